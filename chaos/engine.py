"""The engine's moving parts beneath :class:`chaos.Chaos`: driving a schedule in time and what
each fault did, the processes a target resolves to, memory and store fills, the watchdog's
report, the RPC knobs' environment and the serialised form of a fault."""

from chaos._delay import rpc_delay_env, rpc_failure_env
from chaos._driver import FaultOutcome, FaultStatus, ScheduleObserver, check_applied, run_schedule
from chaos._engine import Injection, MemoryWatch, StoreFill
from chaos._faults import fault_from_dict, fault_to_dict
from chaos._memory import MemoryOutcome, MemoryResult
from chaos._targets import RayProcess
from chaos._watchdog import StuckCause, StuckTask, WatchReport

__all__ = [
    "FaultOutcome",
    "FaultStatus",
    "Injection",
    "MemoryOutcome",
    "MemoryResult",
    "MemoryWatch",
    "RayProcess",
    "ScheduleObserver",
    "StoreFill",
    "StuckCause",
    "StuckTask",
    "WatchReport",
    "check_applied",
    "fault_from_dict",
    "fault_to_dict",
    "rpc_delay_env",
    "rpc_failure_env",
    "run_schedule",
]
