"""The one fault loop: inject each scheduled fault at its time, hold it, heal it, say how it went.

Used alike by the pytest ``chaos`` fixture, the scenario runner and user code. Every fault
ends in a :class:`FaultOutcome` with a typed :class:`FaultStatus`; only ``INJECTED`` (sent,
its effect confirmed, healed) counts as having happened. Callers fail closed on the rest.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

from chaos._errors import ChaosError, FaultIneffective, TargetNotFound, UnsafeTarget
from chaos._faults import FaultStatus
from chaos._schedule import Schedule, ScheduledFault

__all__ = ["FaultOutcome", "FaultStatus", "FaultsNotApplied", "ScheduleObserver", "check_applied", "run_schedule"]

MAX_CONCURRENT_FAULTS = 8


@dataclass(frozen=True, slots=True)
class FaultOutcome:
    """One scheduled fault as it went: when it started, was confirmed and ended (seconds
    after the run's start; None if it never started, or its effect was never confirmed), its
    injection, and the error when it did not happen."""

    index: int
    entry: ScheduledFault
    status: FaultStatus
    started: float | None = None
    ended: float | None = None
    injection: Any = None
    error: str = ""
    confirmed: float | None = None

    @property
    def ok(self) -> bool:
        return self.status is FaultStatus.INJECTED

    def describe(self) -> str:
        entry = self.entry
        head = f"faults[{self.index}] {entry.kind} of {entry.target_label} at {entry.at:g} s: {self.status.value}"
        return f"{head}: {self.error}" if self.error else head


class FaultsNotApplied(ChaosError, AssertionError):
    """Scheduled faults were not all injected and confirmed before the run or test ended;
    ``missed`` holds each one's outcome (its status), the message says why for people."""

    def __init__(self, message: str, *, missed: Sequence[FaultOutcome] = ()) -> None:
        super().__init__(message)
        self.missed: tuple[FaultOutcome, ...] = tuple(missed)


class ScheduleObserver:
    """Hooks of :func:`run_schedule`, called from the fault's own thread. The default holds
    each fault for its own ``seconds`` (0 for kills) and observes nothing."""

    def hold(self, entry: ScheduledFault) -> float:
        """How long to keep ``entry``'s fault before healing it (``stop`` cuts it short)."""
        return float(getattr(entry.fault, "seconds", 0.0))

    def injecting(self, index: int, entry: ScheduledFault) -> None:
        """The fault's time came and it is injected next (a last look at what it will hit);
        if it raises, the fault fails with that error and is not injected."""

    def injected(self, index: int, entry: ScheduledFault, injection: Any) -> None:
        """The fault took effect (confirmed); it is held next."""

    def settled(self, outcome: FaultOutcome) -> FaultOutcome:
        """The fault is over (healed, or it failed); may measure recovery. Returns the outcome.

        If it raises, the entry's outcome becomes ``FAILED`` naming the error, and this hook
        is called once more with that outcome; the other entries go on as before."""
        return outcome


_STATUS_OF: tuple[tuple[type[BaseException], FaultStatus], ...] = (
    (TargetNotFound, FaultStatus.NOT_FOUND), (UnsafeTarget, FaultStatus.REFUSED),
    (FaultIneffective, FaultStatus.INEFFECTIVE))


def run_schedule(chaos: Any, schedule: Schedule, *, stop: threading.Event | None = None,
                 start: float | None = None, observer: ScheduleObserver | None = None,
                 clock: Callable[[], float] = time.monotonic) -> list[FaultOutcome]:
    """Inject each fault at its time, hold it, heal it; wait for all; one outcome per entry.

    Args:
        stop: ends the run early: faults not yet started are ``NOT_REACHED`` (also those
            due but still queued for one of the ``MAX_CONCURRENT_FAULTS`` threads), active
            ones are healed now.
        start: the ``clock()`` value the entries' ``at`` count from (default: now).
        observer: hooks for holding, and for what happens after each fault.

    Each fault chooses its target with its own generator, seeded by the engine's seed and
    the fault's index, so concurrent faults pick the same targets in every run.
    """
    stop, observer = stop or threading.Event(), observer or ScheduleObserver()
    start = clock() if start is None else start
    futures: dict[int, Future[FaultOutcome]] = {}
    with ThreadPoolExecutor(MAX_CONCURRENT_FAULTS, thread_name_prefix="raychaos-fault") as pool:
        for i, entry in enumerate(schedule.entries):
            if stop.wait(max(0.0, start + entry.at - clock())):
                break
            futures[i] = pool.submit(_one, chaos, i, entry, stop, start, clock, observer)
    ended = clock() - start
    # Every entry gets its outcome, each one apart: one that raised must not lose the rest.
    return [_result(futures[i], i, e, observer) if i in futures else _settle(observer, FaultOutcome(
        i, e, FaultStatus.NOT_REACHED, error=NOT_REACHED.format(ended=ended)))
        for i, e in enumerate(schedule.entries)]


def _result(future: Future[FaultOutcome], index: int, entry: ScheduledFault,
            observer: ScheduleObserver) -> FaultOutcome:
    """The fault thread's outcome; a thread that raised past its own handling still yields one
    (``FAILED``, shown to the observer)."""
    try:
        return future.result()
    except Exception as exc:  # noqa: BLE001 - the entry's outcome says what went wrong
        return _settle(observer, FaultOutcome(index, entry, FaultStatus.FAILED,
                                              error=_named(exc, "the fault's thread")))


def _settle(observer: ScheduleObserver, outcome: FaultOutcome) -> FaultOutcome:
    """``observer.settled(outcome)``; if it raises, the outcome is ``FAILED`` naming the error,
    and the observer is shown that failed outcome once (so a recorder that records in
    ``settled`` still records this entry). A second raise leaves the failed outcome as is."""
    try:
        return observer.settled(outcome)
    except Exception as exc:  # noqa: BLE001 - one observer error must not cost the entry its outcome
        failed = replace(outcome, status=FaultStatus.FAILED, error=_named(
            exc, f"observer.settled() of this {outcome.status.value} fault"))
    try:
        return observer.settled(failed)
    except Exception:  # noqa: BLE001 - the failure is already named in the outcome
        return failed


def _named(exc: BaseException, where: str) -> str:
    return f"{where} raised {type(exc).__name__}: {exc}"[:500]


def _one(chaos: Any, index: int, entry: ScheduledFault, stop: threading.Event, start: float,
         clock: Callable[[], float], observer: ScheduleObserver) -> FaultOutcome:
    began, injection, confirmed = clock() - start, None, None
    if stop.is_set():  # queued behind busy threads until the run was over: injecting now is after it
        return _settle(observer, FaultOutcome(index, entry, FaultStatus.NOT_REACHED, error=QUEUED_PAST_STOP.format(
            turn=began, at=entry.at, most=MAX_CONCURRENT_FAULTS)))
    rng = random.Random(f"{getattr(chaos, 'seed', 0)}/{index}")
    try:
        observer.injecting(index, entry)
        with chaos.inject(entry.fault, at=entry.at, rng=rng) as injection:
            confirmed = clock() - start  # a fault's effect can come well after its start
            observer.injected(index, entry, injection)
            stop.wait(observer.hold(entry))
    except Exception as exc:  # noqa: BLE001 - every failure becomes a typed outcome
        status = next((s for t, s in _STATUS_OF if isinstance(exc, t)), FaultStatus.FAILED)
        return _settle(observer, FaultOutcome(index=index, entry=entry, status=status, started=began,
                                              ended=clock() - start, injection=injection,
                                              error=f"{type(exc).__name__}: {exc}"[:500], confirmed=confirmed))
    return _settle(observer, FaultOutcome(index=index, entry=entry, status=FaultStatus.INJECTED, started=began,
                                          ended=clock() - start, injection=injection, confirmed=confirmed))


#: Why a fault whose time never came did not happen.
NOT_REACHED = "the run stopped {ended:.2f} s after its start, before this fault's time"
#: Why a fault whose time came while every fault thread was busy did not happen.
QUEUED_PAST_STOP = ("due at {at:g} s, this fault waited for a free fault thread (at most {most} faults run at "
                    "once) and got one {turn:.2f} s after the run's start, when the run had already stopped; "
                    "hold fewer faults at a time, or spread them out")


def check_applied(outcomes: Sequence[FaultOutcome], *, where: str) -> None:
    """Raise :class:`FaultsNotApplied` listing every fault that did not happen.

    Raises:
        FaultsNotApplied: some outcome is not ``INJECTED``.
    """
    missed = [o for o in outcomes if not o.ok]
    if missed:
        lines = "\n".join(f"  - {o.describe()}" for o in missed)
        raise FaultsNotApplied(f"{len(missed)} of {len(outcomes)} scheduled faults did not happen "
                               f"in {where}:\n{lines}", missed=missed)
