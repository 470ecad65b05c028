"""Mutation score of the suite over the code whose bugs would ship silently (``make mutants``).

Groups of code, each against the part of ``make test``'s suite that exercises it without Ray
(a cluster per mutant would take hours):

- ``crash``: the crash-consistency code: the checkpoint store, the WAL, the checkpointer, the
  writer table, the actors' idempotent mutations, the history checker (the in-process
  failpoint sweep with real SIGKILLs included);
- ``verdicts``: the code that decides a run's result: the fault loop's outcomes, the checks
  that a fault happened (RPC knob, memory, CPU), the runner's verdicts, ``Verdict.over``, a
  run's ``deviated``, the scenario model's refusals;
- ``network``: the network lab and its faults' confirmations, read-backs and heals;
- ``disk``: the fault filesystem's model of a power loss, its served faults and deadlines, the
  disk faults' probes and confirmations;
- ``serve_job``: the Serve and job verdicts (what a fault excuses, a body checked, a kill answered);
- ``hunt``: the hunt's oracle and what makes a fault land on what it judges.

Plants one small bug at a time (a mutant) and runs that code's tests against it. A mutant is
*caught* when a test fails; one that makes the tests run past their bound is *timed out*, one
that breaks collection or import is *broken*: both are reported as such, not as caught, and
neither counts towards the score. A *survivor* is a bug the suite would ship. Prints, per
file, caught/timed out/broken/survived and the score (caught over all mutants), then every
mutant not caught, with its line.

Mutation operators (one change per mutant, inside functions only): comparison flips
(``<``/``<=``, ``==``/``!=``, ``in``/``not in``, ``is``/``is not``), ``+``/``-``, ``and``/``or``,
dropping a ``not``, negating an ``if``/``while`` condition, integer constants ±1, ``True``/
``False``, deleting a call statement (an ``fsync``, a ``write``, a ``prune``), and swapping two
adjacent call statements (the order of a commit protocol). Failpoint calls are never mutated:
they are the sweep's instruments.

Usage: ``python benchmarks/mutants.py [--group crash|verdicts|network|disk|serve_job|hunt] [--workers N]
[--only actors/_wal.py] [--limit K]``.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import contextlib
import copy
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import console, machine, table

#: The crash-consistency code: file → the functions mutated (None: every function in it).
CRASH: dict[str, set[str] | None] = {
    "actors/_store.py": None,
    "actors/_wal.py": None,
    "actors/_checkpoint.py": {"mutation", "_sync_mutation.wrapper", "Checkpointable.enable_checkpointing",
                              "_mark", "_writers", "_applied", "_has_idempotent", "_reconstructed",
                              "_lock_of",
                              "_Checkpointer.start", "_Checkpointer._replay", "_Checkpointer._apply",
                              "_Checkpointer._open_segment", "_Checkpointer.after_mutation",
                              "_Checkpointer._due", "_Checkpointer.checkpoint",
                              "_Checkpointer._checkpoint", "_Checkpointer._prune_segments"},
    "actors/_dedupe.py": None,
    "actors/_replay_actor.py": {"ReplayBufferActor.add", "ReplayBufferActor.state_dict",
                                "ReplayBufferActor.load_state_dict",
                                "ReplayBufferActor.delta_state_dict",
                                "ReplayBufferActor.load_delta_state_dict"},
    "actors/_param_server.py": {"ParameterServer.push", "ParameterServer._too_old",
                                "ParameterServer._remember"},
    "chaos/_history.py": {"SetVerdict.ok", "check_set"},
}
#: The code that decides a run's result, by the same rule.
VERDICTS: dict[str, set[str] | None] = {
    "chaos/_driver.py": {"run_schedule", "_result", "_one", "_settle", "check_applied", "FaultOutcome.ok"},
    "chaos/_delay.py": {"rpc_failures_injected", "unconfirmed_rpc_failures"},
    "chaos/_process_faults.py": {"_confirm_node_dead", "_confirm_node_dead.dead"},
    "chaos/_resource_faults.py": {"confirm_resident", "confirm_resident.verdict"},
    "chaos/agents/_memory.py": {"MemoryProgress.holding"},
    "chaos/agents/_agent.py": {"_confirm_burning", "_confirm_burning.burned"},
    "scenarios/model/_records.py": {"Verdict.over", "RunResult.missed_faults", "RunResult.deviated"},
    "scenarios/runner/_run.py": {
        "declared_verdicts", "undeclared_verdicts", "steady_verdicts", "recovery_verdicts", "_after_heal",
        "complete_records", "at_end_schedule", "at_end_schedule.held", "knob_records", "knob_records.fired",
        "_knob_record", "_with_failures", "_Recorder.close_faults", "_Recorder.fault"},
    "scenarios/workloads/_kit.py": {"kept"},
    "scenarios/workloads/surface/_nodes.py": {"gone_verdict"},
    "scenarios/workloads/surface/_objects.py": {"classify_get_error", "expected_outcome", "objects_verdict"},
    "scenarios/workloads/surface/_rpc.py": {"call_error_kind"},
    "scenarios/workloads/_builtin.py": {
        "loop_bound", "blocked_verdict", "new_oom_kills", "task_evidence", "counters_verdict",
        "owner_death_verdict"},
}
#: The network lab and its faults: the faults' confirmations and read-backs, the heals, the
#: flapping link's halves, the lab's own objects and its leftovers.
NETWORK: dict[str, set[str] | None] = {
    "chaos/net/_faults.py": {
        "peer_addresses", "drop_table", "parse_table", "_drop_rule", "rules_problem", "dropped", "confirm_rules",
        "confirm_cut", "_dropped_probe", "_ways", "confirm_open", "loss_probes", "confirm_loss", "burst_bytes",
        "confirm_capped", "confirm_capped.held", "_bucket_at", "heal_each", "_tables", "_tables.heal_one",
        "Flaps.flaps", "_flapped", "_flap", "table_present", "read_table", "delete_table", "_table_of", "_tc",
        "_qdisc", "parse_qdisc", "bucket_mbit", "read_link", "parse_link", "_retransmitted"},
    "chaos/net/_lab.py": {"_plan", "_create", "network_leftovers", "_listing", "_json", "require_network",
                      "network_missing"},
}
#: The fault filesystem and its model: what a power loss keeps and drops, the faults' switches
#: and deadlines, and the disk faults' probes and confirmations.
DISK: dict[str, set[str] | None] = {
    "chaos/disks/_fuse_model.py": None,
    "chaos/disks/_fuse_faults.py": None,
    "chaos/disks/_faults.py": {"_probe_path", "_fresh_probe", "_timed_op", "_timed_name_op", "_timed_file_op",
                              "_slow", "_fastest_probe", "_until", "_seen", "_stall", "_failing",
                              "_failed_probe", "_power_loss", "_check_not_expired", "switch_off"},
    "chaos/disks/_fusefs.py": {"PowerLossResult.cut_under", "FaultFS.heal"},
}
#: The Serve and job verdicts: what excuses an error, a body checked, a kill answered.
SERVE_JOB: dict[str, set[str] | None] = {
    "scenarios/workloads/serve/_verdicts.py": None,
    "scenarios/workloads/user/_job.py": {
        "job_succeeded", "within_ratio", "fault_seen", "_Answers.restored", "_Answers.regrouped", "_kill_answered",
        "_answered", "attempts_of", "_method", "job_seconds", "_job_timeout", "job_problems", "_with_kill_targets",
        "ActorSighting.there"},
}
#: The hunt's oracle and what makes a fault land: the table of outcomes, the judge, a pressure
#: on its victim, RPC failures of a step's own calls, which process owns what.
HUNT: dict[str, set[str] | None] = {
    "scenarios/hunt/_oracle.py": None,
    "scenarios/hunt/_pressure.py": {"Pressure.landed"},
    "scenarios/hunt/_rpc.py": {"Injected.made_for_a_step", "Window.holds", "Injections.new", "Injections._gained",
                               "_parsed"},
    "scenarios/hunt/_run.py": {"Interpreter._own", "Interpreter._judge_rpc_failures", "Interpreter._rpc_steps",
                               "Interpreter._pids", "Interpreter._window", "Interpreter.processes", "classify",
                               "_retries_spent", "root_name", "observed_error"},
}
#: ``make test``'s tests of each group that need no Ray cluster; the fastest to fail first.
TESTS = {
    "crash": ["tests/test_exactly_once.py", "tests/test_reconstructed.py", "tests/test_refused_mutation.py",
              "tests/test_durability_trace.py", "tests/test_checkpoint_store.py", "tests/test_incremental.py",
              "tests/test_failpoints.py", "tests/test_chaos_unit.py", "tests/test_param_server.py",
              "tests/test_failpoint_sweep.py"],
    "verdicts": ["tests/test_verdict_logic.py", "tests/test_rpc_confirm.py", "tests/test_runner_fail_closed.py",
                 "tests/test_driver.py",
                 "tests/test_workload_evidence.py", "tests/test_failure_surface_unit.py", "tests/test_confirmation.py",
                 "tests/test_scenarios_model.py", "tests/test_chaos_unit.py"],
    "network": ["tests/test_net_unit.py", "tests/test_net_confirm.py", "tests/test_net_lab.py",
                "tests/test_reclaim.py"],
    "disk": ["tests/test_fuse_model.py", "tests/test_fuse_fs.py", "tests/test_fuse_disk_faults.py",
             "tests/test_disk_kinds.py", "tests/test_power_loss.py", "tests/test_fuse_power_loss_property.py"],
    "hunt": ["tests/test_hunt.py"],
    "serve_job": ["tests/test_serve_verdicts.py", "tests/test_serve_load.py", "tests/test_job_unit.py",
                  "tests/test_report_agreement.py"],
}
#: The tests that exercise a file most directly, run first for its mutants: a caught mutant
#: then fails within seconds instead of after the group's other files (the rest follow).
FIRST: dict[str, list[str]] = {
    "chaos/disks/_faults.py": ["tests/test_fuse_disk_faults.py", "tests/test_disk_kinds.py",
                               "tests/test_power_loss.py"],
}

GROUPS = {"crash": CRASH, "verdicts": VERDICTS, "network": NETWORK, "disk": DISK, "serve_job": SERVE_JOB, "hunt": HUNT}
TIMEOUT = 180.0  # per mutant; each group's selection takes ~15 s here unmutated
TEST_TIMEOUT = 120  # per test (pytest-timeout)
KILL_ROUNDS, KILL_WAIT = 5, 10.0  # ending a timed-out mutant's processes
_FLIPS = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
          ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}


@dataclass(frozen=True, slots=True)
class Mutant:
    """One planted bug: where, what, and the mutated module's source."""

    file: str
    line: int
    function: str
    what: str
    source: str


class Outcome(StrEnum):
    """What a mutant did to its tests. Only ``CAUGHT`` (a test failed) counts for the score."""

    CAUGHT = "caught"
    TIMED_OUT = "timed out"  #: the tests ran past their bound: a hang, not a failing check
    BROKEN = "broken"  #: collection or import failed: no test judged the mutant
    SURVIVED = "SURVIVED"


@dataclass(frozen=True, slots=True)
class Result:
    mutant: Mutant
    outcome: Outcome
    seconds: float
    by: str  # the first failing test, or what the run said

    @property
    def caught(self) -> bool:
        return self.outcome is Outcome.CAUGHT


# -- generating mutants ----------------------------------------------------------------------

def _is_failpoint(node: ast.AST) -> bool:
    call = node.value if isinstance(node, ast.Expr) else node
    return isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "failpoint"


def _is_call_stmt(node: ast.AST) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and not _is_failpoint(node)


def _sites(node: ast.AST) -> Iterator[tuple[ast.AST, str]]:
    """(node, description) for each mutation applicable at ``node`` itself."""
    if isinstance(node, ast.Compare) and type(node.ops[0]) in _FLIPS:
        yield node, f"{type(node.ops[0]).__name__} -> {_FLIPS[type(node.ops[0])].__name__}"
    elif isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        yield node, "+ -> -" if isinstance(node.op, ast.Add) else "- -> +"
    elif isinstance(node, ast.BoolOp):
        yield node, "and -> or" if isinstance(node.op, ast.And) else "or -> and"
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield node, "drop not"
    elif isinstance(node, (ast.If, ast.While)):
        yield node, f"negate {type(node).__name__.lower()} condition"
    elif isinstance(node, ast.Constant) and type(node.value) is bool:
        yield node, f"{node.value} -> {not node.value}"
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        yield node, f"{node.value} -> {node.value + 1}"
    if isinstance(node, ast.stmt) and _is_call_stmt(node):
        yield node, f"delete call {ast.unparse(node)[:50]}"


def _apply(node: ast.AST, what: str) -> ast.AST | None:
    """The replacement for ``node`` under mutation ``what`` (None: delete / swap handled apart)."""
    if what.startswith("delete call"):
        return ast.Pass()
    if isinstance(node, ast.Compare):
        return ast.Compare(node.left, [_FLIPS[type(node.ops[0])](), *node.ops[1:]], node.comparators)
    if isinstance(node, ast.BinOp):
        return ast.BinOp(node.left, ast.Sub() if isinstance(node.op, ast.Add) else ast.Add(), node.right)
    if isinstance(node, ast.BoolOp):
        return ast.BoolOp(ast.Or() if isinstance(node.op, ast.And) else ast.And(), node.values)
    if isinstance(node, ast.UnaryOp):
        return node.operand
    if isinstance(node, (ast.If, ast.While)):
        mutated = copy.copy(node)
        mutated.test = ast.UnaryOp(ast.Not(), node.test)
        return mutated
    if type(node.value) is bool:  # type: ignore[attr-defined]
        return ast.Constant(not node.value)  # type: ignore[attr-defined]
    return ast.Constant(node.value + 1)  # type: ignore[attr-defined]


class _Functions(ast.NodeVisitor):
    """Qualified name → function node, for the functions of a module (methods as Class.f,
    nested functions as outer.f)."""

    def __init__(self) -> None:
        self.found: dict[str, ast.AST] = {}
        self._prefix: list[str] = []

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._prefix.append(node.name)
        self.generic_visit(node)
        self._prefix.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        name = ".".join([*self._prefix[-1:], node.name])
        self.found[name] = node
        self._prefix.append(node.name)
        self.generic_visit(node)
        self._prefix.pop()


def _body_nodes(function: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function's body, skipping its docstring, decorators, annotations,
    f-strings (messages for people) and ``stacklevel=`` (which line a warning names)."""
    body = function.body  # type: ignore[attr-defined]
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    stack = list(reversed(body))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.JoinedStr, ast.FunctionDef)) or _is_failpoint(node) or (
                isinstance(node, ast.keyword) and node.arg == "stacklevel"):
            continue  # messages, nested functions (mutated on their own), instruments, warning attribution
        yield node
        children = [c for c in ast.iter_child_nodes(node) if not isinstance(c, ast.arg | ast.arguments)]
        stack.extend(reversed(children))


def _swaps(function: ast.AST) -> Iterator[tuple[list[ast.stmt], int]]:
    for node in ast.walk(function):
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if isinstance(stmts, list):
                for i in range(len(stmts) - 1):
                    if _is_call_stmt(stmts[i]) and _is_call_stmt(stmts[i + 1]):
                        yield stmts, i


def mutants_of(file: str, only: set[str] | None) -> Iterator[Mutant]:
    source = (ROOT / file).read_text()
    functions = _Functions()
    functions.visit(ast.parse(source))
    missing = (only or set()) - set(functions.found)
    if missing:
        raise SystemExit(f"{file} has no function {sorted(missing)}: update CRASH or VERDICTS")
    for name in sorted(n for n in functions.found if only is None or n in only):
        yield from _function_mutants(file, source, name)


def _function_mutants(file: str, source: str, name: str) -> Iterator[Mutant]:
    count = sum(1 for _ in _enumerate_sites(source, name))
    for k in range(count):
        tree = ast.parse(source)
        node, what, parent_swap = next(s for i, s in enumerate(_enumerate_sites(source, name, tree)) if i == k)
        if parent_swap is not None:
            stmts, i = parent_swap
            stmts[i], stmts[i + 1] = stmts[i + 1], stmts[i]
        else:
            _replace(tree, node, _apply(node, what))
        yield Mutant(file, node.lineno, name, what, ast.unparse(ast.fix_missing_locations(tree)))


def _enumerate_sites(source: str, name: str,
                     tree: ast.AST | None = None) -> Iterator[tuple[ast.AST, str, tuple | None]]:
    tree = tree or ast.parse(source)
    functions = _Functions()
    functions.visit(tree)
    function = functions.found[name]
    for node in _body_nodes(function):
        for site, what in _sites(node):
            yield site, what, None
    for stmts, i in _swaps(function):
        yield stmts[i], f"swap with next: {ast.unparse(stmts[i])[:40]}", (stmts, i)


def _replace(tree: ast.AST, old: ast.AST, new: ast.AST) -> None:
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, field, ast.copy_location(new, old))
                return
            if isinstance(value, list) and any(v is old for v in value):
                value[next(i for i, v in enumerate(value) if v is old)] = ast.copy_location(new, old)
                return
    raise LookupError("mutation site not found")


# -- running them ----------------------------------------------------------------------------

def _copy_tree(dest: Path) -> None:
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    for rel in files.stdout.split():
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / rel).is_file():
            shutil.copy2(ROOT / rel, target)


def _run_tests(workdir: Path, tests: list[str]) -> tuple[Outcome, str, float]:
    """Run ``tests`` in ``workdir``: (outcome, the first failure or what pytest said, seconds)."""
    env = {**os.environ, "PYTHONPATH": str(workdir), "PYTHONDONTWRITEBYTECODE": "1"}
    start = time.monotonic()
    # Not `with Popen`: its exit waits for the process without a bound, and a pytest held in a
    # FUSE request by a stalled server would hold this worker with it.
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", f"--timeout={TEST_TIMEOUT}",
         "-m", "not ray and not slow", f"--basetemp={workdir / '.tmp'}", *tests],
        cwd=workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        output, _ = proc.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        if not _ended_started_in(workdir, proc):
            raise SystemExit(f"pytest pid {proc.pid} in {workdir} outlived {KILL_ROUNDS} rounds of SIGKILL: "
                             "run `raychaos cleanup`, then the group again") from None
        return Outcome.TIMED_OUT, f"ran past {TIMEOUT:.0f} s", time.monotonic() - start
    finally:
        assert proc.stdout is not None
        proc.stdout.close()
    return (*classify(proc.returncode, output), time.monotonic() - start)


def _ended_started_in(workdir: Path, proc: subprocess.Popen[str]) -> bool:
    """Kill what the tests in ``workdir`` started until their pytest has exited, at most
    ``KILL_ROUNDS`` times; whether it exited."""
    for _ in range(KILL_ROUNDS):
        _kill_started_in(workdir)
        try:
            proc.wait(timeout=KILL_WAIT)
        except subprocess.TimeoutExpired:
            continue
        return True
    return False


def _remove_what_they_left() -> None:
    """What the killed tests of timed-out mutants left (a fault filesystem's mount), removed
    once every worker is done, as ``raychaos cleanup`` removes it: only what ended drivers owned."""
    from chaos.cluster import cleanup_machine

    cleanup_machine(dry_run=False, echo=lambda *args, **_: console.print(*args))


def _kill_started_in(workdir: Path) -> None:
    """SIGKILL every process the tests in ``workdir`` started: those whose working directory is
    in it, and those that inherited its ``PYTHONPATH`` in sessions of their own (a fault
    filesystem's server runs in ``/``; one a mutant left stalled holds the tests in an
    uninterruptible FUSE request, which only its own end releases)."""
    import psutil

    for process in psutil.process_iter(["cwd", "environ"]):
        cwd, env = process.info["cwd"], process.info["environ"] or {}
        if (cwd and Path(cwd).is_relative_to(workdir)) or env.get("PYTHONPATH") == str(workdir):
            with contextlib.suppress(psutil.Error):
                process.kill()


def classify(returncode: int, output: str) -> tuple[Outcome, str]:
    """A pytest run's outcome for a mutant, from its exit code and output. Exit 1 with a failed
    test is caught, unless the failure is pytest-timeout's; exit 2 with a collection error, or
    3 (internal error), 4 (usage) and 5 (no tests) judged nothing."""
    first = next((line.split()[1] for line in output.splitlines()
                  if line.startswith(("FAILED", "ERROR")) and len(line.split()) > 1), f"exit code {returncode}")
    if returncode == 0:
        return Outcome.SURVIVED, ""
    if "from pytest-timeout" in output or "+ Timeout +" in output:  # its two forms (signal, thread)
        return Outcome.TIMED_OUT, f"{first}: ran past its {TEST_TIMEOUT} s bound"
    if returncode == 1:
        return Outcome.CAUGHT, first
    return Outcome.BROKEN, f"{first} (pytest exit {returncode}: {_last_line(output)})"


def _last_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    return lines[-1][:120] if lines else "no output"


def _worker(workdir: Path, mutants: list[Mutant], tests: dict[str, list[str]], done: list[Result],
            total: int) -> None:
    for mutant in mutants:
        path = workdir / mutant.file
        original = path.read_text()
        path.write_text(mutant.source)
        try:
            outcome, by, seconds = _run_tests(workdir, tests[mutant.file])
        finally:
            path.write_text(original)
        done.append(Result(mutant, outcome, seconds, by))
        colour = {Outcome.CAUGHT: "green", Outcome.SURVIVED: "red"}.get(outcome, "yellow")
        console.print(f"{len(done):4d}/{total} [{colour}]{outcome.value}[/] {mutant.file}:{mutant.line} "
                      f"{mutant.function}: {mutant.what} ({seconds:.1f} s)", markup=True, highlight=False)


def _baseline(workdir: Path, tests: list[str]) -> None:
    outcome, by, seconds = _run_tests(workdir, tests)
    if outcome is not Outcome.SURVIVED:
        raise SystemExit(f"the unmutated selection does not pass ({outcome.value}: {by}): fix it before "
                         "measuring mutants")
    imported = subprocess.run([sys.executable, "-c", "import actors, chaos; print(actors.__file__, chaos.__file__)"],
                              cwd=workdir, env={**os.environ, "PYTHONPATH": str(workdir)},
                              capture_output=True, text=True, check=True).stdout.split()
    if not all(path.startswith(str(workdir)) for path in imported):
        raise SystemExit(f"the copy imports {imported}, not from {workdir}: mutants would not run")
    console.print(f"unmutated selection passes in {seconds:.1f} s; imports from the copy")


def report(results: list[Result], groups: list[str]) -> None:
    by_file: dict[str, list[Result]] = {}
    for r in results:
        by_file.setdefault(r.mutant.file, []).append(r)
    rows = [_row(file, rs) for file, rs in sorted(by_file.items())]
    for group in groups:
        rows.append(_row(f"all {group}", [r for r in results if r.mutant.file in GROUPS[group]]))
    table(f"Mutation score of make test's suite (no-Ray part), groups {', '.join(groups)} — {machine()}",
          ["file", "mutants", "caught", "timed out", "broken", "survived", "score"], rows)
    missed = sorted((r for r in results if not r.caught), key=lambda r: (r.mutant.file, r.mutant.line))
    table("Not caught", ["outcome", "where", "function", "mutation"],
          [[r.outcome.value, f"{r.mutant.file}:{r.mutant.line}", r.mutant.function, r.mutant.what] for r in missed])


def _row(name: str, rs: list[Result]) -> list[str]:
    counts = [sum(r.outcome is o for r in rs) for o in Outcome]
    return [name, str(len(rs)), *map(str, counts), f"{counts[0] / max(1, len(rs)):.1%}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--group", action="append", choices=sorted(GROUPS),
                        help="mutate this group's code (repeatable; default: every group)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--only", action="append", help="mutate only this file (repeatable)")
    parser.add_argument("--limit", type=int, default=0, help="at most this many mutants (a smoke run)")
    args = parser.parse_args()
    groups = args.group or sorted(GROUPS)
    targets = {file: (only, TESTS[g]) for g in groups for file, only in GROUPS[g].items()}
    unknown = set(args.only or ()) - set(targets)
    if unknown:
        parser.error(f"--only {sorted(unknown)}: not a mutated file of {groups}; use one of {sorted(targets)}")
    mutants = [m for file, (only, _) in targets.items() if not args.only or file in args.only
               for m in mutants_of(file, only)]
    mutants = mutants[: args.limit] if args.limit else mutants
    tests = {file: [*FIRST.get(file, []), *(t for t in tests if t not in FIRST.get(file, []))]
             for file, (_, tests) in targets.items()}
    console.print(f"{len(mutants)} mutants in groups {', '.join(groups)}")
    with tempfile.TemporaryDirectory(prefix="raychaos-mutants-") as tmp:
        dirs = [Path(tmp, f"w{i}") for i in range(args.workers)]
        for d in dirs:
            _copy_tree(d)
        for group in groups:
            _baseline(dirs[0], TESTS[group])
        done: list[Result] = []
        with concurrent.futures.ThreadPoolExecutor(args.workers) as pool:
            futures = [pool.submit(_worker, d, mutants[i:: args.workers], tests, done, len(mutants))
                       for i, d in enumerate(dirs)]
            for future in futures:
                future.result()
        if any(r.outcome is Outcome.TIMED_OUT for r in done):
            _remove_what_they_left()
    report(done, groups)


if __name__ == "__main__":
    main()
