"""slow-checkpoint-disk: each invariant's verdict function held on a run's shape and red on a
planted one (Ray-free), the run's storage mounted through a fault filesystem with its disk
faults aimed there, and the scenario itself on Ray (slow tier) with its fault-free twin."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from chaos import FaultKind, Schedule
from chaos._faults import STORAGE, FaultStatus
from chaos._resource_faults import FillDisk
from chaos._schedule import ScheduledFault
from chaos.cluster import ClusterHandle
from chaos.disks._faults import SlowDisk
from chaos.disks._fusefs import fuse_mounts_left
from scenarios import load_scenario, run_scenario
from scenarios.model._records import RunLabel, RunResult, RunStatus, Validity
from scenarios.model._workload import FaultWindow
from scenarios.runner._disk_storage import aim_disk_faults, storage_on_faultfs
from scenarios.runner._run import against_twin, twin_met, twin_verdicts
from scenarios.workloads._kit import Ack
from scenarios.workloads.disk._checkpoint_disk import (
    Call,
    CheckpointSample,
    SlowCheckpointDisk,
    checkpoint_age_bounded,
    kept_serving,
    oldest_checkpoint_age,
    slowed_by_disk,
)

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


#: The slow disk's window in that shape: confirmed at 2.0 s, healed at 4.0 s.
ON = [FaultWindow(FaultKind.SLOW_DISK, 2.0, 4.0)]


def test_slowed_by_disk_holds_when_an_add_met_the_latency_and_breaks_on_a_fault_free_run() -> None:
    assert slowed_by_disk(CALLS, at_least=0.15, windows=ON).held
    twin = [Call(c.t, 0.004, c.ack) for c in CALLS]  # the fault-free twin: no add slowed
    planned = [FaultWindow(FaultKind.SLOW_DISK, 2.0, 4.0, planned=True)]  # measured over its own window
    verdict = slowed_by_disk(twin, at_least=0.15, windows=planned)
    assert not verdict.held and "0 of the 20 adds started in [2.00, 4.00) s took >= 0.15 s" in verdict.detail
    # No slow disk confirmed: nothing to measure in (unknown, never held).
    assert slowed_by_disk(CALLS, at_least=0.15, windows=[]).validity is Validity.UNKNOWN


def test_slowed_by_disk_counts_only_adds_inside_the_faults_window() -> None:
    """A busy host slows an add before the fault or after its heal: not the fault's trace. The
    rule that took every add from a call's bound before the confirmation on, with no end, held
    on either (the twin was red only for having no window at all)."""
    before = [Call(c.t, 0.3 if c.t < 1.0 else 0.004, c.ack) for c in CALLS]  # slowed at 0-1 s
    after = [Call(c.t, 0.3 if c.t >= 4.5 else 0.004, c.ack) for c in CALLS]  # slowed after the heal
    assert not slowed_by_disk(before, at_least=0.15, windows=ON).held
    assert not slowed_by_disk(after, at_least=0.15, windows=ON).held
    # An add that started inside the window and was slowed there holds it, however long it took.
    edge = [Call(c.t, 0.3 if abs(c.t - 3.9) < 1e-9 else 0.004, c.ack) for c in CALLS]
    assert slowed_by_disk(edge, at_least=0.15, windows=ON).held


def test_a_twin_slowed_in_the_same_window_makes_the_chaos_runs_slowdown_no_evidence() -> None:
    """The twin measured by the same rule over its own planned window: when it is as slow there
    (a loaded host), the chaos run's slow adds are no evidence of the disk: unknown."""
    twin = slowed_by_disk(CALLS, at_least=0.15, windows=[FaultWindow(FaultKind.SLOW_DISK, 2.0, 4.0, planned=True)])
    (na,) = twin_verdicts([twin], SlowCheckpointDisk.FAULT_VERDICTS)
    assert na.validity is Validity.NOT_APPLICABLE and na.measured is Validity.HELD
    twin_run = RunResult(scenario="slow-checkpoint-disk", label=RunLabel.BASELINE, seed=0,
                         status=RunStatus.COMPLETED, seconds=9.0, verdicts=(na,), probes=(), samples=(), faults=())
    (chaos,) = against_twin([slowed_by_disk(CALLS, at_least=0.15, windows=ON)], twin_met([twin_run]))
    assert chaos.validity is Validity.UNKNOWN and "the fault-free twin met it too" in chaos.detail


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
    # The twin's fault traces are n/a, each measured over the schedule's window of its own run:
    # never held there (else the chaos run's would be unknown, and it deviated above).
    na = [v for v in baseline.verdicts if v.validity is Validity.NOT_APPLICABLE]
    assert all(v.measured is not Validity.HELD for v in na), na
    assert all(v.held for v in baseline.verdicts if v not in na), baseline.verdicts
    return {v.name for v in na}
