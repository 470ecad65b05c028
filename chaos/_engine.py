"""The chaos engine: resolve a target, inject through the agent on its node, confirm, heal, journal.

Every injector is inject → confirm → ``yield`` → heal in ``finally``; every wait has a
deadline. *Confirm* means the fault's effect was observed (the process gone, state T, bytes
resident, resources held): a fault that was only *sent* raises :class:`FaultIneffective`
and is journaled ``ineffective``, as CockroachDB's roachprod failure modes check that an
injection took effect before they wait for its consequences.
"""

from __future__ import annotations

import functools
import os
import random
import signal as signals
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from chaos._context import FaultContext, Injection, MemoryWatch, StoreFill, node_of
from chaos._errors import FaultIneffective, HangError, TargetNotFound, UnsafeTarget
from chaos._faults import (
    CpuHog,
    DrainNode,
    Fault,
    FillDisk,
    FillObjectStore,
    FreezeNode,
    Kill,
    KillGcs,
    KillNode,
    LimitOpenFiles,
    MemoryPressure,
    Pause,
    Starve,
)
from chaos._journal import FaultEvent, Journal, Observed, RecoverEvent
from chaos._json import JsonValue
from chaos._kinds import FaultSpec, Need, register, spec_of
from chaos._ray_state import live_nodes, short
from chaos._schedule import Schedule
from chaos._targets import RayProcess, TaskTarget, resolve
from chaos._wait import wait_until
from chaos.agents._agent import agent_for, driver_token, start_agents
from chaos.agents._memory import (
    MemoryOutcome,
    MemoryProgress,
    MemoryResult,
    allocate,
    outcome_of,
    progress_path,
    read_progress,
)
from chaos.cluster._cluster import head_of

T = TypeVar("T")

__all__ = ["Chaos", "Injection", "MemoryOutcome", "MemoryResult", "MemoryWatch", "StoreFill"]

CALL_TIMEOUT = 30.0
#: How long a signalled process may take to be gone (a Ray worker's SIGTERM handler included).
KILL_CONFIRM = 15.0
#: How long Ray may take to declare a killed node dead (its health check; default settings
#: need about 5 misses of 3 s, the test settings about 3 of 1 s).
NODE_DEATH_CONFIRM = 60.0
#: How long a memory fault's task may take to start running (a worker may be starting).
MEMORY_CONFIRM = 30.0


class Chaos:
    """Injects faults into the cluster at ``address`` and journals each step.

    Args:
        address: the cluster's GCS address (State API calls go there, never to "auto").
        journal: where events go (a fresh in-memory one by default).
        seed: seeds the choice among matching targets (each scheduled fault gets its own
            generator from :func:`chaos.engine.run_schedule`, so concurrent faults stay reproducible).
        kill_confirm: seconds a signalled process may take to be gone before the kill is
            ``ineffective`` (a Ray worker's SIGTERM handler needs some).
    """

    def __init__(self, *, address: str, journal: Journal | None = None, seed: int = 0,
                 kill_confirm: float = KILL_CONFIRM) -> None:
        self.address = address
        self.kill_confirm = kill_confirm
        self.journal = journal or Journal()
        self.seed = seed
        self.rng = random.Random(seed)
        self.driver_pids = (os.getpid(),)
        self._active: dict[int, Callable[[], None]] = {}
        self._lock = threading.Lock()
        self._next = 0

    # -- public ----------------------------------------------------------------------------

    @contextmanager
    def inject(self, fault: Fault, *, at: float | None = None,
               rng: random.Random | None = None) -> Iterator[Injection]:
        """Inject ``fault``, confirm it took effect, yield, and heal it when the block ends
        (also on error or Ctrl-C).

        Args:
            at: the scheduled time, journaled for replay.
            rng: chooses among matching targets (default: this engine's seeded generator).

        Raises:
            InvalidFaultSpec: ``fault`` is not a fault record.
            TargetNotFound: nothing alive matches the fault's target (journaled ``refuse``).
            UnsafeTarget: the safety check refused the process (journaled ``refuse``).
            FaultIneffective: the effect was not observed (journaled ``ineffective``).
        """
        injector = spec_of(fault).inject
        try:
            with injector(self, fault, at, rng or self.rng) as injection:
                yield injection
        except (UnsafeTarget, TargetNotFound) as exc:
            self.journal.record(FaultEvent(kind="refuse", fault=fault, at=at, outcome=str(exc)))
            raise
        except FaultIneffective as exc:
            self.journal.record(FaultEvent(kind="ineffective", fault=fault, at=at, outcome=str(exc)))
            raise

    def warm_up(self, schedule: Schedule) -> None:
        """Before a schedule's time zero: start the agents its faults act through, open the
        State API's connection (its first call costs tens of ms), map the object store's
        memory and leave an idle worker on each node for memory faults, so no fault is late."""
        from ray.util.state import list_nodes

        if schedule.uses_agents:
            start_agents()
        if schedule.entries:
            list_nodes(address=self.address, limit=1, timeout=CALL_TIMEOUT)
        for size in {e.fault.chunk_mb for e in schedule.entries if isinstance(e.fault, FillObjectStore)}:
            _warm_store(size)
        if any(isinstance(e.fault, MemoryPressure) for e in schedule.entries):

            for row in live_nodes():
                _prestart(row.node_id, wait=True)

    def kill(self, fault: Kill | KillNode | DrainNode) -> Injection:
        """Inject a kill and confirm it (nothing to heal: Ray restarts what it may)."""
        with self.inject(fault) as injection:
            return injection

    def heal_all(self) -> int:
        """Heal every fault still active from this engine, now (each one, even when another's
        heal fails; the first failure is raised after). Returns how many."""
        with self._lock:
            heals, self._active = list(self._active.values()), {}
        errors = []
        for heal in heals:
            try:
                heal()
            except Exception as exc:  # noqa: BLE001 - heal the rest first
                errors.append(exc)
        if errors:
            raise errors[0]
        return len(heals)

    def wait_restarted(self, process: RayProcess, *, timeout: float = 60.0) -> float:
        """Wait until the actor of ``process`` is alive in a new process; journal the MTTR."""
        from ray.util.state import get_actor

        start = time.monotonic()

        def restarted() -> bool:
            actor = get_actor(process.actor_id, address=self.address, timeout=CALL_TIMEOUT)
            return bool(actor and actor.state == "ALIVE" and actor.pid and actor.pid != process.pid)

        wait_until(restarted, timeout=timeout, interval=0.05,
                   what=f"restart of {process.label} after the fault")
        seconds = time.monotonic() - start
        self.journal.record(RecoverEvent(target=process.label, node=process.node_id, pid=process.pid,
                                         outcome="restarted", seconds=seconds))
        return seconds

    # -- plumbing --------------------------------------------------------------------------

    def call(self, ref: Any, timeout: float = CALL_TIMEOUT) -> Any:
        import ray

        return ray.get(ref, timeout=timeout)

    @contextmanager
    def on_heal(self, heal: Callable[[], None]) -> Iterator[None]:
        with self._lock:
            key, self._next = self._next, self._next + 1
            self._active[key] = heal
        try:
            yield
        finally:
            with self._lock:
                still = self._active.pop(key, None)
            if still is not None:
                still()

    def record(self, kind: Literal["inject", "heal"], fault: Fault, at: float | None, proc: RayProcess | None,
               outcome: str, observed: Observed | None = None) -> None:
        observed = observed or Observed()
        if proc is not None and proc.name:  # stable across runs, unlike pids and actor ids
            observed = observed.model_copy(update={"name": proc.name})
        self.journal.record(FaultEvent(kind=kind, fault=fault, at=at, target=proc.label if proc else None,
                                       node=proc.node_id if proc else None, pid=proc.pid if proc else None,
                                       outcome=outcome, observed=observed))


# -- injectors: inject → confirm → yield → heal in finally --------------------------------------


def _signal_resolved(ctx: FaultContext, target: Any, signum: int, rng: random.Random,
                     confirm_within: float) -> list[tuple[RayProcess, float]]:
    """Resolve, signal and confirm each process gone (see :func:`_each_resolved`)."""
    def signal(proc: RayProcess) -> float:
        return float(ctx.call(agent_for(proc.node_id).signal.remote(
            proc.pid, signum, driver_pids=ctx.driver_pids, confirm_within=confirm_within,
            running=_task_running(target, proc)), timeout=CALL_TIMEOUT + confirm_within))
    return _each_resolved(ctx, target, rng, signal)


def _each_resolved(ctx: FaultContext, target: Any, rng: random.Random,
                   act: Callable[[RayProcess], T]) -> list[tuple[RayProcess, T]]:
    """Resolve ``target`` and ``act`` on each process. One that exited, or a task's worker that
    moved on, since the State API saw it is skipped and the target resolved again without it
    (the State API lags by a second: right after a kill it still shows the dead pid ALIVE)."""
    stale: set[int] = set()
    for _ in range(5):
        done = []
        for proc in resolve(target, address=ctx.address, rng=rng, exclude_pids=frozenset(stale)):
            try:
                done.append((proc, act(proc)))
            except TargetNotFound:
                stale.add(proc.pid)
        if done:
            return done
    raise TargetNotFound(f"every process matching {target.label()} had exited, or moved on from the "
                         "task, before the fault reached it")


def _task_running(target: Any, proc: RayProcess) -> str | None:
    """The task a plain task's worker may be running when the signal goes and no other: the
    State API's RUNNING lags, and the worker it names may run another task now (a probe's)."""
    return proc.name if isinstance(target, TaskTarget) and proc.actor_id is None else None


@contextmanager
def _kill(ctx: FaultContext, fault: Kill, at: float | None, rng: random.Random) -> Iterator[Injection]:
    done = _signal_resolved(ctx, fault.target, int(getattr(signals, fault.signal)), rng,
                            ctx.kill_confirm)
    for proc, took in done:
        ctx.record("inject", fault, at, proc, f"{fault.signal} sent; process gone after {took:.3f} s")
    try:
        yield Injection(fault, tuple(proc for proc, _ in done))
    finally:
        for proc, _ in done:
            ctx.record("heal", fault, at, proc, "nothing to heal: Ray restarts what it may")


@contextmanager
def _kill_node(ctx: FaultContext, fault: KillNode, at: float | None,
               rng: random.Random) -> Iterator[Injection]:
    (node,) = resolve(fault.target, address=ctx.address, rng=rng)
    agent = agent_for(node.node_id)
    raylet, others = ctx.call(agent.kill_node.remote(driver_pids=ctx.driver_pids))
    # Confirmed only once Ray has declared the node dead (its health check, seconds): what
    # the run's verdicts read about a lost node is Ray's view, and until then Ray still
    # schedules on it. A node whose processes died but that Ray never calls dead is ineffective.
    took = _confirm_node_dead(ctx, node.node_id, since=time.monotonic())
    proc = RayProcess(raylet, node.node_id, f"raylet of node {short(node.node_id)}")
    ctx.record("inject", fault, at, proc, f"raylet stopped and the {others} processes under it "
                                          "SIGKILLed, each confirmed; the raylet SIGKILLed next; "
                                          f"Ray declared the node dead {took:.1f} s later")
    try:
        yield Injection(fault, (proc,))
    finally:
        ctx.record("heal", fault, at, proc, "nothing to heal: the node stays dead")


def _node_states(address: str, node_id: str) -> list[str]:
    """The GCS's state of each row for ``node_id`` (the State API; empty if it lists none)."""
    from ray.util.state import list_nodes

    rows = list_nodes(address=address, filters=[("node_id", "=", node_id)],
                      raise_on_missing_output=False, timeout=CALL_TIMEOUT)
    return [str(n.state) for n in rows]


def _confirm_node_dead(ctx: FaultContext, node_id: str, *, since: float) -> float:
    """Wait until the GCS lists ``node_id`` DEAD; seconds from ``since`` until it did.

    Raises:
        FaultIneffective: it was not listed DEAD within ``NODE_DEATH_CONFIRM`` seconds.
    """
    seen: list[list[str]] = []

    def dead() -> bool:
        seen.append(states := _node_states(ctx.address, node_id))
        return bool(states) and all(state == "DEAD" for state in states)

    try:
        wait_until(dead, timeout=NODE_DEATH_CONFIRM, interval=0.1, what=f"node {short(node_id)} dead")
    except HangError:
        last = seen[-1] if seen else "no answer"
        raise FaultIneffective(f"node {short(node_id)} was not DEAD in the GCS {NODE_DEATH_CONFIRM:g} s after "
                               f"its raylet was killed (last seen: {last!r}); Ray never declared it "
                               "dead, so the node loss did not happen as Ray sees it") from None
    return time.monotonic() - since


@contextmanager
def _pause(ctx: FaultContext, fault: Pause, at: float | None, rng: random.Random) -> Iterator[Injection]:
    paused: list[tuple[RayProcess, int]] = []  # with each pause's own token: its heal resumes that pause only

    def heal() -> None:
        for proc, token in paused:
            _resume_one(ctx, fault, at, proc, token)

    def pause(proc: RayProcess) -> None:
        paused.append((proc, _pause_one(ctx, fault, at, proc)))

    with ctx.on_heal(heal):  # every process paused so far is resumed, whatever happens
        _each_resolved(ctx, fault.target, rng, pause)
        yield Injection(fault, tuple(proc for proc, _ in paused))


def _pause_one(ctx: FaultContext, fault: Pause, at: float | None, proc: RayProcess) -> int:
    """Pause ``proc``; returns the pause's token, which its heal must give."""
    agent = agent_for(proc.node_id)
    ticket = ctx.call(agent.pause.remote(proc.pid, fault.seconds, driver_pids=ctx.driver_pids,
                                         owner=driver_token()))
    ctx.record("inject", fault, at, proc, "SIGSTOP; seen in state T", Observed(resume_by=ticket.deadline))
    return int(ticket.token)


def _resume_one(ctx: FaultContext, fault: Pause, at: float | None, proc: RayProcess, token: int) -> None:
    # This pause's own token: healing an earlier pause of the same process must not resume a
    # later one that overlaps it (a seeded plugin run saw that later pause never confirmed).
    resumed = ctx.call(agent_for(proc.node_id).resume.remote(proc.pid, token=token))
    ctx.record("heal", fault, at, proc, "SIGCONT" if resumed else
               "already resumed by its own timer, or held on by a later pause of the same process")


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
                   Observed(memory_outcome=result.outcome, peak_bytes=result.peak_bytes))

    with ctx.on_heal(heal):
        ctx.record("inject", fault, at, node, _confirm_started(ctx, hog, node, path))
        yield Injection(fault, (node,), memory=watch)
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
               Observed(bytes=held, capacity=capacity))

    def heal() -> None:
        refs.clear()
        ctx.record("heal", fault, at, node, "references dropped")

    with ctx.on_heal(heal):
        yield Injection(fault, (node,), store=StoreFill(held, capacity, full))


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
               Observed(cpus=fault.cpus, resources=dict(fault.resources)))

    def heal() -> None:
        remove_placement_group(group)
        ctx.record("heal", fault, at, node, "resources released")

    with ctx.on_heal(heal):
        yield Injection(fault, (node,))


@contextmanager
def _freeze_node(ctx: FaultContext, fault: FreezeNode, at: float | None,
                 rng: random.Random) -> Iterator[Injection]:
    (node,) = resolve(fault.target, address=ctx.address, rng=rng)
    agent = agent_for(node.node_id)
    pids = ctx.call(agent.freeze_node.remote(fault.seconds, workers=fault.workers,
                                             driver_pids=ctx.driver_pids, owner=driver_token()))
    proc = RayProcess(pids[0], node.node_id, f"raylet of node {short(node.node_id)}")
    ctx.record("inject", fault, at, proc, f"raylet and {len(pids) - 1} workers SIGSTOPped; "
                                          "each seen in state T", Observed(pids=tuple(pids)))

    def heal() -> None:
        ctx.record("heal", fault, at, proc, _thaw(ctx, agent, pids))

    with ctx.on_heal(heal):
        yield Injection(fault, (proc,), pids=tuple(pids))


def _thaw(ctx: FaultContext, agent: Any, pids: list[int]) -> str:
    """Resume a frozen node through its agent. Once Ray has declared the node dead its agent
    is dead to Ray too, though its process runs on: its own timer resumed the raylet at the
    same deadline (a healer process guards it as well), and that is what is said."""
    from ray.exceptions import RayActorError

    try:
        resumed = ctx.call(agent.resume_all.remote(pids), timeout=10.0)
    except (RayActorError, TimeoutError) as exc:
        return (f"the agent is unreachable ({type(exc).__name__}: Ray declared the node dead); its "
                "timer resumed the raylet at the deadline")
    return f"SIGCONT to {resumed} of {len(pids)} processes (the rest had exited)"


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
                       Observed(old_limit=soft, limit=low))
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
        yield Injection(fault, (node,), ballast_bytes=filled.bytes)


@contextmanager
def _drain_node(ctx: FaultContext, fault: DrainNode, at: float | None,
                rng: random.Random) -> Iterator[Injection]:
    (node,) = resolve(fault.target, address=ctx.address, rng=rng)
    agent = agent_for(node.node_id)
    ctx.call(agent.where.remote())  # up before the drain: a draining node takes no new actor
    deadline = time.monotonic() + fault.deadline_s
    _request_drain(ctx, node.node_id, fault)
    ctx.record("inject", fault, at, node, f"drain accepted by the GCS ({fault.reason}); "
                                          f"deadline in {fault.deadline_s:g} s")
    if fault.kill_at_deadline:
        threading.Event().wait(max(0.0, deadline - time.monotonic()))  # the notice's length
        raylet, others = ctx.call(agent.kill_node.remote(
            driver_pids=ctx.driver_pids, grace_s=fault.grace_s), timeout=CALL_TIMEOUT + fault.grace_s)
        took = _confirm_node_dead(ctx, node.node_id, since=time.monotonic())
        ctx.record("inject", fault, at, RayProcess(raylet, node.node_id, node.label),
                   f"deadline reached: SIGTERM, {fault.grace_s:g} s grace, SIGKILL to the raylet "
                   f"and {others} processes; Ray declared the node dead after {took:.1f} s")
    try:
        yield Injection(fault, (node,))
    finally:
        ctx.record("heal", fault, at, node, "nothing to heal: the node is gone"
                   if fault.kill_at_deadline else "nothing to heal: the node stays drained")


def _request_drain(ctx: FaultContext, node_id: str, fault: DrainNode) -> None:
    import ray
    from ray.core.generated import autoscaler_pb2

    reason = {"preemption": "DRAIN_NODE_REASON_PREEMPTION",
              "idle_termination": "DRAIN_NODE_REASON_IDLE_TERMINATION"}[fault.reason]
    client = ray._raylet.GcsClient(address=ctx.address)
    deadline_ms = time.time_ns() // 1_000_000 + int(fault.deadline_s * 1000)
    accepted, why = client.drain_node(node_id, autoscaler_pb2.DrainNodeReason.Value(reason),
                                      "raychaos DrainNode", deadline_ms)
    if not accepted:
        raise FaultIneffective(f"the GCS refused to drain node {short(node_id)}: {why}")


@contextmanager
def _kill_gcs(ctx: FaultContext, fault: KillGcs, at: float | None,
              rng: random.Random) -> Iterator[Injection]:
    head = head_of(ctx.address)
    pid = head.kill_gcs()
    proc = RayProcess(pid, head.node_id, f"gcs_server pid {pid}")
    ctx.record("inject", fault, at, proc, "gcs_server SIGKILLed; process gone")

    def heal() -> None:
        if not fault.restart:
            ctx.record("heal", fault, at, proc, "not restarted, as asked: the head is lost")
            return
        new_pid, took = head.restart_gcs(ctx.address)
        ctx.record("heal", fault, at, proc, f"gcs_server restarted as pid {new_pid}; it answered "
                                            f"after {took:.2f} s", Observed(new_pid=new_pid))

    with ctx.on_heal(heal):
        yield Injection(fault, (proc,))


_ON_PROCESSES = frozenset({Need.AGENT, Need.STATE_API, Need.PROC, Need.CONTROL})
_ON_NODES = frozenset({Need.AGENT, Need.STATE_API})
_TARGETS: dict[str, JsonValue] = {"actor": {"kind": "actor", "class_name": "EnvWorker"}, "node": {"kind": "node"},
            "replay": {"kind": "actor", "name": "replay", "namespace": "raychaos"},
            "files": {"kind": "actor", "name": "files", "namespace": "raychaos"}}
register(
    FaultSpec(record=Kill, inject=_kill, needs=_ON_PROCESSES, colour="#e4572e",
              example={"target": _TARGETS["actor"], "signal": "SIGKILL"}),
    FaultSpec(record=KillNode, inject=_kill_node, needs=_ON_PROCESSES, colour="#a4031f",
              example={"target": _TARGETS["node"]}),
    FaultSpec(record=Pause, inject=_pause, needs=_ON_PROCESSES, colour="#f3a712",
              example={"seconds": 3, "target": _TARGETS["replay"]}),
    FaultSpec(record=MemoryPressure, inject=_memory, needs=_ON_NODES | {Need.RAYCHAOS}, colour="#5d2e8c",
              example={"fraction": 0.2, "host_cap": 0.5, "seconds": 3}),
    FaultSpec(record=CpuHog, inject=_cpu, needs=_ON_NODES, colour="#29335c", example={"cores": 2, "seconds": 4}),
    FaultSpec(record=FillObjectStore, inject=_object_store, needs=frozenset({Need.STATE_API}), colour="#2e86ab",
              example={"fraction": 0.8, "seconds": 3}),
    FaultSpec(record=Starve, inject=_starve, needs=frozenset({Need.STATE_API}), colour="#669bbc",
              example={"seconds": 5, "cpus": 2}),
    FaultSpec(record=FreezeNode, inject=_freeze_node, needs=_ON_PROCESSES, colour="#0b6e4f",
              example={"seconds": 12, "workers": False}),
    FaultSpec(record=LimitOpenFiles, inject=_limit_open_files, needs=_ON_PROCESSES, colour="#8f2d56",
              example={"target": _TARGETS["files"], "seconds": 2}),
    FaultSpec(record=FillDisk, inject=_fill_disk, needs=_ON_NODES, colour="#6b4226",
              example={"path": "$STORAGE", "seconds": 2}),
    FaultSpec(record=DrainNode, inject=_drain_node, needs=_ON_PROCESSES, colour="#3a506b",
              example={"deadline_s": 2, "reason": "preemption", "grace_s": 2}),
    FaultSpec(record=KillGcs, inject=_kill_gcs, needs=frozenset({Need.GCS}), colour="#c5283d",
              example={"seconds": 1, "restart": True}),
)
