"""The ``raychaos`` command line: list, show, validate, run and replay scenarios; attack a
running program; the scenario file's schema; the lessons; the demo.

Exit codes (``EXIT_CODES``, shown in ``raychaos --help``): 0 passed, 1 deviated (an invariant
broke, a scheduled fault did not happen, the run aborted, or a lesson's fix did not win),
2 bad input or refused (nothing started), 3 inconclusive (a verdict could not be judged, or a
lesson's measurement was too noisy to tell), 130 interrupted (every fault healed first; an
embedded cluster is torn down).
"""

from __future__ import annotations

import dataclasses
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, NoReturn

import click

if TYPE_CHECKING:
    from collections.abc import Sequence

    from scenarios.model._records import RunResult
    from scenarios.model._scenario import Scenario

EXIT_DEVIATED, EXIT_BAD_INPUT, EXIT_NOISY, EXIT_INTERRUPTED = 1, 2, 3, 130
#: A run with a verdict that could not be judged (unknown): not a pass, not a break. The same
#: code as a lesson too noisy to tell: both say "inconclusive".
EXIT_UNKNOWN = EXIT_NOISY
#: Every exit code the commands use, as ``raychaos --help`` lists them.
EXIT_CODES = f"""\b
Exit codes:
  0    passed: every invariant held and every scheduled fault happened (explain: the
       fix won)
  {EXIT_DEVIATED}    deviated: an invariant broke, a scheduled fault did not happen or the run
       aborted, in the run under faults or its fault-free twin (explain: the fix did not
       win; demo: the WAL counter lost state)
  {EXIT_BAD_INPUT}    bad input or refused: the problems are printed one per line, nothing started
  {EXIT_UNKNOWN}    inconclusive: nothing broke, but a verdict could not be judged (unknown: the
       evidence it stands on is missing); explain: the lesson's measurement was too noisy to
       tell mistake from fix
  {EXIT_INTERRUPTED}  interrupted (Ctrl-C): every fault healed, an embedded cluster stopped"""


def _version() -> str:
    try:
        return version("raychaos")
    except PackageNotFoundError:
        return "0+unknown"


class _Main(click.Group):
    """The command group: Ctrl-C anywhere (a lesson, the demo, loading a file) exits 130, as
    a run's does, instead of click's "Aborted!" and 1."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)


@click.group(cls=_Main, invoke_without_command=True, epilog=EXIT_CODES)
@click.version_option(_version(), prog_name="raychaos")
@click.pass_context
def main(ctx: click.Context) -> None:
    """raychaos: fault-tolerance and lifecycle testing for Ray.

    Start with `raychaos list`, `raychaos show NAME` (a built-in scenario's file) and
    `raychaos validate FILE` (what a file would run, nothing started).
    """
    if ctx.invoked_subcommand is None:
        click.echo(f"raychaos {_version()}")
        click.echo(ctx.get_help())


@main.command("list")
def list_scenarios() -> None:
    """List the built-in scenarios: name, duration, what each needs beyond
    `pip install raychaos`, and its description. Starts nothing."""
    _print_scenarios()


def _print_scenarios(*, err: bool = False) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    from scenarios.model._needs import scenario_needs
    from scenarios.model._scenario import builtin_names, load_scenario, resolve_workload

    table = Table(box=None, pad_edge=False, show_lines=False)
    for col, kw in (("scenario", {"no_wrap": True}), ("s", {"justify": "right"}), ("needs", {}),
                    ("description", {"ratio": 1})):
        table.add_column(col, **kw)
    for name in builtin_names():
        scenario = load_scenario(name)
        needs = scenario_needs(scenario, resolve_workload(scenario.workload))
        table.add_row(Text(name), f"{scenario.duration:g}", Text(", ".join(needs) or "-"),
                      Text(" ".join(scenario.description.split())))
    Console(stderr=err, width=None if sys.stdout.isatty() else 160).print(table)


@main.command()
@click.argument("name")
def show(name: str) -> None:
    """Print built-in scenario NAME's TOML file, to copy and start from."""
    from importlib import resources

    from scenarios.model._scenario import builtin_names

    if name not in builtin_names():
        _fail(f"no built-in scenario {name!r}; `raychaos list` lists them: {', '.join(builtin_names())}")
    click.echo((resources.files("scenarios") / "builtin" / f"{name}.toml").read_text(encoding="utf-8"), nl=False)


@main.command()
@click.argument("scenarios", nargs=-1, required=True, metavar="FILE_OR_NAME...")
@click.option("--seed", type=click.IntRange(0, 2**31 - 1), default=0, show_default=True,
              help="draws a [random] schedule as `run --seed` would")
def validate(scenarios: tuple[str, ...], seed: int) -> None:
    """Check scenario files (or built-in names) and print the schedule each would run.

    Starts nothing. Exits 0 when every one is valid, 2 otherwise, with one line per problem."""
    from scenarios.model._scenario import ScenarioError, load_scenario

    bad = 0
    for source in scenarios:
        try:
            scenario = load_scenario(source, seed=seed)
        except ScenarioError as exc:
            bad += 1
            for problem in exc.problems:
                click.echo(f"{exc.source}: {problem}", err=True)
            continue
        _print_plan(scenario, seed)
    if bad:
        sys.exit(EXIT_BAD_INPUT)


@main.command()
@click.option("--dry-run", is_flag=True, help="list what would be removed and remove nothing")
def cleanup(dry_run: bool) -> None:
    """Remove what killed raychaos drivers left on this machine.

    Each driver's reaper undoes what it made when it is killed; this removes what is left when
    the reaper could not. It finds what raychaos labels as its own: the network lab's namespaces,
    links, bridges and nftables tables (named rc-*), fault filesystems, capped tmpfs mounts, and
    `ray start` daemons, fault-filesystem and Redis servers (RAYCHAOS_OWNER in their
    environment). It removes only the things of drivers that have ended; a live driver's things,
    and anything without raychaos's owner label, are listed and left alone. Needs root.

    Exits 0 when nothing of an ended driver is left, 1 when something could not be removed or
    listed (each one named)."""
    from chaos.cluster import cleanup_machine

    if cleanup_machine(dry_run=dry_run, echo=click.echo):
        sys.exit(EXIT_DEVIATED)


def _print_plan(scenario: Scenario, seed: int) -> None:
    """What a valid scenario would run: its workload, cluster, faults in order, invariants."""
    from scenarios.model._needs import scenario_needs
    from scenarios.model._scenario import resolve_workload

    needs = scenario_needs(scenario, resolve_workload(scenario.workload))
    click.echo(f"{scenario.source or scenario.name}: valid — {scenario.name}, workload {scenario.workload!r}, "
               f"{scenario.duration:g} s on {scenario.nodes} node(s), seed {seed}"
               + (f"; needs {', '.join(needs)}" if needs else ""))
    for entry in scenario.schedule.entries:
        click.echo(f"  at {entry.at:6.2f} s  {entry.kind.value:<16} {entry.target_label}")
    for failure in scenario.rpc_failures:
        click.echo(f"  whole run    rpc_failure      {failure.method}")
    click.echo(f"  invariants: {', '.join(scenario.invariants) or 'none (the steady-state probe judges)'}")


@main.command()
@click.option("--markdown", is_flag=True, help="print the reference page generated from the same model instead")
def schema(markdown: bool) -> None:
    """Print the scenario file's JSON Schema (for a TOML editor to validate and complete
    from), generated from the scenario model. Starts nothing."""
    import json

    from scenarios.model._schema import reference_markdown, scenario_schema

    click.echo(reference_markdown() if markdown else json.dumps(scenario_schema(), indent=2), nl=not markdown)


#: What ``raychaos run`` without a scenario says, under the list.
NO_SCENARIO = ("no scenario given: run one with `raychaos run NAME` (a name above) or `raychaos run "
               "FILE.toml`; the flagship is `raychaos run dqn-cartpole` (`make run` in a checkout)")


def _fail(problem: str) -> NoReturn:
    click.echo(f"error: {problem}", err=True)
    sys.exit(EXIT_BAD_INPUT)


@main.command()
@click.argument("scenario", required=False)
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
@click.option("--job", "job", default=None, metavar="COMMAND",
              help="run COMMAND (your script, e.g. 'python train.py') as a Ray job under SCENARIO, an "
              "attack-style schedule file, and once without faults; the current directory travels with it")
@click.option("--max-slowdown", type=float, default=3.0, show_default=True,
              help="with --job: the run under faults may take at most this many times the fault-free run")
@click.option("--job-timeout", type=float, default=None,
              help="with --job: seconds each job may run before it is stopped and fails (default: 600 "
              "for the fault-free run, 10 times its time, at least 60, for the run under faults)")
@click.option("--probe", "shell_probes", multiple=True, metavar="COMMAND",
              help="with --job: a shell command that passes (exit 0) while the job is healthy; repeatable")
@click.option("--probe-python", "python_probes", multiple=True, metavar="MODULE:FUNCTION",
              help="with --job: a callable that passes unless it raises or returns False; repeatable")
def run(scenario: str | None, seed: int, duration: float | None, address: str | None, nodes: int | None,
        report_dir: str | None, baseline: bool | None, job: str | None, max_slowdown: float,
        job_timeout: float | None, shell_probes: tuple[str, ...], python_probes: tuple[str, ...]) -> None:
    """Run SCENARIO (a built-in name or a TOML file) and check its invariants.

    With --job, SCENARIO is an attack-style schedule file run against your command as a Ray
    job, judged by job_succeeded, within_ratio (against the same command without faults;
    RAYCHAOS_SEED is the same in both) and fault_seen (Ray restarted what was killed).

    Without SCENARIO it lists the built-ins and starts nothing; the flagship is
    `raychaos run dqn-cartpole` (`make run` in a checkout)."""
    from scenarios.model._scenario import ScenarioError, load_scenario

    if scenario is None:
        _print_scenarios(err=True)
        _fail(NO_SCENARIO)
    if address and nodes:
        _fail(f"--address {address!r} and --nodes {nodes} exclude each other: an existing cluster "
              "has the nodes it has; drop one")
    if job is not None:
        _run_job(scenario, job, seed=seed, duration=duration, address=address, nodes=nodes, report_dir=report_dir,
                 baseline=baseline, max_slowdown=max_slowdown, job_timeout=job_timeout,
                 probes=_probe_params(shell_probes, python_probes))
    if shell_probes or python_probes:
        _fail("--probe and --probe-python judge a job: give --job 'COMMAND' (a scenario's workload has its own probe)")
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
@click.option("--agent-timeout", type=click.FloatRange(1, 600), default=30.0, show_default=True,
              help="seconds each node's chaos agent has to start and answer before the first fault")
def attack(schedule: str, address: str, shell_probes: tuple[str, ...], python_probes: tuple[str, ...],
           every: float, recover_within: float, seed: int, duration: float | None, report_dir: str | None,
           agent_timeout: float) -> None:
    """Run SCHEDULE's faults against a program already running on the cluster at --address,
    judged by your probes; exit codes as `run`.

    Nothing needs installing on the nodes: the chaos agent travels with the attack. Before the
    first fault each node is checked for what the schedule's faults need there; a node that
    lacks it is named and the attack refused (exit 2)."""
    from scenarios.model._scenario import ScenarioError, load_attack

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
    _execute(loaded, seed=seed, address=address, report_dir=report_dir, baseline=False, agent_timeout=agent_timeout)


def _probe_params(shell_probes: Sequence[str], python_probes: Sequence[str]) -> list[dict[str, str]]:
    """The probes as the attack and job workloads take them; a Python probe without ':' refused."""
    bad = [p for p in python_probes if ":" not in p]
    if bad:
        _fail(f"--probe-python {bad[0]!r}: use MODULE:FUNCTION, e.g. myapp.health:check")
    return [{"kind": "shell", "spec": p} for p in shell_probes] + [{"kind": "python", "spec": p} for p in python_probes]


def _run_job(schedule: str, command: str, *, seed: int, duration: float | None, address: str | None,
             nodes: int | None, report_dir: str | None, baseline: bool | None, max_slowdown: float,
             job_timeout: float | None, probes: list[dict[str, str]]) -> NoReturn:
    """``run --job``: the schedule file against the command as a Ray job, after its fault-free run."""
    import os
    import tempfile

    from scenarios.model._scenario import ScenarioError
    from scenarios.workloads.user._job import AGENT_PORT, AGENT_PORT_PATIENCE, agent_port_taken, load_job, port_holder

    if baseline is False:
        _fail("--no-baseline with --job: within_ratio times the job against its fault-free run; drop --no-baseline")
    with tempfile.TemporaryDirectory(prefix="raychaos-job-") as tmp:
        try:
            loaded = load_job(schedule, command=command, working_dir=os.getcwd(), handoff=f"{tmp}/baseline.json",
                              max_slowdown=max_slowdown, job_timeout=job_timeout, probes=probes, seed=seed,
                              duration=duration, embedded=address is None)
        except ScenarioError as exc:
            _fail(str(exc))
        _refuse_missing_needs(loaded, address)  # before the wait for the agent's port, as before a cluster
        if address is None and agent_port_taken(patience=AGENT_PORT_PATIENCE):
            _fail(f"port {AGENT_PORT} is taken on this machine by {port_holder()} (another Ray cluster's "
                  "dashboard agent?): the "
                  "embedded cluster's agent, which takes its jobs, could not listen there; stop that cluster "
                  "(`ray stop`) or run against it with --address")
        _execute(loaded if nodes is None else loaded.with_nodes(nodes), seed=seed, address=address,
                 report_dir=report_dir, baseline=True)
    raise AssertionError("_execute exits")  # pragma: no cover


@main.command()
@click.argument("journal", type=click.Path(exists=True, dir_okay=False))
@click.option("--report", "report_dir", type=click.Path(file_okay=False), default=None)
@click.option("--address", default=None, help="run against this existing Ray cluster")
def replay(journal: str, report_dir: str | None, address: str | None) -> None:
    """Re-run the exact fault schedule a JOURNAL recorded (same scenario, same seed)."""
    from chaos import Schedule
    from chaos.errors import JournalCorrupt
    from chaos.journal import StartEvent, read_journal
    from scenarios.model._scenario import ScenarioError, load_scenario

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
             baseline: bool | None, agent_timeout: float = 30.0) -> NoReturn:
    from chaos.errors import ClusterUnfit, InvalidConfig, MissingExtra
    from scenarios.reports._console import print_results, progress_display
    from scenarios.reports._files import write_reports
    from scenarios.runner._run import run_scenario

    _refuse_missing_needs(scenario, address)
    try:
        with progress_display(scenario) as progress:
            results = run_scenario(scenario, seed=seed, address=address, report_dir=report_dir,
                                   baseline=baseline, progress=progress, agent_timeout=agent_timeout)
    # Refused before any run: the cluster does not suit it. MissingExtra only if a need were missed
    # above: still one line, never a traceback (the runner has stopped what it started).
    except (InvalidConfig, ClusterUnfit, MissingExtra) as exc:
        _fail(str(exc))
    except KeyboardInterrupt:
        click.echo("interrupted: every fault healed, the embedded cluster stopped", err=True)
        sys.exit(EXIT_INTERRUPTED)
    if report_dir:
        write_reports(results, report_dir)
    print_results(results, report_dir)
    _print_unchecked(results)
    sys.exit(exit_code(results))


def exit_code(results: Sequence[RunResult]) -> int:
    """The exit code of a scenario's runs: what every report says of them (``outcome_of``)."""
    from scenarios.model._records import Validity, outcome_of

    return {Validity.HELD: 0, Validity.BROKEN: EXIT_DEVIATED}.get(outcome_of(results), EXIT_UNKNOWN)


def _refuse_missing_needs(scenario: Scenario, address: str | None) -> None:
    """Before anything starts (a cluster, a mount, a Redis): every need of the scenario this
    machine lacks, one line each with its fix, and exit 2. What would otherwise fail halfway
    through setup (an extra, a tool, root) is one line here, the same needs `raychaos list` says."""
    from scenarios.model._needs import missing_needs
    from scenarios.model._scenario import resolve_workload

    missing = missing_needs(scenario, resolve_workload(scenario.workload), embedded=address is None)
    for line in missing:
        click.echo(f"error: {line}", err=True)
    if missing:
        sys.exit(EXIT_BAD_INPUT)


def _print_unchecked(results: Sequence[RunResult]) -> None:
    """What the runs did not judge, said under the tables: never silently dropped."""
    from scenarios.model._records import NO_PROBE_NOTE

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
    from scenarios.workloads._demo import run_demo

    rows = run_demo(adds=adds)
    wal = next(r for r in rows if r.durability == "wal")
    if wal.after != wal.before:
        raise click.ClickException(f"WAL mode lost state: {wal.before} before, {wal.after} after")


@main.command()
@click.argument("lesson_id", required=False)
@click.option("--address", default=None, help="run on this existing Ray cluster instead of an embedded one")
def explain(lesson_id: str | None, address: str | None) -> None:
    """List the lessons, or run LESSON_ID: the chapter's mistake and its fix, their code side by
    side, each measured.

    \b
    Exits 0 when the fix wins, 1 when it does not, 3 when the measurement was too noisy to tell
    (the figures lie within their margin of each other: run it again on a quieter machine)."""
    from chaos.errors import InvalidConfig
    from scenarios.lessons._catalog import find, lessons, run_lesson
    from scenarios.lessons._console import print_lesson, print_lessons
    from scenarios.lessons._model import LessonOutcome

    if lesson_id is None:
        print_lessons(lessons())
        return
    try:
        item = find(lesson_id)
    except InvalidConfig as exc:
        _fail(str(exc))
    result = run_lesson(item, address=address)
    print_lesson(result)
    codes = {LessonOutcome.FIX_WINS: 0, LessonOutcome.NOISY: EXIT_NOISY, LessonOutcome.FIX_LOSES: EXIT_DEVIATED}
    sys.exit(codes[result.outcome])
