"""``@pytest.mark.chaos``: its arguments, validated at collection, and the run it drives.

Kept apart from the plugin module so the plugin stays thin; nothing here imports ``ray``
at import time.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chaos._driver import FaultOutcome, FaultStatus, run_schedule
from chaos._errors import InvalidFaultSpec
from chaos._faults import Fault
from chaos._journal import EndEvent, StartEvent
from chaos._schedule import Schedule, ScheduledFault
from chaos._suite import CHAOS_MARKER_HELP

__all__ = ["MARKER_HELP", "NO_FAULT_NO_FIXTURE", "NO_FAULT_RAN", "ChaosRun", "ChaosSpec", "parse_marker"]

MARKER_HELP = CHAOS_MARKER_HELP
_OPTIONS = ("seed", "faults", "menu", "rate", "duration", "strict")
_FAULT_FIX = ("give a fault record such as Kill(ActorTarget(name='victim')), or an (at, fault) "
              "pair such as (1.0, Kill(ActorTarget(name='victim')))")
#: How to give a marker a fault, or to accept a run without one in words.
_NO_FAULT_FIX = ("give one, e.g. faults=[(1.0, Kill(ActorTarget(name='victim')))] or menu=[...], "
                 "or pass strict=False to accept a run without faults")
#: A marked test that ran without any fault: it passed without chaos, which proves nothing.
NO_FAULT_RAN = ("@pytest.mark.chaos here schedules no fault (no `faults`, no `menu`) and the test "
                "injected none through the `chaos` fixture: it ran without chaos, so its pass says "
                f"nothing about faults; {_NO_FAULT_FIX} (or inject one in the body, chaos.kill(...))")
#: A marked test without the ``chaos`` fixture and without faults: nothing could inject one.
NO_FAULT_NO_FIXTURE = ("the test has @pytest.mark.chaos but schedules no fault and does not use the "
                       f"`chaos` fixture, so it would run without chaos; {_NO_FAULT_FIX}, and add "
                       "`chaos` to its arguments")
#: How long the fault loop may take to wind down after the test body (a kill's confirmation,
#: a node's death, a heal).
FINISH_TIMEOUT = 120.0


@dataclass(frozen=True, slots=True)
class ChaosSpec:
    """A validated ``@pytest.mark.chaos``."""

    seed: int | None = None
    explicit: tuple[ScheduledFault, ...] = ()
    menu: tuple[Fault, ...] = ()
    rate: float = 0.5
    duration: float = 5.0
    strict: bool = True

    def schedule(self, seed: int) -> Schedule:
        """The explicit faults plus, with a ``menu``, a random schedule drawn from ``seed``."""
        entries = list(self.explicit)
        if self.menu:
            entries += Schedule.random(self.menu, rate=self.rate, duration=self.duration, seed=seed).entries
        return Schedule(tuple(sorted(entries, key=lambda e: e.at)), seed)

    @property
    def schedules_nothing(self) -> bool:
        """Neither explicit faults nor a menu: the marker by itself injects nothing."""
        return not self.explicit and not self.menu

    def drew_nothing(self, schedule: Schedule) -> bool:
        """The marker asked for random faults and ``schedule`` holds none of them: a Poisson
        draw is empty with probability exp(-rate x duration), 8% at the defaults."""
        return bool(self.menu) and len(schedule.entries) == len(self.explicit)

    def nothing_drawn(self, seed: int) -> str:
        chance = math.exp(-self.rate * self.duration)
        return (f"@pytest.mark.chaos drew no fault from its menu with seed {seed} (at {self.rate:g} faults/s "
                f"over {self.duration:g} s a draw is empty {chance:.1%} of the time), so the test would run "
                "without one. Raise rate or duration, add faults=[...], or pass strict=False to accept a "
                "run without faults")


def parse_marker(args: Sequence[Any], kwargs: Mapping[str, Any]) -> ChaosSpec:
    """Validate a chaos marker's arguments (all of its markers' merged, closest first).

    Raises:
        InvalidFaultSpec: an argument is not valid; the message names it, its value and the fix.
    """
    if args:
        raise InvalidFaultSpec(f"@pytest.mark.chaos takes keyword arguments only "
                               f"({', '.join(_OPTIONS)}), got positional {tuple(args)!r}")
    unknown = sorted(set(kwargs) - set(_OPTIONS))
    if unknown:
        raise InvalidFaultSpec(f"@pytest.mark.chaos got unknown argument(s) {unknown}; "
                               f"use {', '.join(_OPTIONS)}")
    return ChaosSpec(seed=_seed(kwargs.get("seed")), explicit=_explicit(kwargs.get("faults", ())),
                     menu=_menu(kwargs.get("menu", ())), rate=_number("rate", kwargs.get("rate", 0.5), 1.0),
                     duration=_number("duration", kwargs.get("duration", 5.0), 3600.0),
                     strict=_flag(kwargs.get("strict", True)))


def _seed(value: object) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise InvalidFaultSpec(f"chaos marker `seed` must be a whole number, got {value!r}")
    return value


def _flag(value: object) -> bool:
    if not isinstance(value, bool):
        raise InvalidFaultSpec(f"chaos marker `strict` must be True or False, got {value!r}; "
                               "strict=False lets faults that did not happen pass (best effort)")
    return value


def _number(name: str, value: object, upper: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or not 0 < value <= upper:
        raise InvalidFaultSpec(f"chaos marker `{name}` must be a number in (0, {upper:g}], got {value!r}")
    return float(value)


def _explicit(faults: object) -> tuple[ScheduledFault, ...]:
    if isinstance(faults, Schedule):
        return faults.entries
    if isinstance(faults, (str, bytes)) or not isinstance(faults, Sequence):
        raise InvalidFaultSpec(f"chaos marker `faults` must be a list of faults or (at, fault) pairs, "
                               f"or a Schedule, got {faults!r}")
    return tuple(sorted((_entry(i, f) for i, f in enumerate(faults)), key=lambda e: e.at))


def _entry(i: int, item: object) -> ScheduledFault:
    if isinstance(item, ScheduledFault):
        return item
    if isinstance(item, Fault):
        return ScheduledFault(0.0, item)
    if isinstance(item, (tuple, list)) and len(item) == 2 and isinstance(item[1], Fault):
        return ScheduledFault(item[0], item[1])
    raise InvalidFaultSpec(f"chaos marker faults[{i}] = {item!r} is not a fault: {_FAULT_FIX}")


def _menu(menu: object) -> tuple[Fault, ...]:
    if isinstance(menu, (str, bytes)) or not isinstance(menu, Sequence):
        raise InvalidFaultSpec(f"chaos marker `menu` must be a list of faults, got {menu!r}")
    for i, item in enumerate(menu):
        if not isinstance(item, Fault):
            raise InvalidFaultSpec(f"chaos marker menu[{i}] = {item!r} is not a fault: {_FAULT_FIX}")
    return tuple(menu)


class ChaosRun:
    """The fault loop of one test: started with its body, finished (and healed) after it."""

    def __init__(self, engine: Any, schedule: Schedule, *, strict: bool, nodeid: str) -> None:
        self.engine, self.schedule, self.strict, self.nodeid = engine, schedule, strict, nodeid
        self.stop = threading.Event()
        self.outcomes: list[FaultOutcome] | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Time zero of the schedule: the test body begins now."""
        import time

        self.engine.journal.record(StartEvent(test=self.nodeid, seed=self.engine.seed,
                                              schedule=self.schedule.planned()))
        began = time.monotonic()
        self._thread = threading.Thread(target=self._drive, args=(began,), daemon=True,
                                        name="raychaos-schedule")
        self._thread.start()

    def _drive(self, began: float) -> None:
        self.outcomes = run_schedule(self.engine, self.schedule, stop=self.stop, start=began)

    def finish(self) -> list[FaultOutcome]:
        """Stop the loop (faults not yet due are ``NOT_REACHED``), heal, journal the end."""
        self.stop.set()
        if self._thread is not None:
            self._thread.join(timeout=FINISH_TIMEOUT)
        self.engine.heal_all()
        outcomes = self._final()
        if self._thread is not None and self.engine.journal.events[-1].kind != "end":
            self.engine.journal.record(EndEvent(outcome="completed" if all(o.ok for o in outcomes) else "deviated",
                                                faults=tuple(o.status for o in outcomes)))
        return outcomes

    def injected(self) -> int:
        """Faults injected in this test so far, the schedule's and the body's own."""
        return sum(e.kind == "inject" for e in self.engine.journal.events)

    def _final(self) -> list[FaultOutcome]:
        if self._thread is None:  # the body never started: nothing was due
            return []
        if self.outcomes is None:  # still running after FINISH_TIMEOUT
            return [FaultOutcome(i, e, FaultStatus.FAILED, error=f"the fault loop did not finish within "
                                 f"{FINISH_TIMEOUT:g} s of the test's end")
                    for i, e in enumerate(self.schedule.entries)]
        return self.outcomes
