"""The documentation cannot rot: every code block of README.md, CHANGELOG.md and docs/ is run
or parsed here, and README's four quickstarts run end to end (those in the slow tier).

What each fenced block gets, by its language:

- ``python``: compiled (``ast.parse``); run as well when an ``<!-- docs-test: run -->``
  comment stands on the line before it (a self-contained, fast example). A block that defines
  tests (``def test_...``, a state machine) must be marked ``<!-- docs-test: pytest -->``
  instead: each page's such blocks are test files of one pytester project, whose
  ``conftest.py`` is ``tests/docs_fixtures/<page>.py`` when the page names fixtures of "yours",
  and their tests must all pass (slow tier: they start Ray).
- ``toml``: parsed with ``tomllib``; a complete scenario (it names a ``workload``) is loaded
  with :func:`scenarios.load_scenario`, an attack schedule (``[[faults]]`` or ``[random]``
  without a workload) with :func:`scenarios.load_attack`.
- ``bash`` / ``console``: each ``raychaos`` command's subcommand must exist and each of its
  ``--options`` must be one the subcommand declares (read from the CLI itself, nothing run);
  each ``make`` target must be in the Makefile; each ``pip install 'raychaos[extra]'`` must
  name extras pyproject declares.
- ``text``: printed output, shown as is.

A block preceded by ``<!-- docs-test: file PATH -->`` must equal that file of the checkout
(so the page shows what the tests run), and a block whose only line is a snippet include
(``--8<-- "PATH"``) is checked as that file's content.
"""

from __future__ import annotations

import ast
import http.client
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from conftest import stop_ray_start, wait_for_ray_start_head
from scenarios import load_attack, load_scenario
from scenarios.cli import main
from scenarios.model._experiment import Overrides

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "examples" / "quickstart"
RAYCHAOS = os.path.join(os.path.dirname(sys.executable), "raychaos")
RAY = os.path.join(os.path.dirname(sys.executable), "ray")
#: Ray 2.60 clients send the cluster's token (~/.ray/auth_token, written by `ray start`) only
#: when asked to.
TOKEN_ENV = {**os.environ, "RAY_AUTH_MODE": "token"}


def doc_files() -> list[Path]:
    return [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").rglob("*.md"))]


# -- the collector --------------------------------------------------------------------------------

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
DIRECTIVE = re.compile(r"<!--\s*docs-test:\s*(?P<what>run|file|pytest)\s*(?P<arg>\S*)\s*-->")
SNIPPET = re.compile(r'^--8<--\s+"(?P<path>[^"]+)"$')


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    path: Path
    line: int  #: of the opening fence, 1-based
    lang: str
    text: str
    run: bool = False  #: marked ``<!-- docs-test: run -->``
    pytest: bool = False  #: marked ``<!-- docs-test: pytest -->``: a test file, run under pytest
    same_as: str | None = None  #: marked ``<!-- docs-test: file PATH -->``

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path}:{self.line}"


def collect(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file, dedented to its fence, with its directive."""
    lines, blocks, i = path.read_text(encoding="utf-8").splitlines(), [], 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        indent, fence = opened["indent"], opened["fence"]
        body, j = [], i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        if j == len(lines):
            raise AssertionError(f"{path}:{i + 1}: a code block is never closed")
        directive = DIRECTIVE.search(lines[i - 1]) if i else None
        blocks.append(Block(path, i + 1, opened["info"].strip().split(" ")[0].lower(), "\n".join(body) + "\n",
                            run=bool(directive and directive["what"] == "run"),
                            pytest=bool(directive and directive["what"] == "pytest"),
                            same_as=directive["arg"] if directive and directive["what"] == "file" else None))
        i = j + 1
    return blocks


def check(block: Block, tmp_path: Path) -> None:
    """Parse (and where marked, run) one block; raise AssertionError naming where it is."""
    text = block.text
    included = SNIPPET.match(text.strip())
    if included:
        text = (ROOT / included["path"]).read_text(encoding="utf-8")
    if block.same_as is not None:
        want = (ROOT / block.same_as).read_text(encoding="utf-8")
        assert text == want, f"{block.where}: the block differs from {block.same_as}; copy the file into the page"
    checker = CHECKERS.get(block.lang)
    assert checker is not None, (f"{block.where}: a ```{block.lang} block: give every block one of the "
                                 f"checked languages {sorted(CHECKERS)}")
    checker(block, text, tmp_path)


def _python(block: Block, text: str, tmp_path: Path) -> None:
    try:
        tree = ast.parse(text, filename=block.where)
    except SyntaxError as exc:
        raise AssertionError(f"{block.where}: the python block does not parse: {exc}") from exc
    if block.run:
        cwd = os.getcwd()
        os.chdir(tmp_path)
        try:
            exec(compile(tree, block.where, "exec"), {"__name__": "__docs__"})
        except Exception as exc:
            raise AssertionError(f"{block.where}: the python block fails: {type(exc).__name__}: {exc}") from exc
        finally:
            os.chdir(cwd)


def _toml(block: Block, text: str, tmp_path: Path) -> None:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise AssertionError(f"{block.where}: the toml block does not parse: {exc}") from exc
    path = tmp_path / "block.toml"
    path.write_text(text, encoding="utf-8")
    try:
        if "workload" in data:
            load_scenario(str(path))
        elif "kind" in data:  # an attack's file, whole: as `raychaos validate` checks it
            load_attack(str(path), require_probes=False)
        elif "faults" in data or "random" in data:  # a part of one: its faults
            load_attack(str(path), overrides=Overrides(probes=({"kind": "command", "command": "true"},)))
    except Exception as exc:
        raise AssertionError(f"{block.where}: the scenario does not load: {exc}") from exc


def _commands(text: str) -> Iterator[list[str]]:
    """Each shell command of a block (continuations joined, prompts and comments dropped),
    split at `&&`, `||`, `;` and `|`."""
    joined = re.sub(r"\\\n\s*", " ", text)
    for line in joined.splitlines():
        line = line.strip().removeprefix("$ ")
        if not line or line.startswith("#"):
            continue
        words: list[str] = []
        for word in shlex.split(line, comments=True):
            if word in {"&&", "||", ";", "|", "&"}:
                yield words
                words = []
            else:
                words.append(word.rstrip(";&"))
        yield words


def _raychaos(where: str, args: list[str]) -> None:
    if not args or args[0] in {"--help", "--version"}:
        return
    command = main.commands.get(args[0]) if isinstance(main, click.Group) else None
    assert command is not None, f"{where}: `raychaos {args[0]}` is not a raychaos command ({sorted(main.commands)})"
    declared = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)} | {"--help"}
    for word in args[1:]:
        name = word.split("=", 1)[0]
        assert not name.startswith("--") or name in declared, \
            f"{where}: `raychaos {args[0]}` has no option {name} (it has {sorted(declared)})"


def _shell(block: Block, text: str, tmp_path: Path) -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
                 ["project"]["optional-dependencies"])
    for words in _commands(text):
        words = [w for w in words if not re.match(r"^[A-Z_]+=", w)]  # VAR=value prefixes
        # `raychaos`, or a venv's `…/bin/raychaos`; `pip install raychaos` names the package
        at = next((i for i, w in enumerate(words) if os.path.basename(w) == "raychaos"), None)
        if at is not None and "install" not in words[:at]:
            _raychaos(block.where, words[at + 1:])
        if words[:1] == ["make"]:
            for target in (w for w in words[1:] if "=" not in w and not w.startswith("-")):
                assert re.search(rf"^{re.escape(target)}:", makefile, re.M), \
                    f"{block.where}: `make {target}`: the Makefile has no such target"
        for word in words:
            named = re.fullmatch(r"raychaos\[(?P<extras>[\w,]+)\]", word)
            for extra in named["extras"].split(",") if named else ():
                assert extra in extras, f"{block.where}: raychaos[{extra}]: pyproject declares {sorted(extras)}"


def _text(block: Block, text: str, tmp_path: Path) -> None:
    """Printed output: shown as is."""


def defines_tests(text: str) -> list[str]:
    """The tests a block of Python defines: ``test_*`` functions, and classes deriving from a
    state machine (a name ending in ``Machine``)."""
    tree = ast.parse(text)
    names = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]
    return names + [n.name for n in tree.body if isinstance(n, ast.ClassDef) and any(
        (b.id if isinstance(b, ast.Name) else getattr(b, "attr", "")).endswith("Machine") for b in n.bases)]


CHECKERS = {"python": _python, "toml": _toml, "bash": _shell, "console": _shell, "text": _text}

BLOCKS = [block for path in doc_files() for block in collect(path)]


def test_the_pages_have_code_blocks() -> None:
    assert len(BLOCKS) > 30, [b.where for b in BLOCKS]
    assert {b.lang for b in BLOCKS} >= {"python", "toml", "bash"}


@pytest.mark.parametrize("block", BLOCKS, ids=[b.where for b in BLOCKS])
def test_code_block(block: Block, tmp_path: Path) -> None:
    check(block, tmp_path)


def test_the_attack_pages_table_of_needs_is_the_codes() -> None:
    """What each kind of fault needs of a node, as the faults declare it (a kind added or a need
    changed shows here, or this fails)."""
    from chaos._preflight import needs_table

    page = (ROOT / "docs" / "how-to" / "attack.md").read_text(encoding="utf-8")
    assert needs_table() in page, "docs/how-to/attack.md: paste chaos._preflight.needs_table()'s output as its table"


def test_the_scenario_files_page_lists_every_fault_kind_a_file_takes() -> None:
    from chaos._kinds import fault_specs

    page = (ROOT / "docs" / "how-to" / "scenario-files.md").read_text(encoding="utf-8")
    sentence = page.split("Each fault kind (", 1)[1].split(") and each target kind", 1)[0]
    listed = set(re.findall(r"`(\w+)`", sentence))
    assert listed == {k.value for k in fault_specs()}, listed ^ {k.value for k in fault_specs()}


def test_the_ray_releases_page_states_the_compat_modules_facts() -> None:
    """Each difference between Ray releases, as `chaos._ray_compat.FACTS` states it (a fact
    added or changed shows on the page, or this fails)."""
    from chaos._ray_compat import facts_markdown

    page = (ROOT / "docs" / "reference" / "ray-versions.md").read_text(encoding="utf-8")
    shown = page.split("<!-- facts:start -->\n", 1)[1].split("<!-- facts:end -->", 1)[0]
    assert shown == facts_markdown(), "docs/reference/ray-versions.md: paste chaos._ray_compat.facts_markdown()"


def test_a_block_that_defines_tests_is_run_under_pytest() -> None:
    """``exec`` of a block defines its tests and never calls them: such a block could never fail."""
    unrun = [f"{b.where}: {defines_tests(b.text)}" for b in BLOCKS
             if b.lang == "python" and not b.pytest and not SNIPPET.match(b.text.strip())
             and b.same_as is None and defines_tests(b.text)]
    assert not unrun, ("blocks define tests that nothing runs; mark each `<!-- docs-test: pytest -->` "
                       f"(fixtures of \"yours\" go in tests/docs_fixtures/<page>.py): {unrun}")


PAGE_TESTS = sorted({b.path for b in BLOCKS if b.pytest})
FIXTURES = ROOT / "tests" / "docs_fixtures"

#: Pages whose tests run under make deep only (CI's hour): a user's own suite under the plugin is
#: shown in make slow by test_quickstart_pytest_on_your_own_actor and tests/test_example_suite.py.
DEEP_PAGES = {"docs/how-to/pytest-plugin.md", "docs/how-to/test-your-actor.md"}


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.usefixtures("no_shared_cluster")
@pytest.mark.parametrize("page", [pytest.param(p, marks=[pytest.mark.deep] if str(p.relative_to(ROOT)) in DEEP_PAGES
                                               else []) for p in PAGE_TESTS],
                         ids=[str(p.relative_to(ROOT)) for p in PAGE_TESTS])
def test_the_tests_a_page_shows_pass(page: Path, pytester: pytest.Pytester) -> None:
    blocks = [b for b in BLOCKS if b.path == page and b.pytest]
    for block in blocks:
        assert defines_tests(block.text), f"{block.where}: a pytest block that defines no test"
        pytester.makepyfile(**{f"test_block_{block.line}": block.text})
    conftest = FIXTURES / f"{page.stem}.py"
    if conftest.exists():
        pytester.makeconftest(conftest.read_text(encoding="utf-8"))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", timeout=900)
    tests = sum(len(defines_tests(b.text)) - sum(n.endswith("Machine") for n in defines_tests(b.text))
                for b in blocks)
    result.assert_outcomes(passed=tests)


#: The checkpointed-actors page's caller as it once was: a Writer made anew on each call.
FRESH_WRITER = ("        ray.get([self.counter.add.remote(1, **self.me.next()) for _ in range(10)], timeout=60)\n",
                "        me = Writer(\"trainer-0\")  # numbers 0-9 again on every call\n"
                "        ray.get([self.counter.add.remote(1, **me.next()) for _ in range(10)], timeout=60)\n")


@pytest.mark.ray
@pytest.mark.deep
@pytest.mark.usefixtures("no_shared_cluster")
def test_the_checkpointed_actors_pages_test_fails_with_a_writer_made_per_call(pytester: pytest.Pytester) -> None:
    """The page's own test, run on the shape the page once showed, fails: its second ``add_ten``
    is dropped as repeats (it reads 10, not 20)."""
    page = ROOT / "docs" / "how-to" / "checkpointed-actors.md"
    [block] = [b for b in BLOCKS if b.path == page and b.pytest]
    assert FRESH_WRITER[0] in block.text, "the page's Trainer changed: update FRESH_WRITER"
    pytester.makepyfile(test_old_shape=block.text.replace(*FRESH_WRITER))  # the page's fixture is the plugin's
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", timeout=900)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*assert 10 == 20*"])

BROKEN = {
    "python": ("```python\nfrom chaos import Kill\ndef f(:\n```\n", "does not parse"),
    "python-run": ("<!-- docs-test: run -->\n```python\nassert 1 + 1 == 3\n```\n", "the python block fails"),
    "toml": ('```toml\nduration = 8\n[[faults]]\nat = "soon"\nkind = "kill"\n```\n', "does not load"),
    "toml-syntax": ("```toml\nduration = \n```\n", "does not parse"),
    "command": ("```bash\nraychaos atack schedule.toml\n```\n", "is not a raychaos command"),
    "option": ("```bash\nraychaos run straggler --sed 3\n```\n", "has no option --sed"),
    "make": ("```bash\nmake documentation\n```\n", "no such target"),
    "extra": ("```bash\npip install 'raychaos[gpu]'\n```\n", "raychaos[gpu]"),
    "stale": ("<!-- docs-test: file examples/quickstart/schedule.toml -->\n```toml\nduration = 1\n```\n",
              "differs from examples/quickstart/schedule.toml"),
    "language": ("```yaml\na: 1\n```\n", "checked languages"),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_block_fails(name: str, tmp_path: Path) -> None:
    """The collector is not green by default: each kind of rot, written to a page of its own."""
    page, expected = BROKEN[name]
    path = tmp_path / "page.md"
    path.write_text(f"# A page\n\nSome prose.\n\n{page}")
    (block,) = collect(path)
    with pytest.raises(AssertionError, match=re.escape(expected)):
        check(block, tmp_path)


def test_the_quickstart_files_are_the_readmes_blocks() -> None:
    marked = {b.same_as for b in collect(ROOT / "README.md") if b.same_as}
    assert marked >= {"examples/quickstart/test_my_actor.py", "examples/quickstart/schedule.toml"}


# -- pages that list what the code has ---------------------------------------------------------

def _sections(path: Path, prefix: str) -> dict[str, str]:
    """Each heading's text (``prefix`` stripped of its Markdown) mapped to the section under it."""
    parts = re.split(rf"^{re.escape(prefix)} ", path.read_text(encoding="utf-8"), flags=re.M)[1:]
    return {part.split("\n", 1)[0].strip(): part for part in parts}


def test_every_builtin_scenario_is_on_its_page() -> None:
    from scenarios import builtin_names

    sections = _sections(ROOT / "docs" / "reference" / "builtin-scenarios.md", "##")
    assert sorted(sections) == sorted(builtin_names())
    for name in builtin_names():
        for invariant in load_scenario(name).invariants:
            assert f"`{invariant}`" in sections[name], f"{name}: {invariant} is not described on the page"


def test_every_lesson_is_on_its_page() -> None:
    from scenarios.lessons._catalog import lessons

    page = (ROOT / "docs" / "reference" / "lessons.md").read_text(encoding="utf-8")
    for item in lessons():
        assert f"### `{item.id}`" in page and f"| `{item.id}` |" in page, item.id


def test_the_readme_and_install_page_list_every_extra() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]
    for page in (ROOT / "README.md", ROOT / "docs" / "tutorials" / "install.md"):
        text = page.read_text(encoding="utf-8")
        assert all(f"`{extra}`" in text for extra in extras), (page.name, sorted(extras))


# -- the pages speak of the product, not of its history -----------------------------------------

ORDINAL = r"(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|\d+(st|nd|rd|th))"
HISTORY = [
    rf"\b{ORDINAL} (session|round|wave|iteration)\b",
    r"\b(this|that|the last|the previous|the next|a later|an earlier) session\b",
    r"\b(issue|ticket) #?\d+",
    r"(?<![\w/-])#\d{1,4}\b",  # our own issue numbers; Ray's are cited as ray-project/ray#N
    r"\bwaves?\b",
    r"\bfound and fixed\b",
    r"\bfixed since\b",
    r"\b(changed|moved) since (then|\d{4}-)",
    r"\bused to (be|pass|fail|go|lose|read|fall|skip|count|say)\b",
    r"\buntil \d{4}-\d{2}-\d{2}\b",
    r"\b(the|a) (review|mend)\b",
]


def test_no_development_history_in_the_pages() -> None:
    found = [f"{path.relative_to(ROOT)}:{n}: {match.group(0)!r}"
             for path in [*doc_files(), ROOT / "mkdocs.yml"]
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             for pattern in HISTORY for match in re.finditer(pattern, line, re.I)]
    assert not found, "development history in the pages (it belongs in git):\n" + "\n".join(found)


#: The code's comments, docstrings and test names: narrower, for code numbers things (``#3``,
#: "waves" of tasks, Ray's session) that are no history.
CODE_HISTORY = [
    rf"\b{ORDINAL} (session|wave)\b",
    r"\b(issue|ticket) #?\d+",
    r"\bfound and fixed\b",
    r"\bused to (be|pass|fail|go|lose|read|fall|skip|count|say|raise|get)\b",
    r"\b(CI|make test|the slow tier) once\b",
    r"\bonce (saw|took|measured|carried)\b",
]


def code_files() -> list[Path]:
    names = subprocess.run(["git", "ls-files", "*.py", "Makefile", ".ci/run", "pyproject.toml"], cwd=ROOT,
                           capture_output=True, text=True, check=True, timeout=30).stdout.split()
    return [ROOT / name for name in names if name != "tests/test_docs.py"]


def test_no_development_history_in_the_code() -> None:
    found = [f"{path.relative_to(ROOT)}:{n}: {match.group(0)!r}"
             for path in code_files()
             for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             for pattern in CODE_HISTORY for match in re.finditer(pattern, line, re.I)]
    assert len(found) == 0, "development history in the code (it belongs in git):\n" + "\n".join(found)


#: Sentences the check must flag, kept as word lists so that this file itself reads as none.
FLAGGED = [("measured in the", "eleventh", "session"), ("see", "issue", "17"), ("found and", "fixed in CI"),
           ("the", "third", "wave"), ("it", "used to", "pass")]
CODE_FLAGGED = [("CI", "once saw", "tasks 2 and 3"), ("it", "once carried", "none"), ("see", "issue", "31"),
                ("a second Ctrl-C", "used to", "raise")]


def test_the_history_check_sees_history(tmp_path: Path) -> None:
    for words in FLAGGED:
        line = " ".join(words)
        assert any(re.search(p, line, re.I) for p in HISTORY), line
    for words in CODE_FLAGGED:
        line = " ".join(words)
        assert any(re.search(p, line, re.I) for p in CODE_HISTORY), line


# -- the quickstarts, end to end --------------------------------------------------------------------

def _readme_command(prefix: str) -> list[str]:
    """README's command line that starts with ``prefix``, split as the shell would."""
    for block in collect(ROOT / "README.md"):
        if block.lang in {"bash", "console"}:
            for words in _commands(block.text):
                if " ".join(words).startswith(prefix):
                    return words
    raise AssertionError(f"README has no command starting {prefix!r}")


@pytest.mark.slow
@pytest.mark.ray
def test_quickstart_pytest_on_your_own_actor(pytester: pytest.Pytester) -> None:
    """(a) The chaos marker and the stateful property, in a project of the user's own."""
    pytester.makepyfile(test_my_actor=(QUICKSTART / "test_my_actor.py").read_text())
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q")
    result.assert_outcomes(passed=2)


def _free_port() -> int:
    from chaos.cluster._cluster import _free_port as free

    return free()


@dataclass(frozen=True)
class Head:
    address: str
    app_port: int


@pytest.fixture
def head_with_app(tmp_path: Path) -> Iterator[Head]:
    """`ray start --head`, then README's program on it, serving its health endpoint."""
    from chaos import wait_until

    port, dashboard, agent, app = _free_port(), _free_port(), _free_port(), _free_port()
    temp = tempfile.mkdtemp(prefix="rc-docs-", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    ray_proc = subprocess.Popen([RAY, "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
                                 f"--temp-dir={temp}", "--disable-usage-stats", "--include-dashboard=true",
                                 f"--dashboard-port={dashboard}", f"--dashboard-agent-listen-port={agent}"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    address = f"127.0.0.1:{port}"
    app_proc = None
    try:
        wait_for_ray_start_head(address, env=TOKEN_ENV, what="`ray start --head` to list its node")
        app_proc = subprocess.Popen([sys.executable, str(QUICKSTART / "my_app.py"), str(app)], cwd=tmp_path,
                                    env={**TOKEN_ENV, "RAY_ADDRESS": address},
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_until(lambda: _healthy(app), timeout=90, interval=0.5, what="the program's health endpoint")
        yield Head(address, app)
    finally:
        if app_proc is not None:
            app_proc.kill()
            app_proc.wait(timeout=30)
        stop_ray_start(ray_proc)  # --block: its exit stops the cluster's processes
        shutil.rmtree(temp, ignore_errors=True)


def _healthy(port: int) -> bool:
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        connection.request("GET", "/health")
        return connection.getresponse().status == 200
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.ray
def test_quickstart_attack_a_running_program(head_with_app: Head, tmp_path: Path) -> None:
    """(b) README's attack command, its schedule file, against README's program."""
    words = _readme_command("raychaos attack")
    schedule = tmp_path / "schedule.toml"  # the file's probe, at the port the program serves here
    schedule.write_text((QUICKSTART / "schedule.toml").read_text(encoding="utf-8")
                        .replace("127.0.0.1:8000", f"127.0.0.1:{head_with_app.app_port}"), encoding="utf-8")
    command = [RAYCHAOS, *(w.replace("127.0.0.1:6379", head_with_app.address)
                           .replace("schedule.toml", str(schedule))
                           .replace("report/attack", str(tmp_path / "report")) for w in words[1:])]
    out = subprocess.run(command, capture_output=True, text=True, timeout=240, check=False, env=TOKEN_ENV,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    run = json.loads((tmp_path / "report" / "summary.json").read_text())["runs"][-1]
    assert [f["status"] for f in run["faults"]] == ["injected", "injected"]
    assert all(v["held"] for v in run["verdicts"]), run["verdicts"]


@pytest.mark.slow
@pytest.mark.ray
def test_quickstart_run_a_builtin_scenario_and_its_report(tmp_path: Path) -> None:
    """(c) README's `raychaos run` line: exit 0, and the report it points at."""
    words = _readme_command("raychaos run")
    command = [RAYCHAOS, *(w.replace("report/replay", str(tmp_path / "report")) for w in words[1:])]
    out = subprocess.run(command, capture_output=True, text=True, timeout=300, check=False, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert {"journal.jsonl", "summary.json", "junit.xml", "report.html"} <= {
        p.name for p in (tmp_path / "report").iterdir()}


@pytest.mark.slow
@pytest.mark.ray
def test_quickstart_explain_a_lesson(tmp_path: Path) -> None:
    """(d) README's `raychaos explain` line runs its lesson and exits 0."""
    words = _readme_command("raychaos explain ")
    out = subprocess.run([RAYCHAOS, *words[1:]], capture_output=True, text=True, timeout=300, check=False,
                         cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def test_explain_lists_the_lessons_without_ray() -> None:
    from click.testing import CliRunner

    result = CliRunner().invoke(main, ["explain"])
    assert result.exit_code == 0 and "01-global-state" in result.output, result.output


def test_the_readme_is_a_front_page_of_at_most_200_lines() -> None:
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move detail into docs/ and link it"


#: A dotted name of raychaos's code in prose: `chaos.watch`, `actors.CheckpointedCounter`,
#: `raychaos.actors` (no such package: the distribution is raychaos, the packages are not).
#: Not a name: a file (`scenarios.md`), a pattern (`scenarios._lessons_*`), a call on an object
#: a page calls `chaos` (`chaos.kill(...)`, a `Chaos`).
CODE_NAME = re.compile(r"(?<![\w./-])(?:raychaos\.(?:chaos|actors|scenarios)|(?:chaos|actors|scenarios)\.[A-Za-z_]\w*)"
                       r"(?:\.[A-Za-z_]\w*)*(?P<after>[(*]?)")
FILE_SUFFIXES = {"md", "py", "toml", "json", "jsonl", "html", "txt", "yml", "yaml", "xml"}


def resolves(name: str) -> bool:
    """Whether ``name`` is a module of the checkout or an attribute of one."""
    import importlib

    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def named_in(text: str) -> set[str]:
    from chaos import Chaos

    names = set()
    for match in CODE_NAME.finditer(text):
        name = match.group(0).rstrip("(*")
        first, _, rest = name.partition(".")
        a_chaos_call = match["after"] == "(" and first == "chaos" and "." not in rest and hasattr(Chaos, rest)
        if match["after"] != "*" and not a_chaos_call and name.rsplit(".", 1)[1] not in FILE_SUFFIXES:
            names.add(name)
    return names


def test_every_module_a_page_or_lesson_names_exists() -> None:
    """A page or a lesson's words name real modules and attributes (a test of this test: a
    made-up name does not resolve)."""
    lessons = sorted((ROOT / "scenarios" / "lessons").glob("*.py"))
    pages = [p for p in doc_files() if p.name != "CHANGELOG.md"]  # it names what was renamed, as it was
    where = {p: named_in(p.read_text(encoding="utf-8")) for p in [*pages, *lessons]}
    missing = sorted(f"{p.relative_to(ROOT)}: {n}" for p, names in where.items() for n in names if not resolves(n))
    assert not missing, missing
    assert not resolves("raychaos.actors") and not resolves("chaos.no_such_thing") and resolves("chaos.watch")
    assert named_in("see raychaos.actors, chaos.watch and scenarios.md; chaos.kill(x)") == {
        "raychaos.actors", "chaos.watch"}
