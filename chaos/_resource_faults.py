"""Resource faults, each kind whole: memory pressure, a CPU hog, a full object store, starved
resources, an open-file limit, a full disk (their records, their injectors, their specs, what
each warms up before a schedule starts)."""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import Field

from chaos._context import (
    CALL_TIMEOUT,
    FaultContext,
    Injection,
    MemoryWatch,
    StoreFill,
    node_of,
)
from chaos._errors import FaultIneffective, HangError, InvalidFaultSpec
from chaos._faults import STORAGE
from chaos._kinds import ON_NODES, ON_PROCESSES, Fault, FaultKind, FaultSpec, Need, duration, number_in, register
from chaos._observed import Observed
from chaos._ray_state import live_nodes
from chaos._targets import NodeTarget, RayProcess, Target, resolve
from chaos._wait import wait_until
from chaos.agents._agent import agent_for, driver_token
from chaos.agents._memory import (
    MemoryOutcome,
    MemoryProgress,
    allocate,
    outcome_of,
    progress_path,
    read_progress,
)

__all__ = ["MEMORY_CONFIRM", "CpuHog", "FillDisk", "FillObjectStore", "LimitOpenFiles", "MemoryPressure", "Starve",
           "confirm_resident"]

#: How long a memory fault's task may take to start running (a worker may be starting).
MEMORY_CONFIRM = 30.0


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


class MemoryObserved(Observed):
    """A memory fault's heal as observed: how its allocation ended and its peak resident bytes."""

    memory_outcome: MemoryOutcome | None = None
    peak_bytes: int | None = None


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


class StoreObserved(Observed):
    """An object-store fill as observed: ``bytes`` held of the node's store ``capacity``."""

    capacity: float | None = None


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


class StarveObserved(Observed):
    """A starvation as observed: what its placement group holds, once Ray granted it."""

    cpus: float | None = None
    resources: dict[str, float] = Field(default_factory=dict)


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


class OpenFilesObserved(Observed):
    """An open-file limit as observed: the limit set and the one it replaced (both read back)."""

    limit: int | None = None
    old_limit: int | None = None


#: ``FillDisk(path=STORAGE)`` in a scenario: the run's checkpoint storage (see ``storage_mb``).


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


@contextmanager
def _cpu(ctx: FaultContext, fault: CpuHog, at: float | None, rng: random.Random) -> Iterator[Injection]:
    node = node_of(ctx, fault.node, rng)
    agent = agent_for(node.node_id)
    pids = ctx.call(agent.cpu_hog.remote(fault.cores, fault.seconds, owner=driver_token()))
    ctx.record("inject", fault, at, node, f"{len(pids)} busy processes, each seen burning CPU",
               Observed(pids=tuple(pids)))

    def heal() -> None:
        ctx.call(agent.stop_hogs.remote(owner=driver_token()))  # not another driver's, on a shared agent
        ctx.record("heal", fault, at, node, "busy processes stopped")

    with ctx.on_heal(heal):
        yield Injection(fault, (node,), pids=tuple(pids))


@contextmanager
def _memory(ctx: FaultContext, fault: MemoryPressure, at: float | None,
            rng: random.Random) -> Iterator[Injection]:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    node = node_of(ctx, fault.node, rng)
    path = progress_path()
    hog = _allocator().options(
        max_retries=0, num_cpus=0, name="raychaos.memory_pressure",
        scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False),
    ).remote(fault.fraction, fault.host_cap, fault.seconds, path)
    watch = MemoryWatch(hog)

    def heal() -> None:
        ray.cancel(hog, force=True)  # the pressure ends first; only then is the agent asked
        _prestart(node.node_id, wait=False)  # the killed worker's replacement, for the next one
        result = watch.result = outcome_of(hog, _progress(node, path))
        ctx.record("heal", fault, at, node, result.note,
                   MemoryObserved(memory_outcome=result.outcome, peak_bytes=result.peak_bytes))

    with ctx.on_heal(heal):
        ctx.record("inject", fault, at, node, _confirm_started(ctx, hog, node, path))
        yield Injection(fault, (node,), found=watch)
    # Its effect is known once it is over: bytes held resident, or Ray's memory monitor's kill.
    result = watch.result
    if result is not None and result.outcome is not MemoryOutcome.OOM_KILLED and result.peak_bytes == 0:
        raise FaultIneffective(f"the memory fault never held a resident byte: {result.note}")


def _noop() -> None:
    """A task that only makes Ray start (or reuse) a worker process."""


def _prestart(node_id: str, *, wait: bool) -> None:
    """Leave an idle worker in ``node_id``'s pool: a memory fault's task then starts in
    milliseconds instead of waiting ~0.5 s for a new worker process."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ref = ray.remote(_noop).options(num_cpus=0, max_retries=0, name="raychaos.prestart",
                                    scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)).remote()
    if wait:
        ray.get(ref, timeout=CALL_TIMEOUT)


def _warm_store(megabytes: int) -> None:
    """Put one chunk and free it: the store's first large put maps its memory (~0.2 s here)."""
    import ray

    ray.get(ray.put(_chunk(megabytes)), timeout=CALL_TIMEOUT)


@functools.cache
def _chunk(megabytes: int) -> Any:
    """One read-only chunk per size, made once: every put of it is a copy into the store."""
    import numpy as np

    chunk = np.ones(megabytes * 2**20, dtype=np.uint8)
    chunk.flags.writeable = False
    return chunk


def _progress(node: RayProcess, path: str) -> MemoryProgress | None:
    """The allocation's last report, read on its node by a fresh task once the pressure is
    over (not by the agent: Ray's memory monitor picked it as a victim while it served)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    reader = ray.remote(read_progress).options(
        num_cpus=0, max_retries=3, name="raychaos.memory_progress",
        scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False))
    try:
        progress: MemoryProgress | None = ray.get(reader.remote(path, remove=True), timeout=CALL_TIMEOUT)
        return progress
    except Exception:  # noqa: BLE001 - without the report, the OOM kill (or not) still decides
        return None


def _confirm_started(ctx: FaultContext, hog: Any, node: RayProcess, path: str) -> str:
    """Wait until the allocating task holds memory resident — by its own report on its node,
    read by the agent there — or Ray's memory monitor killed it (it may be that quick)."""
    import ray

    agent = agent_for(node.node_id)

    def ended() -> MemoryOutcome | None:
        return outcome_of(hog, None).outcome if ray.wait([hog], timeout=0)[0] else None

    return confirm_resident(lambda: ctx.call(agent.progress.remote(path)), ended)


def confirm_resident(report: Callable[[], MemoryProgress | None], ended: Callable[[], MemoryOutcome | None], *,
                     timeout: float | None = None, clock: Callable[[], float] = time.monotonic) -> str:
    """Wait until the allocation's ``report`` shows bytes resident (a block made resident,
    resident > 0: its first report, written before any block, is no proof), or its task
    ``ended`` in Ray's OOM kill. Returns what confirmed it, for the journal.

    Raises:
        FaultIneffective: the host was already past the target (nothing to allocate), the task
            ended another way holding nothing, or nothing was resident within ``timeout``
            (default ``MEMORY_CONFIRM``) seconds.
    """
    timeout = MEMORY_CONFIRM if timeout is None else timeout
    last: list[MemoryProgress | None] = [None]

    def verdict() -> _Resident | None:
        last[0] = progress = report()
        if progress is not None and (progress.cannot or progress.holding()):
            return _Resident(progress, None)
        outcome = ended()
        if outcome is None:
            return None
        last[0] = progress = report() or progress  # its last report, written before it ended
        return _Resident(progress, outcome)

    try:
        found = wait_until(verdict, timeout=timeout, interval=0.005, clock=clock,
                           what="the memory fault to hold memory")
    except HangError:
        raise FaultIneffective(f"the memory fault held no resident memory within {timeout:g} s "
                               f"(last report: {last[0]!r})") from None
    return found.note()


@dataclass(frozen=True, slots=True)
class _Resident:
    """The allocation's report and, if its task has ended, how: what decides its confirmation."""

    progress: MemoryProgress | None
    ended: MemoryOutcome | None

    def note(self) -> str:
        """What confirmed the fault, for the journal. Raises FaultIneffective if nothing did."""
        progress = self.progress
        if progress is not None and progress.cannot:
            raise FaultIneffective(f"the memory fault allocated nothing: the host already used "
                                   f"{progress.host_used:.0%}, past its target")
        if progress is not None and progress.holding():
            return f"{progress.resident / 2**20:.0f} MiB resident ({progress.pace()})"
        if self.ended is MemoryOutcome.OOM_KILLED:
            return "Ray's memory monitor killed the allocating task at once"
        raise FaultIneffective(f"the memory fault's task ended ({self.ended}) holding no resident "
                               f"memory (last report: {progress!r})")


@functools.cache
def _allocator() -> Any:
    """The allocating task, made remote once: each ``ray.remote`` would export it anew."""
    import ray

    return ray.remote(allocate)


@contextmanager
def _object_store(ctx: FaultContext, fault: FillObjectStore, at: float | None,
                  rng: random.Random) -> Iterator[Injection]:
    import ray
    from ray.exceptions import ObjectStoreFullError

    node = node_of(ctx, None, rng)
    capacity = ray.cluster_resources().get("object_store_memory", 0.0) / max(1, len(ray.nodes()))
    refs: list[Any] = []
    chunk, full = _chunk(fault.chunk_mb), False
    try:
        while len(refs) * chunk.nbytes < fault.fraction * capacity:
            refs.append(ray.put(chunk))
    except ObjectStoreFullError:
        full = True
    held = len(refs) * chunk.nbytes
    if held == 0 and not full:
        raise FaultIneffective(f"nothing put in the object store (capacity {capacity:.0f} bytes)")
    ctx.record("inject", fault, at, node, "ObjectStoreFullError" if full else "filled",
               StoreObserved(bytes=held, capacity=capacity))

    def heal() -> None:
        refs.clear()
        ctx.record("heal", fault, at, node, "references dropped")

    with ctx.on_heal(heal):
        yield Injection(fault, (node,), found=StoreFill(held, capacity, full))


@contextmanager
def _starve(ctx: FaultContext, fault: Starve, at: float | None, rng: random.Random) -> Iterator[Injection]:
    """Held by a placement group, not by an actor: reserving resources needs no worker process,
    so the starvation starts within milliseconds of its tick (an actor took ~0.5 s to start)."""
    from ray.util.placement_group import placement_group, remove_placement_group

    bundle = {**({"CPU": fault.cpus} if fault.cpus else {}), **fault.resources}
    group = placement_group([bundle], name="raychaos.starve")
    if not group.wait(timeout_seconds=CALL_TIMEOUT):
        remove_placement_group(group)
        raise FaultIneffective(f"could not acquire {bundle} within {CALL_TIMEOUT:g} s to starve the "
                               "cluster; are they free?")
    node = node_of(ctx, None, rng)
    ctx.record("inject", fault, at, node, "resources held",
               StarveObserved(cpus=fault.cpus, resources=dict(fault.resources)))

    def heal() -> None:
        remove_placement_group(group)
        ctx.record("heal", fault, at, node, "resources released")

    with ctx.on_heal(heal):
        yield Injection(fault, (node,))


@contextmanager
def _limit_open_files(ctx: FaultContext, fault: LimitOpenFiles, at: float | None,
                      rng: random.Random) -> Iterator[Injection]:
    limited: list[tuple[RayProcess, int, int]] = []

    def heal() -> None:
        for proc, soft, hard in limited:
            back = ctx.call(agent_for(proc.node_id).restore_open_files.remote(proc.pid, soft, hard))
            ctx.record("heal", fault, at, proc, f"open-file limit back to {soft} (read back)"
                       if back else "the process has exited: nothing to restore")

    with ctx.on_heal(heal):
        for proc in resolve(fault.target, address=ctx.address, rng=rng):
            soft, hard, low = ctx.call(agent_for(proc.node_id).limit_open_files.remote(
                proc.pid, fault.headroom, driver_pids=ctx.driver_pids))
            limited.append((proc, soft, hard))
            ctx.record("inject", fault, at, proc, f"open-file limit {soft} -> {low} (read back)",
                       OpenFilesObserved(old_limit=soft, limit=low))
        yield Injection(fault, tuple(p for p, _, _ in limited))


@contextmanager
def _fill_disk(ctx: FaultContext, fault: FillDisk, at: float | None,
               rng: random.Random) -> Iterator[Injection]:
    node = node_of(ctx, fault.node, rng)
    agent = agent_for(node.node_id)
    filled = ctx.call(agent.fill_disk.remote(fault.path))
    ctx.record("inject", fault, at, node, f"{fault.path} full: {filled.bytes} bytes of ballast, "
                                          "0 bytes free (statvfs)", Observed(bytes=filled.bytes))

    def heal() -> None:
        free = ctx.call(agent.free_disk.remote(filled.ballast))
        ctx.record("heal", fault, at, node, f"ballast deleted; {free} bytes free again")

    with ctx.on_heal(heal):
        yield Injection(fault, (node,), found=filled)


def _warm_up_store(faults: Sequence[Fault]) -> None:
    """Map the object store's memory for each chunk size the schedule's fills put."""
    for size in {f.chunk_mb for f in faults if isinstance(f, FillObjectStore)}:
        _warm_store(size)


def _warm_up_memory(faults: Sequence[Fault]) -> None:
    """Leave an idle worker on each node: a memory fault's task then starts at once."""
    if faults:
        for row in live_nodes():
            _prestart(row.node_id, wait=True)


register(
    FaultSpec(record=MemoryPressure, inject=_memory, needs=ON_NODES | {Need.RAYCHAOS}, colour="#5d2e8c",
              example={"fraction": 0.2, "host_cap": 0.5, "seconds": 3}, warm_up=_warm_up_memory,
              observed=MemoryObserved),
    FaultSpec(record=CpuHog, inject=_cpu, needs=ON_NODES, colour="#29335c", example={"cores": 2, "seconds": 4}),
    FaultSpec(record=FillObjectStore, inject=_object_store, needs=frozenset({Need.STATE_API}), colour="#2e86ab",
              example={"fraction": 0.8, "seconds": 3}, warm_up=_warm_up_store, observed=StoreObserved),
    FaultSpec(record=Starve, inject=_starve, needs=frozenset({Need.STATE_API}), colour="#669bbc",
              example={"seconds": 5, "cpus": 2}, observed=StarveObserved),
    FaultSpec(record=LimitOpenFiles, inject=_limit_open_files, needs=ON_PROCESSES, colour="#8f2d56",
              example={"target": {"kind": "actor", "name": "files", "namespace": "raychaos"}, "seconds": 2},
              observed=OpenFilesObserved),
    FaultSpec(record=FillDisk, inject=_fill_disk, needs=ON_NODES, colour="#6b4226",
              example={"path": "$STORAGE", "seconds": 2}),
)
