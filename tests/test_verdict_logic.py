"""The small pure pieces every run's result rests on, pinned at their edges: a fault's times
and its observer's calls, when a run deviates, one verdict per declared invariant, the
recovery bound, what counts as resident memory or a dead node. Each test here kills bugs a
mutation of that code would ship (``make mutants``, the verdicts group)."""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from chaos import ActorTarget, FaultKind, Kill, Schedule
from chaos.agents._memory import MemoryProgress
from chaos.engine import FaultStatus, ScheduleObserver, run_schedule
from chaos.errors import FaultIneffective
from scenarios.model._records import FaultRecord, RunLabel, RunResult, RunStatus, Verdict
from scenarios.runner._run import RECOVERED, _with_failures, declared_verdicts, recovery_verdicts


class _Clock:
    """A clock the fake engine moves: injection takes 2 s to confirm, its heal 1 s more."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _TimedEngine:
    seed = 0

    def __init__(self, clock: _Clock, *, error: str = "") -> None:
        self.clock, self.error = clock, error

    @contextmanager
    def inject(self, fault: Any, *, at: float, rng: random.Random) -> Iterator[str]:
        self.clock.now += 2.0
        if self.error:
            raise RuntimeError(self.error)
        yield "the injection"
        self.clock.now += 1.0


class _Calls(ScheduleObserver):
    def __init__(self) -> None:
        self.calls: list[str] = []

    def injected(self, index: int, entry: Any, injection: Any) -> None:
        self.calls.append(f"injected {index} {injection}")

    def hold(self, entry: Any) -> float:
        self.calls.append("hold")
        return 0.0


def test_a_faults_start_confirmation_and_end_are_its_own_times() -> None:
    clock, observer = _Clock(), _Calls()
    (outcome,) = run_schedule(_TimedEngine(clock), Schedule.explicit([(0.0, Kill(ActorTarget(name="a")))]),
                              start=clock.now, clock=clock, observer=observer)
    assert (outcome.status, outcome.started, outcome.confirmed, outcome.ended) == (FaultStatus.INJECTED, 0.0, 2.0, 3.0)
    assert observer.calls == ["injected 0 the injection", "hold"]  # observed once, before it is held


def test_a_failed_injection_keeps_its_times_and_a_bounded_error() -> None:
    clock = _Clock()
    (outcome,) = run_schedule(_TimedEngine(clock, error="x" * 900), Schedule.explicit(
        [(0.0, Kill(ActorTarget(name="a")))]), start=clock.now, clock=clock)
    assert (outcome.status, outcome.started, outcome.ended, outcome.confirmed) == (FaultStatus.FAILED, 0.0, 2.0, None)
    assert len(outcome.error) == 500 and outcome.error.startswith("RuntimeError: xxx")


def test_a_fault_not_reached_says_when_the_run_stopped() -> None:
    clock, stop = _Clock(), threading.Event()
    stop.set()
    clock.now = 107.5
    (outcome,) = run_schedule(_TimedEngine(clock), Schedule.explicit([(60.0, Kill(ActorTarget(name="a")))]),
                              start=100.0, clock=clock, stop=stop)
    assert outcome.status is FaultStatus.NOT_REACHED and "stopped 7.50 s after its start" in outcome.error


# -- when a run deviates ---------------------------------------------------------------------

def _record(status: FaultStatus = FaultStatus.INJECTED, *, start: float = 1.0, end: float = 2.0,
            mttr: float | None = 1.5, kind: FaultKind = FaultKind.KILL) -> FaultRecord:
    return FaultRecord(at=1.0, start=start, end=end, kind=kind, target="actor a", outcome="ok", mttr=mttr,
                       status=status, confirmed=start)


def _result(*, status: RunStatus = RunStatus.COMPLETED, held: bool = True, fault: FaultStatus = FaultStatus.INJECTED,
            strict: bool = True) -> RunResult:
    return RunResult(scenario="s", label=RunLabel.CHAOS, seed=0, status=status, seconds=1.0,
                     verdicts=(Verdict.of("v", held, "d", 1),), probes=(), samples=(), faults=(_record(fault),),
                     strict_faults=strict)


def test_a_run_deviates_on_each_cause_alone_and_only_then() -> None:
    assert not _result().deviated and _result().missed_faults == ()
    assert _result(status=RunStatus.ABORTED).deviated
    assert _result(held=False).deviated
    missed = _result(fault=FaultStatus.INEFFECTIVE)
    assert missed.deviated and [f.status for f in missed.missed_faults] == [FaultStatus.INEFFECTIVE]
    assert not _result(fault=FaultStatus.INEFFECTIVE, strict=False).deviated  # opted out in words


def test_the_runners_own_failures_abort_a_completed_run_but_not_an_interrupted_one() -> None:
    assert _with_failures(RunStatus.COMPLETED, "", []) == (RunStatus.COMPLETED, "")
    assert _with_failures(RunStatus.INTERRUPTED, "ctrl-c", ["late"]) == (RunStatus.INTERRUPTED, "ctrl-c")
    assert _with_failures(RunStatus.ABORTED, "boom", ["late", "boom"]) == (RunStatus.ABORTED, "boom; late")


# -- one verdict per declared invariant --------------------------------------------------------

def test_each_declared_invariant_gets_exactly_its_own_verdict_in_declared_order() -> None:
    produced = [Verdict.of("b", True, "b ok", 1), Verdict.of("a", False, "a broke", 1), Verdict.of("c", True, "c1", 1),
                Verdict.of("c", True, "c2", 1), Verdict.of("extra", True, "not asked", 1)]
    a, b, c, missing = declared_verdicts(["a", "b", "c", "d"], produced)
    assert (a, b) == (produced[1], produced[0])
    assert (c.name, c.held) == ("c", False) and c.detail == "2 verdicts for one invariant: True: c1; True: c2"
    assert (missing.name, missing.held) == ("d", False) and missing.detail.startswith("no verdict")


# -- recovery ----------------------------------------------------------------------------------

def test_recovery_exactly_at_its_bound_holds_and_past_it_breaks() -> None:
    at_bound = _record(start=1.0, end=2.0, mttr=4.0)  # probe held 3.0 s after the heal
    (v,) = recovery_verdicts([at_bound], within=3.0)
    assert (v.name, v.held, v.seen) == (RECOVERED, True, 1) and "(slowest 3.00 s)" in v.detail
    (both,) = recovery_verdicts([at_bound, _record(start=1.0, end=5.0, mttr=None)], within=3.0)
    assert not both.held and "not recovered within 3 s of its heal" in both.detail
    (late,) = recovery_verdicts([_record(start=1.0, end=2.0, mttr=4.01)], within=3.0)
    assert not late.held and "past the 3 s bound" in late.detail


def test_the_rpc_knob_and_faults_that_did_not_happen_are_not_judged_for_recovery() -> None:
    knob = _record(kind=FaultKind.RPC_FAILURE, mttr=None)
    assert recovery_verdicts([knob, _record(FaultStatus.INEFFECTIVE, mttr=None)], within=3.0) == []


# -- what counts as the effect -----------------------------------------------------------------

@pytest.mark.parametrize(("blocks", "resident", "holding"), [(0, 0, False), (1, 0, False), (0, 1, False),
                                                              (1, 1, True)])
def test_memory_is_held_only_once_a_block_is_resident(blocks: int, resident: int, holding: bool) -> None:
    assert MemoryProgress(resident=resident, host_used=0.5, cannot=False, blocks=blocks).holding() is holding


def test_a_dead_node_is_confirmed_with_the_seconds_it_took(monkeypatch: pytest.MonkeyPatch) -> None:
    from chaos import _process_faults as _engine

    answers = iter([["ALIVE"], ["ALIVE", "DEAD"], ["DEAD"]])
    monkeypatch.setattr(_engine, "_node_states", lambda address, node: next(answers))
    since = time.monotonic()
    took = _engine._confirm_node_dead(type("C", (), {"address": "x"})(), "n" * 20, since=since)
    assert 0.0 <= took < 5.0


def test_a_process_that_prints_something_else_has_not_begun_burning() -> None:
    from chaos.agents import _agent

    proc = subprocess.Popen([sys.executable, "-c", "print('sleeping', flush=True); import time; time.sleep(5)"],
                            stdout=subprocess.PIPE)
    try:
        with pytest.raises(FaultIneffective, match="did not begin its loop"):
            _agent._confirm_burning(proc, time.monotonic() + 3.0)
    finally:
        proc.kill()
        proc.wait(timeout=10)


# -- evidence and bounds at their edges ----------------------------------------------------------

def test_the_knob_counts_only_what_this_run_added(tmp_path: Any) -> None:
    from chaos import RpcFailure
    from scenarios.runner._run import _Knob, knob_records

    logs = tmp_path / "session_x" / "logs"
    logs.mkdir(parents=True)
    push = "CoreWorkerService.grpc_client.PushTask"
    (logs / "python-core-worker-1.log").write_text(f"grpc_client.h:137: Inject RPC request failure for {push}\n" * 3)
    lease = "NodeManagerService.grpc_client.RequestWorkerLease"
    (logs / "raylet.out").write_text(f"grpc_client.h:137: Inject RPC request failure for {lease}\n")
    (single,) = knob_records(_Knob((RpcFailure(lease, request_percent=10),), str(tmp_path)), {}, 5.0, wait=0.0)
    assert single.status is FaultStatus.INJECTED and "injected 1 failure(s)" in single.outcome
    knob = _Knob((RpcFailure(push, request_percent=10),), str(tmp_path))
    (fresh,) = knob_records(knob, {}, 5.0, wait=0.0)
    (after_one,) = knob_records(knob, {push: 1}, 5.0, wait=0.0)
    (after_all,) = knob_records(knob, {push: 3}, 5.0, wait=0.0)
    assert "injected 3 failure(s)" in fresh.outcome and "injected 2 failure(s)" in after_one.outcome
    assert after_all.status is FaultStatus.INEFFECTIVE


def test_a_loop_turn_exactly_at_its_bound_is_blocked() -> None:
    from scenarios.workloads._builtin import blocked_verdict, loop_bound

    bound = loop_bound(0.5)
    assert blocked_verdict(10, bound - 0.01, 0.5, None).held
    assert not blocked_verdict(10, bound, 0.5, None).held


def test_a_drained_node_dead_exactly_at_the_bound_is_gone_in_time() -> None:
    from scenarios.workloads.surface._nodes import gone_verdict

    assert gone_verdict([10.0], {"n1": 15.0}, ["n1"], 5.0).held
    assert not gone_verdict([10.0], {"n1": 15.5}, ["n1"], 5.0).held
    assert not gone_verdict([10.0], {"head": 11.0}, ["n1"], 5.0).held


def test_the_counters_verdict_counts_the_fewest_seen_and_needs_one_on_a_dead_node() -> None:
    from scenarios.workloads._builtin import counters_verdict

    each = [Verdict.of("actor_state_recovered", True, "w0", 3), Verdict.of("actor_state_recovered", True, "w1", 5)]
    held = counters_verdict(each, ["node-a-0123456789", "node-b"], {"node-a-0123456789"})
    assert (held.name, held.held, held.seen) == ("actor_state_recovered", True, 3)
    assert "'node-a-01234'" in held.detail  # node ids shortened to 12 characters
    assert "on a dead node: ['node-a-01234']" in held.detail
    none_seen = counters_verdict([Verdict.of("actor_state_recovered", True, "w0", None)], ["a"], {"a"})
    assert none_seen.seen == 0
    (only,) = [Verdict.of("x_recovered", False, "w0", 2)]
    assert counters_verdict([only], ["a"], {"a"}).name == "x_recovered"
    assert not counters_verdict([], ["a"], {"a"}).held and counters_verdict([], ["a"], {"a"}).seen == 0
    assert not counters_verdict(each, ["a", "b"], {"c"}).held  # no counter on the dead node


def test_the_last_state_the_gcs_gave_is_the_one_named(monkeypatch: pytest.MonkeyPatch) -> None:
    from chaos import _process_faults as _engine

    states = iter([["ALIVE"], ["SUSPECT"], ["DRAINING"]] + [["ALIVE"]] * 10_000)
    given: list[list[str]] = []
    monkeypatch.setattr(_engine, "_node_states", lambda address, node: given.append(next(states)) or given[-1])
    monkeypatch.setattr(_engine, "NODE_DEATH_CONFIRM", 0.3)
    with pytest.raises(FaultIneffective) as raised:
        _engine._confirm_node_dead(type("C", (), {"address": "x"})(), "n" * 20, since=time.monotonic())
    assert f"last seen: {given[-1]!r}" in str(raised.value)


def test_a_silent_process_is_given_up_at_its_deadline_not_at_its_exit() -> None:
    from chaos.agents import _agent

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(8)"], stdout=subprocess.PIPE)
    start = time.monotonic()
    try:
        with pytest.raises(FaultIneffective, match="did not begin its loop"):
            _agent._confirm_burning(proc, time.monotonic() + 1.0)
        assert time.monotonic() - start < 4.0
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_runs_fault_windows_are_confirmed_to_healed_and_the_twins_are_the_schedules_spans() -> None:
    """A fault-bit verdict measures inside its fault's window; the fault-free twin, which
    injects nothing, gets the schedule's own span of each fault, so the same measurement over
    the same window of its own run says whether it shows the trace too."""
    from chaos import FaultKind, Schedule, ScheduledFault
    from chaos.disks._faults import SlowDisk
    from scenarios.model._workload import FaultWindow, Params, RunContext

    plan = Schedule((ScheduledFault(2.0, SlowDisk("/m", seconds=5, latency=0.2)),))

    def ctx(faults: bool) -> RunContext:
        return RunContext(address="x", namespace="n", seed=0, params=Params(), storage="/s", duration=9.0,
                          faults=faults, plan=plan)

    twin, chaos = ctx(False), ctx(True)
    assert twin.windows(FaultKind.SLOW_DISK) == [FaultWindow(FaultKind.SLOW_DISK, 2.0, 7.0, planned=True)]
    assert chaos.windows(FaultKind.SLOW_DISK) == []  # nothing happened yet: no window
    chaos.fault_settled(FaultWindow(FaultKind.SLOW_DISK, 2.3, 7.4))
    assert chaos.windows(FaultKind.SLOW_DISK) == [FaultWindow(FaultKind.SLOW_DISK, 2.3, 7.4)]
    assert chaos.windows(FaultKind.KILL) == [] and twin.windows(FaultKind.KILL) == []
    window = FaultWindow(FaultKind.SLOW_DISK, 2.3, 7.4)
    assert window.holds(2.3) and not window.holds(7.4)


def test_the_set_checker_and_the_journal_speak_the_one_verdict_type() -> None:
    from chaos.history import History, OpStatus, Validity, Verdict, check_set
    from chaos.journal import VerdictEntry

    history = History()
    for seq, status in ((0, OpStatus.OK), (1, OpStatus.OK), (2, OpStatus.INFO)):
        history.invoke(("w", seq), "w")
        history.complete(("w", seq), status)
    kept = check_set(history.ops(), [("w", 0), ("w", 1)]).verdict("kept", detail="w: ")
    assert kept.validity is Validity.HELD and kept.seen == 2 and kept.detail.startswith("w: 2 acknowledged")
    lost = check_set(history.ops(), [("w", 0)]).verdict("kept")
    assert lost.validity is Validity.BROKEN and "1 lost" in lost.detail
    assert check_set([], []).verdict("kept").validity is Validity.UNKNOWN  # nothing acknowledged: nothing kept
    entry = VerdictEntry.of(Verdict.unknown("kept", "none seen"))
    assert (entry.held, entry.validity) == (False, Validity.UNKNOWN)
