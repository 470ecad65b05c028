"""The findings are scripts anyone can run and file upstream: Ray alone, a usage line, a count.

Each ``findings/*.py`` reproduces one behaviour of Ray with Ray's public API (and Python's
standard library, numpy, torch for Ray Train): no raychaos, no pytest, no Hypothesis, so a Ray
maintainer can run it as it is. The one exception says why in its docstring: a disk that answers
``EIO`` needs a fault filesystem, which Ray alone cannot make.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

FINDINGS = sorted((Path(__file__).resolve().parents[1] / "findings").glob("*.py"))
OURS = {"chaos", "scenarios", "actors", "pytest", "hypothesis", "conftest", "tests", "benchmarks"}
#: Findings that need a filesystem that fails on demand: raychaos's fault filesystem, nothing else.
NEEDS_FAULT_FS = {name: {"chaos.disks", "chaos.cluster"}
                  for name in ("spill_disk_errors.py", "spill_restore_interrupted.py")}


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    return names | {node.module for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0}


def test_there_are_findings() -> None:
    assert len(FINDINGS) >= 5, [p.name for p in FINDINGS]


@pytest.mark.parametrize("path", FINDINGS, ids=lambda p: p.name)
def test_a_finding_uses_ray_alone(path: Path) -> None:
    allowed = NEEDS_FAULT_FS.get(path.name, set())
    ours = {m for m in imported_modules(path) if m.split(".")[0] in OURS and m not in allowed}
    assert not ours, f"{path.name} imports {sorted(ours)}: a finding must run with Ray alone"


@pytest.mark.parametrize("path", FINDINGS, ids=lambda p: p.name)
def test_a_finding_says_what_ray_promised_how_to_run_it_and_how_often_it_reproduced(path: Path) -> None:
    text = path.read_text()
    doc = ast.get_docstring(ast.parse(text)) or ""
    assert doc.startswith("Standalone reproduction"), f"{path.name}: its docstring's first words"
    assert f"findings/{path.name}" in doc, f"{path.name}: its docstring shows the command that runs it"
    assert "REPRODUCED" in text or path.name in NEEDS_FAULT_FS, f"{path.name}: prints REPRODUCED k of N"
