"""The faults beyond the reference chapter, on real Ray processes: each one seen to take effect,
and seen undone by its heal (a limit read back, a filesystem emptied, a node resumed)."""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
import ray

from actors import CheckpointedCounter
from chaos import ActorTarget, Chaos, FillDisk, KillGcs, LimitOpenFiles, wait_until
from chaos.cluster import ClusterHandle, capped_filesystem, free_bytes
from chaos.errors import InvalidFaultSpec, MutationNotLogged, UnsafeTarget
from conftest import CALL_TIMEOUT

pytestmark = pytest.mark.ray


@ray.remote(max_restarts=-1, max_task_retries=-1)
class Opener:
    """Opens a file per call: what a process that leaks or needs descriptors does."""

    def __init__(self, folder: str) -> None:
        self.folder, self.held = folder, []

    def open_one(self) -> int:
        f = open(os.path.join(self.folder, f"f{len(self.held)}"), "w")  # noqa: SIM115 - held on purpose
        self.held.append(f)
        return len(self.held)

    def pid(self) -> int:
        return os.getpid()


@pytest.mark.slow  # make test's 10-minute budget (a fresh clone: 587 s wall with it)
@pytest.mark.deep  # CI's budget: make slow runs the open-files scenario
def test_an_open_file_limit_surfaces_emfile_through_ray_get_and_heals(
        ray_cluster: ClusterHandle, tmp_path: Any) -> None:
    chaos, opener = Chaos(address=ray_cluster.address), Opener.remote(str(tmp_path))
    pid = ray.get(opener.pid.remote(), timeout=CALL_TIMEOUT)
    before = psutil.Process(pid).rlimit(psutil.RLIMIT_NOFILE)
    with chaos.inject(LimitOpenFiles(ActorTarget.of(opener), seconds=30, headroom=2)) as injection:
        assert injection.processes[0].pid == pid
        assert psutil.Process(pid).rlimit(psutil.RLIMIT_NOFILE)[0] < before[0]
        opened = [ray.get(opener.open_one.remote(), timeout=CALL_TIMEOUT) for _ in range(2)]
        with pytest.raises(OSError) as caught:  # RayTaskError(OSError): the cause's type too
            ray.get(opener.open_one.remote(), timeout=CALL_TIMEOUT)
        # Ray's dual type is an OSError without the errno: the cause carries it.
        assert caught.value.cause.errno == errno.EMFILE, caught.value.cause  # type: ignore[attr-defined]
    assert psutil.Process(pid).rlimit(psutil.RLIMIT_NOFILE) == before
    assert ray.get(opener.open_one.remote(), timeout=CALL_TIMEOUT) == opened[-1] + 1
    assert [e.kind for e in chaos.journal.events] == ["inject", "heal"]
    ray.kill(opener)


@pytest.fixture
def disk() -> Iterator[str]:
    with capped_filesystem(8) as root:
        yield root


@pytest.mark.slow  # the in-process ENOSPC tests (tests/test_full_disk.py) stay in make test
@pytest.mark.deep  # CI's budget: make slow runs the full-disk scenario
def test_a_full_disk_fails_the_unlogged_add_loses_nothing_acknowledged_and_heals(
        ray_cluster: ClusterHandle, disk: str) -> None:
    counter = ray.remote(max_restarts=-1, max_task_retries=-1)(CheckpointedCounter).remote(
        f"{disk}/ckpt", durability="wal", every_n=50)
    chaos, acked, failed = Chaos(address=ray_cluster.address), 0, 0
    for seq in range(20):
        acked = ray.get(counter.add.remote(1, writer_id="w", seq=seq), timeout=CALL_TIMEOUT)
    with chaos.inject(FillDisk(disk, seconds=30)):
        assert free_bytes(disk) == 0
        for seq in range(20, 20 + os.sysconf("SC_PAGE_SIZE")):  # the log's page fills, then it fails
            try:
                acked = ray.get(counter.add.remote(1, writer_id="w", seq=seq), timeout=CALL_TIMEOUT)
            except MutationNotLogged as exc:  # RayTaskError(MutationNotLogged)
                failed += 1
                assert exc.cause.undone, exc.cause  # type: ignore[attr-defined]
                break
    assert failed == 1 and free_bytes(disk) > 0
    acked = ray.get(counter.add.remote(1, writer_id="w", seq=10**6), timeout=CALL_TIMEOUT)
    os.kill(ray.get(counter.pid.remote(), timeout=CALL_TIMEOUT), 9)
    assert ray.get(counter.get.remote(), timeout=CALL_TIMEOUT) == acked  # restored: every ack
    ray.kill(counter)


def test_a_disk_fault_refuses_anything_but_a_small_tmpfs(ray_cluster: ClusterHandle, tmp_path: Any) -> None:
    chaos = Chaos(address=ray_cluster.address)
    with pytest.raises(UnsafeTarget, match="never the host's disk"), \
            chaos.inject(FillDisk(str(tmp_path), seconds=1)):
        pass
    with pytest.raises(InvalidFaultSpec, match="absolute directory"):
        FillDisk("relative/dir", seconds=1)


def test_kill_gcs_needs_a_cluster_this_process_started(ray_cluster: ClusterHandle) -> None:
    with pytest.raises(InvalidFaultSpec, match="not started by this process"), \
            Chaos(address="127.0.0.1:1").inject(KillGcs(seconds=1)):
        pass


HEAD_LOSS_DRIVER = """
import sys, time, ray
from chaos import Chaos, KillGcs, local_cluster
from chaos.cluster import TEST_SYSTEM_CONFIG
config = {**TEST_SYSTEM_CONFIG, "gcs_rpc_server_reconnect_timeout_s": %d}
with local_cluster(nodes=2, num_cpus=1, log_to_driver=False, system_config=config) as cluster:
    print("temp_dir", cluster.temp_dir, flush=True)
    def nap(seconds):
        time.sleep(seconds)
    slow = ray.remote(max_retries=0, num_cpus=0)(nap)
    ray.get(slow.remote(0))
    ref = slow.remote(120)
    with Chaos(address=cluster.address).inject(KillGcs(restart=False)):
        print("killed", time.monotonic(), flush=True)
    ray.get(ref, timeout=300)
    print("ray.get returned: the head's loss went unnoticed", flush=True)
"""


@pytest.mark.slow
@pytest.mark.deep  # Ray's behaviour without GCS fault tolerance, measured; make slow restarts a head on Redis
def test_without_redis_the_heads_loss_ends_the_driver_and_the_cluster_within_a_bound(tmp_path: Any) -> None:
    """No GCS fault tolerance: the GCS dies for good. Nothing may hang silently: the driver
    blocked in ray.get must end (Ray 2.60 exits the process: "Failed to connect to GCS within
    N seconds"), and every process of that cluster must exit on its own."""
    import subprocess
    import sys
    import time

    from chaos.cluster import ray_processes, reap

    reconnect = 5
    before = {p.pid for p in ray_processes()}  # the session's own cluster, if any
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-c", HEAD_LOSS_DRIVER % reconnect], capture_output=True,
                         text=True, timeout=240, cwd=os.path.dirname(os.path.dirname(__file__)), check=False)
    lines = dict(line.split(" ", 1) for line in out.stdout.splitlines() if " " in line)
    assert "killed" in lines, out.stdout + out.stderr[-3000:]
    ended = time.monotonic() - start
    assert out.returncode != 0 and "ray.get returned" not in out.stdout
    assert f"Failed to connect to GCS within {reconnect} seconds" in out.stderr, out.stderr[-3000:]

    def orphans() -> list[psutil.Process]:  # the headless cluster's: nobody tears it down
        return [p for p in ray_processes() if p.pid not in before]

    try:
        gone = wait_until(lambda: not orphans() and time.monotonic(), timeout=120,
                          what="the headless cluster's processes to exit")
    finally:
        reap(orphans(), timeout=5)
        # Ray ends the driver itself: local_cluster's exit, which removes its folder, never runs.
        shutil.rmtree(lines.get("temp_dir", "").strip() or "/nonexistent", ignore_errors=True)
    killed = float(lines["killed"])  # CLOCK_MONOTONIC is one clock for every process here
    assert ended < 60, ended
    print(f"after the GCS's kill: the driver ended {start + ended - killed:.1f} s later, the "
          f"cluster's last process {gone - killed:.1f} s later")


GCS_HEALED_FROM_A_THREAD = """
import os, threading, psutil, ray
from chaos import Chaos, KillGcs, local_cluster
from chaos.cluster import redis_server
from chaos.cluster._cluster import head_of
with redis_server() as redis, local_cluster(nodes=1, num_cpus=1, redis_address=redis, log_to_driver=False) as cluster:
    def kill_and_heal():
        with Chaos(address=cluster.address).inject(KillGcs(seconds=0.5)):
            pass
    healer = threading.Thread(target=kill_and_heal, name="healer")
    healer.start()
    healer.join(timeout=90)
    assert not healer.is_alive(), "the heal did not end"
    gcs = psutil.Process(head_of(cluster.address).gcs_pid())
    def pid():
        return os.getpid()
    fresh = ray.remote(num_cpus=0, runtime_env={"env_vars": {"RAYCHAOS_FRESH_WORKER": "1"}})(pid)
    print("fresh worker", ray.get(fresh.remote(), timeout=30), "GCS", gcs.status(), flush=True)
"""


@pytest.mark.slow  # make test's 10 minutes (21 s); the gcs-restart scenario is there too
@pytest.mark.deep  # CI's budget: make slow runs the gcs-restart scenario
def test_a_gcs_restarted_by_a_thread_that_then_ends_keeps_serving() -> None:
    """Ray forks the GCS with PR_SET_PDEATHSIG, tied to the forking thread: healed from the
    schedule's thread, which ends after the last fault, the restarted GCS was SIGKILLed a
    second later (CI: a task stuck forever, or the driver ended after 60 s). A task in a new
    worker process (which must register with the GCS) after that thread ended pins it. Its
    own process: the session's cluster must not be this driver's."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", GCS_HEALED_FROM_A_THREAD], capture_output=True, text=True,
                         timeout=180, cwd=os.path.dirname(os.path.dirname(__file__)), check=False)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert "fresh worker" in out.stdout and "GCS zombie" not in out.stdout, out.stdout
