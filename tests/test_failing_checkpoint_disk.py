"""failing-checkpoint-disk: each invariant's verdict function held on a run's shape and red on a
planted one (Ray-free), the errno read off a failure's causes, and the scenario itself on Ray
(slow tier) with its fault-free twin."""

from __future__ import annotations

import errno
import os
import pathlib
import warnings
from dataclasses import replace

import pytest

from actors import CheckpointedCounter
from actors.checkpoint import CheckpointWarning
from chaos import FaultKind
from chaos._faults import FaultStatus
from chaos.cluster import ClusterHandle
from chaos.disks import fault_filesystem
from chaos.disks._faults import FailingDisk
from chaos.errors import CheckpointError, StorageUnreachable
from scenarios import load_scenario, run_scenario
from scenarios.model._records import Validity
from scenarios.workloads._kit import Ack
from scenarios.workloads.disk._checkpoint_disk import (
    CheckpointSample,
    DiskCall,
    FolderCheck,
    cause_errno,
    covered_by_last_checkpoint,
    failure_reported,
    last_good_kept,
    no_half_checkpoint,
    recovered_after_heal,
    stored_seqs,
)
from test_slow_checkpoint_disk import twin_misses

EIO = errno.EIO


def _run_shape() -> list[DiskCall]:
    """Adds of a few ms every 0.01 s, a checkpoint every 10 (the first start commits checkpoint
    1); the disk fails from 2.0 s to 5.0 s (confirmed at 2.05 s), and every add from the first
    due checkpoint on fails naming EIO until the heal, the checkpoints pending; the first add
    after the heal commits checkpoint 22."""
    calls = []
    for i in range(800):
        t = i * 0.01
        if t < 2.05:
            calls.append(DiskCall(i, t, 0.004, Ack.ACKED, checkpoint=1 + min(i + 1, 200) // 10,
                                  pending=i - 199 if i >= 200 else (i + 1) % 10))
        elif t < 5.0:
            calls.append(DiskCall(i, t, 0.004, Ack.UNKNOWN, EIO, checkpoint=21, pending=i - 199))
        else:
            calls.append(DiskCall(i, t, 0.004, Ack.ACKED, checkpoint=22 + (i - 500) // 10, pending=(i - 500) % 10))
    return calls


CALLS = _run_shape()
SINCE = 2.05
#: The failing disk's heal (5.0 s) and a call's bound.
UNTIL = 8.0
SAMPLES = [CheckpointSample(c.t, (c.seq // 10) if c.t < 2.0 else 20 if c.t < 5.0 else 20 + (c.seq - 500) // 10)
           for c in CALLS]
#: The store once the fault was over: checkpoints 20 and 21 from before it, 22 from the first
#: add after the heal, each holding the adds up to the one that committed it.
STORED: dict[int, frozenset[int] | None] = {20: frozenset(range(190)), 21: frozenset(range(200)),
                                             22: frozenset(range(501))}


def test_failure_reported_holds_on_named_failures_and_breaks_on_silence_hangs_and_other_errors() -> None:
    assert failure_reported(CALLS, since=SINCE, until=UNTIL, bound=3.0, every_n=10).held
    # The fault-free twin: no failing disk confirmed, no add failed.
    twin = [replace(c, ack=Ack.ACKED, errno=0) for c in CALLS]
    assert not failure_reported(twin, since=2.0, until=UNTIL, bound=3.0, every_n=10).held
    # A silent actor: failed adds answered as acknowledged while the disk failed.
    silent = [*CALLS[:300], replace(CALLS[300], ack=Ack.ACKED, errno=0), *CALLS[301:]]
    verdict = failure_reported(silent, since=SINCE, until=UNTIL, bound=3.0, every_n=10)
    assert not verdict.held and "1 were acknowledged silently" in verdict.detail
    # A failure that named no disk error (a dead actor, a timeout).
    unnamed = [*CALLS[:300], replace(CALLS[300], errno=0), *CALLS[301:]]
    assert not failure_reported(unnamed, since=SINCE, until=UNTIL, bound=3.0, every_n=10).held
    # A hang: an add that waited on the disk past the bound.
    hung = [*CALLS[:300], replace(CALLS[300], seconds=3.5), *CALLS[301:]]
    verdict = failure_reported(hung, since=SINCE, until=UNTIL, bound=3.0, every_n=10)
    assert not verdict.held and "1 took over 3 s" in verdict.detail
    # Failures only before the fault was confirmed: not the fault's.
    assert not failure_reported(CALLS, since=6.0, until=9.0, bound=3.0, every_n=10).held
    # Nor only after its heal and a call's bound: the window has an end. The rule without one
    # took a failure of any later cause (a disk failing again, a dead actor with an errno) as this fault's.
    late = [replace(c, ack=Ack.ACKED, errno=0, pending=0) for c in CALLS if c.t < 5.0]
    late += [replace(c, t=c.t + 10.0) for c in CALLS[205:210]]  # EIO at 12.05 s and on
    assert not failure_reported(late, since=SINCE, until=UNTIL, bound=3.0, every_n=10).held
    # No failing disk confirmed: nothing to measure in, unknown (never held).
    assert failure_reported(CALLS, since=None, until=0.0, bound=3.0, every_n=10).validity is Validity.UNKNOWN


def test_failure_reported_breaks_on_adds_acknowledged_after_the_last_failure_while_checkpoints_are_dropped() -> None:
    # Failures reported from 2.05 s to 3.0 s, then acknowledged while the checkpoints they need
    # are dropped silently until the heal at 5.0 s: the silence outlasts the last failure.
    quiet = [replace(c, ack=Ack.ACKED, errno=0) if 3.0 <= c.t < 5.0 else c for c in CALLS]
    verdict = failure_reported(quiet, since=SINCE, until=UNTIL, bound=3.0, every_n=10)
    assert not verdict.held and "200 were acknowledged silently" in verdict.detail, verdict.detail
    assert "first at 3.00 s, 101 adds pending after it" in verdict.detail
    # Acknowledged after the last failure with its checkpoint committed: not silent.
    healed = [replace(c, ack=Ack.ACKED, errno=0, checkpoint=22, pending=0) if 3.0 <= c.t < 5.0 else c
              for c in CALLS]
    assert failure_reported(healed, since=SINCE, until=UNTIL, bound=3.0, every_n=10).held


def test_no_half_checkpoint_holds_on_whole_folders_and_breaks_on_one_that_is_not() -> None:
    whole = [FolderCheck(seq, True) for seq in (3, 4, 5, 52, 53, 54)]
    assert no_half_checkpoint(whole).held
    verdict = no_half_checkpoint([*whole, FolderCheck(6, False)])
    assert not verdict.held and "not whole: [6]" in verdict.detail
    assert not no_half_checkpoint([]).held  # nothing read back: nothing checked


def test_last_good_kept_holds_when_the_last_checkpoint_before_the_fault_survived_it_whole() -> None:
    assert covered_by_last_checkpoint(CALLS, since=SINCE) == (21, list(range(200)))
    verdict = last_good_kept(CALLS, STORED, since=SINCE)
    assert verdict.held and "checkpoint 21" in verdict.detail and "holds 200 of the 200" in verdict.detail
    # Missing an add it covered.
    verdict = last_good_kept(CALLS, {**STORED, 21: STORED[21] - {17}}, since=SINCE)
    assert not verdict.held and "lost seqs [17]" in verdict.detail
    # Present but no longer loading.
    verdict = last_good_kept(CALLS, {**STORED, 21: None}, since=SINCE)
    assert not verdict.held and "did not load" in verdict.detail
    # Adds after it (pending when the disk failed) are not this verdict's: nothing_acknowledged_lost's.
    assert last_good_kept(CALLS, {**STORED, 22: STORED[22] - {203}}, since=SINCE).held
    assert not last_good_kept(CALLS, None, since=SINCE).held  # the store was not read
    assert not last_good_kept(CALLS, STORED, since=None).held  # no fault: nothing kept across it


def test_last_good_kept_breaks_when_a_failing_save_deleted_the_last_checkpoint_before_the_fault() -> None:
    # A failing save that removed checkpoint 21: the first add after the heal commits 22 from
    # memory, which holds every add (as the final restore would): the fault's loss must still show.
    deleted = {seq: seqs for seq, seqs in STORED.items() if seq != 21}
    verdict = last_good_kept(CALLS, deleted, since=SINCE)
    assert not verdict.held and "checkpoint 21, the last before the fault, is gone" in verdict.detail, verdict.detail


def test_the_store_is_read_back_as_each_checkpoints_seqs_of_the_writer(tmp_path: pathlib.Path) -> None:
    counter = CheckpointedCounter(str(tmp_path / "counter"), every_n=10)
    for seq in range(25):
        counter.add(1, writer_id="driver", seq=seq)
    assert stored_seqs(str(tmp_path / "counter"), "driver") == {1: frozenset(), 2: frozenset(range(10)),
                                                                 3: frozenset(range(20))}
    (tmp_path / "counter" / "ckpt-0000000003" / "manifest.json").write_text("{")  # a damaged folder
    assert stored_seqs(str(tmp_path / "counter"), "driver")[3] is None


def test_recovered_after_heal_holds_when_adds_and_checkpoints_resume_and_breaks_when_they_do_not() -> None:
    assert recovered_after_heal(CALLS, SAMPLES, within=2.0).held
    # Still failing to the end (an actor that needs a restart to serve again).
    stuck = [replace(c, ack=Ack.UNKNOWN, errno=EIO) if c.t >= 2.05 else c for c in CALLS]
    verdict = recovered_after_heal(stuck, SAMPLES, within=2.0)
    assert not verdict.held and "came inf s later" in verdict.detail
    # Adds acknowledged again, but no checkpoint committed after the heal.
    flat = [CheckpointSample(s.t, min(s.checkpoints, 20)) for s in SAMPLES]
    verdict = recovered_after_heal(CALLS, flat, within=2.0)
    assert not verdict.held and "0 checkpoints committed since" in verdict.detail
    # Acknowledged again only 2.5 s after the last failure.
    late = [c for c in CALLS if not (5.0 <= c.t < 7.5)]
    assert not recovered_after_heal(late, SAMPLES, within=2.0).held
    # The fault-free twin: nothing failed, nothing recovered from.
    assert not recovered_after_heal([DiskCall(c.seq, c.t, c.seconds, Ack.ACKED) for c in CALLS], SAMPLES,
                                    within=2.0).held


def test_the_errno_is_read_off_a_failures_causes() -> None:
    try:
        try:
            raise OSError(EIO, "Input/output error")
        except OSError as exc:
            raise CheckpointError("add() was applied but the checkpoint failed") from exc
    except CheckpointError as exc:
        assert cause_errno(exc) == EIO
    assert cause_errno(CheckpointError("no cause")) == 0
    looped = RuntimeError("a")
    looped.__context__ = looped
    assert cause_errno(looped) == 0


def test_the_scenario_aims_eio_at_the_counters_folder_for_three_seconds() -> None:
    scenario = load_scenario("failing-checkpoint-disk")
    (entry,) = scenario.schedule.entries
    assert scenario.storage_faultfs and entry.fault == FailingDisk("$STORAGE", seconds=3, errno="EIO",
                                                                   glob="/counter/*")


@pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse")
def test_a_restart_while_no_checkpoint_can_be_read_fails_rather_than_starting_empty() -> None:
    with fault_filesystem() as fs:
        storage = os.path.join(fs.mount, "counter")
        counter = CheckpointedCounter(storage, every_n=5, restore="never")
        for seq in range(23):
            counter.add(1, writer_id="d", seq=seq)
        fs.fail(EIO, glob="*ckpt-*")  # the folders unreadable, the storage itself writable
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", CheckpointWarning)
                restarted = CheckpointedCounter(storage, every_n=5, restore="always")
        except StorageUnreachable as exc:
            assert "an I/O error, not damage" in str(exc)
            return  # refused: the restart fails loudly, and once the disk answers it restores
        assert restarted.value == 20, restarted.restore_info  # the newest checkpoint's, or nothing


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse")
def test_the_scenario_holds_on_a_failing_disk_and_its_fault_free_twin_misses_the_failure(
        ray_cluster: ClusterHandle) -> None:
    missed = twin_misses(ray_cluster, "failing-checkpoint-disk", FaultKind.FAILING_DISK)
    assert missed == {"failure_reported", "recovered_after_heal", "last_good_kept"}


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.deep
@pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse")
def test_an_actor_that_answers_failed_adds_as_acknowledged_breaks_failure_reported(
        ray_cluster: ClusterHandle) -> None:
    silent = replace(load_scenario("failing-checkpoint-disk"), params={"report_failures": False})
    (chaos,) = run_scenario(silent, address=ray_cluster.address, baseline=False)
    assert chaos.faults[0].status is FaultStatus.INJECTED, chaos.faults
    assert {v.name for v in chaos.verdicts if not v.held} >= {"failure_reported"}, chaos.verdicts
