"""The house drawn from its imports: chaos → actors → scenarios, one way, and no module cycle.

Every ``import`` and ``from … import`` in chaos/, actors/ and scenarios/ counts, those inside
functions too (a lazy import is still a dependency).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("chaos", "actors", "scenarios")
#: Which packages each one may import: data flows driver → scenario → agent, never back.
ALLOWED = {"chaos": {"chaos"}, "actors": {"chaos", "actors"}, "scenarios": set(PACKAGES)}
#: What of chaos the actors may use: its errors, failpoints, extras, JSON type and waiting
#: helpers, which import nothing of the engine. A checkpointed actor must not drag in the
#: fault engine, its agents or the cluster harness.
SHARED_GROUND = {"chaos._errors", "chaos._failpoint", "chaos._extras", "chaos._json", "chaos._wait",
                 "chaos._byvalue", "chaos._ray_compat"}


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(path: Path, known: dict[str, Path]) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
            yield from (n for n in names if n in known)  # `from actors import _codec`: the submodule
            if node.module in known and not all(n in known for n in names):
                yield node.module  # a name the module (or package __init__) defines
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names if alias.name in known)


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: set(imports(path, known)) - {name} for name, path in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                found.append(sorted([v, *component]))

    for v in edges:
        if v not in index:
            visit(v)
    return found


def test_cycles_finds_a_cycle_when_there_is_one() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_house_has_no_import_cycle() -> None:
    edges = graph()
    assert len(edges) > 40  # the walk found the house
    assert cycles(edges) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_each_package_imports_only_the_ones_beneath_it(package: str) -> None:
    wrong = sorted(f"{m} imports {t}" for m, targets in graph().items() if m.split(".")[0] == package
                   for t in targets if t.split(".")[0] not in ALLOWED[package])
    assert wrong == []


def test_the_actors_use_only_the_shared_ground_of_chaos() -> None:
    edges = graph()
    wrong = sorted(f"{m} imports {t}" for m, targets in edges.items() if m.startswith("actors")
                   for t in targets if t.startswith("chaos") and t not in SHARED_GROUND)
    assert wrong == []
    beneath = sorted(f"{m} imports {t}" for m in SHARED_GROUND for t in edges[m] if t not in SHARED_GROUND)
    assert beneath == []


def test_the_scenarios_use_only_what_chaos_exports() -> None:
    """Workloads, the runner and the CLI build on chaos's public faces (``chaos``, ``chaos.engine``,
    ``chaos.net``, ...), never on its private modules: the engine's insides can move without them."""
    wrong = sorted(f"{m} imports {t}" for m, targets in graph().items() if m.startswith("scenarios")
                   for t in targets if t.startswith("chaos.") and t.split(".")[1].startswith("_"))
    assert wrong == []


def test_the_scenarios_show_their_parts() -> None:
    """The model, the runner, the workloads, the lessons, the reports and the hunt each have a folder,
    and nothing of them lies loose beside the public modules."""
    loose = {p.name for p in (ROOT / "scenarios").glob("*.py")}
    assert loose == {"__init__.py", "cli.py"}
    parts = {p.parent.name for p in (ROOT / "scenarios").glob("*/__init__.py")}
    assert parts == {"model", "runner", "workloads", "lessons", "reports", "hunt"}
    page = (ROOT / "docs" / "how-to" / "contributing.md").read_text(encoding="utf-8")
    assert all(f"scenarios/{part}/" in page for part in parts), "the contributing page's tree is stale"


def test_chaos_shows_its_parts() -> None:
    """The agents, the cluster harness, the disks, the GCS and the network each have a package
    behind their public face; what every teardown shares lies beneath them (``_reclaim``)."""
    parts = {p.parent.name for p in (ROOT / "chaos").glob("*/__init__.py")}
    assert parts == {"agents", "cluster", "disks", "gcs", "net", "_reclaim"}
    page = (ROOT / "docs" / "explanation" / "architecture.md").read_text(encoding="utf-8")
    assert all(f"chaos/{part}/" in page for part in parts), "the architecture page's parts are stale"


def test_the_workloads_show_their_areas_and_one_registry_lists_them() -> None:
    from scenarios.workloads._registry import builtin_workloads

    areas = {p.parent.name for p in (ROOT / "scenarios" / "workloads").glob("*/__init__.py")}
    assert areas == {"surface", "disk", "net", "gcs", "serve", "apps", "user"}
    tables = [n for n in graph()["scenarios.workloads._registry"] if n.startswith("scenarios.workloads.")]
    assert {t.split(".")[2] for t in tables} == areas | {"_builtin"}  # one table, read area by area
    assert len(builtin_workloads()) > 30


#: Imports each module of chaos as the first of the house a process imports (the packages'
#: ``__init__`` import their parts eagerly, so an order the graph allows may still fail).
IMPORT_EACH_FIRST = """\
import importlib, sys
failed = []
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m.split(".")[0] in ("chaos", "actors", "scenarios")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed.append(f"{name}: {type(exc).__name__}: {exc}")
print("\\n".join(failed))
"""


@pytest.mark.slow
def test_every_module_of_chaos_imports_first() -> None:
    import subprocess
    import sys

    names = sorted(m for m in modules() if m.split(".")[0] == "chaos")
    out = subprocess.run([sys.executable, "-c", IMPORT_EACH_FIRST, *names], capture_output=True, text=True,
                         cwd=ROOT, timeout=300, check=True)
    assert len(names) > 60 and out.stdout.strip() == "", out.stdout


# -- facts travel as types: nothing untyped crosses from one package to another -----------------

UNTYPED = re.compile(r"\b(dict|Mapping)\[str, Any\]")


def exported_annotations() -> Iterator[tuple[str, str, str]]:
    """(where, parameter or "return", annotation) of every exported function, class
    constructor, public method and record field of the three packages and their public
    submodules."""
    import importlib
    import inspect

    from test_exports import SUBMODULES

    for package in map(importlib.import_module, ("chaos", "actors", "scenarios", *SUBMODULES)):
        for name in package.__all__:
            obj = getattr(package, name)
            members = [(name, obj)]
            if inspect.isclass(obj):
                members += [(f"{name}.{m}", f) for m, f in vars(obj).items() if not m.startswith("_") and callable(f)]
                members.append((f"{name}.__init__", obj.__init__))
            for where, member in members:
                for param, annotation in (getattr(member, "__annotations__", None) or {}).items():
                    yield f"{package.__name__}.{where}", param, str(annotation)


def test_the_scan_sees_an_untyped_annotation() -> None:
    def leaky(x: dict[str, Any]) -> None: ...  # noqa: F821 - the annotation stays a string

    found = [a for a in leaky.__annotations__.values() if UNTYPED.search(str(a))]
    assert found == ["dict[str, Any]"]


def test_no_exported_signature_or_record_carries_an_untyped_dict() -> None:
    # State trees (the user's own state_dict) are the `StateTree` alias; configuration passed
    # on to Ray or validated inside is `Mapping[str, object]`; serialised forms are JsonValue.
    leaks = [f"{where}: {param}: {annotation}" for where, param, annotation in exported_annotations()
             if UNTYPED.search(annotation)]
    assert len(list(exported_annotations())) > 200  # the scan saw the API
    assert leaks == []


# -- records built with keywords -------------------------------------------------------------

#: Positional arguments a record may be built with: past three, a reader counts fields.
MOST_POSITIONAL = 3


def _is_dataclass(node: ast.ClassDef) -> bool:
    return any(getattr(d.func if isinstance(d, ast.Call) else d, "id", None) == "dataclass"
               or getattr(d.func if isinstance(d, ast.Call) else d, "attr", None) == "dataclass"
               for d in node.decorator_list)


def record_names(trees: list[ast.Module]) -> set[str]:
    """The records' class names: a dataclass's, unless a plain class shares it."""
    classes = [n for tree in trees for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    return {c.name for c in classes if _is_dataclass(c)} - {c.name for c in classes if not _is_dataclass(c)}


def positional_records(tree: ast.Module, records: set[str]) -> list[str]:
    """Calls that build a record with more than ``MOST_POSITIONAL`` positional arguments."""
    return [f"{getattr(n.func, 'id', getattr(n.func, 'attr', '?'))}:{n.lineno}" for n in ast.walk(tree)
            if isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) in records
            and len(n.args) > MOST_POSITIONAL and not any(isinstance(a, ast.Starred) for a in n.args)]


def test_the_record_scan_sees_a_record_built_by_position() -> None:
    tree = ast.parse("@dataclass(frozen=True)\nclass R:\n    a: int\n\nR(1, 2, 3, 4)\nR(1, 2, 3)\nR(a=1)\n")
    assert positional_records(tree, record_names([tree])) == ["R:5"]


def test_records_are_built_with_keywords() -> None:
    trees = {path: ast.parse(path.read_text(encoding="utf-8")) for path in modules().values()}
    records = record_names(list(trees.values()))
    assert len(records) > 150  # the scan saw the records
    found = [f"{path.relative_to(ROOT)}: {call}" for path, tree in trees.items()
             for call in positional_records(tree, records)]
    assert found == []


# -- one schedule loop ------------------------------------------------------------------------


def calls(path: Path, name: str) -> int:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return sum(isinstance(n, ast.Call) and getattr(n.func, "id", getattr(n.func, "attr", None)) == name
               for n in ast.walk(tree))


def waits_on_a_schedule(source: str) -> list[int]:
    """Lines where a ``.wait(...)`` call's timeout is computed from a scheduled fault's ``at``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        is_wait = isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "wait"
        if is_wait and any(isinstance(a, ast.Attribute) and a.attr == "at"
                           for arg in node.args for a in ast.walk(arg)):
            found.append(node.lineno)
    return found


def test_the_runner_and_the_plugin_drive_faults_through_run_schedule_alone() -> None:
    known = modules()
    assert calls(known["scenarios.runner._run"], "run_schedule") == 1
    assert calls(known["chaos._marker"], "run_schedule") == 1
    loops = {name: lines for name, path in known.items()
             if (lines := waits_on_a_schedule(path.read_text(encoding="utf-8")))}
    assert set(loops) == {"chaos._driver"}, loops  # the one loop that waits for each fault's time


def test_the_loop_finder_sees_a_second_loop() -> None:
    # The runner's old `_drive`, in miniature: its own wait for each fault's time.
    source = "def drive(stop, schedule):\n    for e in schedule.entries:\n        stop.wait(e.at - 1.0)\n"
    assert waits_on_a_schedule(source) == [3]
    assert waits_on_a_schedule("stop.wait(0.2)\n") == []
