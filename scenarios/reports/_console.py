"""Terminal output of a run: a live progress line while it runs, tables when it is done.

Every text raychaos did not write as markup (a verdict's detail, an error, a fault's target, a
progress message) is printed literally: rich would otherwise read ``raychaos[rl]`` in an error as
a markup tag and print ``raychaos``. Only this module's own styling is markup.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from scenarios.model._records import (
    OUTCOME_WORDS,
    VALIDITY_WORDS,
    RunLabel,
    RunResult,
    RunStatus,
    Validity,
    Verdict,
    outcome_of,
    seconds_text,
)
from scenarios.model._scenario import Scenario
from scenarios.model._workload import RunContext
from scenarios.runner._run import Progress

__all__ = ["print_results", "progress_display"]


@contextmanager
def progress_display(scenario: Scenario, *, console: Console | None = None) -> Iterator[Progress]:
    """A progress callback that keeps one live line: phase, elapsed time, counters, faults."""
    console = console or Console(stderr=True)
    state = {"phase": f"{scenario.name}: starting the cluster"}
    with Live(Text(state["phase"]), console=console, refresh_per_second=4, transient=True) as live:
        def progress(message: str, ctx: RunContext | None) -> None:
            if message:
                state["phase"] = message
                # A timestamped line, without rich's log column naming this file and line.
                console.print(f"[{time.strftime('%H:%M:%S')}] {message}", markup=False, highlight=False)
            live.update(Text(_line(state["phase"], ctx, scenario)))

        yield progress


def _line(phase: str, ctx: RunContext | None, scenario: Scenario) -> str:
    if ctx is None:
        return phase
    counters = ", ".join(f"{k} {v:g}" for k, v in sorted(ctx.snapshot().items()))
    return (f"{phase} · {ctx.elapsed():5.1f}/{scenario.duration:g} s · {counters or 'warming up'}"
            f" · faults injected {len(ctx.injected)}")


def print_results(results: Sequence[RunResult], report_dir: str | None, *,
                  console: Console | None = None) -> None:
    console = console or Console()
    for r in results:
        table = Table(title=Text(f"{r.scenario} [{r.label}] — {r.status}, {r.seconds:.1f} s, "
                                 f"peak memory {r.peak_rss_bytes / 2**30:.2f} GiB"))
        for col in ("invariant", "verdict", "evidence"):
            table.add_column(col)
        for v in r.verdicts:
            table.add_row(Text(v.name), _verdict(r, v), Text(v.detail))
        if r.status is RunStatus.ABORTED and not r.verdicts:
            table.add_row("-", "[bold red]not judged[/]", "the run aborted: its cause is below")
        console.print(table)
        if r.label is RunLabel.BASELINE and any(v.validity is Validity.NOT_APPLICABLE for v in r.verdicts):
            console.print("n/a: a fault's trace, which the fault-free twin cannot show; its measurement is beside it")
        if r.faults:
            console.print(_faults(r))
        if r.missed_faults:
            verdict = "the run fails" if r.strict_faults else "accepted: strict_faults = false"
            console.print(f"[bold red]{len(r.missed_faults)} of {len(r.faults)} scheduled faults did "
                          f"not happen[/] ({verdict})")
        if r.error:
            console.print(f"[bold red]aborted:[/] {escape(r.error)}")
    outcome = outcome_of(results)
    console.print(f"[{_STYLE[outcome]}]{OUTCOME_WORDS[outcome]}[/]" + (
        ": a verdict could not be judged (unknown): the run did not pass" if outcome is Validity.UNKNOWN else ""))
    if report_dir:
        console.print(f"report: {report_dir}/report.html (journal.jsonl, junit.xml, summary.json)", markup=False)


#: Each validity's style in the tables.
_STYLE = {Validity.HELD: "green", Validity.BROKEN: "bold red", Validity.UNKNOWN: "bold yellow",
          Validity.NOT_APPLICABLE: "dim"}


def _verdict(r: RunResult, v: Verdict) -> str:
    """A verdict's cell: held, BROKEN, UNKNOWN (not judged: never a pass) or n/a. An aborted
    run's is never "held": its error is its one cause, and a check that passed on a run that
    could not be trusted holds nothing."""
    if v.held and r.status is RunStatus.ABORTED:
        return "[bold red]not judged (aborted)[/]"
    return f"[{_STYLE[v.validity]}]{VALIDITY_WORDS[v.validity]}[/]"


def _faults(r: RunResult) -> Table:
    table = Table(title="faults")
    for col in ("at", "confirmed", "fault", "target", "status", "MTTR", "outcome"):
        table.add_column(col)
    for f in r.faults:
        status = Text(f.status, style="" if f.status == "injected" else "bold red")
        table.add_row(f"{f.start:.1f} s", seconds_text(f.confirmed), Text(f.kind), Text(f.target), status,
                      seconds_text(f.mttr), Text(f.outcome))
    return table
