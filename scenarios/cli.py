"""The ``raychaos`` command line: list, run and replay scenarios; the demo.

Exit codes: 0 every invariant held, 1 one broke (or the run aborted), 2 bad input,
130 interrupted (every fault healed first; an embedded cluster is torn down).
"""

from __future__ import annotations

import dataclasses
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, NoReturn

import click

if TYPE_CHECKING:
    from collections.abc import Sequence

    from scenarios._model import Scenario
    from scenarios._records import RunResult

EXIT_DEVIATED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 1, 2, 130


def _version() -> str:
    try:
        return version("raychaos")
    except PackageNotFoundError:
        return "0+unknown"


@click.group(invoke_without_command=True)
@click.version_option(_version(), prog_name="raychaos")
@click.pass_context
def main(ctx: click.Context) -> None:
    """raychaos: fault-tolerance and lifecycle testing for Ray."""
    if ctx.invoked_subcommand is None:
        click.echo(f"raychaos {_version()}")
        click.echo(ctx.get_help())


@main.command("list")
def list_scenarios() -> None:
    """List the built-in scenarios."""
    from scenarios._model import builtin_names, load_scenario

    for name in builtin_names():
        scenario = load_scenario(name)
        first = scenario.description.split(". ")[0].split(": ")[0]
        click.echo(f"{name:28} {scenario.duration:>5g} s  {first}")


def _fail(problem: str) -> NoReturn:
    click.echo(f"error: {problem}", err=True)
    sys.exit(EXIT_BAD_INPUT)


@main.command()
@click.argument("scenario", default="dqn-cartpole")
@click.option("--seed", type=click.IntRange(0, 2**31 - 1), default=0, show_default=True,
              help="seeds the workload and any random schedule")
@click.option("--duration", type=click.FloatRange(1, 3600), default=None,
              help="seconds; overrides the scenario's duration")
@click.option("--address", default=None, help="run against this existing Ray cluster (GCS address)")
@click.option("--nodes", type=click.IntRange(1, 8), default=None,
              help="embedded nodes (head included); overrides the scenario's")
@click.option("--report", "report_dir", type=click.Path(file_okay=False), default=None,
              help="write journal.jsonl, summary.json, junit.xml and report.html here")
@click.option("--baseline/--no-baseline", default=None,
              help="also run the same seed without faults (default: as the scenario's workload says)")
def run(scenario: str, seed: int, duration: float | None, address: str | None, nodes: int | None,
        report_dir: str | None, baseline: bool | None) -> None:
    """Run SCENARIO (a built-in name or a TOML file) and check its invariants."""
    from scenarios._model import ScenarioError, load_scenario

    if address and nodes:
        _fail(f"--address {address!r} and --nodes {nodes} exclude each other: an existing cluster "
              "has the nodes it has; drop one")
    try:
        loaded = load_scenario(scenario, seed=seed, duration=duration)
    except ScenarioError as exc:
        _fail(str(exc))
    _execute(loaded if nodes is None else loaded.with_nodes(nodes), seed=seed, address=address,
             report_dir=report_dir, baseline=baseline)


@main.command()
@click.argument("schedule", type=click.Path(exists=True, dir_okay=False))
@click.option("--address", required=True, help="the running cluster's GCS address (host:port)")
@click.option("--probe", "shell_probes", multiple=True, metavar="COMMAND",
              help="a shell command that passes (exit 0) while the program is healthy; repeatable")
@click.option("--probe-python", "python_probes", multiple=True, metavar="MODULE:FUNCTION",
              help="a callable that passes unless it raises or returns False; repeatable")
@click.option("--every", type=click.FloatRange(0.1, 600), default=1.0, show_default=True,
              help="seconds between rounds of probes")
@click.option("--recover-within", type=click.FloatRange(0.1, 3600), default=30.0, show_default=True,
              help="seconds a failing probe has to pass again")
@click.option("--seed", type=click.IntRange(0, 2**31 - 1), default=0, show_default=True,
              help="seeds target choice and any random schedule")
@click.option("--duration", type=click.FloatRange(1, 3600), default=None,
              help="seconds; overrides the file's duration")
@click.option("--report", "report_dir", type=click.Path(file_okay=False), default=None,
              help="write journal.jsonl, summary.json, junit.xml and report.html here")
def attack(schedule: str, address: str, shell_probes: tuple[str, ...], python_probes: tuple[str, ...],
           every: float, recover_within: float, seed: int, duration: float | None, report_dir: str | None) -> None:
    """Run SCHEDULE's faults against a program already running on the cluster at --address,
    judged by your probes; exit codes as `run`."""
    from scenarios._model import ScenarioError, load_attack

    probes = [{"kind": "shell", "spec": p} for p in shell_probes] + [
        {"kind": "python", "spec": p} for p in python_probes]
    if not probes:
        _fail("no probe: give --probe 'COMMAND' or --probe-python MODULE:FUNCTION (what must keep "
              "working while the program is attacked); without one nothing would judge it")
    bad = [p for p in python_probes if ":" not in p]
    if bad:
        _fail(f"--probe-python {bad[0]!r}: use MODULE:FUNCTION, e.g. myapp.health:check")
    try:
        loaded = load_attack(schedule, probes=probes, every=every, recover_within=recover_within,
                             seed=seed, duration=duration)
    except ScenarioError as exc:
        _fail(str(exc))
    _execute(loaded, seed=seed, address=address, report_dir=report_dir, baseline=False)


@main.command()
@click.argument("journal", type=click.Path(exists=True, dir_okay=False))
@click.option("--report", "report_dir", type=click.Path(file_okay=False), default=None)
@click.option("--address", default=None, help="run against this existing Ray cluster")
def replay(journal: str, report_dir: str | None, address: str | None) -> None:
    """Re-run the exact fault schedule a JOURNAL recorded (same scenario, same seed)."""
    from chaos import JournalCorrupt, Schedule, StartEvent, read_journal
    from scenarios._model import ScenarioError, load_scenario

    try:
        events = list(read_journal(journal))
    except JournalCorrupt as exc:
        _fail(str(exc))
    start = next((e for e in events if isinstance(e, StartEvent) and e.scenario is not None), None)
    if start is None or start.scenario is None:
        _fail(f"{journal!r} has no start event from `raychaos run`; replay a run's journal.jsonl")
    try:
        scenario = load_scenario(start.source or start.scenario, seed=start.seed, duration=start.duration)
    except ScenarioError as exc:
        _fail(str(exc))
    scenario = dataclasses.replace(scenario, schedule=Schedule.from_journal(events))
    click.echo(f"replaying {len(scenario.schedule.entries)} faults of {scenario.name} (seed {start.seed})")
    _execute(scenario, seed=start.seed, address=address, report_dir=report_dir, baseline=False)


def _execute(scenario: Scenario, *, seed: int, address: str | None, report_dir: str | None,
             baseline: bool | None) -> None:
    from scenarios._console import print_results, progress_display
    from scenarios._records import RunLabel
    from scenarios._report import write_reports
    from scenarios._runner import run_scenario

    try:
        with progress_display(scenario) as progress:
            results = run_scenario(scenario, seed=seed, address=address, report_dir=report_dir,
                                   baseline=baseline, progress=progress)
    except KeyboardInterrupt:
        click.echo("interrupted: every fault healed, the embedded cluster stopped", err=True)
        sys.exit(EXIT_INTERRUPTED)
    if report_dir:
        write_reports(results, report_dir)
    print_results(results, report_dir)
    _print_unchecked(results)
    sys.exit(EXIT_DEVIATED if any(r.deviated for r in results if r.label is RunLabel.CHAOS) else 0)


def _print_unchecked(results: Sequence[RunResult]) -> None:
    """What the runs did not judge, said under the tables: never silently dropped."""
    from scenarios._records import NO_PROBE_NOTE

    for r in results:
        for v in r.unjudged:
            click.echo(f"{r.scenario} [{r.label}]: {v.name} not declared, not judged "
                       f"({'held' if v.held else 'broke'}: {v.detail})")
        if not r.probed:
            click.echo(f"{r.scenario} [{r.label}]: {NO_PROBE_NOTE}")


@main.command()
@click.option("--adds", default=12, show_default=True, type=click.IntRange(1, 10_000),
              help="acknowledged adds before the kill")
def demo(adds: int) -> None:
    """A checkpointed counter actor SIGKILLed and restored, before and after, per durability mode."""
    from scenarios._demo import run_demo

    rows = run_demo(adds=adds)
    wal = next(r for r in rows if r.durability == "wal")
    if wal.after != wal.before:
        raise click.ClickException(f"WAL mode lost state: {wal.before} before, {wal.after} after")


@main.command()
@click.argument("lesson_id", required=False)
@click.option("--address", default=None, help="run on this existing Ray cluster instead of an embedded one")
def explain(lesson_id: str | None, address: str | None) -> None:
    """List the lessons, or run LESSON_ID: the chapter's mistake and its fix, measured side by side."""
    from chaos import InvalidConfig
    from scenarios._lesson_console import print_lesson, print_lessons
    from scenarios._lessons import find, lessons, run_lesson

    if lesson_id is None:
        print_lessons(lessons())
        return
    try:
        item = find(lesson_id)
    except InvalidConfig as exc:
        _fail(str(exc))
    result = run_lesson(item, address=address)
    print_lesson(result)
    if not result.favours_fix:
        sys.exit(EXIT_DEVIATED)
