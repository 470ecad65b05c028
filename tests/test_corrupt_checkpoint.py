"""corrupt-checkpoint: its resume verdict held, broken and unknown on a run's shapes (Ray-free),
and the scenario on Ray (slow tier): the restart passes over the corrupted checkpoint to the one
before and loses nothing with its log; without the log it loses what the corrupted one held."""

from __future__ import annotations

from dataclasses import replace

import pytest

from actors._checkpoint import RestoreInfo
from chaos import FaultKind
from chaos.cluster import ClusterHandle
from chaos.corruption import Corruption
from chaos.engine import FaultStatus
from conftest import unheld
from scenarios import load_scenario, run_scenario
from scenarios.model._records import Validity
from scenarios.workloads.disk._corrupt_checkpoint import checkpoint_seq, resumed_from_last_valid
from scenarios.workloads.disk._power_loss import CHUNK, has_room

FILE = "/tmp/run/replay/ckpt-0000000046/manifest.json"
CORRUPTED = Corruption(file=FILE, mode="flip", offset=137, length=64, size_before=226, size_after=226, changed=64,
                       candidates=3)


def _restored(seq: int, skipped: tuple[int, ...] = ()) -> RestoreInfo:
    return RestoreInfo(True, seq, 40, 0.1, skipped)


def test_an_add_has_room_only_while_it_overwrites_nothing() -> None:
    assert has_room(0, CHUNK) and has_room(9, 10 * CHUNK)
    assert not has_room(10, 10 * CHUNK) and not has_room(1, CHUNK + 1)


def test_a_checkpoints_file_names_its_seq() -> None:
    assert checkpoint_seq(FILE) == 46
    assert checkpoint_seq("/tmp/run/replay/wal-0000000046.log") is None
    assert checkpoint_seq("/tmp/run/ckpt-3") is None  # the folder itself is no file of it


def test_resuming_the_one_before_and_passing_over_only_the_corrupted_one_holds() -> None:
    verdict = resumed_from_last_valid(CORRUPTED, _restored(45, (46,)))
    assert verdict.validity is Validity.HELD, verdict
    assert "restored checkpoint 45, passed over [46]" in verdict.detail


@pytest.mark.parametrize(("restore", "said"), [
    (_restored(46), "restored checkpoint 46, passed over none"),  # the corrupted state loaded
    (_restored(44, (46, 45)), "restored checkpoint 44, passed over [46, 45]"),  # a valid one passed over
    (_restored(0, (46, 45, 44)), "restored checkpoint 0"),  # started empty
])
def test_a_restore_that_loaded_the_corruption_or_passed_over_a_valid_checkpoint_is_broken(
        restore: RestoreInfo, said: str) -> None:
    verdict = resumed_from_last_valid(CORRUPTED, restore)
    assert verdict.validity is Validity.BROKEN and said in verdict.detail, verdict


@pytest.mark.parametrize(("corruption", "restore", "why"), [
    (None, _restored(45, (46,)), "no corruption of a checkpoint's file was confirmed"),
    (replace(CORRUPTED, file="/tmp/run/replay/wal-0000000046.log"), _restored(45, (46,)), "in no checkpoint folder"),
    (CORRUPTED, None, "never restarted to read it"),
    (CORRUPTED, _restored(47), "checkpoint 47, newer than the corrupted 46, was committed before the restart"),
])
def test_without_a_corrupted_checkpoint_read_by_a_restart_it_is_unknown(
        corruption: Corruption | None, restore: RestoreInfo | None, why: str) -> None:
    verdict = resumed_from_last_valid(corruption, restore)
    assert verdict.validity is Validity.UNKNOWN and why in verdict.detail, verdict


@pytest.mark.ray
@pytest.mark.slow
def test_the_restart_resumes_the_last_valid_checkpoint_and_its_log(ray_cluster: ClusterHandle) -> None:
    (run,) = run_scenario(load_scenario("corrupt-checkpoint"), address=ray_cluster.address, baseline=False)
    assert [f.status for f in run.faults] == [FaultStatus.INJECTED] * 3, run.faults
    assert [f.kind for f in run.faults] == [FaultKind.PAUSE, FaultKind.FILE_CORRUPTION, FaultKind.KILL]
    assert all(v.held for v in run.verdicts) and not run.deviated, unheld(run)


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.deep  # the Ray-free store test shows the same loss in milliseconds
def test_without_its_log_the_restart_loses_what_the_corrupted_checkpoint_held(ray_cluster: ClusterHandle) -> None:
    planted = replace(load_scenario("corrupt-checkpoint"), params={"durability": "policy"})
    (run,) = run_scenario(planted, address=ray_cluster.address, baseline=False)
    verdicts = {v.name: v.validity for v in run.verdicts}
    assert verdicts["resumed_from_last_valid"] is Validity.HELD, run.verdicts
    assert verdicts["no_lost_transitions"] is Validity.BROKEN, run.verdicts


@pytest.mark.ray
@pytest.mark.slow
def test_a_buffer_full_before_its_faults_ends_the_run_with_them_not_reached(ray_cluster: ClusterHandle) -> None:
    # A buffer that evicts acknowledged transitions would read as lost: the adds stop instead,
    # and the faults the run never reached fail it (an eviction is never called a loss).
    small = replace(load_scenario("corrupt-checkpoint"), params={"capacity": 40 * CHUNK})
    (run,) = run_scenario(small, address=ray_cluster.address, baseline=False)
    assert [f.status for f in run.faults] == [FaultStatus.NOT_REACHED] * 3, run.faults
    verdicts = {v.name: v.validity for v in run.verdicts}
    assert verdicts["no_lost_transitions"] is Validity.HELD and run.outcome is Validity.BROKEN, run.verdicts
