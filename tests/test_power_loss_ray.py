"""The power-loss sweep on real Ray: the actor's storage on a fault filesystem, armed through
its ``runtime_env``, two writers keeping calls in flight (``max_task_retries=-1``). When the
failpoint SIGKILLs the actor, the driver stalls the mount (so the process Ray restarts cannot
read yet), drops every unsynced write once the killed process is gone, and releases the
stall: Ray's restart then restores from what a machine crash would have left."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

import psutil
import pytest
import ray
from ray import cloudpickle

from actors import CheckpointConfig, ReplayBufferActor
from actors import _failpoints as fp
from chaos import History, wait_until
from chaos.cluster import ClusterHandle
from chaos.disks import FaultFS, PowerLossResult, fault_filesystem
from chaos.failpoints import failpoint_env, firings
from chaos.history import OpStatus, drive_writers
from conftest import CALL_TIMEOUT, ci_sample
from crashcases import CAPACITY, EVERY_N, WRITERS, WRITES, Case, check, row, stored_keys

cloudpickle.register_pickle_by_value(sys.modules["crashcases"])  # workers cannot import tests/

pytestmark = pytest.mark.skipif(not Path("/dev/fuse").exists(), reason="needs /dev/fuse")
MAX_RESTARTS = 3
CASES = [Case(fp.WAL_WRITTEN, "wal", False, 5), Case(fp.CHECKPOINT_PRUNE, "wal", False, 1),
         Case(fp.MUTATION_APPLIED, "policy", False, 5)]


def config(case: Case, storage: str) -> CheckpointConfig:
    return CheckpointConfig(storage=storage, durability=case.durability, every_n=EVERY_N, incremental=case.incremental,
                            full_every=3, keep=2, fsync_every=1, fsync_interval=3600.0)


def cut_power_at_each_crash(fs: FaultFS, evidence: str, stop: threading.Event,
                            cuts: list[PowerLossResult]) -> None:
    """At each failpoint firing: stall the mount, wait for the killed process to be gone, drop
    the unsynced writes, release the stall."""
    seen = 0
    while not stop.is_set():
        fired = firings(evidence)
        if len(fired) > seen:
            fs.stall(seconds=30)
            try:
                wait_until(lambda: not psutil.pid_exists(fired[-1].pid), timeout=10, interval=0.01,
                           what="the killed actor's process gone")
                cuts.append(fs.power_loss())
            finally:
                fs.heal("stall")
            seen = len(fired)
        stop.wait(0.005)  # the watcher's poll: the restart takes ~0.5 s, the stall comes well before


@pytest.mark.slow
# CI's budget: make slow runs the WAL's case, make deep the three.
@pytest.mark.parametrize("case", ci_sample(CASES, keep={CASES[0]}), ids=Case.label)
def test_a_ray_actor_recovers_after_a_crash_and_a_power_loss(ray_cluster: ClusterHandle, case: Case,
                                                             tmp_path: Path) -> None:
    evidence, history, cuts, stop = str(tmp_path / "evidence"), History(), [], threading.Event()
    with fault_filesystem() as fs:
        storage = Path(fs.mount) / "ckpt"
        storage.mkdir()
        fd = os.open(fs.mount, os.O_RDONLY | os.O_DIRECTORY)  # its name durable, as a user's would be
        os.fsync(fd)
        os.close(fd)
        cls = ray.remote(max_restarts=MAX_RESTARTS, max_task_retries=-1,
                         runtime_env=failpoint_env(case.plan(evidence)))(ReplayBufferActor)
        actor: Any = cls.remote(CAPACITY, checkpoint=config(case, str(storage)), seed=0)
        watcher = threading.Thread(target=cut_power_at_each_crash, args=(fs, evidence, stop, cuts), daemon=True)
        watcher.start()
        try:
            errors = drive_writers(lambda w, s: actor.add.remote(row(w, s), writer_id=w, seq=s), history,
                                   writers=WRITERS, writes=WRITES, window=3, timeout=CALL_TIMEOUT)
            assert not errors, f"{case.label()}: writers failed: {errors}"
            assert history.count(OpStatus.OK) == len(WRITERS) * WRITES
            ray.get(actor.checkpoint.remote(), timeout=CALL_TIMEOUT)  # committed: a power loss must keep it
            stats = ray.get(actor.stats.remote(), timeout=CALL_TIMEOUT)
            columns = ray.get([actor.column.remote("w"), actor.column.remote("s")], timeout=CALL_TIMEOUT)
        finally:
            stop.set()
            watcher.join(30)
            ray.kill(actor)
        # The restart may have read before a cut landed: judge again what a last power loss
        # leaves, restored in this process, as the in-process sweep does.
        wait_until(lambda: not any(_holds(p, fs.mount) for p in psutil.process_iter()), timeout=30,
                   what="the killed actor's files closed")
        fs.power_loss()
        last = ReplayBufferActor(CAPACITY, checkpoint=config(case, str(storage)), restore="always", seed=0)
        stored = stored_keys((last.column("w"), last.column("s"))) if last.size() else []
    crashes = len(firings(evidence))
    assert crashes >= 1 and len(cuts) == crashes, (crashes, cuts)
    assert stats.checkpoint.restore.restored, f"{case.label()}: the actor never restored"
    assert check(case, history, stored_keys(columns), [stats.checkpoint.restore], evidence, crashes) == []
    assert check(case, history, stored, [stats.checkpoint.restore, last.restore_info], evidence, crashes) == []


def _holds(proc: psutil.Process, mount: str) -> bool:
    """Whether ``proc`` has a file under ``mount`` open (a live actor would write after the cut)."""
    try:
        return any(f.path.startswith(mount) for f in proc.open_files())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False
