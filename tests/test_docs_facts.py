"""Facts the pages state about the code, held to the code: every extra a page names exists, each
extras table lists exactly what pyproject's extra installs, and the plugin page's fixture scopes
are the scopes pytest reports (with the default ini and with ``raychaos_cluster_scope = module``),
and its ini table lists exactly the plugin's ini options.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
EXTRAS: dict[str, list[str]] = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))[
    "project"]["optional-dependencies"]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
#: ``raychaos[rl,apps]`` anywhere, or "the `apps` extra" in prose.
NAMED = re.compile(r"raychaos\[(?P<list>[\w,]+)\]|`(?P<one>\w+)` extra\b")
#: An extras table's row: the extras (code spans) and what they add, ``;`` between extras.
TABLE_ROW = re.compile(r"^\|\s*(?P<extras>(?:`\w+`(?:,\s*)?)+)\s*\|\s*(?P<adds>[^|]+?)\s*\|")


def named_extras(text: str) -> set[str]:
    found: set[str] = set()
    for m in NAMED.finditer(text):
        found |= set(m["list"].split(",")) if m["list"] else {m["one"]}
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_extra_a_page_names_exists(page: Path) -> None:
    assert named_extras(page.read_text(encoding="utf-8")) <= set(EXTRAS), sorted(EXTRAS)


def installs(extra: str) -> set[str]:
    """What pyproject's extra installs: each distribution, with its own extras, no versions."""
    reqs = [Requirement(r) for r in EXTRAS[extra]]
    return {f"{r.name}[{','.join(sorted(r.extras))}]" if r.extras else r.name for r in reqs}


def table(text: str) -> dict[str, set[str]]:
    """An extras table as the page writes it: each extra and the distributions it says it adds."""
    rows: dict[str, set[str]] = {}
    for line in text.splitlines():
        if not (m := TABLE_ROW.match(line)) or m["adds"].strip() == "adds":
            continue
        extras = re.findall(r"`(\w+)`", m["extras"])
        parts = m["adds"].replace("`", "").split(";") if len(extras) > 1 else [m["adds"].replace("`", "")]
        for extra, part in zip(extras, parts, strict=True):
            rows[extra] = {w.strip() for w in re.split(r",(?![^\[]*\])", part) if w.strip()}
    return rows


@pytest.mark.parametrize("page", [ROOT / "README.md", ROOT / "docs" / "tutorials" / "install.md"],
                         ids=["README.md", "install.md"])
def test_an_extras_table_lists_what_each_extra_installs(page: Path) -> None:
    rows = table(page.read_text(encoding="utf-8"))
    assert set(rows) == set(EXTRAS)
    assert {extra: rows[extra] for extra in EXTRAS} == {extra: installs(extra) for extra in EXTRAS}


def test_the_table_reader_sees_a_missing_package() -> None:
    text = "| extra | adds | for |\n|---|---|---|\n| `apps` | `ray[rllib,train,tune]`, torch | x |\n" \
           "| `bench`, `test` | cpprb; pillow | y |\n"
    assert table(text) == {"apps": {"ray[rllib,train,tune]", "torch"}, "bench": {"cpprb"}, "test": {"pillow"}}
    assert table(text)["apps"] != installs("apps")  # serve left out: the check sees it
    assert named_extras("pip install 'raychaos[rl,gpu]' or the `apps` extra") == {"rl", "gpu", "apps"}


#: What the plugin page's scope column means, with the default ini and with module scope.
SCOPE_WORDS = {"session (or module)": ("session", "module"), "function": ("function", "function"),
               "module": ("module", "module")}


def reported_scopes(folder: Path) -> dict[str, str]:
    """Each plugin fixture's scope as ``pytest --fixtures`` reports it, run in ``folder``."""
    out = subprocess.run([sys.executable, "-m", "pytest", "--fixtures", "-q", "-p", "no:cacheprovider"],
                         cwd=folder, capture_output=True, text=True, timeout=120, check=False).stdout
    scopes = {}
    for m in re.finditer(r"^(\w+)(?: \[(\w+) scope\])? -- .*chaos/pytest_plugin\.py", out, re.MULTILINE):
        scopes[m[1]] = m[2] or "function"
    return scopes


def ini_table_options(text: str) -> set[str]:
    """The options of a page's ini table: the first column of the table headed ``ini option``."""
    rows = text.split("| ini option |", 1)[1].split("\n\n", 1)[0].splitlines()[2:]
    return {row.split("|")[1].strip().strip("`") for row in rows}


def test_the_plugin_pages_ini_table_lists_exactly_the_plugins_ini_options() -> None:
    from chaos._suite import INI_OPTIONS

    text = (ROOT / "docs" / "how-to" / "pytest-plugin.md").read_text(encoding="utf-8")
    assert ini_table_options(text) == {name for name, _, _ in INI_OPTIONS}
    assert ini_table_options(text.replace("| `raychaos_profile` |", "| `raychaos_depth` |")) != {
        name for name, _, _ in INI_OPTIONS}  # the reader sees a wrong name


def test_the_plugin_pages_fixture_scopes_are_pytests(tmp_path: Path) -> None:
    page = (ROOT / "docs" / "how-to" / "pytest-plugin.md").read_text(encoding="utf-8")
    documented = {m[1]: SCOPE_WORDS[m[2]] for m in re.finditer(r"^\| `(\w+)` \| ([a-z ()]+) \|", page, re.MULTILINE)
                  if m[2] in SCOPE_WORDS}
    (tmp_path / "default").mkdir()
    (tmp_path / "module").mkdir()
    (tmp_path / "module" / "pytest.ini").write_text("[pytest]\nraychaos_cluster_scope = module\n", encoding="utf-8")
    default, module = reported_scopes(tmp_path / "default"), reported_scopes(tmp_path / "module")
    assert documented and set(documented) == set(default), (documented, default)
    assert documented == {name: (default[name], module[name]) for name in documented}


def quoted_mismatches(text: str, name: str) -> list[str]:
    """What a built-in scenario's section quotes that its file does not say: its "Runs: N s on K
    nodes" and each "at T s" of its faults, in order (faults at one instant quoted once)."""
    from scenarios.model._scenario import load_scenario

    scenario, wrong = load_scenario(name), []
    runs = re.search(r"\*\*Runs\*\*: ([\d.]+) s (?:under faults and [\d.]+ s without, )?on (\d+) nodes?", text)
    if not runs or (float(runs[1]), int(runs[2])) != (scenario.duration, scenario.nodes):
        wrong.append(f"runs: page {runs[0] if runs else 'none'}, file {scenario.duration:g} s on {scenario.nodes}")
    faults = re.search(r"\*\*Faults\*\*: (.+)", text)
    quoted = [float(t) for t in re.findall(r"\bat ([\d.]+) s\b", faults[1])] if faults else []
    if quoted != sorted({e.at for e in scenario.schedule.entries}):
        wrong.append(f"fault times: page {quoted}, file {sorted({e.at for e in scenario.schedule.entries})}")
    return wrong


@pytest.mark.parametrize("name", sorted(__import__("scenarios").builtin_names()))
def test_a_builtin_scenarios_quoted_length_nodes_and_fault_times_are_its_files(name: str) -> None:
    page = (ROOT / "docs" / "reference" / "builtin-scenarios.md").read_text(encoding="utf-8")
    section = next(part for part in re.split(r"^## ", page, flags=re.MULTILINE)
                   if part.split("\n", 1)[0].strip() == name)
    assert quoted_mismatches(section, name) == []


def test_the_quoted_facts_check_sees_a_wrong_length_and_a_wrong_fault_time() -> None:
    right = "- **Faults**: kill at 2 s; kill at 5 s.\n- **Runs**: 12 s on 1 node (workload `sampling`)."
    assert quoted_mismatches(right, "env-worker-kill") == []
    assert len(quoted_mismatches(right.replace("12 s on", "20 s on").replace("at 5 s", "at 6 s"),
                                 "env-worker-kill")) == 2
