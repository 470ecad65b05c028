"""The failpoint sweep, in-process: every failpoint × durability × checkpoint kind, crashed
with a real SIGKILL at exactly that point, then restored and checked.

Each life of the actor runs in a process forked from a clean fork server (no Ray, no test
threads), so a crash is a real one: no ``finally``, no flush, unsynced data only in the page
cache. Between lives the driver re-sends the call that was in flight, as Ray's
``max_task_retries`` would (``test_failpoint_sweep_ray.py`` has Ray do it).
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from actors import RestoreInfo
from chaos import History
from crashcases import (
    MAX_PHASES,
    Case,
    Life,
    all_cases,
    check,
    final_state,
    next_writes,
    pending,
    phase_child,
    record,
    run_life,
    tmp_paths,
)


def live(case: Case, storage: str, plan_json: str, todo: list[tuple[str, int]], *, fresh: bool,
         broken: bool) -> Life:
    """One life in a child process, its reports collected until it exits (bounded)."""
    return run_life(phase_child, (storage, plan_json, case, todo, fresh, broken), label=case.label())


def run_case(case: Case, root: Path, *, broken: bool = False) -> list[str]:
    storage, evidence = tmp_paths(root)
    plan_json = case.plan(evidence).to_json()
    history, restores, crashes = History(), [], 0
    for n in range(MAX_PHASES):
        life = live(case, storage, plan_json, pending(history) + next_writes(history), fresh=n == 0,
                    broken=broken)
        record(life, history, restores)
        if life.finished:
            break
        if life.exitcode != -signal.SIGKILL:
            return [f"{case.label()}: a life ended with exit code {life.exitcode}, not a crash"]
        crashes += 1
    else:
        return [f"{case.label()}: still crashing after {MAX_PHASES} lives"]
    keys, info, warned = final_state(case.config(storage))
    problems = check(case, history, keys, [*restores, info], evidence, crashes)
    return problems + [f"{case.label()}: the final restore warned: {w}" for w in warned]


def one_per_failpoint() -> list[Case]:
    """A case of every failpoint, rotating through each one's durabilities, kinds and skips."""
    by_point: dict[str, list[Case]] = {}
    for case in all_cases():
        by_point.setdefault(case.point, []).append(case)
    return [cases[i % len(cases)] for i, cases in enumerate(by_point.values())]


SAMPLE = one_per_failpoint()


def test_make_tests_sample_has_every_failpoint_durability_and_kind() -> None:
    assert {c.point for c in SAMPLE} == {c.point for c in all_cases()}
    assert {c.durability for c in SAMPLE} == {"policy", "wal"} and {c.incremental for c in SAMPLE} == {False, True}


# make test's budget: a case of every failpoint there, every case in make deep (CI's budget).
@pytest.mark.parametrize("case", [c if c in SAMPLE else pytest.param(c, marks=[pytest.mark.slow, pytest.mark.deep])
                                  for c in all_cases()], ids=Case.label)
def test_every_failpoint_recovers(case: Case, tmp_path: Path) -> None:
    assert run_case(case, tmp_path) == []


@pytest.mark.slow  # 19 s: make test's 10-minute budget
def test_a_store_that_renames_before_writing_is_caught_naming_the_failpoint(tmp_path: Path) -> None:
    """The planted bug (commit the folder, then write into it) passes every fault-free test;
    the sweep catches it at the points between the rename and the manifest, and only there."""
    expected = {"checkpoint.renamed", "checkpoint.file.written", "checkpoint.manifest.before"}
    caught = {}
    for i, case in enumerate(c for c in all_cases() if c.durability == "wal" and not c.incremental):
        problems = run_case(case, tmp_path / str(i), broken=True)
        if problems:
            caught[case.point] = problems[0]
    assert set(caught) == expected, caught
    assert caught["checkpoint.manifest.before"].startswith("checkpoint.manifest.before[skip=")
    assert "passed over committed checkpoints" in caught["checkpoint.manifest.before"]


def test_a_failpoint_never_reached_fails_its_case(tmp_path: Path) -> None:
    problems = run_case(Case("checkpoint.pruned", "wal", False, skip=1000), tmp_path)
    label = "checkpoint.pruned[skip=1000] wal/full"
    assert problems == [f"{label}: failpoint checkpoint.pruned was never reached (skip=1000)",
                        f"{label}: no process crashed"]


def test_the_checker_fails_a_fallback_and_a_run_without_a_crash(tmp_path: Path) -> None:
    """What a process crash must never need: a skipped checkpoint, torn log bytes."""
    case = Case("wal.append.written", "wal", False, skip=0)
    fallback = RestoreInfo(True, 2, 0, 0.0, skipped=(3,), torn_bytes=7)
    problems = check(case, History(), [], [fallback], str(tmp_path), crashes=0)
    assert [p.split(": ", 1)[1][:30] for p in problems] == [
        "failpoint wal.append.written w", "no process crashed", "restore passed over committed ",
        "restore dropped 7 torn log byt"]
