"""slow-checkpoint-disk: each invariant's verdict function held on a run's shape and red on a
planted one (Ray-free), the run's storage mounted through a fault filesystem with its disk
faults aimed there, and the scenario itself on Ray (slow tier) with its fault-free twin."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from chaos import FaultKind, Schedule
from chaos._faults import STORAGE, FaultStatus, FillDisk, SlowDisk
from chaos._fusefs import fuse_mounts_left
from chaos._schedule import ScheduledFault
from chaos.cluster import ClusterHandle
from scenarios import load_scenario, run_scenario
from scenarios.model._records import RunLabel, RunStatus
from scenarios.runner._disk_storage import aim_disk_faults, storage_on_faultfs
from scenarios.workloads._disk import (
    Call,
    CheckpointSample,
    checkpoint_age_bounded,
    kept_serving,
    oldest_checkpoint_age,
    slowed_by_disk,
)
from scenarios.workloads._surface import Ack

# A run's shape: adds of a few ms, slowed to 0.2-0.3 s during the fault, one checkpoint every
# few adds (the count rising every second or so).
CALLS = [Call(t=i * 0.1, seconds=0.25 if 20 <= i < 40 else 0.004, ack=Ack.ACKED) for i in range(60)]
SAMPLES = [CheckpointSample(t=i * 0.5, checkpoints=i // 2) for i in range(20)]


def test_kept_serving_holds_on_slowed_calls_and_breaks_on_a_hung_or_failed_one() -> None:
    assert kept_serving(CALLS, bound=5.0).held
    hung = [*CALLS[:30], Call(3.0, 7.5, Ack.ACKED), *CALLS[31:]]
    assert not kept_serving(hung, bound=5.0).held and "slowest in 7.50 s" in kept_serving(hung, bound=5.0).detail
    failed = [*CALLS[:30], Call(3.0, 0.2, Ack.UNKNOWN), *CALLS[31:]]
    verdict = kept_serving(failed, bound=5.0)
    assert not verdict.held and "59 of 60 adds acknowledged" in verdict.detail and "unknown" in verdict.detail
    assert not kept_serving([], bound=5.0).held  # no add: nothing checked


def test_slowed_by_disk_holds_when_an_add_met_the_latency_and_breaks_on_a_fault_free_run() -> None:
    assert slowed_by_disk(CALLS, at_least=0.15, since=1.5).held
    twin = [Call(c.t, 0.004, c.ack) for c in CALLS]  # the fault-free twin: no add slowed
    verdict = slowed_by_disk(twin, at_least=0.15, since=1.5)
    assert not verdict.held and "0 of 60 adds took >= 0.15 s" in verdict.detail
    # Slow adds, but no slow disk confirmed (the twin on a busy host), or all before it: no fault bit.
    assert not slowed_by_disk(CALLS, at_least=0.15, since=None).held
    assert not slowed_by_disk(CALLS, at_least=0.15, since=4.5).held


def test_the_oldest_checkpoint_age_runs_from_each_commit_seen_to_the_next_or_the_end() -> None:
    samples = [CheckpointSample(0.0, 1), CheckpointSample(1.0, 2), CheckpointSample(5.0, 2), CheckpointSample(6.0, 3)]
    assert oldest_checkpoint_age(samples, end=7.0) == 5.0  # 1.0 -> 6.0
    assert oldest_checkpoint_age(samples, end=20.0) == 14.0  # 6.0 -> the end
    assert oldest_checkpoint_age([], end=3.0) == 3.0


def test_checkpoint_age_bounded_holds_while_checkpoints_come_and_breaks_on_a_gap_or_none() -> None:
    assert checkpoint_age_bounded(SAMPLES, end=9.5, bound=8.0).held
    stalled = [s if s.t < 2 else CheckpointSample(s.t, 1) for s in SAMPLES]  # no commit after 1.0 s
    verdict = checkpoint_age_bounded(stalled, end=9.5, bound=8.0)
    assert not verdict.held and "at most 8.50 s old" in verdict.detail
    never = [CheckpointSample(s.t, 4) for s in SAMPLES]
    assert not checkpoint_age_bounded(never, end=9.5, bound=100.0).held  # no commit: nothing checked


def test_disk_faults_on_the_storage_are_aimed_at_the_runs_mount_and_nothing_else() -> None:
    scenario = load_scenario("slow-checkpoint-disk")
    extra = (SlowDisk("/elsewhere", seconds=1), FillDisk(STORAGE, seconds=1))
    with_others = replace(scenario, schedule=Schedule((*scenario.schedule.entries,
                                                       *(ScheduledFault(5, f) for f in extra))))
    aimed = [e.fault for e in aim_disk_faults(with_others, "/run/mnt").schedule.entries]
    assert aimed == [SlowDisk("/run/mnt", seconds=5, latency=0.2), *extra]


@pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse")
def test_the_runs_storage_is_mounted_through_a_fault_filesystem_and_unmounted_after(tmp_path: Path) -> None:
    scenario = load_scenario("slow-checkpoint-disk")
    root = str(tmp_path / "chaos")
    with storage_on_faultfs(scenario, root) as storage:
        assert storage in fuse_mounts_left() and storage != root
        Path(storage, "f").write_bytes(b"1")
    assert storage not in fuse_mounts_left()
    assert Path(root, "f").read_bytes() == b"1"  # written through to the backing folder
    with storage_on_faultfs(replace(scenario, storage_faultfs=False), root) as plain:
        assert plain == root


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse")
def test_the_scenario_holds_on_a_slow_disk_and_its_fault_free_twin_misses_the_slowdown(
        ray_cluster: ClusterHandle) -> None:
    missed = twin_misses(ray_cluster, "slow-checkpoint-disk", FaultKind.SLOW_DISK)
    assert missed == {"slowed_by_disk"}


def twin_misses(ray_cluster: ClusterHandle, name: str, kind: FaultKind) -> set[str]:
    """Run the disk scenario ``name`` and its fault-free twin: the chaos run holds every verdict
    with its one fault injected, the twin completes, no mount is left. Returns the verdicts the
    twin failed (the fault's traces it missed)."""
    mounted = fuse_mounts_left()
    baseline, chaos = run_scenario(load_scenario(name), address=ray_cluster.address, baseline=True)
    assert chaos.label is RunLabel.CHAOS and not chaos.deviated, (chaos.error, chaos.verdicts, chaos.faults)
    (fault,) = chaos.faults
    assert fault.kind is kind and fault.status is FaultStatus.INJECTED
    assert baseline.label is RunLabel.BASELINE and baseline.status is RunStatus.COMPLETED
    assert fuse_mounts_left() == mounted, "a run's fault filesystem is still mounted"
    return {v.name for v in baseline.verdicts if not v.held}
