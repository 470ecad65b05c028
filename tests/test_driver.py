"""The one fault loop, with an engine that needs no cluster: every scheduled fault ends in a
typed outcome, and only a confirmed injection counts as having happened."""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from chaos import ActorTarget, Kill, Pause, Schedule
from chaos._driver import MAX_CONCURRENT_FAULTS, NOT_REACHED, QUEUED_PAST_STOP
from chaos.engine import FaultStatus, ScheduleObserver, check_applied, run_schedule
from chaos.errors import FaultIneffective, FaultsNotApplied, TargetNotFound, UnsafeTarget

A = ActorTarget(name="a")


class ScriptedEngine:
    """Raises what the fault's target name says; records the rng each fault was given."""

    seed = 7

    def __init__(self) -> None:
        self.picks: dict[tuple[float, str], float] = {}

    @contextmanager
    def inject(self, fault: Any, *, at: float, rng: random.Random) -> Iterator[str]:
        self.picks[(at, type(fault).__name__)] = rng.random()
        errors = {"missing": TargetNotFound("no live process"), "unsafe": UnsafeTarget("pid 1"),
                  "deaf": FaultIneffective("still running"), "broken": RuntimeError("agent down")}
        name = fault.target.name
        if name in errors:
            raise errors[name]
        yield f"injected {name}"


def kill(name: str) -> Kill:
    return Kill(ActorTarget(name=name))


def test_each_failure_has_its_own_status() -> None:
    names = ["ok", "missing", "unsafe", "deaf", "broken"]
    schedule = Schedule.explicit([(i * 0.01, kill(n)) for i, n in enumerate(names)])
    outcomes = run_schedule(ScriptedEngine(), schedule)
    assert [o.status for o in outcomes] == [
        FaultStatus.INJECTED, FaultStatus.NOT_FOUND, FaultStatus.REFUSED, FaultStatus.INEFFECTIVE,
        FaultStatus.FAILED]
    assert outcomes[0].ok and outcomes[0].injection == "injected ok"
    assert outcomes[4].error == "RuntimeError: agent down"


def test_faults_not_yet_due_when_stopped_are_not_reached() -> None:
    stop = threading.Event()
    schedule = Schedule.explicit([(0.0, kill("ok")), (60.0, kill("late"))])

    class StopAfterFirst(ScheduleObserver):
        def settled(self, outcome: Any) -> Any:
            stop.set()
            return outcome

    outcomes = run_schedule(ScriptedEngine(), schedule, stop=stop, observer=StopAfterFirst())
    assert [o.status for o in outcomes] == [FaultStatus.INJECTED, FaultStatus.NOT_REACHED]
    assert outcomes[1].started is None and re.fullmatch(NOT_REACHED.replace("{ended:.2f}", r"[\d.]+"),
                                                        outcomes[1].error)


def test_check_applied_names_every_fault_that_did_not_happen() -> None:
    schedule = Schedule.explicit([(0.0, kill("ok")), (0.0, kill("missing")), (0.0, kill("deaf"))])
    outcomes = run_schedule(ScriptedEngine(), schedule)
    with pytest.raises(FaultsNotApplied, match="2 of 3 scheduled faults did not happen in the test") as e:
        check_applied(outcomes, where="the test")
    assert [o.status for o in e.value.missed] == [FaultStatus.NOT_FOUND, FaultStatus.INEFFECTIVE]
    assert isinstance(e.value, AssertionError)
    check_applied(outcomes[:1], where="the test")  # all happened: nothing raised


def test_each_fault_picks_with_its_own_seeded_generator() -> None:
    # Concurrent faults must not share one generator: the draws would depend on thread timing.
    schedule = Schedule.explicit([(0.0, kill("ok")), (0.0, Pause(A, seconds=0.01)), (0.01, kill("ok"))])
    first, second = ScriptedEngine(), ScriptedEngine()
    run_schedule(first, schedule)
    run_schedule(second, schedule)
    assert first.picks == second.picks
    assert len(first.picks) == 3 and first.picks[(0.01, "Kill")] == random.Random("7/2").random()


def test_a_fault_is_held_for_its_seconds_unless_stopped() -> None:
    held: list[float] = []

    class Recording(ScheduleObserver):
        def hold(self, entry: Any) -> float:
            held.append(super().hold(entry))
            return 0.0

    run_schedule(ScriptedEngine(), Schedule.explicit([(0.0, Pause(A, seconds=2.5)), (0.0, kill("ok"))]),
                 observer=Recording())
    assert sorted(held) == [0.0, 2.5]


class SlowToBite(ScriptedEngine):
    """Each injection takes 1.5 s of a fake clock to be confirmed; a fault named "late" then
    fails at its heal, after it took effect."""

    def __init__(self) -> None:
        super().__init__()
        self.now = 0.0

    @contextmanager
    def inject(self, fault: Any, *, at: float, rng: random.Random) -> Iterator[str]:
        with super().inject(fault, at=at, rng=rng) as injection:
            self.now += 1.5
            yield injection
        if fault.target.name == "late":
            raise FaultIneffective("healed, but its effect was never seen")


def test_each_outcome_says_when_its_fault_took_effect() -> None:
    # A memory fault confirmed seconds after its start must not read as on time in the journal
    # and the report: each outcome carries when its effect was confirmed.
    seen = {}
    for name in ("ok", "missing", "late"):
        engine = SlowToBite()
        (outcome,) = run_schedule(engine, Schedule.explicit([(0.0, kill(name))]), clock=lambda: engine.now,
                                  start=0.0)
        seen[name] = (outcome.status, outcome.started, outcome.confirmed, outcome.ended)
    assert seen == {"ok": (FaultStatus.INJECTED, 0.0, 1.5, 1.5), "missing": (FaultStatus.NOT_FOUND, 0.0, None, 0.0),
                    "late": (FaultStatus.INEFFECTIVE, 0.0, 1.5, 1.5)}


class Exploding(ScheduleObserver):
    """Raises in ``settled`` for the outcomes of the indices in ``explode`` (each time, or only
    the first time with ``once``); stops the run once fault ``last`` settles; records every
    outcome it was shown."""

    def __init__(self, stop: threading.Event, explode: set[int], *, once: bool = True, last: int = 0) -> None:
        self.stop, self.explode, self.once, self.last = stop, explode, once, last
        self.seen: list[tuple[int, FaultStatus]] = []

    def settled(self, outcome: Any) -> Any:
        self.seen.append((outcome.index, outcome.status))
        if outcome.index == self.last:
            self.stop.set()
        if outcome.index in self.explode:
            if self.once:
                self.explode.discard(outcome.index)
            raise RuntimeError(f"recorder broke on faults[{outcome.index}]")
        return outcome


def test_a_settle_that_raises_fails_its_entry_and_loses_no_later_outcome() -> None:
    stop = threading.Event()
    schedule = Schedule.explicit([(0.0, kill("ok")), (60.0, kill("late")), (61.0, kill("later"))])
    observer = Exploding(stop, {0})
    outcomes = run_schedule(ScriptedEngine(), schedule, stop=stop, observer=observer)
    assert [(o.index, o.status) for o in outcomes] == [
        (0, FaultStatus.FAILED), (1, FaultStatus.NOT_REACHED), (2, FaultStatus.NOT_REACHED)]
    assert outcomes[0].error == ("observer.settled() of this injected fault raised RuntimeError: "
                                 "recorder broke on faults[0]")
    assert outcomes[0].injection == "injected ok" and outcomes[0].started is not None
    # The observer saw the failure it caused (so it can record it), and every later entry.
    assert observer.seen == [(0, FaultStatus.INJECTED), (0, FaultStatus.FAILED),
                             (1, FaultStatus.NOT_REACHED), (2, FaultStatus.NOT_REACHED)]


def test_an_observer_that_always_raises_still_leaves_one_outcome_per_entry() -> None:
    stop = threading.Event()
    schedule = Schedule.explicit([(0.0, kill("ok")), (0.0, kill("missing")), (60.0, kill("late"))])
    outcomes = run_schedule(ScriptedEngine(), schedule, stop=stop,
                            observer=Exploding(stop, {0, 1, 2}, once=False, last=1))
    assert [(o.index, o.status) for o in outcomes] == [(i, FaultStatus.FAILED) for i in range(3)]
    assert [o.error.split(" raised ")[0] for o in outcomes] == [
        "observer.settled() of this injected fault", "observer.settled() of this not_found fault",
        "observer.settled() of this not_reached fault"]


class Counting(ScriptedEngine):
    """Records every injection it made, under a lock (the faults' threads share it)."""

    def __init__(self) -> None:
        super().__init__()
        self.injected: list[float] = []
        self.all_busy = threading.Event()
        self._lock = threading.Lock()

    @contextmanager
    def inject(self, fault: Any, *, at: float, rng: random.Random) -> Iterator[str]:
        with self._lock:
            self.injected.append(at)
            if len(self.injected) == MAX_CONCURRENT_FAULTS:
                self.all_busy.set()
        yield "held"


class Stop(threading.Event):
    """A stop that says when the schedule's loop waits for a far entry: every entry before it
    has been handed to the pool by then."""

    def __init__(self) -> None:
        super().__init__()
        self.loop, self.waiting = threading.get_ident(), threading.Event()

    def wait(self, timeout: float | None = None) -> bool:
        if threading.get_ident() == self.loop and timeout is not None and timeout > 1:
            self.waiting.set()
        return super().wait(timeout)


def test_a_fault_queued_until_the_run_stopped_is_not_injected() -> None:
    # Each pause is held until the stop (as heal="at_end" holds them): the ninth and tenth
    # wait for a thread, and get one only once the run is over.
    engine, stop = Counting(), Stop()
    entries = [(0.0, Pause(A, seconds=60))] * (MAX_CONCURRENT_FAULTS + 2) + [(60.0, kill("late"))]
    stopper = threading.Thread(target=lambda: engine.all_busy.wait(10) and stop.waiting.wait(10) and stop.set())
    stopper.start()
    outcomes = run_schedule(engine, Schedule.explicit(entries), stop=stop)
    stopper.join(10)
    assert len(engine.injected) == MAX_CONCURRENT_FAULTS
    assert [o.status for o in outcomes] == [FaultStatus.INJECTED] * MAX_CONCURRENT_FAULTS + [
        FaultStatus.NOT_REACHED] * 3
    queued = re.escape(QUEUED_PAST_STOP).replace(r"\{turn:\.2f\}", r"[\d.]+").replace(
        r"\{at:g\}", "0").replace(r"\{most\}", str(MAX_CONCURRENT_FAULTS))
    for late in outcomes[MAX_CONCURRENT_FAULTS:-1]:
        assert late.started is None and late.injection is None and re.fullmatch(queued, late.error)


def test_a_fault_thread_that_raises_outside_its_fault_still_leaves_its_outcome() -> None:
    def clock() -> float:  # broken only where the faults run
        if threading.current_thread().name.startswith("raychaos-fault"):
            raise OSError("clock unreadable")
        return 0.0

    observer = Exploding(threading.Event(), set())
    outcomes = run_schedule(ScriptedEngine(), Schedule.explicit([(0.0, kill("ok")), (0.0, kill("ok"))]),
                            clock=clock, observer=observer)
    assert [(o.status, o.error) for o in outcomes] == [
        (FaultStatus.FAILED, "the fault's thread raised OSError: clock unreadable")] * 2
    assert sorted(observer.seen) == [(0, FaultStatus.FAILED), (1, FaultStatus.FAILED)]


def test_the_observer_looks_before_each_fault_is_injected_and_a_look_that_raises_fails_only_its_fault() -> None:
    order: list[str] = []

    class Engine(ScriptedEngine):
        @contextmanager
        def inject(self, fault: Any, *, at: float, rng: random.Random) -> Iterator[str]:
            order.append(f"inject {fault.target.name}")
            with super().inject(fault, at=at, rng=rng) as injection:
                yield injection

    class Looking(ScheduleObserver):
        def injecting(self, index: int, entry: Any) -> None:
            order.append(f"look {entry.fault.target.name}")
            if entry.fault.target.name == "blind":
                raise RuntimeError("no listing")

    outcomes = run_schedule(Engine(), Schedule.explicit([(0.0, kill("ok")), (0.05, kill("blind"))]),
                            observer=Looking())
    assert order == ["look ok", "inject ok", "look blind"]
    assert [o.status for o in outcomes] == [FaultStatus.INJECTED, FaultStatus.FAILED]
    assert outcomes[1].error == "RuntimeError: no listing"
