"""The engine's moving parts beneath :class:`chaos.Chaos`: driving a schedule in time and what
each fault did, every kind of fault (its spec: record, injector, needs, colour, example) and
what an injector works with, the processes a target resolves to, memory and store fills, the watchdog's
report, the RPC knobs' environment and the serialised form of a fault."""

from chaos._byvalue import by_value
from chaos._context import FaultContext, Injection, MemoryWatch, StoreFill
from chaos._delay import rpc_delay_env, rpc_failure_env, rpc_failures_injected, unconfirmed_rpc_failures
from chaos._driver import (
    MAX_CONCURRENT_FAULTS,
    FaultOutcome,
    FaultStatus,
    ScheduleObserver,
    check_applied,
    run_schedule,
)
from chaos._extras import import_extra
from chaos._kinds import MAX_FAULT_SECONDS, FaultSpec, Need, fault_from_dict, fault_specs, fault_to_dict
from chaos._plan import FaultPlan, dry_run_problems, plan_faults
from chaos._preflight import preflight
from chaos._process_faults import NODE_DEATH_CONFIRM
from chaos._scope import JobRow, running_jobs
from chaos._targets import _KINDS as TARGET_CLASSES
from chaos._targets import RayProcess, target_from_dict, target_to_dict
from chaos._watchdog import StuckCause, StuckTask, WatchReport
from chaos.agents._memory import MemoryOutcome, MemoryResult

__all__ = [
    "MAX_CONCURRENT_FAULTS",
    "MAX_FAULT_SECONDS",
    "NODE_DEATH_CONFIRM",
    "TARGET_CLASSES",
    "FaultContext",
    "FaultOutcome",
    "FaultPlan",
    "FaultSpec",
    "FaultStatus",
    "Injection",
    "JobRow",
    "MemoryOutcome",
    "MemoryResult",
    "MemoryWatch",
    "Need",
    "RayProcess",
    "ScheduleObserver",
    "StoreFill",
    "StuckCause",
    "StuckTask",
    "WatchReport",
    "by_value",
    "check_applied",
    "dry_run_problems",
    "fault_from_dict",
    "fault_specs",
    "fault_to_dict",
    "import_extra",
    "plan_faults",
    "preflight",
    "rpc_delay_env",
    "rpc_failure_env",
    "rpc_failures_injected",
    "run_schedule",
    "running_jobs",
    "target_from_dict",
    "target_to_dict",
    "unconfirmed_rpc_failures",
]
