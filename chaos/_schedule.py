"""Fault schedules: explicit, periodic with jitter, or seeded random. Same seed, same schedule."""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from chaos._errors import InvalidFaultSpec
from chaos._faults import Fault, fault_from_dict, fault_to_dict
from chaos._journal import Event

__all__ = ["Schedule", "ScheduledFault", "run_schedule"]


@dataclass(frozen=True, slots=True)
class ScheduledFault:
    """A fault and when it starts, in seconds after the run starts."""

    at: float
    fault: Fault

    def __post_init__(self) -> None:
        if not (isinstance(self.at, (int, float)) and math.isfinite(self.at) and self.at >= 0):
            raise InvalidFaultSpec(f"`at` must be a finite number of seconds >= 0, got {self.at!r}")


def _positive(name: str, value: float, *, upper: float | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value <= 0 or (upper is not None and value > upper):
        bound = f"in (0, {upper:g}]" if upper is not None else "positive and finite"
        raise InvalidFaultSpec(f"`{name}` must be {bound}, got {value!r}")


@dataclass(frozen=True, slots=True)
class Schedule:
    """An ordered tuple of scheduled faults (and the seed that made it, if any)."""

    entries: tuple[ScheduledFault, ...]
    seed: int | None = None

    @classmethod
    def explicit(cls, entries: Sequence[tuple[float, Fault]]) -> Schedule:
        return cls(tuple(sorted((ScheduledFault(at, f) for at, f in entries), key=lambda e: e.at)))

    @classmethod
    def interval(cls, faults: Sequence[Fault], *, every: float, duration: float,
                 jitter: float = 0.0, seed: int = 0) -> Schedule:
        """Cycle through ``faults`` every ``every`` seconds ± ``jitter`` × ``every``."""
        _positive("every", every)
        _positive("duration", duration)
        if not 0 <= jitter < 1:
            raise InvalidFaultSpec(f"`jitter` must be in [0, 1), a fraction of `every`, got {jitter!r}")
        if not faults:
            raise InvalidFaultSpec("an interval schedule needs at least one fault")
        rng, entries, t, i = random.Random(seed), [], every, 0
        while t < duration:
            at = max(0.0, t + rng.uniform(-jitter, jitter) * every)
            entries.append(ScheduledFault(round(at, 6), faults[i % len(faults)]))
            t, i = t + every, i + 1
        return cls(tuple(entries), seed)

    @classmethod
    def random(cls, menu: Sequence[Fault], *, rate: float, duration: float, seed: int) -> Schedule:
        """A seeded Poisson process of ``rate`` faults per second (at most 1), each drawn from
        ``menu``: the mix of faults and targets."""
        _positive("rate", rate, upper=1.0)
        _positive("duration", duration)
        if not menu:
            raise InvalidFaultSpec("a random schedule needs a non-empty menu of faults")
        rng, entries, t = random.Random(seed), [], 0.0
        while (t := t + rng.expovariate(rate)) < duration:
            entries.append(ScheduledFault(round(t, 6), rng.choice(list(menu))))
        return cls(tuple(entries), seed)

    @classmethod
    def from_journal(cls, events: Sequence[Event]) -> Schedule:
        """The schedule a journal ran: its ``inject`` and ``refuse`` events, deduplicated."""
        seen: dict[tuple[float, str], ScheduledFault] = {}
        for e in events:
            if e.kind in ("inject", "refuse") and e.fault is not None and e.at is not None:
                seen.setdefault((e.at, repr(sorted(e.fault.items()))),
                                ScheduledFault(e.at, fault_from_dict(e.fault)))
        return cls(tuple(sorted(seen.values(), key=lambda s: s.at)))

    def to_dicts(self) -> list[dict[str, Any]]:
        return [{"at": e.at, "fault": fault_to_dict(e.fault)} for e in self.entries]


def _hold(fault: Fault) -> float:
    return float(getattr(fault, "seconds", 0.0))


def run_schedule(chaos: Any, schedule: Schedule, *, stop: threading.Event | None = None,
                 clock: Any = time.monotonic) -> list[BaseException | None]:
    """Inject each fault at its time, hold it for its ``seconds``, heal it; wait for all.

    ``stop`` ends the run early: pending faults are skipped, active ones healed now.
    Returns one entry per scheduled fault: None, or the error its injection raised.
    """
    stop = stop or threading.Event()
    start = clock()

    def one(entry: ScheduledFault) -> None:
        with chaos.inject(entry.fault, at=entry.at):
            stop.wait(_hold(entry.fault))  # hold the fault for its bound, or until stopped

    futures: list[Future[None]] = []
    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="raychaos-fault") as pool:
        for entry in schedule.entries:
            if stop.wait(max(0.0, start + entry.at - clock())):
                break
            futures.append(pool.submit(one, entry))
    return [f.exception() for f in futures]
