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
from typing import TYPE_CHECKING, NoReturn, TypeVar

import click

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from scenarios.model._experiment import Overrides
    from scenarios.model._records import RunResult
    from scenarios.model._scenario import Scenario

F = TypeVar("F", bound="Callable[..., object]")
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


#: What ``raychaos show`` prints besides the built-ins: a template of each other kind of file.
TEMPLATES = ("attack",)


@main.command()
@click.argument("name")
def show(name: str) -> None:
    """Print built-in scenario NAME's TOML file, or `attack` for an attack file's template, to
    copy and start from."""
    from importlib import resources

    from scenarios.model._scenario import builtin_names

    if name in TEMPLATES:
        click.echo((resources.files("scenarios") / "templates" / f"{name}.toml").read_text(encoding="utf-8"), nl=False)
        return
    if name not in builtin_names():
        _fail(f"no built-in scenario {name!r}; `raychaos list` lists them: {', '.join(builtin_names())}; "
              f"`raychaos show attack` prints an attack file's template")
    click.echo((resources.files("scenarios") / "builtin" / f"{name}.toml").read_text(encoding="utf-8"), nl=False)


@main.command()
@click.argument("scenarios", nargs=-1, required=True, metavar="FILE_OR_NAME...")
@click.option("--seed", type=click.IntRange(0, 2**31 - 1), default=0, show_default=True,
              help="draws a [random] schedule as `run --seed` would")
def validate(scenarios: tuple[str, ...], seed: int) -> None:
    """Check scenario files (or built-in names) and print the schedule each would run.

    Starts nothing. Exits 0 when every one is valid, 2 otherwise, with one line per problem."""
    from scenarios.model._scenario import ScenarioError

    bad = 0
    for source in scenarios:
        try:
            scenario, attack = _load_any(source, seed)
        except ScenarioError as exc:
            bad += 1
            for problem in exc.problems:
                click.echo(f"{exc.source}: {problem}", err=True)
            continue
        _print_plan(scenario, seed, attack=attack)
    if bad:
        sys.exit(EXIT_BAD_INPUT)


def _load_any(source: str, seed: int) -> tuple[Scenario, bool]:
    """A scenario file or built-in name, or an attack file (``kind = "attack"``, its probes
    optional: ``run --job`` judges by the job); whether it is an attack's."""
    import tomllib
    from pathlib import Path

    from scenarios.model._experiment import is_attack_file, load_attack
    from scenarios.model._scenario import load_scenario

    path = Path(source)
    try:
        attack = path.is_file() and is_attack_file(tomllib.loads(path.read_text(encoding="utf-8")))
    except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError):
        attack = False  # the scenario loader says what is wrong with it
    if attack:
        return load_attack(source, seed=seed, require_probes=False), True
    return load_scenario(source, seed=seed), False


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


def _print_plan(scenario: Scenario, seed: int, *, attack: bool = False) -> None:
    """What a valid file would run: its workload (or an attack's probes), cluster, faults in
    order, invariants."""
    from scenarios.model._needs import scenario_needs
    from scenarios.model._scenario import resolve_workload

    needs = scenario_needs(scenario, resolve_workload(scenario.workload))
    what = "an attack" if attack else f"workload {scenario.workload!r}"
    where = "on the cluster at --address" if attack else f"on {scenario.nodes} node(s)"
    click.echo(f"{scenario.source or scenario.name}: valid — {scenario.name}, {what}, "
               f"{scenario.duration:g} s {where}, seed {seed}" + (f"; needs {', '.join(needs)}" if needs else ""))
    for entry in scenario.schedule.entries:
        click.echo(f"  at {entry.at:6.2f} s  {entry.kind.value:<16} {entry.target_label}")
    for failure in scenario.rpc_failures:
        click.echo(f"  whole run    rpc_failure      {failure.method}")
    if attack:
        _print_probes(scenario)
        return
    click.echo(f"  invariants: {', '.join(scenario.invariants) or 'none (the steady-state probe judges)'}")


def _print_probes(scenario: Scenario) -> None:
    from scenarios.model._probes import probe_from

    tables: list[dict[str, object]] = list(scenario.params.get("probes") or [])  # type: ignore[call-overload]
    probes = [probe_from(p) for p in tables]
    for probe in probes:
        click.echo(f"  probe every {scenario.params['every']:g} s: {probe.KIND.value} {probe.label}")
    load: dict[str, object] | None = scenario.params.get("load")  # type: ignore[assignment]
    if load is not None:
        routes = len(load.get("routes") or []) or 1  # type: ignore[arg-type]
        click.echo(f"  load: {load.get('rate', 20)}/s to {load['url']} ({routes} route(s)), judged by its [slo]"
                   + ("" if probes else "; its url is the steady-state probe"))
    if not probes and load is None:
        click.echo("  no probe in the file: `raychaos attack` needs one ([[probes]] or --probe); `run --job` "
                   "judges the job (job_succeeded, within_ratio, fault_seen)")
        return
    click.echo(f"  invariants: {', '.join(scenario.invariants)}; recovery within {scenario.recovery_within:g} s")


@main.command()
@click.option("--markdown", is_flag=True, help="print the reference page generated from the same model instead")
@click.option("--summary", "report", flag_value="summary", help="print summary.json's published JSON Schema instead")
@click.option("--journal", "report", flag_value="journal",
              help="print the JSON Schema of each line of journal.jsonl instead")
@click.option("--reports", "report", flag_value="reports", help="print the report files' reference page instead")
def schema(markdown: bool, report: str | None) -> None:
    """Print the JSON Schema of scenario and attack files (for a TOML editor to validate and
    complete from), generated from the scenario model; or a report's. Starts nothing."""
    import json

    from scenarios.model._schema import reference_markdown, scenario_schema
    from scenarios.reports._schemas import reports_markdown, shipped_schema

    if report == "reports":
        click.echo(reports_markdown(), nl=False)
    elif report is not None:
        click.echo(shipped_schema(report), nl=False)
    else:
        click.echo(reference_markdown() if markdown else json.dumps(scenario_schema(), indent=2), nl=not markdown)


#: What ``raychaos run`` without a scenario says, under the list.
NO_SCENARIO = ("no scenario given: run one with `raychaos run NAME` (a name above) or `raychaos run "
               "FILE.toml`; the flagship is `raychaos run dqn-cartpole` (`make run` in a checkout)")


def _fail(problem: str) -> NoReturn:
    click.echo(f"error: {problem}", err=True)
    sys.exit(EXIT_BAD_INPUT)


#: How every attack option meets the file (``attack --help``, ``run --help`` and the docs say it).
PRECEDENCE = ("Each option overrides the file's field of the same meaning (the command line wins); an option "
              "left out leaves the file's value. Probes given on the command line replace all the file's.")


def _probe_options(command: F) -> F:
    """The probe options of ``attack`` and ``run --job``, each overriding the file's."""
    options: tuple[Callable[[F], F], ...] = (
            click.option("--probe", "shell_probes", multiple=True, metavar="COMMAND",
                         help="a shell command that passes (exit 0) while the program is healthy; repeatable"),
            click.option("--probe-python", "python_probes", multiple=True, metavar="MODULE:FUNCTION",
                         help="a callable that passes unless it raises or returns False; repeatable"),
            click.option("--probe-http", "http_probes", multiple=True, metavar="URL",
                         help="a GET that passes on status 200; repeatable (the file's [[probes]] say more)"),
            click.option("--every", type=click.FloatRange(0.1, 600), default=None,
                         help="seconds between rounds of probes [file's probe_every, else 1]"),
            click.option("--probe-timeout", type=click.FloatRange(0.1, 600), default=None,
                         help="seconds each probe has to pass [file's probe_timeout, else 10]"),
            click.option("--recover-within", type=click.FloatRange(0.1, 3600), default=None,
                         help="seconds a failing probe has to pass again, and each fault from its heal "
                         "[file's recovery_within, else 30]"))
    for option in reversed(options):
        command = option(command)
    return command


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
@_probe_options
def run(scenario: str | None, seed: int, duration: float | None, address: str | None, nodes: int | None,
        report_dir: str | None, baseline: bool | None, job: str | None, max_slowdown: float,
        job_timeout: float | None, shell_probes: tuple[str, ...], python_probes: tuple[str, ...],
        http_probes: tuple[str, ...], every: float | None, probe_timeout: float | None,
        recover_within: float | None) -> None:
    """Run SCENARIO (a built-in name or a TOML file) and check its invariants.

    With --job, SCENARIO is an attack file (kind = "attack") run against your command as a
    Ray job, judged by job_succeeded, within_ratio (against the same command without faults;
    RAYCHAOS_SEED is the same in both), fault_seen (Ray restarted what was killed) and the
    file's probes, if any. Each probe option overrides the file's field of the same meaning
    (the command line wins); probes given replace all the file's.

    Without SCENARIO it lists the built-ins and starts nothing; the flagship is
    `raychaos run dqn-cartpole` (`make run` in a checkout)."""
    from scenarios.model._scenario import ScenarioError, load_scenario

    if scenario is None:
        _print_scenarios(err=True)
        _fail(NO_SCENARIO)
    if address and nodes:
        _fail(f"--address {address!r} and --nodes {nodes} exclude each other: an existing cluster "
              "has the nodes it has; drop one")
    overrides = _overrides(shell_probes, python_probes, http_probes, every=every, probe_timeout=probe_timeout,
                           recover_within=recover_within, duration=duration)
    if job is not None:
        _run_job(scenario, job, seed=seed, overrides=overrides, address=address, nodes=nodes, report_dir=report_dir,
                 baseline=baseline, max_slowdown=max_slowdown, job_timeout=job_timeout)
    if dataclasses.replace(overrides, duration=None) != type(overrides)():
        _fail("--probe, --probe-python, --probe-http, --every, --probe-timeout and --recover-within judge a job: "
              "give --job 'COMMAND' (a scenario's workload has its own probe)")
    try:
        loaded = load_scenario(scenario, seed=seed, duration=duration)
    except ScenarioError as exc:
        _fail(str(exc))
    _execute(loaded if nodes is None else loaded.with_nodes(nodes), seed=seed, address=address,
             report_dir=report_dir, baseline=baseline)


@main.command(epilog=PRECEDENCE)
@click.argument("experiment", type=click.Path(exists=True, dir_okay=False), metavar="FILE")
@click.option("--address", required=True, help="the running cluster's GCS address (host:port)")
@_probe_options
@click.option("--seed", type=click.IntRange(0, 2**31 - 1), default=0, show_default=True,
              help="seeds target choice and any random schedule")
@click.option("--duration", type=click.FloatRange(1, 3600), default=None,
              help="seconds of attack [file's duration, else 60]")
@click.option("--report", "report_dir", type=click.Path(file_okay=False), default=None,
              help="write journal.jsonl, summary.json, junit.xml and report.html here")
@click.option("--agent-timeout", type=click.FloatRange(1, 600), default=30.0, show_default=True,
              help="seconds each node's chaos agent has to start and answer before the first fault")
@click.option("--dry-run", is_flag=True,
              help="connect, look up what each fault would hit now and check the cluster; inject nothing, "
              "start nothing (exit 0: it would run, 2: it would be refused or a fault would fail)")
def attack(experiment: str, address: str, shell_probes: tuple[str, ...], python_probes: tuple[str, ...],
           http_probes: tuple[str, ...], every: float | None, probe_timeout: float | None,
           recover_within: float | None, seed: int, duration: float | None, report_dir: str | None,
           agent_timeout: float, dry_run: bool) -> None:
    """Run FILE's faults (an attack file, kind = "attack") against a program already running on
    the cluster at --address, judged by its probes; exit codes as `run`.

    Nothing needs installing on the nodes: the chaos agent travels with the attack. Before the
    first fault each node is checked for what the schedule's faults need there; a node that
    lacks it is named and the attack refused (exit 2)."""
    from scenarios.model._experiment import load_attack
    from scenarios.model._scenario import ScenarioError

    overrides = _overrides(shell_probes, python_probes, http_probes, every=every, probe_timeout=probe_timeout,
                           recover_within=recover_within, duration=duration)
    try:
        loaded = load_attack(experiment, overrides=overrides, seed=seed)
    except ScenarioError as exc:
        _fail(str(exc))
    if dry_run:
        _dry_run(loaded, address)
    _execute(loaded, seed=seed, address=address, report_dir=report_dir, baseline=False, agent_timeout=agent_timeout)


def _dry_run(scenario: Scenario, address: str) -> NoReturn:
    """Print what the attack would meet now; exit 0 when it would run, 2 when not."""
    from scenarios.runner._dry_run import dry_run

    _refuse_missing_needs(scenario, address)
    _print_plan(scenario, 0, attack=True)
    found = dry_run(scenario, address=address)
    for line in found.lines():
        click.echo(line)
    for problem in found.problems:
        click.echo(f"error: {problem}", err=True)
    sys.exit(EXIT_BAD_INPUT if found.problems else 0)


def _overrides(shell: Sequence[str], python: Sequence[str], http: Sequence[str], *, every: float | None,
               probe_timeout: float | None, recover_within: float | None, duration: float | None) -> Overrides:
    """The command line's overrides of an attack file."""
    from scenarios.model._experiment import Overrides, probe_options

    return Overrides(probes=probe_options(shell, python, http), probe_every=every, probe_timeout=probe_timeout,
                     recovery_within=recover_within, duration=duration)


def _run_job(schedule: str, command: str, *, seed: int, overrides: Overrides, address: str | None,
             nodes: int | None, report_dir: str | None, baseline: bool | None, max_slowdown: float,
             job_timeout: float | None) -> NoReturn:
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
                              max_slowdown=max_slowdown, job_timeout=job_timeout, overrides=overrides,
                              seed=seed, embedded=address is None)
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
@click.argument("report_a", metavar="A")
@click.argument("report_b", metavar="B")
@click.option("--mttr-ratio", type=click.FloatRange(1, 100), default=1.5, show_default=True,
              help="a fault's MTTR in B may be at most this many times A's")
@click.option("--seconds-ratio", type=click.FloatRange(1, 100), default=1.5, show_default=True,
              help="the run's seconds in B may be at most this many times A's")
@click.option("--availability-drop", type=click.FloatRange(0, 1), default=0.01, show_default=True,
              help="an availability in B may be at most this much below A's")
@click.option("--latency-ratio", type=click.FloatRange(1, 100), default=1.5, show_default=True,
              help="a latency or recovery time in B may be at most this many times A's")
def compare(report_a: str, report_b: str, mttr_ratio: float, seconds_ratio: float, availability_drop: float,
            latency_ratio: float) -> None:
    """Put two runs of the same scenario or attack file side by side (each a --report folder or
    its summary.json): B against A, e.g. the candidate Ray against the current one.

    \b
    Exits 0 when B regressed on nothing, 1 when it did (a verdict that held in A and not in B, a
    fault that happened in A only, a figure past its tolerance: each named), 2 on bad input."""
    from chaos.errors import InvalidConfig
    from scenarios.reports._compare import Tolerances, lines, read_summary
    from scenarios.reports._compare import compare as compare_runs

    tolerances = Tolerances(mttr_ratio=mttr_ratio, seconds_ratio=seconds_ratio,
                            availability_drop=availability_drop, latency_ratio=latency_ratio)
    try:
        found = compare_runs(read_summary(report_a), read_summary(report_b), tolerances)
    except InvalidConfig as exc:
        _fail(str(exc))
    for line in lines(found, names=(report_a, report_b)):
        click.echo(line)
    sys.exit(EXIT_DEVIATED if found.regressions else 0)


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
