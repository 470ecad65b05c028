"""The chaos engine: resolve a target, inject through the agent on its node, confirm, heal, journal.

Every injector is inject → confirm → ``yield`` → heal in ``finally``; every wait has a
deadline. *Confirm* means the fault's effect was observed (the process gone, state T, bytes
resident, resources held): a fault that was only *sent* raises :class:`FaultIneffective`
and is journaled ``ineffective``, as CockroachDB's roachprod failure modes check that an
injection took effect before they wait for its consequences.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Literal

from chaos._context import CALL_TIMEOUT, Injection, MemoryWatch, StoreFill
from chaos._errors import FaultIneffective, TargetNotFound, UnsafeTarget
from chaos._faults import Fault
from chaos._journal import FaultEvent, Journal, RecoverEvent
from chaos._kinds import FaultKind, spec_of
from chaos._observed import Observed
from chaos._schedule import Schedule
from chaos._targets import RayProcess
from chaos._wait import wait_until
from chaos.agents._agent import start_agents
from chaos.agents._memory import MemoryOutcome, MemoryResult

if TYPE_CHECKING:
    from chaos._process_faults import DrainNode, Kill, KillNode

__all__ = ["Chaos", "Injection", "MemoryOutcome", "MemoryResult", "MemoryWatch", "StoreFill"]

#: How long a signalled process may take to be gone (a Ray worker's SIGTERM handler included).
KILL_CONFIRM = 15.0


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
        by_kind: dict[FaultKind, list[Fault]] = {}
        for entry in schedule.entries:
            by_kind.setdefault(entry.fault.KIND, []).append(entry.fault)
        for faults in by_kind.values():
            if (warm_up := spec_of(faults[0]).warm_up) is not None:
                warm_up(faults)

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
