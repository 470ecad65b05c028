"""Fault records: what to inject, validated on construction (nothing is injected if invalid)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import ClassVar, Literal

from chaos._errors import InvalidFaultSpec
from chaos._kinds import Fault, FaultKind, duration, fault_from_dict, fault_to_dict, number_in
from chaos._targets import NodeTarget, Target

__all__ = ["CpuHog", "DrainNode", "Fault", "FaultKind", "FaultStatus", "FillDisk",
           "FillObjectStore", "FreezeNode", "Kill", "KillGcs", "KillNode", "LimitOpenFiles",
           "MemoryPressure", "Pause", "Starve",
           "fault_from_dict", "fault_to_dict"]

Signal = Literal["SIGKILL", "SIGTERM"]


class FaultStatus(StrEnum):
    """How a scheduled fault went. Only ``INJECTED`` means it happened."""

    INJECTED = "injected"  #: sent, its effect confirmed, then healed
    NOT_FOUND = "not_found"  #: no live process matched its target
    REFUSED = "refused"  #: the safety check refused the process it matched
    INEFFECTIVE = "ineffective"  #: sent, but its effect was not observed within its bound
    FAILED = "failed"  #: the injection raised another error
    NOT_REACHED = "not_reached"  #: the run ended before the fault's time came


@dataclass(frozen=True, slots=True)
class Kill(Fault):
    """Signal the target's process: SIGKILL (crash) or SIGTERM (polite)."""

    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind] = FaultKind.KILL
    #: Carried out by the chaos agent on the target's node (see :func:`chaos.agents.start_agents`).
    USES_AGENT: ClassVar[bool] = True

    target: Target
    signal: Signal = "SIGKILL"

    def __post_init__(self) -> None:
        if self.signal not in ("SIGKILL", "SIGTERM"):
            raise InvalidFaultSpec(f"unknown signal {self.signal!r}; use 'SIGKILL' or 'SIGTERM'", field="signal")


@dataclass(frozen=True, slots=True)
class KillNode(Fault):
    """SIGKILL a node's raylet and every process under it: the whole node dies at once, as a
    machine that fails would. Never the head unless asked.

    Confirmed in milliseconds by the node's agent (raylet stopped, every process under it
    gone); it counts as injected only once Ray has also declared the node dead (its health
    check: seconds), which its heal waits for."""

    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind] = FaultKind.KILL_NODE
    #: Carried out by the chaos agent on the target's node (see :func:`chaos.agents.start_agents`).
    USES_AGENT: ClassVar[bool] = True

    target: NodeTarget = field(default_factory=NodeTarget)


@dataclass(frozen=True, slots=True)
class Pause(Fault):
    """SIGSTOP the target's process for ``seconds``, then SIGCONT: a true straggler."""

    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind] = FaultKind.PAUSE
    #: Carried out by the chaos agent on the target's node (see :func:`chaos.agents.start_agents`).
    USES_AGENT: ClassVar[bool] = True

    target: Target
    seconds: float

    def __post_init__(self) -> None:
        duration("seconds", self.seconds)


@dataclass(frozen=True, slots=True)
class MemoryPressure(Fault):
    """Allocate on a node until its memory use reaches ``fraction`` of the host, never past
    ``host_cap``, for ``seconds``: drives Ray's memory monitor (``memory_usage_threshold``)
    to kill a task with ``OutOfMemoryError``."""

    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind] = FaultKind.MEMORY
    #: Its resident memory is confirmed by the chaos agent on the target's node (see :func:`chaos.agents.start_agents`).
    USES_AGENT: ClassVar[bool] = True

    fraction: float
    seconds: float
    host_cap: float = 0.8
    node: NodeTarget | None = None

    def __post_init__(self) -> None:
        number_in("fraction", self.fraction, 0, 1, what="a fraction", low_open=True)
        number_in("host_cap", self.host_cap, 0, 1, what="a fraction", low_open=True)
        duration("seconds", self.seconds)
        if self.fraction > self.host_cap:
            raise InvalidFaultSpec(f"memory `fraction` {self.fraction} is above the host cap "
                                   f"{self.host_cap}; lower it, or raise host_cap knowingly", field="fraction")


@dataclass(frozen=True, slots=True)
class CpuHog(Fault):
    """Busy-loop ``cores`` processes on a node for ``seconds``."""

    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind] = FaultKind.CPU
    #: Carried out by the chaos agent on the target's node (see :func:`chaos.agents.start_agents`).
    USES_AGENT: ClassVar[bool] = True

    cores: int
    seconds: float
    node: NodeTarget | None = None

    def __post_init__(self) -> None:
        number_in("cores", self.cores, 1, 256, what="a whole number", whole=True)
        duration("seconds", self.seconds)


@dataclass(frozen=True, slots=True)
class FillObjectStore(Fault):
    """``ray.put`` chunks until ``fraction`` of the object store is used (or it spills or
    refuses), and hold them for ``seconds``."""

    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind] = FaultKind.OBJECT_STORE
    #: Carried out by the chaos agent on the target's node (see :func:`chaos.agents.start_agents`).
    USES_AGENT: ClassVar[bool] = False

    fraction: float
    seconds: float
    chunk_mb: int = 16

    def __post_init__(self) -> None:
        if isinstance(self.fraction, bool) or not isinstance(self.fraction, (int, float)) \
                or not 0 < self.fraction <= 4:
            raise InvalidFaultSpec(f"`fraction` of the object store must be in (0, 4] "
                                   f"(above 1 forces spilling), got {self.fraction!r}", field="fraction")
        duration("seconds", self.seconds)


@dataclass(frozen=True, slots=True)
class Starve(Fault):
    """Hold ``cpus`` and custom ``resources`` for ``seconds`` so new work stays pending."""

    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind] = FaultKind.STARVE
    #: Carried out by the chaos agent on the target's node (see :func:`chaos.agents.start_agents`).
    USES_AGENT: ClassVar[bool] = False

    seconds: float
    cpus: float = 0.0
    resources: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        duration("seconds", self.seconds)
        if self.cpus < 0 or any(v <= 0 for v in self.resources.values()) or \
                (self.cpus == 0 and not self.resources):
            raise InvalidFaultSpec(f"starvation needs cpus > 0 or positive resources, got "
                                   f"cpus={self.cpus!r}, resources={self.resources!r}",
                                   field="resources" if self.resources else "cpus")


@dataclass(frozen=True, slots=True)
class FreezeNode(Fault):
    """SIGSTOP a node's raylet (with ``workers``, its workers too) for ``seconds``: a node that
    stops answering without dying, as a long swap storm or a hung kernel does. Ray's health
    check declares it dead after about ``failure_threshold × (period + timeout)``; once
    thawed, a raylet Ray declared dead must exit rather than rejoin."""

    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind] = FaultKind.FREEZE_NODE
    #: Carried out by the chaos agent on the target's node (see :func:`chaos.agents.start_agents`).
    USES_AGENT: ClassVar[bool] = True

    seconds: float
    target: NodeTarget = field(default_factory=NodeTarget)
    workers: bool = False

    def __post_init__(self) -> None:
        duration("seconds", self.seconds)
        if self.target.allow_head:
            raise InvalidFaultSpec("freezing the head freezes the GCS's node: use KillGcs for the "
                                   "head, FreezeNode for worker nodes", field="target.allow_head")


@dataclass(frozen=True, slots=True)
class LimitOpenFiles(Fault):
    """Lower the target process's open-file limit (``RLIMIT_NOFILE``) for ``seconds`` so that it
    can open ``headroom`` more descriptors: the next ``open``/``socket`` fails with ``EMFILE``,
    as a descriptor leak would make it (those it holds stay usable). Healing restores the
    limit it had."""

    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind] = FaultKind.LIMIT_OPEN_FILES
    #: Carried out by the chaos agent on the target's node (see :func:`chaos.agents.start_agents`).
    USES_AGENT: ClassVar[bool] = True

    target: Target
    seconds: float
    headroom: int = 0

    def __post_init__(self) -> None:
        duration("seconds", self.seconds)
        number_in("headroom", self.headroom, 0, 4096, what="a whole number of descriptors", whole=True)


#: ``FillDisk(path=STORAGE)`` in a scenario: the run's checkpoint storage (see ``storage_mb``).
STORAGE = "$STORAGE"

@dataclass(frozen=True, slots=True)
class FillDisk(Fault):
    """Fill the filesystem holding ``path`` on a node (this driver's when ``node`` is None) for
    ``seconds``; healing deletes the ballast. Only a tmpfs of at most 1 GiB is ever filled
    (:func:`chaos.cluster.capped_filesystem` mounts one), never the host's disk."""

    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind] = FaultKind.FILL_DISK
    #: Carried out by the chaos agent on the target's node (see :func:`chaos.agents.start_agents`).
    USES_AGENT: ClassVar[bool] = True

    path: str
    seconds: float
    node: NodeTarget | None = None

    def __post_init__(self) -> None:
        duration("seconds", self.seconds)
        if not isinstance(self.path, str) or not (self.path.startswith("/") or self.path == STORAGE):
            raise InvalidFaultSpec(f"`path` must be an absolute directory (or {STORAGE!r}, a "
                                   f"scenario's checkpoint storage), got {self.path!r}", field="path")


DrainReason = Literal["preemption", "idle_termination"]


@dataclass(frozen=True, slots=True)
class DrainNode(Fault):
    """Drain a node through Ray's autoscaler API with a deadline, as a spot instance's
    preemption notice does, then at the deadline SIGTERM its processes, wait ``grace_s``, and
    SIGKILL what is left (the instance going away). ``kill_at_deadline=False`` only drains."""

    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind] = FaultKind.DRAIN_NODE
    #: Carried out by the chaos agent on the target's node (see :func:`chaos.agents.start_agents`).
    USES_AGENT: ClassVar[bool] = True

    deadline_s: float
    target: NodeTarget = field(default_factory=NodeTarget)
    reason: DrainReason = "preemption"
    grace_s: float = 2.0
    kill_at_deadline: bool = True

    def __post_init__(self) -> None:
        duration("deadline_s", self.deadline_s)
        duration("grace_s", self.grace_s)
        if self.reason not in ("preemption", "idle_termination"):
            raise InvalidFaultSpec(f"unknown drain reason {self.reason!r}; use 'preemption' or "
                                   "'idle_termination'", field="reason")
        if self.target.allow_head:
            raise InvalidFaultSpec("Ray refuses to drain the head node; target a worker node",
                                   field="target.allow_head")


@dataclass(frozen=True, slots=True)
class KillGcs(Fault):
    """SIGKILL the GCS server (on the head) and, with ``restart``, start it again after
    ``seconds`` on the same address. With GCS fault tolerance (an external Redis) the
    cluster carries on; without it, this is the head's loss: raylets and workers give up after
    ``gcs_rpc_server_reconnect_timeout_s``. Needs the cluster this process started."""

    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind] = FaultKind.KILL_GCS
    #: Carried out by this driver, which owns the head's processes (see the class docstring).
    USES_AGENT: ClassVar[bool] = False

    seconds: float = 1.0
    restart: bool = True

    def __post_init__(self) -> None:
        duration("seconds", self.seconds)
