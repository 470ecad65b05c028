"""raychaos chaos engine: faults on real Ray processes, their targets and schedules, and the
helpers a test writes against.

What a user writes code against is exported here. The rest lives in named submodules, each with
its own ``__all__``:

- ``chaos.errors``: every error, rooted at :class:`ChaosError`;
- ``chaos.failpoints``: crash, raise or stall at a named point of the code;
- ``chaos.history``: histories of concurrent operations and the set checker;
- ``chaos.journal``: the journal of a run and its event records;
- ``chaos.engine``: the engine's moving parts (schedule driver, outcomes, resolved processes);
- ``chaos.agents``: the per-node chaos agents;
- ``chaos.cluster``: the test cluster and its harness;
- ``chaos.disks``: the fault filesystem and its disk faults (slow, stalled, failing, power loss);
- ``chaos.testing``: the model-based ``ActorChaosMachine``;
- ``chaos.strategies``: Hypothesis strategies for faults and schedules.

Nothing here is imported until it is used (``ray`` not even then), so the pytest plugin stays
cheap to load.
``chaos.testing`` and ``chaos.strategies`` (Hypothesis) are imported on their own.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names below, for type checkers; at run time each is imported when first used
    from chaos._delay import Latency, RpcFailure, delayed
    from chaos._engine import Chaos
    from chaos._errors import ChaosError, HangError
    from chaos._failpoint import failpoint
    from chaos._faults import Fault, FaultKind
    from chaos._history import History, check_set
    from chaos._process_faults import DrainNode, FreezeNode, Kill, KillGcs, KillNode, Pause
    from chaos._resource_faults import CpuHog, FillDisk, FillObjectStore, LimitOpenFiles, MemoryPressure, Starve
    from chaos._schedule import Schedule, ScheduledFault
    from chaos._targets import ActorTarget, NodeTarget, TaskTarget, WorkerTarget
    from chaos._wait import wait_until
    from chaos._watchdog import watch
    from chaos.cluster._cluster import local_cluster
    from chaos.net._faults import Bandwidth, FlappingLink, PacketLoss, Partition

#: Where each public name lives: ``import chaos`` (and the pytest plugin, which every pytest run of
#: the environment loads) imports none of them until one is used, so a test suite that never uses
#: raychaos does not pay for pydantic, the engine and the journal.
_WHERE = {
    "ActorTarget": "chaos._targets",
    "Bandwidth": "chaos.net._faults",
    "Chaos": "chaos._engine",
    "ChaosError": "chaos._errors",
    "CpuHog": "chaos._resource_faults",
    "DrainNode": "chaos._process_faults",
    "Fault": "chaos._faults",
    "FaultKind": "chaos._faults",
    "FillDisk": "chaos._resource_faults",
    "FillObjectStore": "chaos._resource_faults",
    "FlappingLink": "chaos.net._faults",
    "FreezeNode": "chaos._process_faults",
    "HangError": "chaos._errors",
    "History": "chaos._history",
    "Kill": "chaos._process_faults",
    "KillGcs": "chaos._process_faults",
    "KillNode": "chaos._process_faults",
    "Latency": "chaos._delay",
    "LimitOpenFiles": "chaos._resource_faults",
    "MemoryPressure": "chaos._resource_faults",
    "NodeTarget": "chaos._targets",
    "PacketLoss": "chaos.net._faults",
    "Partition": "chaos.net._faults",
    "Pause": "chaos._process_faults",
    "RpcFailure": "chaos._delay",
    "Schedule": "chaos._schedule",
    "ScheduledFault": "chaos._schedule",
    "Starve": "chaos._resource_faults",
    "TaskTarget": "chaos._targets",
    "WorkerTarget": "chaos._targets",
    "check_set": "chaos._history",
    "delayed": "chaos._delay",
    "failpoint": "chaos._failpoint",
    "local_cluster": "chaos.cluster._cluster",
    "wait_until": "chaos._wait",
    "watch": "chaos._watchdog",
}

__all__ = [
    "ActorTarget",
    "Bandwidth",
    "Chaos",
    "ChaosError",
    "CpuHog",
    "DrainNode",
    "Fault",
    "FaultKind",
    "FillDisk",
    "FillObjectStore",
    "FlappingLink",
    "FreezeNode",
    "HangError",
    "History",
    "Kill",
    "KillGcs",
    "KillNode",
    "Latency",
    "LimitOpenFiles",
    "MemoryPressure",
    "NodeTarget",
    "PacketLoss",
    "Partition",
    "Pause",
    "RpcFailure",
    "Schedule",
    "ScheduledFault",
    "Starve",
    "TaskTarget",
    "WorkerTarget",
    "check_set",
    "delayed",
    "failpoint",
    "local_cluster",
    "wait_until",
    "watch",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'chaos' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups find it without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
