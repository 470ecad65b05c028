"""The example suite (``examples/suite``: its own package and actor, module fixtures on the
session cluster, a node killed by the marker on a three-node cluster, a state machine that kills
with calls in flight) passes with ``pytest`` and with the CI recipe's own command (``pytest -n 2
--dist loadfile``, run exactly as ``examples/ci/chaos.yml`` writes it), and leaves nothing running."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import psutil
import pytest
import yaml

from chaos.cluster import ray_processes

ROOT = Path(__file__).resolve().parent.parent
SUITE, WORKFLOW = ROOT / "examples" / "suite", ROOT / "examples" / "ci" / "chaos.yml"
#: The suite's tests: two on one node, one on three nodes, the state machine.
TESTS = 4
#: A run of the suite takes about two minutes; ten is a hang.
RUN_TIMEOUT = 600

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.usefixtures("no_shared_cluster")]


def workflow_command(event: str) -> str:
    """The ``Chaos tests`` step's command as GitHub runs it for ``event``: its one expression,
    ``${{ github.event_name == 'schedule' && X || '' }}``, evaluated."""
    steps = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))["jobs"]["chaos"]["steps"]
    command = " ".join(next(s for s in steps if s.get("name") == "Chaos tests")["run"].split())
    pattern = r"\$\{\{ github\.event_name == 'schedule' && '([^']*)' \|\| '' \}\}"
    assert len(re.findall(r"\$\{\{", command)) == len(re.findall(pattern, command)) == 1, command
    return re.sub(pattern, lambda m: m.group(1) if event == "schedule" else "", command)


def run_in_copy(tmp_path: Path, command: str) -> subprocess.CompletedProcess[str]:
    """``command`` in a copy of the suite, its package importable as ``pip install -e .`` makes it
    (by Ray's workers too, which inherit the environment)."""
    project = tmp_path / "suite"
    shutil.copytree(SUITE, project, ignore=shutil.ignore_patterns("__pycache__", ".pytest_cache"))
    env = {**os.environ, "PYTHONPATH": str(project / "src"), "PYTHONDONTWRITEBYTECODE": "1"}
    command = command.replace("python -m", f"{sys.executable} -m", 1)
    before = {p.pid for p in ray_processes()}
    proc = subprocess.run(["bash", "-e", "-c", command], cwd=project, env=env, capture_output=True, text=True,
                          timeout=RUN_TIMEOUT)
    left = [p for p in ray_processes() if p.pid not in before]
    _, alive = psutil.wait_procs(left, timeout=10)
    assert not alive, f"left running after the suite: {[(p.pid, p.name()) for p in alive]}"
    return proc


def test_the_workflow_runs_pytest_with_xdist_junit_and_journals_and_thorough_at_night() -> None:
    assert workflow_command("push").split()[:6] == ["python", "-m", "pytest", "-n", "2", "--dist"]
    assert "--chaos-profile=thorough" in workflow_command("schedule").split()
    assert "--chaos-profile=thorough" not in workflow_command("push").split()


def test_the_example_suite_passes_with_pytest(tmp_path: Path) -> None:
    proc = run_in_copy(tmp_path, "python -m pytest -p no:cacheprovider -v")
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert f"{TESTS} passed" in proc.stdout, proc.stdout[-3000:]
    assert "raychaos: 2 chaos test(s), 2 scheduled fault(s), 2 injected and confirmed" in proc.stdout


def test_the_example_suite_passes_as_the_ci_workflow_runs_it(tmp_path: Path) -> None:
    proc = run_in_copy(tmp_path, workflow_command("push"))
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    suite = ET.parse(tmp_path / "suite" / "reports" / "junit.xml").getroot().find("testsuite")
    assert suite is not None and (suite.get("tests"), suite.get("failures"), suite.get("errors")) == (
        str(TESTS), "0", "0")
    faults = {case.get("name"): prop.get("value") for case in suite.iter("testcase")
              for prop in case.iter("property") if prop.get("name") == "raychaos_faults"}
    assert set(faults) == {"test_no_receipt_is_lost_or_doubled_by_a_kill",
                           "test_no_receipt_is_lost_or_doubled_when_a_node_dies"}, faults
    assert all("injected, confirmed" in line for line in faults.values()), faults
    journals = sorted(p.name for p in (tmp_path / "suite" / "reports" / "journals").iterdir())
    assert len(journals) == 2 and all(name.endswith(".jsonl") for name in journals), journals
    assert f"2 workers [{TESTS} items]" in proc.stdout, proc.stdout[-3000:]
