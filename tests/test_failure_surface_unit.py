"""The Ray-free parts of the failure-surface faults and scenarios: records validated, Ray's
knob format, the oracles and checks each one false as well as true."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from actors import CheckpointedCounter
from chaos import (
    DrainNode,
    FillDisk,
    FreezeNode,
    History,
    KillGcs,
    LimitOpenFiles,
    NodeTarget,
    RpcFailure,
    TaskTarget,
    wait_until,
)
from chaos._watchdog import group_fits
from chaos.agents._agent import _limit_leaving
from chaos.cluster import capped_filesystem, redis_server
from chaos.engine import fault_from_dict, fault_to_dict, rpc_failure_env
from chaos.errors import InvalidConfig, InvalidFaultSpec
from chaos.history import Op, OpStatus
from scenarios import ScenarioError, load_scenario
from scenarios.workloads._kit import kept
from scenarios.workloads.surface._objects import ObjectKind, expected_outcome


@pytest.mark.parametrize("fault", [
    FreezeNode(seconds=3), LimitOpenFiles(TaskTarget("t"), seconds=2, headroom=1),
    FillDisk("/tmp/x", seconds=1), FillDisk("$STORAGE", seconds=1), DrainNode(deadline_s=2),
    KillGcs(seconds=2, restart=False)])
def test_new_faults_round_trip_through_the_journal_form(fault: object) -> None:
    assert fault_from_dict(json.loads(json.dumps(fault_to_dict(fault)))) == fault  # type: ignore[arg-type]


@pytest.mark.parametrize(("make", "message"), [
    (lambda: FreezeNode(seconds=0), "duration"),
    (lambda: FreezeNode(seconds=1, target=NodeTarget(allow_head=True)), "KillGcs for the head"),
    (lambda: LimitOpenFiles(TaskTarget("t"), seconds=1, headroom=-1), "headroom"),
    (lambda: FillDisk("relative", seconds=1), "absolute directory"),
    (lambda: DrainNode(deadline_s=2, reason="boredom"), "unknown drain reason"),  # type: ignore[arg-type]
    (lambda: DrainNode(deadline_s=2, target=NodeTarget(allow_head=True)), "refuses to drain the head"),
    (lambda: KillGcs(seconds=float("nan")), "duration"),
    (lambda: RpcFailure("PushTask", response_percent=10), "Service.grpc_client.Method"),
    (lambda: RpcFailure("*", response_percent=60, request_percent=60), "adding up to"),
    (lambda: RpcFailure("*"), "adding up to"),
    (lambda: RpcFailure("*", response_percent=5, num_failures=0), "num_failures"),
])
def test_bad_fault_specs_say_what_and_how_to_fix(make: object, message: str) -> None:
    with pytest.raises(InvalidFaultSpec, match=message):
        make()  # type: ignore[operator]


def test_the_rpc_failure_env_is_ray_260s_json_and_spares_no_intra_node_call() -> None:
    env = rpc_failure_env(RpcFailure("CoreWorkerService.grpc_client.PushTask", response_percent=10,
                                     num_failures=5))
    assert json.loads(env["RAY_testing_rpc_failure"]) == {"CoreWorkerService.grpc_client.PushTask": {
        "num_failures": 5, "req_failure_prob": 0, "resp_failure_prob": 10, "in_flight_failure_prob": 0}}
    assert env["RAY_testing_rpc_failure_avoid_intra_node_failures"] == "0"
    with pytest.raises(InvalidFaultSpec):
        rpc_failure_env()


@pytest.mark.parametrize(("release", "knob"), [
    ("2.51.2", "CoreWorkerService.grpc_client.PushTask=5:0:10,*=-1:20:0"),
    ("2.53.0", "CoreWorkerService.grpc_client.PushTask=5:0:10:0,*=-1:20:0:0"),
])
def test_the_rpc_failure_knob_is_in_the_format_of_the_installed_ray(
        monkeypatch: pytest.MonkeyPatch, release: str, knob: str) -> None:
    """Ray before 2.54 reads `M=max:req:resp` (a fourth field, in flight, from 2.52); a field
    count it does not expect fails a check in every process at start-up (seen on 2.50 and 2.53)."""
    from chaos import _ray_compat

    _ray_compat.ray_minor.cache_clear()
    monkeypatch.setattr(_ray_compat, "version", lambda name: release)
    try:
        env = rpc_failure_env(RpcFailure("CoreWorkerService.grpc_client.PushTask", response_percent=10,
                                         num_failures=5), RpcFailure("*", request_percent=20))
        assert env["RAY_testing_rpc_failure"] == knob
        if release < "2.52":
            with pytest.raises(InvalidFaultSpec, match=r"in_flight_percent = 5 .* no in-flight failures"):
                rpc_failure_env(RpcFailure("*", in_flight_percent=5))
    finally:
        _ray_compat.ray_minor.cache_clear()


def test_the_open_file_limit_leaves_exactly_the_headroom() -> None:
    held = {0, 1, 2, 5, 6, 9}
    assert _limit_leaving(held, 0) == 3  # the lowest free slot: the next open fails
    assert _limit_leaving(held, 2) == 7  # slots 3 and 4 may still be taken, 7 may not
    assert _limit_leaving(held, 4) == 10


def test_a_placement_group_fits_or_not_by_strategy() -> None:
    nodes = [{"CPU": 2.0}, {"CPU": 2.0, "worker": 1.0}]
    assert group_fits([{"CPU": 1.0}] * 2, "PACK", nodes)
    assert not group_fits([{"CPU": 64.0}], "PACK", nodes)
    assert not group_fits([{"CPU": 2.0}] * 2, "STRICT_PACK", nodes)
    assert group_fits([{"CPU": 1.0}] * 2, "STRICT_SPREAD", nodes)
    assert not group_fits([{"CPU": 1.0}] * 3, "STRICT_SPREAD", nodes)
    assert not group_fits([{"worker": 1.0}, {"gpu": 1.0}], "SPREAD", nodes)


def test_the_lost_object_oracle() -> None:
    assert expected_outcome(ObjectKind.ONCE_TASK, on_dead_node=False) == "value"
    assert expected_outcome(ObjectKind.RETRIED_TASK, on_dead_node=True) == "value"
    assert expected_outcome(ObjectKind.ONCE_TASK, on_dead_node=True) == "ObjectReconstructionFailedError"
    assert expected_outcome(ObjectKind.WORKER_PUT, on_dead_node=True) == "OwnerDiedError"


def _history(*statuses: OpStatus, writer: str = "w") -> list[Op]:
    """One writer's adds: seq i ended as ``statuses[i]``."""
    history = History()
    for seq, status in enumerate(statuses):
        history.invoke((writer, seq), writer)
        history.complete((writer, seq), status)
    return history.ops()


def test_a_counter_holds_every_acknowledged_add_and_no_undone_one() -> None:
    ok, info, fail = OpStatus.OK, OpStatus.INFO, OpStatus.FAIL
    adds = _history(ok, ok, info, fail)
    assert kept("k", "w", 2, adds, [0, 1]).held and kept("k", "w", 3, adds, [0, 1, 2]).held
    assert not kept("k", "w", 1, adds, [1]).held  # an acknowledged add lost
    assert not kept("k", "w", 3, adds, [0, 1, 3]).held  # a refused and undone add applied after all
    assert not kept("k", "w", 3, adds, [0, 1]).held  # an applied add counted twice
    nothing = kept("k", "w", 0, _history(info), [])  # no add acknowledged: nothing was kept
    assert not nothing.held and nothing.seen == 0, nothing


def test_a_lost_acknowledged_add_is_not_excused_by_an_unknown_one_that_landed() -> None:
    # One number would pass this: acknowledged 1 <= counter 1 <= acknowledged + unknown 2.
    verdict = kept("k", "w", 1, _history(OpStatus.OK, OpStatus.INFO), [1])
    assert not verdict.held and "1 lost (first: ('w', 0))" in verdict.detail, verdict


def test_a_counter_reports_exactly_the_seqs_it_applied(tmp_path: Path) -> None:
    counter = CheckpointedCounter(str(tmp_path / "c"), durability="wal", every_n=4)
    for seq in (0, 1, 3, 2, 7, 5, 3):  # out of order, one repeat
        counter.add(1, writer_id="w", seq=seq)
    counter.add(1)  # no ids: counted, not a seq
    assert counter.applied_seqs("w") == [0, 1, 2, 3, 5, 7] and counter.applied_seqs("x") == []
    # From its checkpoint and its log, as a restarted actor reads them.
    restored = CheckpointedCounter(str(tmp_path / "c"), durability="wal", every_n=4, restore="always")
    assert restored.applied_seqs("w") == [0, 1, 2, 3, 5, 7] and restored.get() == 7


def _scenario(tmp_path: object, text: str) -> str:
    path = f"{tmp_path}/s.toml"
    with open(path, "w", encoding="utf-8") as f:
        f.write('name = "x"\nworkload = "open-files"\nduration = 5\ninvariants = []\n' + text)
    return path


def test_scenario_fields_of_the_failure_surface_are_validated(tmp_path: object) -> None:
    bad = _scenario(tmp_path, 'gcs_fault_tolerance = "yes"\nstorage_mb = 0\n'
                              '[[rpc_failures]]\nmethod = "PushTask"\nresponse_percent = 10\n')
    with pytest.raises(ScenarioError) as caught:
        load_scenario(bad)
    text = str(caught.value)
    for expected in ("gcs_fault_tolerance", "storage_mb", "rpc_failures = '1 entries'",
                     "rpc_failures[0]", "Service.grpc_client.Method"):
        assert expected in text, text


def test_a_scenario_that_builds_its_cluster_refuses_an_address(tmp_path: object) -> None:
    from scenarios import run_scenario

    scenario = load_scenario("gcs-restart")
    with pytest.raises(InvalidConfig, match="without --address"):
        run_scenario(scenario, address="127.0.0.1:1")


def test_redis_is_started_answers_and_is_stopped() -> None:
    with redis_server() as address:
        host, port = address.split(":")
        out = subprocess.run(["redis-cli", "-h", host, "-p", port, "PING"], capture_output=True,
                             text=True, timeout=10, check=False)
        assert out.stdout.strip() == "PONG"
    assert subprocess.run(["pgrep", "-f", f"redis-server 127.0.0.1:{port}"], check=False).returncode == 1


def test_redis_dies_with_a_driver_that_aborts() -> None:
    # Ray's core worker ends a driver that lost its GCS for 60 s without unwinding (seen in a
    # gcs-restart run): the harness's Redis must not outlive it.
    script = ("import os, sys\nfrom chaos.cluster import redis_server\n"
              "with redis_server() as address:\n    print(address, flush=True)\n    os._exit(3)\n")
    before = set(Path(tempfile.gettempdir()).glob("rc-redis-*"))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    # The abort leaves Redis's (empty) folder behind, as it would a real driver's: every make
    # test left one in /tmp until this removed it.
    for folder in set(Path(tempfile.gettempdir()).glob("rc-redis-*")) - before:
        shutil.rmtree(folder, ignore_errors=True)
    assert out.returncode == 3, out.stderr
    port = out.stdout.strip().split(":")[1]
    wait_until(lambda: subprocess.run(["pgrep", "-f", f"redis-server 127.0.0.1:{port}"],
                                      check=False).returncode == 1,
               timeout=10, what="the orphaned redis-server to stop")


def test_a_missing_redis_is_a_clear_error() -> None:
    with pytest.raises(InvalidConfig, match="apt-get install redis-server"), \
            redis_server(executable="redis-server-not-here"):
        pass


def test_a_capped_filesystem_refuses_a_bad_size() -> None:
    with pytest.raises(InvalidConfig, match="size_mb"), capped_filesystem(0):
        pass


def test_a_node_kill_stops_the_parent_and_kills_each_process_under_it() -> None:
    # A stand-in raylet: a process with a child, as a raylet has workers.
    import psutil

    from chaos.agents._agent import _gone, _stop_and_kill_under

    script = ("import subprocess, sys, time\n"
              "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
              "time.sleep(60)")
    parent = subprocess.Popen([sys.executable, "-c", script])
    try:
        proc = psutil.Process(parent.pid)
        wait_until(lambda: proc.children(), timeout=10, what="the child to start")
        child = proc.children()[0]
        assert _stop_and_kill_under(proc, ()) == 1
        assert proc.status() == psutil.STATUS_STOPPED  # stopped, not yet killed: that comes after the reply
        assert _gone(child)  # a zombie its stopped parent cannot reap counts
    finally:
        parent.kill()
        parent.wait(timeout=10)


def test_a_node_kill_that_cannot_stop_the_raylet_is_ineffective(monkeypatch: pytest.MonkeyPatch) -> None:
    # An exited, unreaped process never shows state T: the kill must fail, not pass.
    import psutil

    from chaos.agents import _agent
    from chaos.errors import FaultIneffective

    monkeypatch.setattr(_agent, "STOP_TIMEOUT", 0.3)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    wait_until(lambda: psutil.Process(gone.pid).status() == psutil.STATUS_ZOMBIE, timeout=10,
               what="the process to exit")
    try:
        with pytest.raises(FaultIneffective, match=f"waited 0.3 s for raylet {gone.pid} to stop"):
            _agent._stop_and_kill_under(psutil.Process(gone.pid), ())
    finally:
        gone.wait(timeout=10)
