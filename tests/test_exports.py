"""The public API of each package is what its __all__ says, and the plugin stays thin."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import actors
import chaos
import chaos.errors
import scenarios


def test_chaos_exports() -> None:
    assert set(chaos.__all__) == {
        "Chaos", "Schedule", "ScheduledFault",
        # faults and their kinds
        "Fault", "FaultKind", "Kill", "KillNode", "KillGcs", "Pause", "Starve", "CpuHog", "DrainNode",
        "FillDisk", "FillObjectStore", "FreezeNode", "LimitOpenFiles", "MemoryPressure",
        # network faults (local_cluster(network=True))
        "Partition", "PacketLoss", "Bandwidth", "FlappingLink",
        # targets
        "ActorTarget", "NodeTarget", "TaskTarget", "WorkerTarget",
        # Ray's RPC knobs
        "RpcFailure", "Latency", "delayed",
        # the root errors (every error is in chaos.errors)
        "ChaosError", "HangError",
        # helpers a test writes against
        "local_cluster", "wait_until", "watch", "failpoint", "History", "check_set",
    }


SUBMODULES = {
    "chaos.errors": {
        "AgentMismatch", "AgentUnavailable", "ChaosError", "CheckpointError", "CheckpointFormatError",
        "ClusterUnfit", "FailpointError", "FaultFSError", "FaultIneffective", "FaultsNotApplied", "HangError",
        "InvalidConfig", "InvalidFaultSpec", "JournalCorrupt", "MissingExtra", "MutationNotLogged",
        "NetworkUnavailable", "StillMounted", "StorageUnreachable", "TargetNotFound", "TeardownFailed", "Unscoped",
        "UnsafeTarget",
    },
    "chaos.failpoints": {
        "FAILPOINTS_ENV", "FailAction", "Failpoint", "FailpointPlan", "Firing", "arm", "armed", "disarm",
        "failpoint", "failpoint_env", "firings", "is_armed",
    },
    "chaos.history": {"History", "Op", "OpStatus", "SetVerdict", "Validity", "Verdict", "check_set", "compose",
                      "drive_writers"},
    "chaos.journal": {
        "EndEvent", "FaultEvent", "Journal", "JournalEvent", "JsonValue", "Observed", "PlannedFault",
        "RecoverEvent", "StartEvent", "VerdictEntry", "read_journal", "JOURNAL_SCHEMA_VERSION", "event_schema",
    },
    "chaos.engine": {
        "MAX_CONCURRENT_FAULTS", "MAX_FAULT_SECONDS", "NODE_DEATH_CONFIRM", "TARGET_CLASSES", "FaultContext",
        "FaultOutcome", "FaultSpec", "FaultStatus", "Injection", "MemoryOutcome", "MemoryResult", "MemoryWatch",
        "Need", "RayProcess", "ScheduleObserver", "StoreFill", "StuckCause", "StuckTask", "WatchReport", "by_value",
        "check_applied", "fault_from_dict", "fault_specs", "fault_to_dict", "import_extra", "preflight",
        "rpc_delay_env", "rpc_failure_env", "rpc_failures_injected", "run_schedule", "target_from_dict",
        "target_to_dict", "unconfirmed_rpc_failures", "FaultPlan", "JobRow", "dry_run_problems", "plan_faults",
        "running_jobs",
    },
    "chaos.agents": {"AGENT_START_TIMEOUT", "ChaosAgent", "agent_for", "start_agents", "stop_agents"},
    "chaos.net": {"COMMAND_TIMEOUT", "LinkState", "NetLab", "NetNode", "kill_node_processes", "lab_of", "read_link",
                  "run"},
    "chaos.gcs": {"KillRedis", "RedisClientKill", "RedisEvent", "RedisFault", "RedisIdleTimeout", "RedisServer",
                  "gcs_connections", "head_of", "inject_redis_fault", "redis_of"},
    "chaos.cluster": {
        "TEST_SYSTEM_CONFIG", "ClusterHandle", "NodeRow", "NodeState", "capped_filesystem", "cleanup_machine",
        "free_bytes",
        "live_nodes", "local_cluster", "node_states", "ray_processes", "reap", "redis_server", "short",
        "auth_headers", "client_auth_mode", "ray_minor", "rpc_in_flight", "shared_host_worker_args",
        "token_auth_enabled",
    },
    "chaos.strategies": {"faults", "schedules"},
    "chaos.disks": {
        "DISK_GRACE", "MAX_STALL_SECONDS", "STORAGE", "DiskFault", "DiskEvent", "DiskInjection", "FailingDisk",
        "FaultFS", "FaultFSError", "FaultFSState", "PowerLoss", "PowerLossResult", "SlowDisk", "StallDisk", "connect",
        "fault_filesystem", "fuse_mounts_left", "inject_disk",
    },
    "chaos.testing": {"ActorChaosMachine"},
    "actors.checkpoint": {
        "FAILPOINTS", "FORMAT_VERSION", "ActorFailpoint", "CheckpointInfo", "CheckpointRetried", "CheckpointStats",
        "CheckpointStore", "CheckpointWarning", "LoadedCheckpoint", "RestartUnknown", "StorageNotFresh", "Superseded",
    },
    "chaos.corruption": {"MAX_FILES", "CorruptFile", "Corruption"},
    "actors.replay": {"EmptyBufferError", "ReplayActorStats", "ReplayStats", "SchemaError"},
    "actors.param_server": {"GradientError", "PushResult", "ServerStats", "StaleGradientError", "VersionTimeout"},
    "actors.spare": {"SpareState", "SpareWorkerError", "spare_actor_env", "spare_job_env"},
    "scenarios.hunt": {
        "TABLE", "Actor", "Arg", "Call", "Cancel", "Drop", "ErrorKind", "Fault", "FaultKind", "Naming", "Program",
        "ProgramVerdict", "Put", "Seen", "Signature", "Situation", "StepKind", "Stream", "Task", "Wait", "programs",
        "run_program",
    },
    "scenarios.runner": {"DemoRow", "FaultRecord", "Probe", "Problem", "Sample", "SteadyState", "run_demo"},
}


@pytest.mark.parametrize("name", sorted(SUBMODULES))
def test_public_submodule_exports(name: str) -> None:
    module = importlib.import_module(name)
    assert set(module.__all__) == SUBMODULES[name]
    for exported in module.__all__:
        assert hasattr(module, exported), f"{name}.{exported}"


def test_actors_exports() -> None:
    assert set(actors.__all__) == {
        "Checkpointable", "CheckpointConfig", "Durability", "Policy", "RestoreInfo", "StateTree",
        "checkpoint_async", "mutation", "Writer", "WriterSeqs", "CheckpointedCounter",
        "ParameterServer", "PrioritizedReplayBuffer", "ReplayBufferActor", "ReplayClient", "keep_spare",
    }


def test_scenarios_exports() -> None:
    assert set(scenarios.__all__) == {
        "Scenario", "ScenarioError", "load_scenario", "load_attack", "builtin_names", "run_scenario",
        "RunResult", "Verdict", "Workload", "Params", "RunContext", "register_workload", "known_workloads",
        "summary", "write_reports",
    }


def test_the_public_api_stays_small_and_shadows_nothing() -> None:
    assert len(chaos.__all__) <= 40
    assert len(actors.__all__) <= 20
    assert len(scenarios.__all__) <= 15
    for shadowing in ("Process", "Event"):  # multiprocessing.Process, threading.Event
        assert not hasattr(chaos, shadowing)


def test_one_public_home_per_name() -> None:
    # A name a package exports is not exported again by one of its submodules under the same
    # package, except a few re-exported where a reader looks for them first.
    shared = {"ChaosError", "HangError", "History", "check_set", "failpoint", "local_cluster"}
    for name, names in SUBMODULES.items():
        package = importlib.import_module(name.split(".")[0])
        assert set(package.__all__) & names <= shared, name


def test_each_package_ships_py_typed() -> None:
    for module in (chaos, actors, scenarios):
        assert (Path(module.__file__).parent / "py.typed").is_file(), module.__name__


def test_every_exported_name_exists() -> None:
    for module in (chaos, actors, scenarios):
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.{name}"


def test_errors_also_inherit_the_matching_builtin() -> None:
    assert issubclass(chaos.errors.InvalidConfig, ValueError)
    assert issubclass(chaos.errors.StorageUnreachable, OSError)
    assert issubclass(chaos.errors.HangError, TimeoutError)
    assert issubclass(chaos.errors.CheckpointFormatError, chaos.errors.CheckpointError)
    assert issubclass(chaos.errors.InvalidFaultSpec, ValueError)
    assert issubclass(chaos.errors.TargetNotFound, LookupError)
    assert issubclass(chaos.errors.UnsafeTarget, PermissionError)
    assert issubclass(chaos.errors.FaultIneffective, RuntimeError)
    assert issubclass(chaos.errors.FaultsNotApplied, AssertionError)
    assert issubclass(chaos.errors.MissingExtra, ImportError)
    for name in chaos.errors.__all__:
        assert issubclass(getattr(chaos.errors, name), chaos.errors.ChaosError)
        assert getattr(chaos.errors, name).__doc__


def test_plugin_and_packages_do_not_import_ray() -> None:
    public = ", ".join(SUBMODULES)
    code = f"import sys, chaos.pytest_plugin, actors, scenarios, {public}; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
