"""raychaos chaos engine: faults on real Ray processes, schedules, journal, watchdog;
failpoints (crash at an exact point of the code) and Jepsen-style histories with a set checker.

Nothing here imports ``ray`` at import time, so the pytest plugin stays cheap to load.
``chaos.strategies`` (Hypothesis strategies) is imported on its own.
"""

from chaos._agent import ChaosAgent, agent_for, start_agents, stop_agents
from chaos._cluster import TEST_SYSTEM_CONFIG, ClusterHandle, local_cluster, ray_processes, reap
from chaos._delay import Latency, delayed, rpc_delay_env
from chaos._driver import (
    FaultOutcome,
    FaultStatus,
    ScheduleObserver,
    check_applied,
    run_schedule,
)
from chaos._engine import Chaos, Injection
from chaos._errors import (
    ChaosError,
    CheckpointError,
    CheckpointFormatError,
    FaultIneffective,
    FaultsNotApplied,
    HangError,
    InvalidConfig,
    InvalidFaultSpec,
    MutationNotLogged,
    StorageUnreachable,
    TargetNotFound,
    UnsafeTarget,
)
from chaos._failpoint import (
    FAILPOINTS_ENV,
    FailAction,
    Failpoint,
    FailpointError,
    FailpointPlan,
    Firing,
    arm,
    armed,
    disarm,
    failpoint,
    failpoint_env,
    firings,
    is_armed,
)
from chaos._faults import (
    CpuHog,
    Fault,
    FillObjectStore,
    Kill,
    KillNode,
    MemoryPressure,
    Pause,
    Starve,
    fault_from_dict,
    fault_to_dict,
)
from chaos._history import History, Op, OpStatus, SetVerdict, check_set, drive_writers
from chaos._journal import Event, Journal, read_journal
from chaos._memory import MemoryOutcome
from chaos._schedule import Schedule, ScheduledFault
from chaos._targets import ActorTarget, NodeTarget, Process, TaskTarget, WorkerTarget
from chaos._wait import wait_until
from chaos._watchdog import StuckCause, StuckTask, WatchReport, watch

__all__ = [
    "FAILPOINTS_ENV",
    "TEST_SYSTEM_CONFIG",
    "ActorTarget",
    "Chaos",
    "ChaosAgent",
    "ChaosError",
    "CheckpointError",
    "CheckpointFormatError",
    "ClusterHandle",
    "CpuHog",
    "Event",
    "FailAction",
    "Failpoint",
    "FailpointError",
    "FailpointPlan",
    "Fault",
    "FaultIneffective",
    "FaultOutcome",
    "FaultStatus",
    "FaultsNotApplied",
    "FillObjectStore",
    "Firing",
    "HangError",
    "History",
    "Injection",
    "InvalidConfig",
    "InvalidFaultSpec",
    "Journal",
    "Kill",
    "KillNode",
    "Latency",
    "MemoryOutcome",
    "MemoryPressure",
    "MutationNotLogged",
    "NodeTarget",
    "Op",
    "OpStatus",
    "Pause",
    "Process",
    "Schedule",
    "ScheduleObserver",
    "ScheduledFault",
    "SetVerdict",
    "Starve",
    "StorageUnreachable",
    "StuckCause",
    "StuckTask",
    "TargetNotFound",
    "TaskTarget",
    "UnsafeTarget",
    "WatchReport",
    "WorkerTarget",
    "agent_for",
    "arm",
    "armed",
    "check_applied",
    "check_set",
    "delayed",
    "disarm",
    "drive_writers",
    "failpoint",
    "failpoint_env",
    "fault_from_dict",
    "fault_to_dict",
    "firings",
    "is_armed",
    "local_cluster",
    "ray_processes",
    "read_journal",
    "reap",
    "rpc_delay_env",
    "run_schedule",
    "start_agents",
    "stop_agents",
    "wait_until",
    "watch",
]
