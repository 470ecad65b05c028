"""Every problem the scenario loader reports names the field (its path), the value and the fix:
never a Python exception's own text, never a traceback. Ray-free.

A Hypothesis property mutates each built-in scenario file (a key dropped, a key misspelt, a
value of another type or out of range, an unknown key, at any depth) and writes random TOML
documents; loading either succeeds or raises :class:`ScenarioError` whose every problem is a
field, a value and a fix, and ``raychaos validate`` exits 0 or 2 with one line per problem.
"""

from __future__ import annotations

import json
import math
import tempfile
import tomllib
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaos._kinds import fault_specs
from chaos._targets import _KINDS as TARGET_CLASSES
from scenarios import ScenarioError, builtin_names, load_attack, load_scenario
from scenarios.cli import main
from scenarios.model._experiment import Overrides
from scenarios.model._records import Problem
from scenarios.model._scenario import FIELDS, STEADY_STATE_FIELDS

FAULT_CLASSES = {kind.value: spec.record for kind, spec in fault_specs().items()}

#: Text only a Python exception (or its traceback) would put in front of a user.
RAW = ("Traceback", "__init__()", "unexpected keyword argument", "KeyError", "TypeError", "ValueError",
       "AttributeError", "could not convert", "not supported between instances", "object has no attribute",
       "required positional argument", "is not iterable", "unhashable type", "dictionary update sequence",
       "argument after ** must be", "object is not subscriptable", "Empty module name")
HEAD = 'name = "x"\nworkload = "sampling"\nduration = 10\ninvariants = ["results_correct"]\n'

TRUE_PROBE = Overrides(probes=({"kind": "command", "command": "true"},))  # a probe that always passes



def _write(tmp_path: Path, text: str, name: str = "s.toml") -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


def _problems(path: str, load: Callable[[str], object] = load_scenario) -> list[Problem]:
    with pytest.raises(ScenarioError) as caught:
        load(path)
    for problem in caught.value.problems:
        _assert_well_formed(problem)
    return caught.value.problems


def _assert_well_formed(problem: Problem) -> None:
    """A field (a path), a value and a fix; one line; no exception's own words."""
    assert isinstance(problem.field, str) and problem.field.strip(), problem
    assert isinstance(problem.fix, str) and problem.fix.strip(), problem
    line = str(problem)
    assert "\n" not in line and line.startswith(f"{problem.field} = "), line
    assert not [m for m in RAW if m in problem.fix], line


# -- the two cases of the issue ----------------------------------------------------------------

def test_a_misspelt_target_key_is_named_with_did_you_mean(tmp_path: Path) -> None:
    path = _write(tmp_path, HEAD + '[[faults]]\nat = 1\nkind = "kill"\ntarget = { kind = "actor", nam = "replay" }\n')
    (problem,) = _problems(path)
    assert (problem.field, problem.value) == ("faults[0].target.nam", "replay")
    assert "did you mean 'name'?" in problem.fix
    assert "actor_id, name, namespace, class_name, pick" in problem.fix
    result = CliRunner().invoke(main, ["validate", path], catch_exceptions=False)
    assert result.exit_code == 2
    assert result.stderr == f"{path}: faults[0].target.nam = 'replay': {problem.fix}\n"


def test_signal_on_kill_node_is_named_with_the_keys_it_takes(tmp_path: Path) -> None:
    path = _write(tmp_path, HEAD + '[[faults]]\nat = 1\nkind = "kill_node"\nsignal = "SIGTERM"\n')
    (problem,) = _problems(path)
    assert (problem.field, problem.value) == ("faults[0].signal", "SIGTERM")
    assert "kill_node" in problem.fix and "takes at, kind, target (signal is a key of kill)" in problem.fix
    result = CliRunner().invoke(main, ["validate", path], catch_exceptions=False)
    assert result.exit_code == 2 and "__init__()" not in result.output
    assert result.stderr.splitlines() == [f"{path}: {problem}"]


# -- each path from TOML to a record, as a class ---------------------------------------------------

@pytest.mark.parametrize(("body", "field", "value", "said"), [
    # a fault's own keys: unknown, missing, of another type, a kind misspelt
    ('[[faults]]\nat = 1\nkind = "pause"\nsecnds = 2\ntarget = { kind = "worker" }\n',
     "faults[0].secnds", 2, "did you mean 'seconds'?"),
    ('[[faults]]\nat = 1\nkind = "pause"\ntarget = { kind = "worker" }\n', "faults[0].seconds", None, "required"),
    ('[[faults]]\nat = 1\nkind = "pause"\nseconds = "2"\ntarget = { kind = "worker" }\n',
     "faults[0].seconds", "2", "must be a number"),
    ('[[faults]]\nat = 1\nkind = "kil"\ntarget = { kind = "worker" }\n', "faults[0].kind", "kil",
     "did you mean 'kill'?"),
    ('[[faults]]\nat = 1\nkind = ["kill"]\n', "faults[0].kind", ["kill"], "use one of"),
    ('[[faults]]\nat = 1\ntarget = { kind = "worker" }\n', "faults[0].kind", None, "required"),
    ('[[faults]]\nat = 1\nkind = "starve"\nseconds = 2\nresources = [1]\n', "faults[0].resources", [1],
     "must be a table"),
    ('[[faults]]\nat = 1\nkind = "starve"\nseconds = 2\ncpus = "x"\n', "faults[0].cpus", "x", "must be a number"),
    ('[[faults]]\nat = 1\nkind = "cpu"\nseconds = 2\ncores = 1.5\n', "faults[0].cores", 1.5, "whole number"),
    ('[[faults]]\nat = 1\nkind = "pause"\nseconds = nan\ntarget = { kind = "worker" }\n',
     "faults[0].seconds", math.nan, "must be a"),
    ('[[faults]]\nat = 1\nkind = "pause"\nseconds = -1\ntarget = { kind = "worker" }\n',
     "faults[0].seconds", -1, "must be a duration in (0, 3600] seconds"),
    ('[[faults]]\nat = 1\nkind = "kill"\nsignal = "SIGKIL"\ntarget = { kind = "worker" }\n',
     "faults[0].signal", "SIGKIL", "did you mean 'SIGKILL'?"),
    ('[[faults]]\nat = 1\nkind = "slow_disk"\nmount = "/m"\nseconds = 1\nops = "fsync"\n', "faults[0].ops",
     "fsync", "must be an array of strings"),
    # targets: not a table, a kind misspelt, a kind the field does not take, an unknown key
    ('[[faults]]\nat = 1\nkind = "kill"\ntarget = "replay"\n', "faults[0].target", "replay", "must be a table"),
    ('[[faults]]\nat = 1\nkind = "kill"\ntarget = { kind = "actr", name = "r" }\n', "faults[0].target.kind",
     "actr", "did you mean 'actor'?"),
    ('[[faults]]\nat = 1\nkind = "kill_node"\ntarget = { kind = "actor", name = "r" }\n',
     "faults[0].target.kind", "actor", 'use kind = "node"'),
    ('[[faults]]\nat = 1\nkind = "freeze_node"\nseconds = 2\ntarget = { kind = "worker" }\n',
     "faults[0].target.kind", "worker", 'use kind = "node"'),
    ('[[faults]]\nat = 1\nkind = "drain_node"\ndeadline_s = 2\ntarget = { kind = "task", name = "t" }\n',
     "faults[0].target.kind", "task", 'use kind = "node"'),
    ('[[faults]]\nat = 1\nkind = "kill"\ntarget = { kind = "actor" }\n', "faults[0].target", {"kind": "actor"},
     "exactly one of actor_id, name, class_name"),
    ('[[faults]]\nat = 1\nkind = "kill"\ntarget = { kind = "actor", name = "r", pick = "any" }\n',
     "faults[0].target.pick", "any", "unknown pick"),
    ('[[faults]]\nat = 1\nkind = "memory"\nfraction = 0.1\nseconds = 1\nnode = { kind = "node", alow_head = true }\n',
     "faults[0].node.alow_head", True, "did you mean 'allow_head'?"),
    ('[[faults]]\nat = 1\nkind = "freeze_node"\nseconds = 2\ntarget = { kind = "node", allow_head = true }\n',
     "faults[0].target.allow_head", True, "use KillGcs for the head"),
    # [random] and its menu
    ('[random]\nrat = 0.5\nmenu = [{ kind = "kill", target = { kind = "worker" } }]\n', "random.rat", 0.5,
     "did you mean 'rate'?"),
    ('[random]\nrate = "often"\nmenu = [{ kind = "kill", target = { kind = "worker" } }]\n', "random.rate",
     "often", "faults per second"),
    ('[random]\nrate = 0.5\nmenu = ["kill"]\n', "random.menu[0]", "kill", "must be a table"),
    ('[random]\nrate = 0.5\nmenu = [3]\n', "random.menu[0]", 3, "must be a table"),
    ('[random]\nrate = 0.5\nmenu = []\n', "random.menu", [], "at least one fault"),
    ('[random]\nrate = 0.5\nmenu = [{ kind = "kill", target = { kind = "worker", nam = 1 } }]\n',
     "random.menu[0].target.nam", 1, "not a key of a worker target; it takes kind"),
    ('[random]\nrate = 0.5\nmenu = [{ kind = "pause", at = 1, seconds = 1, target = { kind = "worker" } }]\n',
     "random.menu[0].at", 1, "drawn"),
    # [[rpc_failures]], [steady_state], [params], top-level fields
    ('nodes = 2\n[[rpc_failures]]\nmethd = "*"\nrequest_percent = 5\n', "rpc_failures[0].methd", "*",
     "did you mean 'method'?"),
    ('nodes = 2\n[[rpc_failures]]\nmethod = "*"\nrequest_percent = "5"\n', "rpc_failures[0].request_percent",
     "5", "whole number"),
    ('nodes = 2\nrpc_failures = ["*"]\n', "rpc_failures[0]", "*", "must be a table"),
    ('nodes = 2\n[[rpc_failures]]\nmethod = "nope"\nrequest_percent = 5\n', "rpc_failures[0].method", "nope",
     "Service.grpc_client.Method"),
    ('strict_faults = false\n[steady_state]\nbefor = true\n', "steady_state.befor", True,
     "did you mean 'before'?"),
    ('strict_faults = false\n[params]\nwidht = 3\n', "params.widht", 3, "did you mean 'width'?"),
    ('strict_faults = false\ndurration = 5\n', "durration", 5, "did you mean 'duration'?"),
])
def test_each_problem_names_the_field_the_value_and_the_fix(tmp_path: Path, body: str, field: str, value: object,
                                                            said: str) -> None:
    problems = _problems(_write(tmp_path, HEAD + body))
    found = {p.field: p for p in problems}
    assert field in found, problems
    got = found[field].value
    if isinstance(value, float) and math.isnan(value):
        assert isinstance(got, float) and math.isnan(got)
    elif value is None:
        assert repr(got) == "(missing)", found[field]
    else:
        assert got == value, found[field]
    assert said in found[field].fix, found[field]


def test_a_workload_path_that_is_no_module_path_is_named(tmp_path: Path) -> None:
    for workload in (":X", ".rel:X", "a..b:X", "os:", "os:path:x"):
        problems = _problems(_write(tmp_path, f'workload = "{workload}"\nstrict_faults = false\n'))
        assert [(p.field, p.value) for p in problems] == [("workload", workload)], problems
        assert "module:Class" in problems[0].fix


def test_a_file_that_is_not_utf8_is_one_problem(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(HEAD.encode() + b'description = "caf\xe9"\n')
    (problem,) = _problems(str(path))
    assert problem.field == "file" and "UTF-8" in problem.fix


def test_attack_and_job_files_suggest_the_field_they_meant(tmp_path: Path) -> None:
    from scenarios.workloads.user._job import load_job

    path = _write(tmp_path, 'duraton = 8\n[[faults]]\nat = 1\nkind = "kill"\n'
                  'target = { kind = "actor", nam = "w" }\n', name="attack.toml")
    problems = _problems(path, lambda p: load_attack(p, overrides=TRUE_PROBE))
    assert [p.field for p in problems] == ["duraton"] and "did you mean 'duration'?" in problems[0].fix
    problems = _problems(path, lambda p: load_job(p, command="python x.py", working_dir=".", handoff="h"))
    assert [p.field for p in problems] == ["duraton"] and "did you mean 'duration'?" in problems[0].fix
    fixed = path.replace("attack.toml", "fixed.toml")
    Path(fixed).write_text(Path(path).read_text().replace("duraton", "duration"), encoding="utf-8")
    for load in (lambda p: load_attack(p, overrides=TRUE_PROBE),
                 lambda p: load_job(p, command="python x.py", working_dir=".", handoff="h")):
        (problem,) = _problems(fixed, load)
        assert problem.field == "faults[0].target.nam" and "did you mean 'name'?" in problem.fix


# -- the property ------------------------------------------------------------------------------

_BUILTIN = {name: tomllib.loads((resources.files("scenarios") / "builtin" / f"{name}.toml").read_text("utf-8"))
            for name in builtin_names()}
_KEYS = sorted({*FIELDS, *STEADY_STATE_FIELDS, "rate", "menu", "at", "kind", "method", "request_percent",
                *(f for cls in (*FAULT_CLASSES.values(), *TARGET_CLASSES.values())
                  for f in vars(cls)["__dataclass_fields__"])})  # its ClassVars too: no key of a file
_WORDS = st.text("abcdefghijklmnopqrstuvwxyz_0123456789", min_size=1, max_size=10)
_NAMES = st.one_of(st.sampled_from(_KEYS), _WORDS)
_SCALARS = st.one_of(
    st.booleans(), st.integers(-(2**63), 2**63 - 1), st.sampled_from([-1, 0, 1, 3, 99, 10**9, 10**400, -(10**400)]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([-0.5, 0.0, 0.5, 1.5, 4000.0]),
    _WORDS, st.sampled_from(["", "$STORAGE", "$SPILL", "/tmp", "SIGTERM", "node", "actor", "worker", "task",
                             "at_end", *FAULT_CLASSES]),
)
_VALUES = st.recursive(_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(_NAMES, inner, max_size=3)), max_leaves=6)


def _toml(doc: dict[str, Any]) -> str:
    """``doc`` as a TOML document (every table inline: the same data as sections would hold)."""
    return "".join(f"{_key(k)} = {_value(v)}\n" for k, v in doc.items())


def _key(key: str) -> str:
    return _string(key)


def _string(text: str) -> str:
    body = "".join(f"\\u{ord(c):04x}" if ord(c) < 0x20 or ord(c) == 0x7F or c in '"\\' else c for c in text)
    return f'"{body}"'


def _value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    assert isinstance(value, dict), value
    return "{" + ", ".join(f"{_key(k)} = {_value(v)}" for k, v in value.items()) + "}"


Path_ = tuple[str | int, ...]


def _places(node: object, at: Path_ = ()) -> list[Path_]:
    """Every key and array element of ``node``, at any depth."""
    found: list[Path_] = []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in items:
        found.append((*at, key))
        found.extend(_places(child, (*at, key)))
    return found


def _tables(node: object, at: Path_ = ()) -> list[Path_]:
    """Every table of ``node`` (the document itself included)."""
    found: list[Path_] = [at] if isinstance(node, dict) else []
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, child in items:
        found.extend(_tables(child, (*at, key)))
    return found


def _get(doc: Any, at: Path_) -> Any:
    for part in at:
        doc = doc[part]
    return doc


def _typo(word: str, data: st.DataObject) -> str:
    i = data.draw(st.integers(0, max(len(word) - 1, 0)))
    how = data.draw(st.sampled_from(["drop", "double", "swap", "replace"]))
    if how == "drop" and len(word) > 1:
        return word[:i] + word[i + 1:]
    if how == "swap" and i + 1 < len(word):
        return word[:i] + word[i + 1] + word[i] + word[i + 2:]
    if how == "replace":
        return word[:i] + data.draw(st.sampled_from("aeiouxz_")) + word[i + 1:]
    return word[:i] + word[i:i + 1] * 2 + word[i + 1:]


def _mutate(doc: dict[str, Any], data: st.DataObject) -> None:
    """One change to ``doc`` at any depth: a key dropped or misspelt, a value of another type
    or out of range, an unknown key added."""
    how = data.draw(st.sampled_from(["drop", "typo", "replace", "add"]))
    if how == "add":
        table = _get(doc, data.draw(st.sampled_from(_tables(doc))))
        table[data.draw(_NAMES)] = data.draw(_VALUES)
        return
    places = _places(doc)
    if not places:
        return
    at = data.draw(st.sampled_from(places))
    parent, last = _get(doc, at[:-1]), at[-1]
    if how == "drop":
        del parent[last]
    elif how == "typo" and isinstance(last, str):
        typo = _typo(last, data)
        parent[typo] = parent.pop(last)
    else:
        parent[last] = data.draw(_VALUES)


def _judge(text: str) -> None:
    """Load ``text`` as a scenario file and through ``raychaos validate``: either it is valid,
    or every problem is a field, a value and a fix, printed one line each, exit 2."""
    with tempfile.TemporaryDirectory(prefix="rc-loader-") as folder:
        path = str(Path(folder) / "mutant.toml")
        Path(path).write_text(text, encoding="utf-8")
        try:
            load_scenario(path)
            problems: list[Problem] = []
        except ScenarioError as exc:
            problems = exc.problems
            assert problems, "a ScenarioError without a problem"
        for problem in problems:
            _assert_well_formed(problem)
        _as_attack_and_job(path)
        result = CliRunner().invoke(main, ["validate", path], catch_exceptions=False)
    assert result.exit_code == (2 if problems else 0), result.output
    assert result.stderr.splitlines() == [f"{path}: {p}" for p in problems]
    assert not [m for m in RAW if m in result.stdout + result.stderr], result.output


def _as_attack_and_job(path: str) -> None:
    """The same file as an attack's and as a job's schedule: loaded, or every problem well formed."""
    from scenarios.workloads.user._job import load_job

    loads: tuple[Callable[[], object], ...] = (
        lambda: load_attack(path, overrides=TRUE_PROBE),
        lambda: load_job(path, command="python train.py", working_dir="/tmp", handoff="/tmp/h.json"))
    for load in loads:
        try:
            load()
        except ScenarioError as exc:
            assert exc.problems
            for problem in exc.problems:
                _assert_well_formed(problem)


_PROPERTY = settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)


@_PROPERTY
@given(name=st.sampled_from(sorted(_BUILTIN)), changes=st.integers(1, 3), data=st.data())
def test_a_mutated_builtin_loads_or_says_each_problem(name: str, changes: int, data: st.DataObject) -> None:
    doc = json.loads(json.dumps(_BUILTIN[name]))  # a deep copy (the built-ins are plain TOML data)
    for _ in range(changes):
        _mutate(doc, data)
    text = _toml(doc)
    assert _same(tomllib.loads(text), doc)
    _judge(text)


def _same(a: object, b: object) -> bool:
    """Equal, nan being equal to itself (as the document round-trips it)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


_FAULT_TABLES = st.builds(lambda kind, at, fields: {"at": at, "kind": kind, **fields},
                          st.sampled_from(sorted(FAULT_CLASSES)), st.one_of(st.integers(0, 20), _SCALARS),
                          st.dictionaries(_NAMES, _VALUES, max_size=4))
_DOCUMENTS = st.one_of(
    st.dictionaries(_NAMES, _VALUES, max_size=6),
    st.fixed_dictionaries(
        {"workload": st.one_of(st.sampled_from(["sampling", "dqn-cartpole", "serve", "attack", "power-loss", "nope",
                                                ":X", ".rel:X", "a..b:C", "scenarios.model._workload:Workload",
                                                "scenarios.workloads.user._job:Nope"]), _SCALARS)},
        optional={"duration": _SCALARS, "nodes": _SCALARS, "network": _SCALARS, "storage_faultfs": _SCALARS,
                  "faults": st.lists(st.one_of(_FAULT_TABLES, _VALUES), max_size=3),
                  "random": st.one_of(st.fixed_dictionaries({"rate": _SCALARS, "menu": st.lists(
                      st.one_of(_FAULT_TABLES, _VALUES), max_size=2)}), _VALUES),
                  "rpc_failures": st.lists(st.one_of(st.dictionaries(_NAMES, _VALUES, max_size=3), _VALUES),
                                           max_size=2),
                  "steady_state": st.one_of(st.dictionaries(_NAMES, _VALUES, max_size=3), _VALUES),
                  "params": st.one_of(st.dictionaries(_NAMES, _VALUES, max_size=3), _VALUES),
                  "invariants": _VALUES, "heal": _SCALARS, "strict_faults": _SCALARS}),
)


@_PROPERTY
@given(doc=_DOCUMENTS)
def test_a_random_document_loads_or_says_each_problem(doc: dict[str, Any]) -> None:
    _judge(_toml(doc))


@_PROPERTY
@given(text=st.text(st.characters(codec="utf-8"), max_size=60))
def test_random_text_loads_or_says_each_problem(text: str) -> None:
    _judge(text)
