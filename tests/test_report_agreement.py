"""Every report says what the exit code says, for every built-in scenario's outcome. Ray-free.

A CI test reporter reads ``junit.xml`` (failures and errors), a person the console and
``report.html``, a gate ``summary.json``'s ``outcome``; ``raychaos run`` exits 0, 1 or 3. For
each built-in, runs shaped as the runner shapes them (the fault-free twin's fault traces n/a,
its steady state during faults n/a since it has no faults) are reported in every format:
held, broken, unknown (a verdict not judged), and a fault trace the twin met too.
"""

from __future__ import annotations

import io
import re
from collections.abc import Sequence
from dataclasses import replace

import jsonschema
import pytest
from rich.console import Console

from scenarios.cli import EXIT_DEVIATED, EXIT_UNKNOWN, exit_code
from scenarios.model._records import Probe, RunLabel, RunResult, RunStatus, Validity, Verdict
from scenarios.model._scenario import Scenario, builtin_names, load_scenario, resolve_workload
from scenarios.reports._console import print_results
from scenarios.reports._files import junit, summary
from scenarios.reports._html import render_html
from scenarios.reports._schemas import summary_schema
from scenarios.runner._run import against_twin, steady_verdicts, twin_met, twin_verdicts

#: What each outcome is called in summary.json, and the exit code that goes with it.
CODES = {Validity.HELD: 0, Validity.BROKEN: EXIT_DEVIATED, Validity.UNKNOWN: EXIT_UNKNOWN}
HEADLINE = {Validity.HELD: "ALL INVARIANTS HELD", Validity.BROKEN: "DEVIATED", Validity.UNKNOWN: "INCONCLUSIVE"}


def _run(scenario: Scenario, label: RunLabel, verdicts: Sequence[Verdict]) -> RunResult:
    return RunResult(scenario=scenario.name, label=label, seed=0, status=RunStatus.COMPLETED, seconds=10.0,
                     verdicts=tuple(verdicts), probes=(), samples=(), faults=())


def _twin(scenario: Scenario, fault_verdicts: tuple[str, ...], *, met: bool) -> RunResult:
    """The fault-free twin as the runner reports it: each fault trace measured (broken, or held
    when ``met``), the rest held, the steady state before and after probed, none during."""
    probes = [Probe("before", 0.0, True, "ok"), Probe("after", 10.0, True, "ok")]
    measured = [Verdict.of(n, met if n in fault_verdicts else True, "measured", 3) for n in scenario.invariants]
    steady = steady_verdicts(scenario.steady_state, probes)
    return _run(scenario, RunLabel.BASELINE, twin_verdicts(measured + steady, fault_verdicts))


def _runs(name: str, case: str) -> list[RunResult]:
    scenario = load_scenario(name)
    workload = resolve_workload(scenario.workload)
    verdicts = [Verdict.of(n, True, "ok", 3) for n in scenario.invariants]
    if case == "broken":
        verdicts[0] = Verdict.of(verdicts[0].name, False, "planted: broke", 3)
    if case == "unknown":
        verdicts[-1] = Verdict.over(verdicts[-1].name, 0, held=True, detail="planted: none seen")
    twin = [_twin(scenario, workload.FAULT_VERDICTS, met=case == "twin met")] if workload.BASELINE else []
    return [*twin, _run(scenario, RunLabel.CHAOS, against_twin(verdicts, twin_met(twin)))]


def _expected(name: str, case: str) -> Validity:
    if case == "twin met":
        workload = resolve_workload(load_scenario(name).workload)
        traces = set(workload.FAULT_VERDICTS) & set(load_scenario(name).invariants)
        return Validity.UNKNOWN if workload.BASELINE and traces else Validity.HELD
    return {"held": Validity.HELD, "broken": Validity.BROKEN, "unknown": Validity.UNKNOWN}[case]


def _console(results: Sequence[RunResult]) -> str:
    out = io.StringIO()
    print_results(results, None, console=Console(file=out, width=200, color_system=None))
    return out.getvalue()


@pytest.mark.parametrize("case", ["held", "broken", "unknown", "twin met"])
@pytest.mark.parametrize("name", builtin_names())
def test_every_report_agrees_with_the_exit_code(name: str, case: str) -> None:
    results = _runs(name, case)
    outcome = _expected(name, case)
    assert exit_code(results) == CODES[outcome]
    data = summary(results)
    assert data["outcome"] == outcome.value and data["deviated"] is (outcome is not Validity.HELD)
    suites = list(junit(results).iter("testsuite"))
    failures = sum(int(s.get("failures", "0")) for s in suites)
    errors = sum(int(s.get("errors", "0")) for s in suites)
    assert (failures > 0) is (outcome is Validity.BROKEN), [(s.get("name"), s.get("failures")) for s in suites]
    assert (errors > 0) is (outcome is Validity.UNKNOWN), [(s.get("name"), s.get("errors")) for s in suites]
    overall = re.search(r"<p id='overall' class='(\w+)'>([^<]+)</p>", render_html(results))
    assert overall is not None and overall.group(2) == HEADLINE[outcome]
    assert HEADLINE[outcome] in _console(results)


def test_a_passing_runs_twin_shows_its_fault_traces_as_na_never_red() -> None:
    """dqn-cartpole's twin has no faults, so no probe during them: its "steady state during" was
    a failure in junit.xml while the run exited 0. Now it is skipped there, n/a in the others."""
    results = _runs("dqn-cartpole", "held")
    twin = results[0]
    during = next(v for v in twin.verdicts if v.name == "steady state during")
    assert during.validity is Validity.NOT_APPLICABLE and during.measured is Validity.UNKNOWN
    suite = next(s for s in junit(results).iter("testsuite") if s.get("name", "").endswith("[baseline]"))
    case = next(c for c in suite.iter("testcase") if c.get("name") == "steady state during")
    assert case.find("skipped") is not None and case.find("failure") is None
    assert "n/a" in _console(results) and "class='na'>n/a<" in render_html(results)


def test_an_unknown_verdict_is_never_shown_as_held_nor_as_broken() -> None:
    scenario = load_scenario("node-loss")
    verdict = Verdict.unknown("tasks_recovered", "no task ran on the node that died")
    results = [_run(scenario, RunLabel.CHAOS, [verdict])]
    assert exit_code(results) == EXIT_UNKNOWN
    (run,) = summary(results)["runs"]
    assert run["verdicts"][0]["validity"] == "unknown" and run["verdicts"][0]["held"] is False
    case = next(c for c in junit(results).iter("testcase") if c.get("name") == "tasks_recovered")
    assert case.find("error") is not None and case.find("failure") is None and case.find("system-out") is None
    page = render_html(results)
    assert "class='unknown'>UNKNOWN<" in page and "class='held'>held<" not in page
    assert "UNKNOWN" in _console(results) and "BROKEN" not in _console(results)


def test_a_broken_twin_fails_the_scenario_as_every_report_says() -> None:
    """A twin that broke what needs no fault is a finding like any other: the exit code reads it."""
    results = _runs("slow-checkpoint-disk", "held")
    twin = results[0]
    broken = replace(twin, verdicts=tuple(Verdict.of(v.name, False, "lost an add without any fault", 3)
                                          if v.name == "nothing_acknowledged_lost" else v for v in twin.verdicts))
    results = [broken, results[1]]
    assert exit_code(results) == EXIT_DEVIATED and summary(results)["outcome"] == "broken"
    assert int(next(junit(results).iter("testsuite")).get("failures", "0")) == 1


def test_a_twin_asked_only_for_faults_traces_counts_for_nothing() -> None:
    """lost-objects has no steady-state probe: its twin's one verdict is a fault's trace, n/a. That
    twin judged nothing and broke nothing, so it is n/a itself and the run under faults decides
    (it made a healthy run exit 3, inconclusive). A run under faults with nothing but n/a stays
    unknown: fail closed."""
    scenario = load_scenario("lost-objects")
    trace = Verdict.of("lost_objects_as_predicted", True, "measured", 3)
    twin = _run(scenario, RunLabel.BASELINE, twin_verdicts([trace], ("lost_objects_as_predicted",)))
    chaos = _run(scenario, RunLabel.CHAOS, [trace])
    assert twin.outcome is Validity.NOT_APPLICABLE and not twin.deviated
    assert exit_code([twin, chaos]) == 0
    data = summary([twin, chaos])
    assert data["outcome"] == "held" and [r["outcome"] for r in data["runs"]] == ["n/a", "held"]
    jsonschema.validate(data, summary_schema())
    assert "ALL INVARIANTS HELD" in _console([twin, chaos])
    assert exit_code([twin, replace(chaos, label=RunLabel.CHAOS, verdicts=twin.verdicts)]) == EXIT_UNKNOWN
    assert exit_code([replace(twin, verdicts=())]) == EXIT_UNKNOWN  # a run with no verdict at all
