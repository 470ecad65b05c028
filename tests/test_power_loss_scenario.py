"""power-loss: each verdict held on a run's shape and red on a planted one (Ray-free); the
flagship's buffer and server, in this process, on a real fault filesystem through a real power
loss, keeping every acknowledged write with each log record fsynced and losing some with the
log's fsyncs batched or under policy durability (Ray-free); and the scenario on Ray (slow tier)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import replace

import numpy as np
import pytest

from actors._checkpoint import RestoreInfo
from chaos import FaultKind, Schedule, ScheduledFault
from chaos._faults import FaultStatus
from chaos.cluster import ClusterHandle
from chaos.disks import fault_filesystem
from chaos.disks._faults import DiskEvent, DiskInjection, PowerLoss
from chaos.disks._fusefs import FaultFS, PowerLossResult, fuse_mounts_left
from chaos.engine import Injection
from conftest import unheld
from scenarios import load_scenario, run_scenario
from scenarios.model._records import RunLabel, RunStatus, Validity, Verdict
from scenarios.model._workload import FaultWindow
from scenarios.workloads._kit import Ack
from scenarios.workloads.disk._power_loss import (
    CUT_JUDGED,
    Cut,
    PowerLossParams,
    Restart,
    Role,
    Timeline,
    Write,
    both_answer_again,
    cut_of,
    gradient,
    judged_by_cut,
    new_buffer,
    new_server,
    no_duplicate_transitions,
    no_lost_transitions,
    ps_version_matches_pushes,
    restored_after_power_loss,
    stopped_at_power_loss,
    tids,
    unreached,
)

needs_fuse = pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse")

# A run's shape: a write pair every 20 ms, stopped at 3.0 s, the power loss at 3.5 s, the kills at
# 4.0 s, the writes in flight answered by the restarted actors at 6.5 s, and more after.
POWER_LOSS_AT = 3.5
WRITES = [Write(role, seq, round(seq * 0.02, 3), 0.01, Ack.ACKED) for seq in range(150) for role in Role] + \
    [Write(role, 150, 3.0, 3.5, Ack.ACKED) for role in Role] + \
    [Write(role, seq, 6.5 + (seq - 151) * 0.02, 0.01, Ack.ACKED) for seq in range(151, 300) for role in Role]
RESTARTS = [Restart(Role.REPLAY, 100, 200, RestoreInfo(False, 0, 150, 0.4)),
            Restart(Role.PARAMS, 101, 201, RestoreInfo(False, 0, 150, 2.1))]
TIMELINE = Timeline(pauses=(3.05, 3.06), power_losses=(3.52,), kills=(4.03, 4.04))


def test_the_loss_verdicts_stand_only_when_the_power_loss_cut_every_actors_open_files() -> None:
    """With each log record fsynced, a SIGKILL and the log's replay meet every loss verdict: they
    are evidence of the disk's durability only if the power loss cut the actors' own open files."""
    held = [Verdict.of(name, True, "ok", 3) for name in (*CUT_JUDGED, "stopped_at_power_loss")]
    both = judged_by_cut(held, Cut({Role.REPLAY: 2, Role.PARAMS: 1}, files_reverted=0))
    assert all(v.held for v in both) and "replay: 2 open files cut" in both[0].detail
    one = judged_by_cut(held, Cut({Role.REPLAY: 2, Role.PARAMS: 0}, files_reverted=3))
    assert [v.validity for v in one] == [Validity.UNKNOWN] * len(CUT_JUDGED) + [Validity.HELD]
    assert "cut no open file of the params actor's storage" in one[0].detail
    assert all(v.validity is Validity.UNKNOWN for v in judged_by_cut(held[:-1], None))
    broken = judged_by_cut([Verdict.of("no_lost_transitions", False, "3 lost", 9)], None)
    assert broken[0].validity is Validity.BROKEN  # what it saw broke, evidence or not
    assert unreached(Cut({Role.REPLAY: 1, Role.PARAMS: 1}, files_reverted=0)) is None


def test_what_a_power_loss_cut_is_read_from_its_injection() -> None:
    lost = PowerLossResult(2, 100, 0, 1, 3, killed_paths=("/replay/log-7", "/replay/x", "/params/log-3"))
    injection = Injection(PowerLoss("/m"), (), found=DiskInjection(PowerLoss("/m"), "/m", DiskEvent(
        "inject", PowerLoss("/m"), "dropped"), lost))
    window = FaultWindow(FaultKind.POWER_LOSS, 4.0, 4.0, injection=injection)
    assert cut_of([window]) == Cut({Role.REPLAY: 2, Role.PARAMS: 1}, files_reverted=2)
    assert cut_of([FaultWindow(FaultKind.POWER_LOSS, 4.0, 4.0, planned=True)]) is None  # the twin's: nothing cut


def test_no_lost_transitions_holds_when_every_acknowledged_id_is_stored_and_breaks_on_one_missing() -> None:
    acked = np.concatenate([tids(s) for s in range(10)])
    assert no_lost_transitions(acked, np.concatenate([acked, tids(10)])).held  # an unknown add landed too
    verdict = no_lost_transitions(acked, acked[:-16])  # the last add's chunk gone with the power
    assert not verdict.held and "16 lost" in verdict.detail and "144" in verdict.detail
    assert not no_lost_transitions(np.empty(0, np.int64), acked).held  # nothing acknowledged: nothing checked


def test_no_duplicate_transitions_breaks_on_a_retried_add_stored_twice() -> None:
    stored = np.concatenate([tids(s) for s in range(10)])
    assert no_duplicate_transitions(stored).held
    verdict = no_duplicate_transitions(np.concatenate([stored, tids(9)]))
    assert not verdict.held and "16 duplicated ids" in verdict.detail


def test_ps_version_matches_the_acknowledged_pushes_up_to_those_of_unknown_fate() -> None:
    pushes = sum(w.role is Role.PARAMS for w in WRITES)
    assert ps_version_matches_pushes(pushes, WRITES).held
    assert not ps_version_matches_pushes(pushes - 3, WRITES).held  # three acknowledged pushes lost
    assert not ps_version_matches_pushes(pushes + 1, WRITES).held  # one applied twice
    unknown = [*WRITES, Write(Role.PARAMS, 300, 9.0, 20.0, Ack.UNKNOWN, error="GetTimeoutError")]
    assert ps_version_matches_pushes(pushes + 1, unknown).held  # the timed-out push was applied
    assert ps_version_matches_pushes(pushes, unknown).held  # or not
    assert not ps_version_matches_pushes(pushes + 2, unknown).held


def test_restored_after_power_loss_needs_the_power_loss_and_both_actors_restarted_through_their_logs() -> None:
    assert restored_after_power_loss(RESTARTS, power_loss=POWER_LOSS_AT).held
    # The fault-free twin: no power loss, the first processes still serving, nothing replayed.
    twin = [Restart(r.role, r.pid_before, r.pid_before, RestoreInfo(False, 0, 0, 0.0)) for r in RESTARTS]
    verdict = restored_after_power_loss(twin, power_loss=None)
    assert not verdict.held and "no power loss confirmed" in verdict.detail
    assert not restored_after_power_loss(RESTARTS, power_loss=None).held
    not_killed = [RESTARTS[0], Restart(Role.PARAMS, 101, 101, RESTARTS[1].restore)]
    assert not restored_after_power_loss(not_killed, power_loss=POWER_LOSS_AT).held
    # Stopped right after a checkpoint: nothing left to replay, the checkpoint restored.
    nothing_replayed = [RESTARTS[0], Restart(Role.PARAMS, 101, 201, RestoreInfo(True, 3, 0, 1.0))]
    verdict = restored_after_power_loss(nothing_replayed, power_loss=POWER_LOSS_AT)
    assert verdict.held and "params: pid 101 -> 201, checkpoint 3, 0 log records replayed" in verdict.detail
    # A restart that found nothing on its storage restored nothing.
    empty = [RESTARTS[0], Restart(Role.PARAMS, 101, 201, RestoreInfo(True, 0, 0, 1.0))]
    assert not restored_after_power_loss(empty, power_loss=POWER_LOSS_AT).held
    assert not restored_after_power_loss(RESTARTS[:1], power_loss=POWER_LOSS_AT).held


def test_both_answer_again_breaks_when_one_actor_never_acknowledges_after_the_power_loss_or_too_late() -> None:
    verdict = both_answer_again(WRITES, since=POWER_LOSS_AT, within=8.0)
    assert verdict.held and "replay after 3.00 s" in verdict.detail  # the call in flight, retried
    silent = [w for w in WRITES if not (w.role is Role.PARAMS and w.end >= POWER_LOSS_AT)]
    verdict = both_answer_again(silent, since=POWER_LOSS_AT, within=8.0)
    assert not verdict.held and "params never (no write of it ended after the power loss)" in verdict.detail
    timed_out = [*silent, Write(Role.PARAMS, 9, 3.0, 20.0, Ack.UNKNOWN, False, "GetTimeoutError")]
    verdict = both_answer_again(timed_out, since=POWER_LOSS_AT, within=8.0)
    assert not verdict.held and "params never (1 writes ended after it; the first, seq 9 sent at 3.00 s, " \
        "after 20.00 s: unknown GetTimeoutError)" in verdict.detail, verdict.detail
    assert not both_answer_again(WRITES, since=POWER_LOSS_AT, within=2.9).held
    assert not both_answer_again(WRITES, since=None, within=8.0).held  # the twin: no power loss


def test_stopped_at_power_loss_breaks_when_the_order_is_wrong_or_an_actor_ran_on() -> None:
    assert stopped_at_power_loss(TIMELINE, WRITES).held
    late_pause = Timeline(pauses=(3.05, 3.6), power_losses=(3.52,), kills=TIMELINE.kills)
    assert not stopped_at_power_loss(late_pause, WRITES).held
    early_kill = Timeline(pauses=TIMELINE.pauses, power_losses=(3.52,), kills=(3.4, 4.04))
    assert not stopped_at_power_loss(early_kill, WRITES).held
    ran_on = [*WRITES, Write(Role.REPLAY, 301, 3.0, 3.1, Ack.UNKNOWN, True, "OSError: [Errno 5] EIO")]
    verdict = stopped_at_power_loss(TIMELINE, ran_on)
    assert not verdict.held and "1 writes failed by an actor" in verdict.detail
    assert not stopped_at_power_loss(Timeline((), (), ()), WRITES).held  # the twin: no fault at all


# -- the flagship's actors through a real power loss, in this process ------------------------------------


@pytest.fixture(scope="module")
def faultfs() -> Iterator[FaultFS]:
    """One mount for the module's cases, each in its own folder: the restored actors keep files
    open there, so each unmount is a lazy one that waits (2 s)."""
    with fault_filesystem() as fs:
        yield fs


def lose_power(fs: FaultFS, params: PowerLossParams, writes: int, *, power: bool = True) -> list[Verdict]:
    """``writes`` keyed adds and pushes to the flagship's buffer and server in a fresh folder of
    ``fs``, each acknowledged; a power loss (nothing writes meanwhile: this process is their
    only writer; ``power=False``: none, as after a process crash); then new actors restored from
    what the disk kept, judged."""
    storage = f"{fs.mount}/{uuid.uuid4().hex[:8]}"
    buffer, server = new_buffer(storage, params, seed=0), new_server(storage, params, seed=0)
    shapes = {n: tuple(p.shape) for n, p in server.model.named_parameters()}
    rng, done = np.random.default_rng(0), []
    for seq in range(writes):
        buffer.add({"tid": tids(seq)}, writer_id="collector", seq=seq)
        server.push(gradient(shapes, rng), worker_id="learner", seq=seq, base_version=seq)
        done += [Write(role, seq, seq * 0.01, 0.01, Ack.ACKED) for role in Role]
    lost = fs.power_loss() if power else None  # the old actors' handles are dead: never called again
    buffer = new_buffer(storage, params, seed=0, restore="always")
    server = new_server(storage, params, seed=0, restore="always")
    acked = np.concatenate([tids(s) for s in range(writes)])
    restarts = [Restart(role, 1, 2, actor.checkpoint_stats().restore)
                for role, actor in ((Role.REPLAY, buffer), (Role.PARAMS, server))]
    stored = buffer.column("tid") if buffer.size() else np.empty(0, np.int64)
    return [no_lost_transitions(acked, stored), ps_version_matches_pushes(server.version(), done),
            restored_after_power_loss(restarts, power_loss=1.0),
            Verdict.of("power_loss_cut_bytes", lost is not None and lost.bytes_cut > 0, f"{lost}")]


@needs_fuse
def test_each_fsynced_log_record_keeps_every_acknowledged_write_through_a_real_power_loss(faultfs: FaultFS) -> None:
    verdicts = lose_power(faultfs, PowerLossParams(fsync_every=1, fsync_interval=3600.0), writes=12)
    assert all(v.held for v in verdicts[:3]), verdicts
    assert "12 log records replayed" in verdicts[2].detail


@needs_fuse
def test_a_log_whose_fsyncs_are_batched_loses_acknowledged_writes_to_a_real_power_loss(faultfs: FaultFS) -> None:
    # The 8th record fsyncs; the 4 after it sit in the page cache, acknowledged, and go.
    verdicts = lose_power(faultfs, PowerLossParams(fsync_every=8, fsync_interval=3600.0), writes=12)
    lost, version = verdicts[0], verdicts[1]
    assert not lost.held and "64 lost" in lost.detail, lost
    assert not version.held and "server version 8, acknowledged pushes 12" in version.detail, version
    assert verdicts[3].held, verdicts[3]  # the power loss cut the logs' unsynced tails


@needs_fuse
def test_what_the_batched_log_loses_is_the_power_losss_doing_a_process_crash_keeps_it(faultfs: FaultFS) -> None:
    verdicts = lose_power(faultfs, PowerLossParams(fsync_every=8, fsync_interval=3600.0), writes=12, power=False)
    assert all(v.held for v in verdicts[:3]), verdicts  # the page cache kept the 4 unsynced records


@needs_fuse
def test_policy_durability_loses_the_acknowledged_writes_after_its_last_checkpoint(faultfs: FaultFS) -> None:
    verdicts = lose_power(faultfs, PowerLossParams(durability="policy", every_n=8), writes=12)
    lost, version = verdicts[0], verdicts[1]
    assert not lost.held and "64 lost" in lost.detail, lost  # after the checkpoint of the 8th
    assert not version.held and "server version 8" in version.detail, version


# -- the scenario on Ray ------------------------------------------------------------------------------


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.deep  # make slow runs the scenario with its twin (below)
@needs_fuse
def test_the_flagships_actors_keep_every_acknowledged_write_through_a_power_loss(
        ray_cluster: ClusterHandle) -> None:
    mounted = fuse_mounts_left()
    (run,) = run_scenario(load_scenario("power-loss"), address=ray_cluster.address, baseline=False)
    assert run.label is RunLabel.CHAOS and not run.deviated, unheld(run)
    assert [f.status for f in run.faults] == [FaultStatus.INJECTED] * 5, run.faults
    kinds = [f.kind for f in sorted(run.faults, key=lambda f: f.confirmed or 0.0)]
    assert kinds[2] is FaultKind.POWER_LOSS, run.faults  # confirmed after both pauses, before both kills
    assert all(v.held for v in run.verdicts), unheld(run)
    assert set(load_scenario("power-loss").invariants) <= {v.name for v in run.verdicts}
    assert fuse_mounts_left() == mounted, "the run's fault filesystem is still mounted"


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.deep
@needs_fuse
def test_a_log_fsynced_only_at_checkpoints_loses_acknowledged_writes_to_the_power_loss_on_ray(
        ray_cluster: ClusterHandle) -> None:
    # The records reach the page cache before each call returns, so a SIGKILL alone keeps them.
    unsynced = replace(load_scenario("power-loss"), params={"fsync_every": 100_000, "fsync_interval": 3600.0})
    (run,) = run_scenario(unsynced, address=ray_cluster.address, baseline=False)
    assert [f.status for f in run.faults] == [FaultStatus.INJECTED] * 5, run.faults
    red = {v.name for v in run.verdicts if not v.held}
    # Nothing of the log was synced: the restarts find only their checkpoints.
    assert {"no_lost_transitions", "ps_version_matches_pushes"} <= red, run.verdicts
    assert "stopped_at_power_loss" not in red and "no_duplicate_transitions" not in red, run.verdicts


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.deep  # CI's hour: make slow shows a power loss that cut nothing leaves its verdicts unknown
@needs_fuse
def test_the_fault_free_twin_misses_the_power_loss_and_keeps_everything(ray_cluster: ClusterHandle) -> None:
    mounted = fuse_mounts_left()
    baseline, chaos = run_scenario(load_scenario("power-loss"), address=ray_cluster.address, baseline=True)
    assert baseline.label is RunLabel.BASELINE and baseline.status is RunStatus.COMPLETED, baseline.error
    assert chaos.label is RunLabel.CHAOS and not chaos.deviated and all(v.held for v in chaos.verdicts), \
        unheld(chaos)
    assert [f.status for f in chaos.faults] == [FaultStatus.INJECTED] * 5, chaos.faults
    kinds = [f.kind for f in sorted(chaos.faults, key=lambda f: f.confirmed or 0.0)]
    assert kinds[2] is FaultKind.POWER_LOSS, chaos.faults  # confirmed after both pauses, before both kills
    assert set(load_scenario("power-loss").invariants) <= {v.name for v in chaos.verdicts}
    assert fuse_mounts_left() == mounted, "the run's fault filesystem is still mounted"
    missed = {v.name for v in baseline.verdicts if not v.held}
    assert missed == {"restored_after_power_loss", "both_answer_again", "stopped_at_power_loss"}, baseline.verdicts
    # What the power loss cut is said beside each verdict that stands on it.
    restored = next(v for v in chaos.verdicts if v.name == "restored_after_power_loss")
    assert "replay: " in restored.detail and "params: " in restored.detail, restored.detail


@pytest.mark.ray
@pytest.mark.slow
@needs_fuse
def test_a_power_loss_that_cut_none_of_the_actors_files_leaves_their_verdicts_unknown(
        ray_cluster: ClusterHandle) -> None:
    """The power loss aimed at a fault filesystem the actors never write (its probe file at that
    mount's root still confirms it): a SIGKILL and the log's replay met every verdict, and the
    probe alone let the run pass. Now each verdict that stands on the power loss is unknown."""
    scenario = load_scenario("power-loss")
    with fault_filesystem() as other:
        entries = tuple(ScheduledFault(e.at, replace(e.fault, mount=other.mount)) if e.kind is FaultKind.POWER_LOSS
                        else e for e in scenario.schedule.entries)
        (run,) = run_scenario(replace(scenario, schedule=Schedule(entries)), address=ray_cluster.address,
                              baseline=False)
    assert [f.status for f in run.faults] == [FaultStatus.INJECTED] * 5, run.faults
    by = {v.name: v for v in run.verdicts}
    assert {n for n, v in by.items() if v.validity is Validity.UNKNOWN} == set(CUT_JUDGED), run.verdicts
    assert "cut no open file of the replay and params actor's storage" in by["no_lost_transitions"].detail
    assert by["stopped_at_power_loss"].held and run.outcome is Validity.UNKNOWN
