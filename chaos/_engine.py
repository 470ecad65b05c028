"""The chaos engine: resolve a target, inject through the agent on its node, heal, journal.

Every injector is inject → ``yield`` → heal in ``finally``; every wait has a deadline.
"""

from __future__ import annotations

import os
import random
import signal as signals
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from chaos._agent import agent_for
from chaos._errors import HangError, TargetNotFound, UnsafeTarget
from chaos._faults import (
    CpuHog,
    Fault,
    FillObjectStore,
    Kill,
    KillNode,
    MemoryPressure,
    Pause,
    Starve,
    fault_to_dict,
)
from chaos._journal import Journal
from chaos._targets import NodeTarget, Process, resolve
from chaos._wait import wait_until

__all__ = ["Chaos", "Injection"]

CALL_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class Injection:
    """What an injection hit: the processes (pid 0 for a node), and what it observed."""

    fault: Fault
    processes: tuple[Process, ...]
    details: dict[str, Any] = field(default_factory=dict)


class Chaos:
    """Injects faults into the cluster at ``address`` and journals each step.

    Args:
        address: the cluster's GCS address (State API calls go there, never to "auto").
        journal: where events go (a fresh in-memory one by default).
        seed: seeds the choice among matching targets.
    """

    def __init__(self, *, address: str, journal: Journal | None = None, seed: int = 0) -> None:
        self.address = address
        self.journal = journal or Journal()
        self.rng = random.Random(seed)
        self.driver_pids = (os.getpid(),)
        self._active: dict[int, Callable[[], None]] = {}
        self._lock = threading.Lock()
        self._next = 0

    # -- public ----------------------------------------------------------------------------

    @contextmanager
    def inject(self, fault: Fault, *, at: float | None = None) -> Iterator[Injection]:
        """Inject ``fault``, yield, and heal it when the block ends (also on error or Ctrl-C).

        Raises:
            TargetNotFound: nothing alive matches the fault's target.
            UnsafeTarget: the safety check refused the process (journaled as ``refuse``).
        """
        injector = _INJECTORS[type(fault)]
        try:
            with injector(self, fault, at) as injection:
                yield injection
        except (UnsafeTarget, TargetNotFound) as exc:
            self.journal.record("refuse", at=at, fault=fault_to_dict(fault), outcome=str(exc))
            raise

    def kill(self, fault: Kill | KillNode) -> Injection:
        """Inject a kill (nothing to heal: Ray restarts what it may)."""
        with self.inject(fault) as injection:
            return injection

    def heal_all(self) -> int:
        """Heal every fault still active from this engine, now. Returns how many."""
        with self._lock:
            heals, self._active = list(self._active.values()), {}
        for heal in heals:
            heal()
        return len(heals)

    def wait_restarted(self, process: Process, *, timeout: float = 60.0) -> float:
        """Wait until the actor of ``process`` is alive in a new process; journal the MTTR."""
        from ray.util.state import get_actor

        start = time.monotonic()

        def restarted() -> bool:
            actor = get_actor(process.actor_id, address=self.address, timeout=CALL_TIMEOUT)
            return bool(actor and actor.state == "ALIVE" and actor.pid and actor.pid != process.pid)

        wait_until(restarted, timeout=timeout, interval=0.05,
                   what=f"restart of {process.label} after the fault")
        seconds = time.monotonic() - start
        self.journal.record("recover", target=process.label, node=process.node_id,
                            pid=process.pid, outcome="restarted", seconds=seconds)
        return seconds

    # -- plumbing --------------------------------------------------------------------------

    def _resolve(self, target: Any) -> list[Process]:
        return resolve(target, address=self.address, rng=self.rng)

    def _call(self, ref: Any) -> Any:
        import ray

        return ray.get(ref, timeout=CALL_TIMEOUT)

    @contextmanager
    def _active_heal(self, heal: Callable[[], None]) -> Iterator[None]:
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

    def _record(self, kind: str, fault: Fault, at: float | None, proc: Process | None,
                outcome: str, **extra: Any) -> None:
        self.journal.record(kind, at=at, fault=fault_to_dict(fault),  # type: ignore[arg-type]
                            target=proc.label if proc else None, node=proc.node_id if proc else None,
                            pid=proc.pid if proc else None, outcome=outcome, extra=extra)


# -- injectors: inject → yield → heal in finally ------------------------------------------------


def _signal_resolved(chaos: Chaos, target: Any, signum: int) -> list[Process]:
    """Resolve and signal; a process that exited since the State API saw it is skipped and
    the target resolved again without it (the State API lags a dying process)."""
    stale: set[int] = set()
    for _ in range(5):
        procs = resolve(target, address=chaos.address, rng=chaos.rng, exclude_pids=frozenset(stale))
        done = []
        for proc in procs:
            try:
                chaos._call(agent_for(proc.node_id).signal.remote(proc.pid, signum,
                                                                  driver_pids=chaos.driver_pids))
                done.append(proc)
            except TargetNotFound:
                stale.add(proc.pid)
        if done:
            return done
    raise TargetNotFound(f"every process matching {target.label()} exited before it was signalled")


@contextmanager
def _kill(chaos: Chaos, fault: Kill, at: float | None) -> Iterator[Injection]:
    procs = _signal_resolved(chaos, fault.target, int(getattr(signals, fault.signal)))
    for proc in procs:
        chaos._record("inject", fault, at, proc, f"{fault.signal} sent")
    try:
        yield Injection(fault, tuple(procs))
    finally:
        for proc in procs:
            chaos._record("heal", fault, at, proc, "nothing to heal: Ray restarts what it may")


@contextmanager
def _kill_node(chaos: Chaos, fault: KillNode, at: float | None) -> Iterator[Injection]:
    (node,) = chaos._resolve(fault.target)
    agent = agent_for(node.node_id)
    raylet, others = chaos._call(agent.kill_node.remote(driver_pids=chaos.driver_pids))
    proc = Process(raylet, node.node_id, f"raylet of node {node.node_id[:12]}")
    chaos._record("inject", fault, at, proc, f"raylet and the {others} processes under it SIGKILLed")
    try:
        yield Injection(fault, (proc,))
    finally:
        chaos._record("heal", fault, at, proc, "nothing to heal: the node stays dead")


@contextmanager
def _pause(chaos: Chaos, fault: Pause, at: float | None) -> Iterator[Injection]:
    (proc,) = chaos._resolve(fault.target)[:1]
    agent = agent_for(proc.node_id)
    deadline = chaos._call(agent.pause.remote(proc.pid, fault.seconds, driver_pids=chaos.driver_pids))
    chaos._record("inject", fault, at, proc, "SIGSTOP", resume_by=deadline)

    def heal() -> None:
        chaos._call(agent.resume.remote(proc.pid))
        chaos._record("heal", fault, at, proc, "SIGCONT")

    with chaos._active_heal(heal):
        yield Injection(fault, (proc,), {"resume_by": deadline})


@contextmanager
def _cpu(chaos: Chaos, fault: CpuHog, at: float | None) -> Iterator[Injection]:
    node = _node_of(chaos, fault.node)
    agent = agent_for(node.node_id)
    pids = chaos._call(agent.cpu_hog.remote(fault.cores, fault.seconds))
    chaos._record("inject", fault, at, node, f"{len(pids)} busy processes", pids=pids)

    def heal() -> None:
        chaos._call(agent.stop_hogs.remote())
        chaos._record("heal", fault, at, node, "busy processes stopped")

    with chaos._active_heal(heal):
        yield Injection(fault, (node,), {"pids": pids})


def _node_of(chaos: Chaos, target: NodeTarget | None) -> Process:
    import ray

    if target is None:  # this driver's node
        node_id = ray.get_runtime_context().get_node_id()
        return Process(0, node_id, f"node {node_id[:12]}")
    return chaos._resolve(target)[0]


@contextmanager
def _memory(chaos: Chaos, fault: MemoryPressure, at: float | None) -> Iterator[Injection]:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    node = _node_of(chaos, fault.node)
    hog = ray.remote(_allocate).options(
        max_retries=0, num_cpus=0, name="raychaos.memory_pressure",
        scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False),
    ).remote(fault.fraction, fault.host_cap, fault.seconds)
    chaos._record("inject", fault, at, node, f"allocating to {fault.fraction:.0%} of the host")
    details: dict[str, Any] = {"ref": hog}

    def heal() -> None:
        ray.cancel(hog, force=True)
        outcome = _memory_outcome(hog)
        details["outcome"] = outcome
        chaos._record("heal", fault, at, node, outcome)

    with chaos._active_heal(heal):
        yield Injection(fault, (node,), details)


def _memory_outcome(ref: Any) -> str:
    import ray
    from ray.exceptions import OutOfMemoryError, TaskCancelledError, WorkerCrashedError

    try:
        peak = ray.get(ref, timeout=CALL_TIMEOUT)
        return f"held {peak / 2**30:.2f} GiB without an OOM kill"
    except OutOfMemoryError:
        return "OutOfMemoryError: Ray's memory monitor killed the allocating task"
    except (TaskCancelledError, WorkerCrashedError):
        return "allocation stopped at heal"


def _allocate(fraction: float, host_cap: float, seconds: float) -> int:
    """Grow resident memory in 64 MiB steps toward ``fraction`` of the host, never past the cap."""
    import mmap

    import psutil

    blocks, step, deadline = [], 64 * 2**20, time.monotonic() + seconds
    total = psutil.virtual_memory().total
    # MAP_POPULATE: the kernel faults every page in up front, about 6x faster than touching
    # them from Python, so the pressure builds within a short fault's seconds.
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0)
    while time.monotonic() < deadline:
        used = total - psutil.virtual_memory().available
        if used + step <= min(fraction, host_cap) * total:
            block = mmap.mmap(-1, step, flags=flags)
            block[::4096] = b"\x01" * (step // 4096)  # resident even without MAP_POPULATE
            blocks.append(block)
        else:
            time.sleep(0.05)  # at the target: hold until the deadline (or Ray kills us)
    return sum(len(b) for b in blocks)


@contextmanager
def _object_store(chaos: Chaos, fault: FillObjectStore, at: float | None) -> Iterator[Injection]:
    import numpy as np
    import ray
    from ray.exceptions import ObjectStoreFullError

    node = _node_of(chaos, None)
    capacity = ray.cluster_resources().get("object_store_memory", 0.0) / max(1, len(ray.nodes()))
    refs, chunk, outcome = [], np.ones(fault.chunk_mb * 2**20, dtype=np.uint8), "filled"
    try:
        while len(refs) * chunk.nbytes < fault.fraction * capacity:
            refs.append(ray.put(chunk))
    except ObjectStoreFullError:
        outcome = "ObjectStoreFullError"
    held = len(refs) * chunk.nbytes
    chaos._record("inject", fault, at, node, outcome, bytes=held, capacity=capacity)

    def heal() -> None:
        refs.clear()
        chaos._record("heal", fault, at, node, "references dropped")

    with chaos._active_heal(heal):
        yield Injection(fault, (node,), {"bytes": held, "outcome": outcome, "capacity": capacity})


class _Holder:
    """Holds resources while it lives."""

    def ready(self) -> bool:
        return True


@contextmanager
def _starve(chaos: Chaos, fault: Starve, at: float | None) -> Iterator[Injection]:
    import ray

    holder = ray.remote(_Holder).options(num_cpus=fault.cpus, resources=fault.resources,
                                         name=None, max_restarts=0).remote()
    try:
        chaos._call(holder.ready.remote())
    except Exception as exc:
        ray.kill(holder)
        raise HangError(f"could not acquire cpus={fault.cpus} resources={fault.resources} within "
                        f"{CALL_TIMEOUT:g} s to starve the cluster; are they free?") from exc
    node = _node_of(chaos, None)
    chaos._record("inject", fault, at, node, "resources held", cpus=fault.cpus,
                  resources=fault.resources)

    def heal() -> None:
        ray.kill(holder)
        chaos._record("heal", fault, at, node, "resources released")

    with chaos._active_heal(heal):
        yield Injection(fault, (node,))


_INJECTORS: dict[type, Callable[..., Any]] = {
    Kill: _kill, KillNode: _kill_node, Pause: _pause, CpuHog: _cpu, MemoryPressure: _memory,
    FillObjectStore: _object_store, Starve: _starve,
}

