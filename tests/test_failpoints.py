"""Failpoints: armed from outside, each action at exactly its point, once, with evidence."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaos import failpoint
from chaos.errors import FailpointError, InvalidFaultSpec
from chaos.failpoints import (
    FAILPOINTS_ENV,
    FailAction,
    Failpoint,
    FailpointPlan,
    armed,
    failpoint_env,
    firings,
    is_armed,
)


def plan(tmp_path: Path, *points: Failpoint) -> FailpointPlan:
    return FailpointPlan(points, str(tmp_path / "evidence"))


def test_an_unarmed_failpoint_does_nothing() -> None:
    failpoint("wal.append.written")
    assert not is_armed("wal.append.written")


def test_error_fires_after_skip_passes_and_only_times_times(tmp_path: Path) -> None:
    point = Failpoint(name="demo.point", action=FailAction.ERROR, skip=2, times=1)
    passed = 0
    with armed(plan(tmp_path, point)):
        assert is_armed("demo.point") and not is_armed("demo.other")
        for _ in range(2):
            failpoint("demo.point")
            passed += 1
        with pytest.raises(FailpointError, match=r"demo\.point"):
            failpoint("demo.point")
        failpoint("demo.point")  # its one firing is spent: passes from now on
    assert passed == 2 and not is_armed("demo.point")
    (fired,) = firings(str(tmp_path / "evidence"))
    assert (fired.name, fired.n, fired.action) == ("demo.point", 0, FailAction.ERROR)


def test_the_budget_holds_across_processes(tmp_path: Path) -> None:
    """A restarted process finds the token of the first firing and passes."""
    spec = plan(tmp_path, Failpoint(name="demo.point", action=FailAction.ERROR, times=2))
    for _ in range(2):
        with armed(spec), pytest.raises(FailpointError):
            failpoint("demo.point")
    with armed(spec):
        failpoint("demo.point")
    assert [f.n for f in firings(spec.evidence_dir)] == [0, 1]


def test_pause_stalls_exactly_there(tmp_path: Path) -> None:
    with armed(plan(tmp_path, Failpoint(name="demo.slow", action=FailAction.PAUSE, seconds=0.2))):
        start = time.monotonic()
        failpoint("demo.slow")
        assert time.monotonic() - start >= 0.2


def test_crash_kills_a_process_armed_through_its_environment(tmp_path: Path) -> None:
    """What a runtime_env does for an actor: the variable is set, the process arms at import."""
    spec = plan(tmp_path, Failpoint(name="demo.crash", skip=1))
    code = ("from chaos import failpoint\nfailpoint('demo.crash')\nprint('passed', flush=True)\n"
            "failpoint('demo.crash')\nprint('survived')")
    env = {**failpoint_env(spec)["env_vars"], "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=60, cwd=str(Path(__file__).parent.parent), check=False)
    assert proc.returncode == -signal.SIGKILL and proc.stdout == "passed\n"
    (fired,) = firings(spec.evidence_dir)
    assert fired.name == "demo.crash" and fired.pid > 0


def test_failpoint_env_keeps_the_rest_of_the_runtime_env(tmp_path: Path) -> None:
    spec = plan(tmp_path, Failpoint(name="demo.point"))
    env = failpoint_env(spec, {"env_vars": {"A": "1"}, "pip": ["x"]})
    assert env["pip"] == ["x"] and env["env_vars"]["A"] == "1"
    assert FailpointPlan.from_json(env["env_vars"][FAILPOINTS_ENV]) == spec


@pytest.mark.parametrize(("options", "complaint"), [
    ({"name": "Not A Name"}, "dotted lower-case"),
    ({"name": "demo.p", "action": "crash"}, "not a FailAction"),
    ({"name": "demo.p", "skip": -1}, "`skip` must be a whole number >= 0"),
    ({"name": "demo.p", "times": 0}, "`times` must be a whole number >= 1"),
    ({"name": "demo.p", "seconds": 0}, "`seconds` must be in"),
])
def test_a_bad_failpoint_is_refused_naming_the_value(options: dict, complaint: str) -> None:
    with pytest.raises(InvalidFaultSpec, match=complaint):
        Failpoint(**options)


def test_a_bad_plan_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidFaultSpec, match="names a point twice"):
        plan(tmp_path, Failpoint(name="demo.p"), Failpoint(name="demo.p"))
    with pytest.raises(InvalidFaultSpec, match=FAILPOINTS_ENV):
        FailpointPlan.from_json(json.dumps({"points": [{"name": "demo.p"}]}))


def test_the_docs_table_every_failpoint_of_the_checkpoint_mechanism() -> None:
    from actors.checkpoint import FAILPOINTS

    page = (Path(__file__).resolve().parents[1] / "docs/how-to/checkpointed-actors.md").read_text()
    for point in FAILPOINTS:
        assert f"| `{point.name}` | {point.where}" in page, point.name
