"""The public API of each package is what its __all__ says, and the plugin stays thin."""

from __future__ import annotations

import subprocess
import sys

import actors
import chaos
import scenarios


def test_chaos_exports() -> None:
    assert set(chaos.__all__) == {
        "TEST_SYSTEM_CONFIG", "ActorTarget", "Chaos", "ChaosAgent", "ChaosError", "CheckpointError",
        "CheckpointFormatError", "ClusterHandle", "CpuHog", "Event", "Fault", "FaultIneffective",
        "FaultOutcome", "FaultStatus", "FaultsNotApplied", "FillObjectStore", "HangError",
        "Injection", "InvalidConfig", "InvalidFaultSpec", "MissingExtra", "MemoryResult",
        "MemoryWatch", "StoreFill", "Journal", "Kill", "KillNode", "Latency",
        "MemoryOutcome", "MemoryPressure", "NodeTarget", "Pause", "Process", "Schedule",
        "ScheduleObserver", "ScheduledFault", "Starve", "StorageUnreachable", "StuckCause",
        "StuckTask", "TargetNotFound", "TaskTarget", "UnsafeTarget", "WatchReport", "WorkerTarget",
        "agent_for", "check_applied", "delayed", "fault_from_dict", "fault_to_dict",
        "local_cluster", "ray_processes", "read_journal", "reap", "rpc_delay_env", "run_schedule",
        "start_agents", "stop_agents", "wait_until", "watch", "FaultKind",
        # the journal's events
        "EndEvent", "FaultEvent", "JournalCorrupt", "Observed", "PlannedFault", "RecoverEvent", "StartEvent",
        "VerdictEntry", "JsonValue",
        # failpoints
        "FAILPOINTS_ENV", "FailAction", "Failpoint", "FailpointError", "FailpointPlan", "Firing",
        "arm", "armed", "disarm", "failpoint", "failpoint_env", "firings", "is_armed",
        # histories
        "History", "Op", "OpStatus", "SetVerdict", "check_set", "drive_writers",
        # the failure surface beyond the chapter
        "DrainNode", "FillDisk", "FreezeNode", "KillGcs", "LimitOpenFiles", "MutationNotLogged",
        "RpcFailure", "capped_filesystem", "free_bytes", "redis_server", "rpc_failure_env",
    }


def test_strategies_exports() -> None:
    from chaos import strategies

    assert set(strategies.__all__) == {"faults", "schedules"}


def test_actors_exports() -> None:
    assert set(actors.__all__) == {
        "FAILPOINTS", "FORMAT_VERSION", "ActorFailpoint", "LoadedCheckpoint", "CheckpointConfig", "CheckpointInfo",
        "CheckpointStats",
        "CheckpointStore", "CheckpointRetried", "CheckpointWarning", "StateTree",
        "Checkpointable", "CheckpointedCounter",
        "Durability", "EmptyBufferError", "GradientError", "ParameterServer", "Policy",
        "PrioritizedReplayBuffer", "PushResult", "ReplayActorStats", "ReplayBufferActor", "ReplayClient",
        "ReplayStats", "RestoreInfo", "SchemaError", "ServerStats", "StaleGradientError",
        "VersionTimeout", "WriterSeqs", "checkpoint_async", "mutation",
        "RestartUnknown", "StorageNotFresh", "Writer",
        "SpareState", "SpareWorkerError", "keep_spare", "spare_actor_env", "spare_job_env",
    }


def test_scenarios_exports() -> None:
    assert set(scenarios.__all__) == {
        "DemoRow", "FaultRecord", "Probe", "Problem", "RunContext", "RunResult", "Sample", "Scenario",
        "ScenarioError", "SteadyState", "Verdict", "Workload", "builtin_names", "load_attack", "load_scenario",
        "run_demo", "run_scenario", "summary", "write_reports", "Params", "known_workloads",
        "register_workload"}


def test_every_exported_name_exists() -> None:
    for module in (chaos, actors, scenarios):
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name}"


def test_errors_also_inherit_the_matching_builtin() -> None:
    assert issubclass(chaos.InvalidConfig, ValueError)
    assert issubclass(chaos.StorageUnreachable, OSError)
    assert issubclass(chaos.HangError, TimeoutError)
    assert issubclass(chaos.CheckpointFormatError, chaos.CheckpointError)
    assert issubclass(chaos.InvalidFaultSpec, ValueError)
    assert issubclass(chaos.TargetNotFound, LookupError)
    assert issubclass(chaos.UnsafeTarget, PermissionError)
    assert issubclass(chaos.FaultIneffective, RuntimeError)
    assert issubclass(chaos.FaultsNotApplied, AssertionError)
    assert issubclass(chaos.MissingExtra, ImportError)
    for name in ("InvalidConfig", "StorageUnreachable", "HangError", "CheckpointError",
                 "InvalidFaultSpec", "TargetNotFound", "UnsafeTarget", "FaultIneffective",
                 "FaultsNotApplied", "MissingExtra"):
        assert issubclass(getattr(chaos, name), chaos.ChaosError)
        assert getattr(chaos, name).__doc__


def test_plugin_and_packages_do_not_import_ray() -> None:
    code = "import sys, chaos.pytest_plugin, actors, scenarios; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
