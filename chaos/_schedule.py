"""Fault schedules: explicit, periodic with jitter, or seeded random. Same seed, same schedule."""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

from chaos._errors import InvalidFaultSpec
from chaos._faults import Fault, FaultKind
from chaos._journal import FaultEvent, JournalEvent, PlannedFault, StartEvent

__all__ = ["Schedule", "ScheduledFault"]


@dataclass(frozen=True, slots=True)
class ScheduledFault:
    """A fault and when it starts, in seconds after the run starts."""

    at: float
    fault: Fault

    def __post_init__(self) -> None:
        if not (isinstance(self.at, (int, float)) and math.isfinite(self.at) and self.at >= 0):
            raise InvalidFaultSpec(f"`at` must be a finite number of seconds >= 0, got {self.at!r}")

    @property
    def kind(self) -> FaultKind:
        """The fault's kind (``FaultKind.KILL``...; its value is how files spell it)."""
        return self.fault.KIND

    @property
    def target_label(self) -> str:
        """Its target as reports name it; ``node`` for node-wide faults (hogs, memory)."""
        target = getattr(self.fault, "target", None)
        return target.label() if target is not None else "node"


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
    def from_journal(cls, events: Sequence[JournalEvent]) -> Schedule:
        """The schedule a journal ran: the one its ``start`` event recorded when there is one
        (faults that never happened included), else its ``inject``, ``refuse`` and
        ``ineffective`` events, deduplicated."""
        for e in events:
            if isinstance(e, StartEvent) and e.schedule:
                return cls(tuple(ScheduledFault(p.at, p.fault) for p in e.schedule))
        seen: dict[tuple[float, str], ScheduledFault] = {}
        for e in events:
            if isinstance(e, FaultEvent) and e.kind in ("inject", "refuse", "ineffective") and e.at is not None:
                seen.setdefault((e.at, repr(e.fault)), ScheduledFault(e.at, e.fault))
        return cls(tuple(sorted(seen.values(), key=lambda s: s.at)))

    def planned(self) -> tuple[PlannedFault, ...]:
        """The schedule as a ``start`` event journals it."""
        return tuple(PlannedFault(at=e.at, fault=e.fault) for e in self.entries)

    @property
    def uses_agents(self) -> bool:
        """Does some fault act through the chaos agents (start them before time zero, then)?
        Faults that do not stay clear of them: an agent is a Ray worker too, and Ray's memory
        monitor has picked one as its victim under a memory fault."""
        return any(getattr(e.fault, "USES_AGENT", False) for e in self.entries)



