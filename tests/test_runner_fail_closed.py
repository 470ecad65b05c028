"""The runner fails closed: a scenario that would check nothing is refused, a workload without a
probe gets no steady state, every fault must recover, every fault ends with one record, every call
into a workload is bounded, and ``heal = "at_end"`` holds each fault to the end. All without Ray."""

from __future__ import annotations

import re
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

import pytest
from click.testing import CliRunner

from chaos import ActorTarget, CpuHog, FaultKind, Kill, NodeTarget, Pause, Schedule, ScheduledFault, TaskTarget
from chaos.engine import FaultStatus
from chaos.errors import InvalidConfig
from scenarios import ScenarioError, Verdict, load_attack, load_scenario
from scenarios.cli import main
from scenarios.model._bounded import CallHang, bounded
from scenarios.model._probes import PythonProbe
from scenarios.model._records import FaultRecord, Probe, RunLabel, RunStatus
from scenarios.model._scenario import CHECKS_NOTHING, EMPTY_INVARIANTS, NO_PROBE
from scenarios.model._workload import Params, RunContext, Workload
from scenarios.runner import SteadyState
from scenarios.runner._run import (
    AT_END_SLACK,
    CALL_BOUNDS,
    CHECKED_NOTHING,
    NO_PROBE_RECOVERY,
    RECOVERED,
    _Bounded,
    _conclude,
    _probe,
    _Recorder,
    _recovery,
    _Run,
    _with_failures,
    at_end_schedule,
    complete_records,
    recovery_verdicts,
    steady_verdicts,
    undeclared_verdicts,
)

BUILTIN = Path(__file__).parents[1] / "scenarios" / "builtin"


def _copy(tmp_path: Path, name: str, old: str, new: str) -> str:
    text = (BUILTIN / f"{name}.toml").read_text()
    assert old in text, f"{name}.toml no longer holds {old!r}"
    path = tmp_path / f"{name}.toml"
    path.write_text(text.replace(old, new))
    return str(path)


def _context() -> RunContext:
    return RunContext(address="", namespace="t", seed=0, params=Params(), storage="", duration=5.0, faults=True)


# -- a scenario that would check nothing is refused ------------------------------------------------

REPLAY_INVARIANTS = 'invariants = ["no_lost_transitions", "dies_after_max_restarts", "recovers_within_max_restarts"]'


def test_a_builtin_copy_with_empty_invariants_exits_2_with_one_line(tmp_path: Path) -> None:
    path = _copy(tmp_path, "replay-crash-loop", REPLAY_INVARIANTS, "invariants = []")
    result = CliRunner().invoke(main, ["run", path])
    assert result.exit_code == 2, result.output
    problems = [line for line in result.output.splitlines() if line.startswith("  ")]
    assert problems == [f"  invariants = []: {EMPTY_INVARIANTS}; name some of no_lost_transitions, "
                        "dies_after_max_restarts, recovers_within_max_restarts, or leave the field out "
                        "to check every invariant of the workload"], result.output


def test_missing_invariants_default_to_the_workloads_own(tmp_path: Path) -> None:
    path = _copy(tmp_path, "replay-crash-loop", REPLAY_INVARIANTS, "")
    scenario = load_scenario(path)
    assert scenario.invariants == ("no_lost_transitions", "dies_after_max_restarts", "recovers_within_max_restarts")


class _Silent(Workload):
    """Neither an invariant nor a probe: nothing it does can be judged."""

    def step(self) -> bool:
        return False


class _Probed(_Silent):
    def probe(self) -> str:
        return "ok"


class _ProbeWaived(_Probed):
    HAS_PROBE = False  # a probe that cannot fail, said in words


def test_a_probe_is_a_typed_fact_of_the_workload_class() -> None:
    assert (Workload.HAS_PROBE, _Silent.HAS_PROBE, _Probed.HAS_PROBE, _ProbeWaived.HAS_PROBE) == (
        False, False, True, False)
    with pytest.raises(NotImplementedError, match="has no steady-state probe"):
        _Silent(_context()).probe()  # the base never answers "no probe" as if it held


class _ProbeMixin:
    def probe(self) -> str:
        return "ok"


class _MixedIn(_ProbeMixin, _Silent):
    """Its probe comes from a mixin before a base without one: it has a probe."""


class _WaivedChild(_ProbeWaived):
    pass


def test_a_probe_from_a_mixin_counts_and_a_waiver_in_words_is_inherited() -> None:
    assert (_MixedIn.HAS_PROBE, _WaivedChild.HAS_PROBE) == (True, False)


HEAD = 'name = "x"\nduration = 5\n[[faults]]\nat = 1\nkind = "kill"\ntarget = { kind = "actor", name = "a" }\n'


def test_a_workload_with_nothing_to_check_is_refused(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text('workload = "silent"\n' + HEAD)
    with pytest.raises(ScenarioError, match=re.escape(CHECKS_NOTHING)):
        load_scenario(str(tmp_path / "s.toml"), workloads={"silent": _Silent})
    # With a probe, the steady state (asked by default) is a check: loaded, no invariant needed.
    (tmp_path / "p.toml").write_text('workload = "probed"\n' + HEAD)
    assert load_scenario(str(tmp_path / "p.toml"), workloads={"probed": _Probed}).invariants == ()


def test_a_steady_state_asked_of_a_workload_without_a_probe_is_refused(tmp_path: Path) -> None:
    text = 'workload = "silent"\n' + HEAD.replace('duration = 5\n', 'duration = 5\nsteady_state = { after = true }\n')
    (tmp_path / "s.toml").write_text(text)
    with pytest.raises(ScenarioError, match=re.escape(f"steady_state.after = True: workload 'silent' {NO_PROBE}")):
        load_scenario(str(tmp_path / "s.toml"), workloads={"silent": _Silent})


def test_an_attack_without_a_probe_is_refused_at_load(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text(HEAD)
    with pytest.raises(ScenarioError, match=re.escape(f"probes = []: {CHECKS_NOTHING}")):
        load_attack(str(tmp_path / "a.toml"))


# -- no probe: no steady state, no recovery, never "held" ------------------------------------------


def test_a_workload_without_a_probe_gets_no_held_steady_state() -> None:
    asked = SteadyState(before=True, after=True, during_min=0.5)
    assert steady_verdicts(asked, [], has_probe=False) == []
    # With a probe, a check that no probe reached still does not hold.
    assert [v.held for v in steady_verdicts(asked, [Probe("before", 0.0, True, "ok")])] == [True, False, False]
    ctx = _context()
    assert _recovery(_Silent(ctx), ctx, 0.0) == (None, NO_PROBE_RECOVERY)


def test_undeclared_verdicts_are_kept_apart_not_dropped() -> None:
    produced = [Verdict.of("a", True, "1"), Verdict.of("b", False, "2"), Verdict.of("c", True, "3")]
    assert [v.name for v in undeclared_verdicts(["a"], produced)] == ["b", "c"]


# -- recovery within a bound is a verdict of every run with faults ---------------------------------


def _record(at: float, mttr: float | None, *, held: float = 1.0, outcome: str = "recovered",
            status: FaultStatus = FaultStatus.INJECTED) -> FaultRecord:
    return FaultRecord(at=at, start=at, end=at + held, kind=FaultKind.PAUSE, target="task:sample_env",
                       outcome=outcome, mttr=mttr, status=status, confirmed=at)


def test_a_fault_that_did_not_recover_breaks_the_recovery_verdict() -> None:
    recovered = [_record(2.0, 1.5), _record(5.0, 3.0, held=2.5)]
    (verdict,) = recovery_verdicts(recovered, within=10.0)
    assert (verdict.name, verdict.held, verdict.seen) == (RECOVERED, True, 2), verdict
    lost = _record(8.0, None, outcome="the run ended before the steady state returned")
    (verdict,) = recovery_verdicts([*recovered, lost], within=10.0)
    assert not verdict.held and verdict.detail == (
        "pause of task:sample_env at 8 s: not recovered within 10 s of its heal "
        "(the run ended before the steady state returned)"), verdict


def test_a_recovery_past_the_bound_breaks_it_counted_from_the_heal() -> None:
    # Held 20 s (heal at_end, say) and back 2 s after its heal: MTTR 22 s, within a 5 s bound.
    assert recovery_verdicts([_record(1.0, 22.0, held=20.0)], within=5.0)[0].held
    (late,) = recovery_verdicts([_record(1.0, 9.0, held=1.0)], within=5.0)
    assert not late.held and "recovered 8.00 s after its heal, past the 5 s bound" in late.detail


def test_no_recovery_verdict_when_no_fault_happened() -> None:
    assert recovery_verdicts([_record(1.0, None, status=FaultStatus.NOT_FOUND)], within=5.0) == []


def test_the_recovery_bound_comes_from_the_scenario(tmp_path: Path) -> None:
    assert load_scenario("replay-crash-loop").recovery_within == 60.0
    path = _copy(tmp_path, "replay-crash-loop", "duration = 12\n", "duration = 12\nrecovery_within = 7.5\n")
    assert load_scenario(path).recovery_within == 7.5
    bad = _copy(tmp_path, "replay-crash-loop", "duration = 12\n", "duration = 12\nrecovery_within = 0\n")
    with pytest.raises(ScenarioError, match=re.escape("recovery_within = 0: must be a number in [0.1, 3600]")):
        load_scenario(bad)


class _FailsUntil(Workload):
    """A probe that fails until ``healthy_after`` calls."""

    def __init__(self, ctx: RunContext, healthy_after: int) -> None:
        super().__init__(ctx)
        self.calls, self.healthy_after = 0, healthy_after

    def step(self) -> bool:
        return False

    def probe(self) -> str:
        self.calls += 1
        if self.calls < self.healthy_after:
            raise RuntimeError("not yet")
        return "ok"


def test_a_judged_recovery_keeps_its_bound_after_the_run_stopped() -> None:
    ctx = _context()
    ctx.stop.set()  # the fault healed as the run ended: its recovery is still judged in full
    mttr, text = _recovery(_FailsUntil(ctx, healthy_after=3), ctx, 0.0, within=5.0, give_up_at_stop=False)
    assert mttr is not None and text == "recovered after the run ended"
    mttr, text = _recovery(_FailsUntil(ctx, healthy_after=10**9), ctx, 0.0, within=0.3, give_up_at_stop=False)
    assert (mttr, text) == (None, "not recovered within 0.3 s")
    interrupted = threading.Event()
    interrupted.set()  # Ctrl-C: a failing probe ends the wait at once, judged or not
    assert _recovery(_FailsUntil(ctx, healthy_after=10**9), ctx, 0.0, within=60.0, give_up_at_stop=False,
                     abandon=interrupted) == (None, "the run ended before the steady state returned")


# -- every schedule entry ends with exactly one record ---------------------------------------------

KILL = Kill(ActorTarget(name="replay"))
THREE = Schedule((ScheduledFault(1.0, KILL), ScheduledFault(3.0, KILL), ScheduledFault(5.0, KILL)))


def _kill_record(index: int, status: FaultStatus = FaultStatus.INJECTED) -> FaultRecord:
    at = THREE.entries[index].at
    return FaultRecord(at=at, start=at, end=at, kind=FaultKind.KILL, target="actor:replay", outcome="recovered",
                       mttr=0.5, status=status, confirmed=at, index=index)


def test_an_entry_without_a_record_becomes_a_failed_record_naming_it() -> None:
    records, problems = complete_records(THREE, [_kill_record(0), _kill_record(2)], why="the driver was lost")
    assert [(r.index, r.status) for r in records] == [
        (0, FaultStatus.INJECTED), (1, FaultStatus.FAILED), (2, FaultStatus.INJECTED)]
    assert problems == ["faults[1] kill of actor /replay at 3 s: no record: the driver was lost"]
    assert records[1].outcome == "failed: no record: the driver was lost" and records[1].mttr is None


def test_an_entry_with_two_records_or_a_record_of_no_entry_is_named() -> None:
    stray = FaultRecord(at=9.0, start=9.0, end=9.0, kind=FaultKind.KILL, target="actor:x", outcome="?", mttr=None)
    records, problems = complete_records(
        THREE, [_kill_record(0), _kill_record(1), _kill_record(1, FaultStatus.FAILED), _kill_record(2), stray], why="")
    assert [r.status for r in records] == [FaultStatus.INJECTED, FaultStatus.FAILED, FaultStatus.INJECTED]
    assert problems == ["faults[1] kill of actor /replay at 3 s: 2 records for one fault: injected, failed",
                        "a record of no scheduled fault: kill of actor:x at 9 s (index None)"]


def test_the_recorder_fails_the_run_for_a_missing_record_and_drops_late_ones() -> None:
    rec = _Recorder()
    rec.fault(_kill_record(0))
    rec.close_faults(THREE, why="the fault driver was still running 90 s after the run's end")
    assert rec.failures == [
        "fault records: faults[1] kill of actor /replay at 3 s: no record: the fault driver was still running "
        "90 s after the run's end",
        "fault records: faults[2] kill of actor /replay at 5 s: no record: the fault driver was still running "
        "90 s after the run's end"]
    rec.fault(_kill_record(1))  # the driver settles it after all, too late: its entry is already FAILED
    assert [r.status for r in rec.faults] == [FaultStatus.INJECTED, FaultStatus.FAILED, FaultStatus.FAILED]


# -- heal = "at_end": a fault that ends itself is asked to last to the end --------------------------


def test_at_end_asks_each_timed_fault_to_outlast_the_run() -> None:
    pause = Pause(TaskTarget(name="sample_env"), seconds=3.0)
    hog = CpuHog(cores=1, seconds=100.0, node=NodeTarget())  # already longer than the run: kept
    schedule = Schedule((ScheduledFault(0.0, KILL), ScheduledFault(2.0, pause), ScheduledFault(5.0, hog)), seed=7)
    held = at_end_schedule(schedule, duration=20.0)
    assert held.seed == 7 and held.entries[0] == schedule.entries[0]
    assert held.entries[1] == ScheduledFault(2.0, replace(pause, seconds=18.0 + AT_END_SLACK))
    assert held.entries[2] == schedule.entries[2]
    assert at_end_schedule(held, duration=20.0) == held  # a replayed journal's schedule stays as it was


# -- every call into a workload, and every probe of an attack, has a deadline -----------------------

#: How long a planted hook blocks: far past the bounds below, short enough that without a bound
#: the test still ends (and fails) rather than hang.
BLOCKED_FOR = 5.0


class _Blocked(Workload):
    """A workload whose step and probe block on a gate no one opens (a paused service, say)."""

    def __init__(self, ctx: RunContext) -> None:
        super().__init__(ctx)
        self.gate, self.torn_down = threading.Event(), False

    def step(self) -> bool:
        self.gate.wait(BLOCKED_FOR)
        return True

    def probe(self) -> str:
        self.gate.wait(BLOCKED_FOR)
        return "answered"

    def teardown(self) -> None:
        self.torn_down = True


def test_bounded_returns_raises_or_names_the_call_past_its_bound() -> None:
    assert bounded(lambda: 42, what="f()", seconds=1.0) == 42
    with pytest.raises(ZeroDivisionError):
        bounded(lambda: 1 // 0, what="f()", seconds=1.0)
    gate, start = threading.Event(), time.monotonic()
    with pytest.raises(CallHang, match=re.escape("g() did not return within 0.2 s")):
        bounded(lambda: gate.wait(BLOCKED_FOR), what="g()", seconds=0.2)
    assert time.monotonic() - start < BLOCKED_FOR / 2
    gate.set()


def test_a_hook_past_its_bound_aborts_the_run_naming_it() -> None:
    ctx, rec = _context(), _Recorder()
    planted = _Blocked(ctx)
    workload = _Bounded(planted, rec, ctx, bounds={**CALL_BOUNDS, "step": 0.2, "probe": 0.2})
    start = time.monotonic()
    with pytest.raises(CallHang):
        workload.step()
    assert time.monotonic() - start < BLOCKED_FOR / 2
    assert rec.failures == ["_Blocked.step() did not return within 0.2 s (its thread is left running: a Python "
                            "thread cannot be killed); find what it waits on, or bound that wait"]
    assert ctx.stop.is_set() and workload.hung == rec.failures[0]
    with pytest.raises(CallHang, match=re.escape("_Blocked.probe() not called: _Blocked.step() did not return")):
        workload.probe()  # refused at once: the workload is broken
    workload.teardown()
    assert planted.torn_down
    assert _with_failures(RunStatus.COMPLETED, "", rec.failures) == (RunStatus.ABORTED, rec.failures[0])
    planted.gate.set()


def test_a_blocked_probe_is_a_failed_probe_of_the_run_not_a_hang() -> None:
    ctx, rec = _context(), _Recorder()
    planted = _Blocked(ctx)
    probe = _probe(_Bounded(planted, rec, ctx, bounds={**CALL_BOUNDS, "probe": 0.2}), ctx, "during")
    assert not probe.ok and probe.detail.startswith("CallHang: _Blocked.probe() did not return within 0.2 s")
    assert rec.failures and ctx.stop.is_set()
    planted.gate.set()


def test_an_attacks_python_probe_keeps_its_timeout(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "paused_service.py").write_text(
        "import threading\nGATE = threading.Event()\n"
        f"def health():\n    GATE.wait({BLOCKED_FOR})\n    return True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    start = time.monotonic()
    assert PythonProbe(call="paused_service:health").run(timeout=0.2) == (False, "still running after 0.2 s")
    assert time.monotonic() - start < BLOCKED_FOR / 2
    sys.modules["paused_service"].GATE.set()


# -- what a run did not judge is said in every report -------------------------------------------


def test_the_reports_show_unjudged_verdicts_and_a_missing_probe() -> None:
    from scenarios.model._records import NO_PROBE_NOTE, RunLabel, RunResult
    from scenarios.reports._files import junit, summary
    from scenarios.reports._html import render_html

    run = RunResult(scenario="s", label=RunLabel.CHAOS, seed=0, status=RunStatus.COMPLETED, seconds=1.0,
                    verdicts=(Verdict.of("a", True, "ok", 1),), probes=(), samples=(), faults=(),
                    unjudged=(Verdict.of("b", False, "broke here"),), probed=False)
    (runs,) = summary([run])["runs"]
    assert runs["unjudged"] == [{"name": "b", "held": False, "validity": "broken", "detail": "broke here",
                                 "seen": None, "measured": None}]
    assert runs["notes"] == [NO_PROBE_NOTE] and not run.deviated
    suite = junit([run]).find("testsuite")
    assert suite is not None and suite.get("skipped") == "2" and suite.get("failures") == "0"
    assert [c.get("name") for c in suite.iter("testcase") if c.find("skipped") is not None] == ["b", "steady state"]
    page = render_html([run])
    assert "not judged (BROKEN)" in page and NO_PROBE_NOTE in page


class _NeverSetUp(Workload):
    """Setup fails (a missing extra, a cluster without room); invariants read what it never made."""

    INVARIANTS = ("counted",)

    def setup(self) -> None:
        raise RuntimeError("the one cause")

    def invariants(self) -> list[Verdict]:
        return [Verdict.of("counted", True, f"{self.acked} acked")]  # type: ignore[attr-defined]


def test_a_run_whose_setup_failed_judges_nothing_and_reports_its_one_cause() -> None:
    ctx, rec = _context(), _Recorder()
    workload = _Bounded(_NeverSetUp(ctx), rec, ctx)
    with pytest.raises(RuntimeError, match="the one cause"):
        workload.setup()
    scenario = load_scenario("replay-crash-loop")
    run = _Run(scenario, "", 0, RunLabel.CHAOS, True, None, "", embedded=True)
    assert _conclude(run, workload, ctx, rec, RunStatus.ABORTED) == ([], [])
    assert rec.probes == []


class _Quiet(Workload):
    INVARIANTS = ("counted",)

    def invariants(self) -> list[Verdict]:
        return [Verdict.of("counted", True, "1 counted")]


def test_a_scenario_built_in_code_that_judges_nothing_fails() -> None:
    """load_scenario refuses such a file; a Scenario made in code reaches the runner as is."""
    ctx, rec = _context(), _Recorder()
    workload = _Bounded(_Quiet(ctx), rec, ctx)
    workload.setup()
    quiet = replace(load_scenario("replay-crash-loop"), invariants=(),
                    steady_state=SteadyState(before=False, after=False))
    run = _Run(quiet, "", 0, RunLabel.CHAOS, True, None, "", embedded=True)
    assert _conclude(run, workload, ctx, rec, RunStatus.COMPLETED) == ([CHECKED_NOTHING], [workload.invariants()[0]])


def test_a_hook_that_waits_out_a_longer_deadline_gets_that_bound() -> None:
    """An attack's round runs each probe up to its own timeout; a library run's last step
    waits for the fit: the runner's defaults would abort them before their own deadlines."""
    from scenarios.workloads.user._attack import Attack

    attack = Attack(_context())
    attack.probes, attack.timeout, attack.every = [object()] * 7, 10.0, 1.0  # type: ignore[list-item]
    ctx, rec = _context(), _Recorder()
    workload = _Bounded(attack, rec, ctx)
    workload.set_up = True
    workload.bounds = {**workload.bounds, **attack.call_bounds()}
    assert workload.bounds["probe"] >= 7 * 10.0 > CALL_BOUNDS["probe"]
    assert workload.bounds["step"] > workload.bounds["probe"]


class _Bounds(_Quiet):
    asked: ClassVar[dict[str, float]] = {}

    def call_bounds(self) -> dict[str, float]:
        return self.asked


@pytest.mark.parametrize("asked", [{"setup": 90.0}, {"stpe": 5.0}, {"step": 0.0}, {"probe": float("nan")}])
def test_a_bound_asked_for_setup_for_no_hook_or_not_positive_is_refused_naming_it(asked: dict[str, float]) -> None:
    """call_bounds() is asked after setup: a setup bound there would be silently dropped."""
    ctx, rec = _context(), _Recorder()
    workload = _Bounded(type("Asking", (_Bounds,), {"asked": asked})(ctx), rec, ctx)
    ((hook, seconds),) = asked.items()
    with pytest.raises(InvalidConfig, match=rf"Asking.call_bounds\(\) gives '{hook}': {seconds!r}; give positive"):
        workload.setup()
    assert workload.bounds == CALL_BOUNDS


def test_a_bound_asked_for_a_later_hook_replaces_the_runners() -> None:
    ctx, rec = _context(), _Recorder()
    workload = _Bounded(type("Asking", (_Bounds,), {"asked": {"invariants": 500.0}})(ctx), rec, ctx)
    workload.setup()
    assert workload.bounds == {**CALL_BOUNDS, "invariants": 500.0}


def test_at_end_with_more_faults_than_can_be_held_at_once_is_refused(tmp_path: Path) -> None:
    fault = '[[faults]]\nat = {at}\nkind = "pause"\nseconds = 1\ntarget = {{ kind = "actor", name = "a" }}\n'
    text = ('name = "x"\nworkload = "replay-crash-loop"\nduration = 30\nheal = "at_end"\n'
            + "".join(fault.format(at=i + 1) for i in range(9)))
    (tmp_path / "x.toml").write_text(text)
    with pytest.raises(ScenarioError, match="at most 8 faults are held at once: this schedule has 9"):
        load_scenario(str(tmp_path / "x.toml"))
