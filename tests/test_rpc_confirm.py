"""Ray's RPC failure knob is confirmed from what Ray itself logs for each failure it injects."""

from __future__ import annotations

from pathlib import Path

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
    (logs / "raylet.out").write_text(f"Inject RPC response failure for {PUSH}\n")  # not a .log: not read
    return str(tmp_path)


def test_each_injected_failure_is_counted_by_method(tmp_path: Path) -> None:
    assert rpc_failures_injected(_session(tmp_path, LOG)) == {
        PUSH: 2, LEASE: 1}


def test_a_knob_that_fired_is_confirmed_and_one_that_never_fired_is_not(tmp_path: Path) -> None:
    injected = rpc_failures_injected(_session(tmp_path, LOG))
    assert unconfirmed_rpc_failures((RpcFailure(PUSH, response_percent=10),), injected) == []
    assert unconfirmed_rpc_failures((RpcFailure("*", response_percent=10),), injected) == []
    misspelled = RpcFailure(PUSH + "z", response_percent=10)
    (problem,) = unconfirmed_rpc_failures((RpcFailure(PUSH, response_percent=10), misspelled), injected)
    assert repr(PUSH + "z") in problem and "injected none" in problem


def test_no_log_line_confirms_nothing(tmp_path: Path) -> None:
    quiet = _session(tmp_path, "[2026-12-03] core_worker.cc:1: nothing injected\n")
    assert rpc_failures_injected(quiet) == {}
    assert unconfirmed_rpc_failures((RpcFailure("*", response_percent=10),), {}) != []
