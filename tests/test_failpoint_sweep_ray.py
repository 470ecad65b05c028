"""The failpoint sweep on real Ray: the actor armed through its ``runtime_env``, two writers
keeping calls in flight with ``max_task_retries=-1``, Ray restarting the actor under
``max_restarts`` and delivering the calls the crash cut off.

``make slow`` runs one case per failpoint (durabilities and checkpoint kinds rotating over
them); ``make thorough`` runs every point × durability × kind at two skips.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import ray
from ray import cloudpickle

from actors import ReplayBufferActor
from actors.checkpoint import FAILPOINTS
from chaos import History
from chaos.cluster import ClusterHandle
from chaos.failpoints import failpoint_env, firings
from chaos.history import OpStatus, drive_writers
from conftest import CALL_TIMEOUT, _depth
from crashcases import (
    CAPACITY,
    WRITERS,
    WRITES,
    Case,
    all_cases,
    check,
    max_skip,
    row,
    stored_keys,
    tmp_paths,
)

cloudpickle.register_pickle_by_value(sys.modules["crashcases"])  # workers cannot import tests/

pytestmark = pytest.mark.property
MAX_RESTARTS = 3


def sampled_cases() -> list[Case]:
    """One case per failpoint, rotating durability, kind and skip so each appears."""
    cases = []
    for i, point in enumerate(FAILPOINTS):
        durabilities = sorted(point.durabilities)
        cases.append(Case(point.name, durabilities[i % len(durabilities)], bool(i // 2 % 2),
                          min(i % 3, max_skip(point.name))))
    return cases


CASES = list(all_cases()) if _depth() >= 10 else sampled_cases()


def start(case: Case, storage: str, evidence: str) -> Any:
    cls = ray.remote(max_restarts=MAX_RESTARTS, max_task_retries=-1,
                     runtime_env=failpoint_env(case.plan(evidence)))(ReplayBufferActor)
    return cls.remote(CAPACITY, checkpoint=case.config(storage), seed=0)


def test_the_sweep_samples_every_failpoint_durability_and_kind() -> None:
    assert {c.point for c in sampled_cases()} == {p.name for p in FAILPOINTS}
    assert {(c.durability, c.incremental) for c in sampled_cases()} == {
        (d, k) for d in ("policy", "wal") for k in (False, True)}


@pytest.mark.slow  # make test's 10 minutes: the in-process sweep stays there
@pytest.mark.deep  # CI's budget: make slow restores a Ray actor after a crash and a power loss (test_power_loss_ray.py)
@pytest.mark.parametrize("case", CASES, ids=Case.label)
def test_every_failpoint_recovers_on_ray(ray_cluster: ClusterHandle, case: Case, tmp_path: Path) -> None:
    storage, evidence = tmp_paths(tmp_path)
    actor, history = start(case, storage, evidence), History()
    try:
        errors = drive_writers(
            lambda w, s: actor.add.remote(row(w, s), writer_id=w, seq=s), history,
            writers=WRITERS, writes=WRITES, window=3, timeout=CALL_TIMEOUT)
        assert not errors, f"{case.label()}: writers failed: {errors}"
        assert history.count(OpStatus.OK) == len(WRITERS) * WRITES
        stats = ray.get(actor.stats.remote(), timeout=CALL_TIMEOUT)
        columns = ray.get([actor.column.remote("w"), actor.column.remote("s")], timeout=CALL_TIMEOUT)
    finally:
        ray.kill(actor)
    crashes = len(firings(evidence))
    assert stats.checkpoint.restore.restored, f"{case.label()}: the actor never restored"
    assert check(case, history, stored_keys(columns), [stats.checkpoint.restore], evidence, crashes) == []
