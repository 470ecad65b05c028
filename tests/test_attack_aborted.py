"""An aborted run reports its one cause: nothing it judged is shown, and no verdict of it reads
"held" (its probes may well pass: the program was never attacked)."""

from __future__ import annotations

from dataclasses import replace

from rich.console import Console

from chaos import Schedule
from scenarios import Verdict, load_scenario
from scenarios.model._records import RunLabel, RunResult, RunStatus
from scenarios.model._workload import Workload
from scenarios.reports._console import print_results
from scenarios.runner._run import _Run, _run_once

CAUSE = "AgentUnavailable: node 3f2a: no chaos agent there"


class _CannotReachTheCluster(Workload):
    """Sets up, passes its probe and its invariants, and aborts at its first step, as an attack
    does whose agents cannot start (its probes of the program keep passing)."""

    INVARIANTS = ("probes_pass_after_heal",)

    def step(self) -> bool:
        raise RuntimeError(CAUSE)

    def probe(self) -> str:
        return "1 probe passed"

    def invariants(self) -> list[Verdict]:
        return [Verdict.of("probes_pass_after_heal", True, "after the last heal: all 1 passed")]


def _printed(result: RunResult) -> str:
    console = Console(record=True, width=300)
    print_results([result], None, console=console)
    return console.export_text()


def test_an_aborted_run_judges_nothing_and_shows_its_one_cause() -> None:
    scenario = replace(load_scenario("replay-crash-loop"), schedule=Schedule(()),
                       invariants=("probes_pass_after_heal",), duration=5.0)
    run = _Run(scenario, "", 0, RunLabel.CHAOS, True, None, "", embedded=True)
    result = _run_once(run, _CannotReachTheCluster, _CannotReachTheCluster.Params(), lambda message, ctx: None)
    assert result.status is RunStatus.ABORTED and CAUSE in result.error
    assert result.verdicts == () and result.unjudged == ()
    text = _printed(result)
    assert "held" not in text and "not judged" in text and f"aborted: RuntimeError: {CAUSE}" in text


def test_a_verdict_of_an_aborted_run_is_never_shown_held() -> None:
    held, broke = Verdict.of("probes_recover", True, "5 probe runs, 0 failed"), Verdict.of("b", False, "broke")
    aborted = RunResult(scenario="s", label=RunLabel.CHAOS, seed=0, status=RunStatus.ABORTED, seconds=1.0,
                        verdicts=(held, broke), probes=(), samples=(), faults=(), error=CAUSE)
    text = _printed(aborted)
    assert "held" not in text and "not judged (aborted)" in text and "BROKEN" in text
    assert "held" in _printed(replace(aborted, status=RunStatus.COMPLETED, error=""))
