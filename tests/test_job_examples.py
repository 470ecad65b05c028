"""The examples users copy, each run as `raychaos run --job` under its schedule on an embedded
cluster: with the script's fault tolerance on it passes (exit 0); with it off
(``EXAMPLE_NO_FT=1``: ``max_failures=0``) it exits 1 naming the broken verdict.

make slow runs the Tune example with its fault tolerance (the exit-0 path end to end); make deep
runs the other three, to keep CI's time (the exit-1 path is pinned in make test on recorded jobs,
and Train's fault tolerance switched off by the train-torch-ddp scenario's plant in make deep)."""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import pytest

from scenarios.cli import EXIT_DEVIATED
from scenarios.workloads.user._job import AGENT_PORT, agent_port_taken, port_holder
from tests.bounded_cli import Finished, run_bounded

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
#: The jobs the suite plants mistakes in.
JOBS = Path(__file__).resolve().parent / "jobs"
RAYCHAOS = Path(sys.executable).parent / "raychaos"
#: Seconds one CLI run (cluster, fault-free job, job under faults, teardown) may take.
RUN_BOUND = 540
#: Seconds a CLI interrupted at its bound has to heal, stop its job and its embedded cluster
#: before it is killed with its process group (the marker's bound leaves room for both).
INTERRUPT_GRACE = 90

# The session's shared cluster (started by an earlier module) holds the agent's port: it stops first.
pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.usefixtures("no_shared_cluster")]


@pytest.fixture(autouse=True)
def _agent_port_free() -> None:
    """Each run's embedded cluster needs the dashboard agent's port, which the cluster of the
    test before may hold a while after its teardown: waited for (bounded), the wait printed."""
    start = time.monotonic()
    assert not agent_port_taken(patience=90.0), f"port {AGENT_PORT} still taken after 90 s by {port_holder()}"
    print(f"port {AGENT_PORT} free after {time.monotonic() - start:.1f} s")


def _run_job(example: str, command: str, report: Path, *, fault_tolerance: bool) -> Finished:
    env = {**os.environ, "EXAMPLE_NO_FT": "0" if fault_tolerance else "1"}
    out = run_bounded([str(RAYCHAOS), "run", "--job", command, "schedule.toml", "--report", str(report)],
                      bound=RUN_BOUND, grace=INTERRUPT_GRACE, cwd=EXAMPLES / example, env=env)
    assert not out.timed_out, f"over {RUN_BOUND} s, interrupted: {out.stdout[-4000:]}{out.stderr[-2000:]}"
    return out


def _verdicts(report: Path) -> dict[str, bool]:
    """The run under faults' verdicts, from the report's summary (their details printed: the
    figures `pytest -s` shows)."""
    summary = json.loads((report / "summary.json").read_text(encoding="utf-8"))
    chaos = next(r for r in summary["runs"] if r["label"] == "chaos")
    for v in chaos["verdicts"]:
        print(f"{v['name']}: {v['held']}: {v['detail'][:300]}")
    return {v["name"]: v["held"] for v in chaos["verdicts"]}


def _passes(example: str, command: str, report: Path) -> None:
    out = _run_job(example, command, report, fault_tolerance=True)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert _verdicts(report) == {"job_succeeded": True, "within_ratio": True, "fault_seen": True}


def _fails_without_fault_tolerance(example: str, command: str, report: Path) -> None:
    out = _run_job(example, command, report, fault_tolerance=False)
    assert out.returncode == EXIT_DEVIATED, out.stdout[-4000:] + out.stderr[-2000:]
    verdicts = _verdicts(report)
    assert verdicts["job_succeeded"] is False and verdicts["fault_seen"] is False, verdicts
    assert "job_succeeded" in out.stdout and "BROKEN" in out.stdout


@pytest.mark.deep  # CI's hour: make slow runs the Tune example given up under a kill (below)
@pytest.mark.timeout(RUN_BOUND + 120)
def test_tune_example_survives_a_killed_trial(tmp_path: Path) -> None:
    before = _tune_folders()
    _passes("tune", "python tune_search.py", tmp_path)
    # Both runs' (the twin's and the one under faults') Tune results were removed after them.
    assert _tune_folders() == before, sorted(_tune_folders() - before)


@pytest.mark.timeout(RUN_BOUND + 120)
def test_a_tune_trial_given_up_while_a_pending_one_takes_its_slot_is_no_answer_to_the_kill(tmp_path: Path) -> None:
    """Three trials on two slots, max_failures=0, a script that never reads its errors: the
    killed trial is given up and the pending one starts in its slot, as many trials alive as
    before, and the job succeeds and is fast. Counting the class's live actors passed it (exit 0);
    only the killed trial restored (Tune's restore on a new actor) answers the kill."""
    out = run_bounded([str(RAYCHAOS), "run", "--job", "python tune_gives_up.py", "tune-gives-up.toml",
                       "--report", str(tmp_path)], bound=RUN_BOUND, grace=INTERRUPT_GRACE, cwd=JOBS)
    assert not out.timed_out, f"over {RUN_BOUND} s, interrupted: {out.stdout[-4000:]}{out.stderr[-2000:]}"
    verdicts = _verdicts(tmp_path)
    assert out.returncode == EXIT_DEVIATED, out.stdout[-4000:] + out.stderr[-2000:]
    assert verdicts == {"job_succeeded": True, "within_ratio": True, "fault_seen": False}, verdicts


def _tune_folders() -> set[Path]:
    return set(Path(tempfile.gettempdir()).glob("example-tune-*"))


@pytest.mark.deep
@pytest.mark.timeout(RUN_BOUND + 120)
def test_train_example_without_fault_tolerance_fails_job_succeeded(tmp_path: Path) -> None:
    _fails_without_fault_tolerance("train", "python train.py", tmp_path)


@pytest.mark.deep
@pytest.mark.timeout(RUN_BOUND + 120)
def test_train_example_survives_a_killed_worker(tmp_path: Path) -> None:
    _passes("train", "python train.py", tmp_path)


@pytest.mark.deep
@pytest.mark.timeout(RUN_BOUND + 120)
def test_tune_example_without_fault_tolerance_fails_job_succeeded(tmp_path: Path) -> None:
    _fails_without_fault_tolerance("tune", "python tune_search.py", tmp_path)
