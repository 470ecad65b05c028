"""The findings are scripts anyone can run and file upstream: Ray alone, a usage line, a count.

Each ``findings/*.py`` reproduces one behaviour of Ray with Ray's public API and Python's
standard library: no raychaos, no pytest, no Hypothesis, so a Ray maintainer can run it as it
is. A finding that needs one more tool (a FUSE binding, for a disk that answers ``EIO`` on
demand) names it in its docstring and checks for it before anything else.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

FINDINGS = sorted((Path(__file__).resolve().parents[1] / "findings").glob("*.py"))
#: The one tool beyond Ray and the standard library a finding may import (named, checked for).
TOOLS = {"spill_restore_interrupted.py": "mfusepy"}
#: Findings that reproduce by ending (the raylet's abort ends the driver): no count to print.
BY_EXIT = {"spill_disk_errors.py"}


def beyond_ray(text: str, *, tool: str | None) -> set[str]:
    """The top-level packages ``text`` imports beyond the standard library, Ray and ``tool``."""
    tree = ast.parse(text)
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) and node.module and node.level == 0}
    return {m.split(".")[0] for m in names} - set(sys.stdlib_module_names) - {"__future__", "ray", tool}


def test_there_are_findings() -> None:
    assert len(FINDINGS) >= 5, [p.name for p in FINDINGS]


@pytest.mark.parametrize("path", FINDINGS, ids=lambda p: p.name)
def test_a_finding_uses_ray_alone(path: Path) -> None:
    text, tool = path.read_text(), TOOLS.get(path.name)
    extra = beyond_ray(text, tool=tool)
    assert not extra, f"{path.name} imports {sorted(extra)}: a finding runs with Ray and the standard library"
    if tool is not None:
        assert tool in (ast.get_docstring(ast.parse(text)) or ""), f"{path.name}: its docstring names {tool}"
        assert "find_spec" in text, f"{path.name}: checks for {tool} before anything else"


@pytest.mark.parametrize(("text", "extra"), [
    ("import numpy as np\nimport ray\n", {"numpy"}),
    ("from chaos.disks import fault_filesystem\n", {"chaos"}),
    ("def f():\n    from scenarios import x\n", {"scenarios"}),  # an import inside a function too
    ("import json, ray.util.state\nfrom ray import serve\n", set()),
])
def test_the_import_check_sees_what_is_beyond_ray(text: str, extra: set[str]) -> None:
    assert beyond_ray(text, tool=None) == extra


@pytest.mark.parametrize("path", FINDINGS, ids=lambda p: p.name)
def test_a_finding_says_what_ray_promised_how_to_run_it_and_how_often_it_reproduced(path: Path) -> None:
    text = path.read_text()
    doc = ast.get_docstring(ast.parse(text)) or ""
    assert doc.startswith("Standalone reproduction"), f"{path.name}: its docstring's first words"
    assert f"findings/{path.name}" in doc, f"{path.name}: its docstring shows the command that runs it"
    assert "REPRODUCED" in text or path.name in BY_EXIT, f"{path.name}: prints REPRODUCED k of N"
