"""Ray's own account of a run (the ``ray …`` metrics compare shows), read from a real cluster:
retries are the run's own and still read whole when the cluster has more tasks than one State
API listing holds (a test session that reuses its driver), and unknown when Ray cannot say."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import ray

from chaos import wait_until
from chaos.cluster import ClusterHandle
from scenarios.runner import _ray_events
from scenarios.runner._ray_events import RETRIES, RayAccount, ray_account, ray_events


@ray.remote(max_retries=2)
def _slow(pid_file: str) -> int:
    import time

    with open(pid_file, "a", encoding="utf-8") as out:
        out.write(f"{os.getpid()}\n")
    time.sleep(1.5)  # the window in which the test kills this attempt's worker
    return 1


@ray.remote
def _quick() -> int:
    return 1


def _killed_once(tmp_path: Path, index: int) -> None:
    pid_file = tmp_path / f"pid-{index}"
    pid_file.touch()
    ref = _slow.remote(str(pid_file))
    pid = wait_until(lambda: pid_file.read_text(encoding="utf-8").split(), timeout=30, what="the attempt started")[0]
    os.kill(int(pid), signal.SIGKILL)
    assert ray.get(ref, timeout=60) == 1


def test_retries_are_the_runs_own_and_read_whole_past_a_listings_limit(
        ray_cluster: ClusterHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _killed_once(tmp_path, 0)  # before the run: not the run's
    # A listing holds a few rows more than the session's failed attempts; the job gets more tasks.
    limit = len(_ray_events._failed_attempts(ray_cluster.address)) + 20
    monkeypatch.setattr(_ray_events, "LIMIT", limit)
    ray.get([_quick.remote() for _ in range(limit + 50)], timeout=60)
    before = ray_account(ray_cluster.address, "none")
    for i in (1, 2):
        _killed_once(tmp_path, i)
    # Task events reach the GCS about once a second: read until both retries are there, bounded.
    after = wait_until(lambda: (a := ray_account(ray_cluster.address, "none", since=before)).retried == 2 and a,
                       timeout=20, what="two retries in Ray's account")
    assert ray_events(before, after)[RETRIES] == 2.0
    assert before.retried is None  # an account read against nothing has no retries of its own


def test_a_figure_ray_could_not_give_whole_is_unknown_not_zero(
        ray_cluster: ClusterHandle, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_ray_events, "MAX_LOOKUPS", 0)  # any failed task is one too many to look up
    before = RayAccount(counts={"ray actor restarts": 2, "ray nodes dead": 1}, failed=frozenset())
    failed = frozenset({("t1", 0)})
    assert _ray_events._retried(ray_cluster.address, frozenset()) == 0
    with pytest.raises(OverflowError, match="1 failed tasks to look up"):
        _ray_events._retried(ray_cluster.address, failed)
    after = RayAccount(counts={"ray actor restarts": 5})  # the node listing and the retries failed
    assert ray_events(before, after) == {"ray actor restarts": 3.0}
    assert ray_account("127.0.0.1:1", "none", bound=0.5) == RayAccount()  # no State API in time


def test_retries_are_unknown_when_failures_seen_at_the_start_are_gone(ray_cluster: ClusterHandle) -> None:
    # Ray's task events lost between the two reads (a GCS restart without Redis, an eviction):
    # failures of the run may be lost as well, so no count is given.
    since = RayAccount(counts={}, failed=frozenset({("a-task-the-gcs-forgot", 0)}))
    after = ray_account(ray_cluster.address, "none", since=since)
    assert after.failed is not None and after.retried is None
    assert RETRIES not in ray_events(since, after) and "ray nodes dead" in after.counts
    # Some old ones evicted (the GCS drops its oldest events first), one still there: not a reset.
    old, kept, new = ("evicted", 0), ("kept", 0), ("the run's", 0)
    assert not _ray_events._forgotten(frozenset({old, kept}), frozenset({kept, new}))
    assert _ray_events._forgotten(frozenset({old}), frozenset({new}))
    assert not _ray_events._forgotten(frozenset(), frozenset({new}))  # nothing to tell a reset by


def test_retries_after_a_fault_that_restarts_the_gcs_are_unknown() -> None:
    from chaos import FaultKind
    from chaos.engine import fault_specs

    forgetful = {kind for kind, spec in fault_specs().items() if spec.forgets_task_events}
    assert forgetful == {FaultKind.KILL_GCS, FaultKind.KILL_REDIS, FaultKind.REDIS_CLIENT_KILL,
                         FaultKind.REDIS_IDLE_TIMEOUT}
    before = RayAccount(counts={"ray nodes dead": 0}, failed=frozenset())
    after = RayAccount(counts={"ray nodes dead": 0}, failed=frozenset({("t", 0)}), retried=1)
    assert ray_events(before, after) == {"ray nodes dead": 0.0, RETRIES: 1.0}
    assert ray_events(before, after, task_events_kept=False) == {"ray nodes dead": 0.0}
    from scenarios.runner._run import _forgets_task_events

    # Ray's RPC failure knob is recorded as a fault of the run but has no spec: it restarts nothing.
    assert _forgets_task_events(FaultKind.KILL_GCS) and not _forgets_task_events(FaultKind.RPC_FAILURE)
