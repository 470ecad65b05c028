"""What an injector works with: the engine as a :class:`FaultContext` (where it journals each
confirmed step, registers its heal, and calls Ray), and what it yields, an :class:`Injection`.

Every kind's injector has one shape, ``(ctx, fault, at, rng)`` → a context manager yielding an
``Injection``: inject, confirm (journal ``ctx.record("inject", ...)`` only once the effect was
seen), ``yield`` inside ``ctx.on_heal(heal)``, heal in ``finally``.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Literal, Protocol, TypeVar

from chaos._errors import TargetNotFound
from chaos._journal import Journal
from chaos._kinds import Fault
from chaos._observed import Observed
from chaos._ray_state import short
from chaos._targets import NodeTarget, RayProcess, TaskTarget, resolve
from chaos.agents._agent import agent_for
from chaos.agents._memory import MemoryResult

__all__ = ["CALL_TIMEOUT", "FaultContext", "Injection", "Injector", "MemoryWatch", "StoreFill", "driver_node",
           "each_resolved", "node_of", "signal_resolved"]

T = TypeVar("T")

#: How long one call an injector makes may take (an agent's answer, a State API query).
CALL_TIMEOUT = 30.0


class FaultContext(Protocol):
    """What an injector may use of the engine (:class:`chaos.Chaos` is one)."""

    @property
    def address(self) -> str:
        """The cluster's GCS address (State API calls go there)."""

    @property
    def journal(self) -> Journal:
        """Where every step goes."""

    @property
    def driver_pids(self) -> tuple[int, ...]:
        """This driver's processes: never a target."""

    @property
    def kill_confirm(self) -> float:
        """Seconds a signalled process may take to be gone."""

    def record(self, kind: Literal["inject", "heal"], fault: Fault, at: float | None, proc: RayProcess | None,
               outcome: str, observed: Observed | None = None) -> None:
        """Journal a confirmed step of ``fault`` on ``proc`` (a node is a process of pid 0)."""

    def on_heal(self, heal: Callable[[], None]) -> AbstractContextManager[None]:
        """Hold ``heal`` while the block runs: it runs when the block ends, or earlier from
        :meth:`chaos.Chaos.heal_all` (a Ctrl-C's rollback), never twice."""

    def call(self, ref: Any, timeout: float = ...) -> Any:
        """``ray.get(ref)`` within ``timeout`` seconds."""


@dataclass(frozen=True, slots=True)
class StoreFill:
    """What filling the object store held: bytes put, the node's capacity, and whether Ray
    refused a put (``ObjectStoreFullError``) before the asked fraction was reached."""

    held_bytes: int
    capacity_bytes: float
    full: bool


class MemoryWatch:
    """A memory fault's allocating task (``ref``) and, once the fault is healed, how it ended
    (``result``; None until then)."""

    def __init__(self, ref: Any) -> None:
        self.ref = ref
        self.result: MemoryResult | None = None


@dataclass(frozen=True, slots=True)
class Injection:
    """What an injection hit: the processes (pid 0 for a node), the ``pids`` it started or
    stopped (CPU hogs; a frozen node's raylet and workers), and what the kind's injector found,
    as that kind's own typed record, in ``found``: a memory fault's :class:`MemoryWatch` (its
    task and, after its heal, how it ended), a full object store's :class:`StoreFill`, a full
    disk's ``Filled`` ballast, a disk fault's ``DiskInjection`` (its confirmation, and what a power
    loss dropped), a file corruption's ``Corruption``. Read it back with ``isinstance``; None
    when the kind reports nothing."""

    fault: Fault
    processes: tuple[RayProcess, ...]
    pids: tuple[int, ...] = ()
    found: object = None

    def heal_note(self) -> str:
        """What the heal observed, for people ("" when there is nothing to say)."""
        if isinstance(self.found, MemoryWatch) and self.found.result is not None:
            return self.found.result.note
        if isinstance(self.found, StoreFill):
            return "ObjectStoreFullError" if self.found.full else "filled"
        return ""


def driver_node() -> str:
    """This driver's Ray node ("" when Ray is not initialised here: a fault on this machine,
    such as a disk fault on its mount, needs no Ray)."""
    ray = sys.modules.get("ray")  # importing Ray here would cost a second
    return str(ray.get_runtime_context().get_node_id()) if ray is not None and ray.is_initialized() else ""


def node_of(ctx: FaultContext, target: NodeTarget | None, rng: random.Random) -> RayProcess:
    """The node ``target`` names (a process of pid 0); None: this driver's node (Ray's, initialised)."""
    if target is None:
        import ray

        node_id = ray.get_runtime_context().get_node_id()
        return RayProcess(0, node_id, f"node {short(node_id)}")
    return resolve(target, address=ctx.address, rng=rng)[0]


#: An injector: inject → confirm → ``yield`` an :class:`Injection` → heal in ``finally``.
Injector = Callable[[FaultContext, Any, "float | None", random.Random], AbstractContextManager[Injection]]


# -- resolving a target: what process and node faults act on ---------------------------------------


def signal_resolved(ctx: FaultContext, target: Any, signum: int, rng: random.Random,
                     confirm_within: float) -> list[tuple[RayProcess, float]]:
    """Resolve, signal and confirm each process gone (see :func:`each_resolved`)."""
    def signal(proc: RayProcess) -> float:
        return float(ctx.call(agent_for(proc.node_id).signal.remote(
            proc.pid, signum, driver_pids=ctx.driver_pids, confirm_within=confirm_within,
            running=_task_running(target, proc)), timeout=CALL_TIMEOUT + confirm_within))
    return each_resolved(ctx, target, rng, signal)


def each_resolved(ctx: FaultContext, target: Any, rng: random.Random,
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
