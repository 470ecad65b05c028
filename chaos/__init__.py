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

Nothing here imports ``ray`` at import time, so the pytest plugin stays cheap to load.
``chaos.testing`` and ``chaos.strategies`` (Hypothesis) are imported on their own.
"""

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
