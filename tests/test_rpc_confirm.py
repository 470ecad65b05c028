"""Ray's RPC failure knob is confirmed from what Ray itself logs for each failure it injects."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chaos import RpcFailure
from chaos._delay import rpc_failures_injected, unconfirmed_rpc_failures

PUSH = "CoreWorkerService.grpc_client.PushTask"
# Lines as Ray 2.60's core worker wrote them in a run here (grpc_client.h:137).
LEASE = "NodeManagerService.grpc_client.RequestWorkerLease"
LOG = f"""[2026-12-03 10:21:36,597 I 7487 7507] grpc_client.h:137: Inject RPC response failure for {PUSH}
[2026-12-03 10:21:36,598 I 7487 7507] core_worker.cc:1: something else
[2026-12-03 10:21:36,599 I 7487 7507] grpc_client.h:137: Inject RPC request failure for {PUSH}
[2026-12-03 10:21:36,600 I 7487 7507] grpc_client.h:137: Inject RPC response failure while request in flight for {LEASE}
"""


def _session(tmp_path: Path, text: str) -> str:
    logs = tmp_path / "session_x" / "logs"
    logs.mkdir(parents=True)
    (logs / "python-core-worker-1.log").write_text(text)
    (logs / "raylet.out").write_text(f"Inject RPC request failure for {LEASE}\n")  # the raylet's calls
    (logs / "notes.txt").write_text(f"Inject RPC response failure for {PUSH}\n")  # not a log: not read
    return str(tmp_path)


def test_each_injected_failure_is_counted_by_method(tmp_path: Path) -> None:
    assert rpc_failures_injected(_session(tmp_path, LOG)) == {
        PUSH: 2, LEASE: 2}


def test_a_knob_that_fired_is_confirmed_and_one_that_never_fired_is_not(tmp_path: Path) -> None:
    injected = rpc_failures_injected(_session(tmp_path, LOG))
    assert unconfirmed_rpc_failures((RpcFailure(PUSH, response_percent=10),), injected) == []
    assert unconfirmed_rpc_failures((RpcFailure("*", response_percent=10),), injected) == []
    misspelled = RpcFailure(PUSH + "z", response_percent=10)
    (problem,) = unconfirmed_rpc_failures((RpcFailure(PUSH, response_percent=10), misspelled), injected)
    assert repr(PUSH + "z") in problem and "injected none" in problem


def test_a_wildcard_is_not_confirmed_by_a_method_another_entry_names() -> None:
    both = (RpcFailure(PUSH, response_percent=10), RpcFailure("*", request_percent=10))
    (problem,) = unconfirmed_rpc_failures(both, {PUSH: 3})
    assert "'*'" in problem
    assert unconfirmed_rpc_failures(both, {PUSH: 3, LEASE: 1}) == []


def test_no_log_line_confirms_nothing(tmp_path: Path) -> None:
    logs = tmp_path / "session_x" / "logs"
    logs.mkdir(parents=True)
    (logs / "python-core-worker-1.log").write_text("[2026-12-03] core_worker.cc:1: nothing injected\n")
    assert rpc_failures_injected(str(tmp_path)) == {}
    assert unconfirmed_rpc_failures((RpcFailure("*", response_percent=10),), {}) != []


def test_the_runs_records_count_only_its_own_failures_and_a_silent_entry_is_ineffective(tmp_path: Path) -> None:
    from chaos import FaultKind
    from chaos.engine import FaultStatus
    from scenarios.runner._run import _Knob, knob_records

    root = _session(tmp_path, LOG)
    knob = _Knob((RpcFailure(PUSH, response_percent=10), RpcFailure(PUSH + "z", response_percent=10)), root)
    fired, silent = knob_records(knob, {}, 12.0, wait=0.0)
    assert (fired.kind, fired.status, fired.target) == (FaultKind.RPC_FAILURE, FaultStatus.INJECTED, PUSH)
    assert "injected 2 failure(s)" in fired.outcome
    assert silent.status is FaultStatus.INEFFECTIVE and silent.confirmed is None and "injected none" in silent.outcome
    # What an earlier run on the same cluster logged (a baseline) is not this run's.
    (earlier,) = knob_records(_Knob((RpcFailure(PUSH, response_percent=10),), root), {PUSH: 2}, 12.0, wait=0.0)
    assert earlier.status is FaultStatus.INEFFECTIVE


@pytest.mark.slow
@pytest.mark.ray
def test_an_rpc_failure_entry_that_injects_nothing_fails_the_run_as_ineffective(tmp_path: Path) -> None:
    """The rpc-failures scenario with its method misspelled, judged only by invariants that
    need no retry: every call answers, so all of them hold; the knob injected nothing, so the
    run fails, its record ineffective (it passed before the knob was confirmed)."""
    text = (Path(__file__).parents[1] / "scenarios/builtin/rpc-failures.toml").read_text()
    edits = ((f'method = "{PUSH}"', f'method = "{PUSH}z"'),
             ('invariants = ["results_correct", "retried_deliveries_seen", "no_hang"]',
              'invariants = ["results_correct", "no_hang"]'))
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    scenario = tmp_path / "misspelled.toml"
    scenario.write_text(text)
    raychaos = str(Path(sys.executable).with_name("raychaos"))
    out = subprocess.run([raychaos, "run", str(scenario), "--no-baseline", "--report", str(tmp_path / "r")],
                         capture_output=True, text=True, timeout=300, check=False)
    run = json.loads((tmp_path / "r" / "summary.json").read_text())["runs"][-1]
    assert all(v["held"] for v in run["verdicts"]), run["verdicts"]
    assert out.returncode == 1, out.stdout[-2000:]
    (record,) = run["faults"]
    assert (record["kind"], record["status"]) == ("rpc_failure", "ineffective"), record
