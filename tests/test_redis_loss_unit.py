"""The redis-loss verdicts on histories made by hand, and the Redis faults on a real
redis-server (no Ray): each injected, confirmed, healed, and refused when it cannot bite."""

from __future__ import annotations

import io
import os
import shutil
import socket
from pathlib import Path

import pytest

from chaos import Chaos, FaultKind
from chaos._errors import FaultIneffective, InvalidFaultSpec
from chaos.gcs._faults import (
    KillRedis,
    RedisClientKill,
    RedisEvent,
    RedisIdleTimeout,
    gcs_connections,
    inject_redis_fault,
)
from chaos.gcs._redis import RedisReplyError, _read_reply, encode, redis_of, redis_server
from chaos.history import History, OpStatus
from scenarios.workloads.gcs._redis_loss import (
    DOCUMENTED_FATE,
    CaseResult,
    GcsFate,
    GcsSample,
    acknowledged_kept_verdict,
    actors_served_verdict,
    fate_verdict,
    gcs_fate,
    longest_silence,
    never_hung_verdict,
    recovered_verdict,
)

KILL, DROP, IDLE = FaultKind.KILL_REDIS, FaultKind.REDIS_CLIENT_KILL, FaultKind.REDIS_IDLE_TIMEOUT


def probes(*marks: str, every: float = 1.0, took: float = 0.5) -> list[GcsSample]:
    """One probe a second: ``a`` answered, ``s`` alive and silent, ``x`` the process gone."""
    return [GcsSample(i * every, took, m != "x", m == "a") for i, m in enumerate(marks)]


# -- the GCS's fate from its probes -------------------------------------------------------------


def test_a_gcs_that_answers_again_after_a_short_silence_served() -> None:
    assert gcs_fate(probes("a", "s", "s", "a"), [], start=0, end=10, hang_bound=8) is GcsFate.SERVED


def test_a_gcs_whose_process_ended_exited() -> None:
    assert gcs_fate(probes("a", "s", "s", "x", "x"), [], start=0, end=10, hang_bound=8) is GcsFate.EXITED


def test_an_exit_its_supervisor_saw_counts_though_no_probe_found_the_process_gone() -> None:
    # Probes seldom enough to fall before the exit and after the restart.
    assert gcs_fate(probes("a", "a", "a"), [1.5], start=0, end=10, hang_bound=8) is GcsFate.EXITED
    assert gcs_fate(probes("a", "a", "a"), [11.0], start=0, end=10, hang_bound=8) is GcsFate.SERVED


def test_a_gcs_alive_and_silent_past_the_bound_hung_even_if_it_exits_later() -> None:
    samples = probes("a", *"s" * 10, "x")
    assert longest_silence(samples) == pytest.approx(9.5)
    assert gcs_fate(samples, [], start=0, end=20, hang_bound=8) is GcsFate.HUNG
    assert gcs_fate(samples, [], start=0, end=20, hang_bound=9.5) is GcsFate.EXITED  # at the bound: not past it


def test_a_silence_is_measured_over_consecutive_probes_only() -> None:
    samples = probes(*"sssss", "a", *"sssss")
    assert longest_silence(samples) == pytest.approx(4.5)
    assert gcs_fate(samples, [], start=0, end=20, hang_bound=8) is GcsFate.UNSEEN  # silent at the end


def test_only_the_probes_of_the_window_count() -> None:
    samples = probes("x", "a", "a")  # an exit before the fault is not this fault's
    assert gcs_fate(samples, [], start=1, end=5, hang_bound=8) is GcsFate.SERVED
    assert gcs_fate(samples, [], start=5, end=9, hang_bound=8) is GcsFate.UNSEEN  # no probe at all


# -- the verdicts ---------------------------------------------------------------------------------


def case(kind: FaultKind, fate: GcsFate, recovered_in: float | None = 1.0) -> CaseResult:
    return CaseResult(kind=kind, fate=fate, recovered_in=recovered_in, restarted=fate is GcsFate.EXITED,
                      detail="evidence")


def test_never_hung_holds_for_served_and_exited_and_breaks_on_hung_or_unseen() -> None:
    assert never_hung_verdict([case(KILL, GcsFate.EXITED), case(IDLE, GcsFate.SERVED)]).held
    for bad in (GcsFate.HUNG, GcsFate.UNSEEN):
        verdict = never_hung_verdict([case(KILL, GcsFate.EXITED), case(IDLE, bad)])
        assert not verdict.held and f"redis_idle_timeout: {bad}" in verdict.detail


def test_verdicts_over_no_fault_do_not_hold() -> None:
    for verdict in (never_hung_verdict([]), fate_verdict([]), recovered_verdict([], 20.0)):
        assert not verdict.held and verdict.seen == 0 and "nothing to check" in verdict.detail


def test_the_documented_fate_of_each_fault() -> None:
    assert {k: f for k, (f, _) in DOCUMENTED_FATE.items()} == {
        KILL: GcsFate.EXITED, DROP: GcsFate.EXITED, IDLE: GcsFate.EXITED}
    assert fate_verdict([case(KILL, GcsFate.EXITED), case(DROP, GcsFate.EXITED), case(IDLE, GcsFate.EXITED)]).held
    wrong = fate_verdict([case(KILL, GcsFate.SERVED), case(IDLE, GcsFate.EXITED)])
    assert not wrong.held and wrong.detail.startswith("kill_redis: served, documented exited (Ray's test")


def test_recovery_breaks_when_late_or_missing() -> None:
    assert recovered_verdict([case(KILL, GcsFate.EXITED, 19.9)], 20.0).held
    assert not recovered_verdict([case(KILL, GcsFate.EXITED, 20.1)], 20.0).held
    verdict = recovered_verdict([case(KILL, GcsFate.EXITED, None)], 20.0)
    assert not verdict.held and "not served again" in verdict.detail


def test_actors_served_needs_every_call_answered_and_some_during_an_outage() -> None:
    assert actors_served_verdict(100, 0, 5).held
    assert not actors_served_verdict(100, 1, 5).held
    quiet = actors_served_verdict(100, 0, 0)
    assert not quiet.held and "no outage was tested" in quiet.detail


def test_acknowledged_writes_must_all_be_stored() -> None:
    history = History()
    for seq, status in enumerate((OpStatus.OK, OpStatus.OK, OpStatus.INFO)):
        history.invoke(("kv", seq), "driver")
        history.complete(("kv", seq), status)
    assert acknowledged_kept_verdict(history.ops(), [("kv", 0), ("kv", 1)]).held
    lost = acknowledged_kept_verdict(history.ops(), [("kv", 0), ("kv", 2)])
    assert not lost.held and "1 lost (first: ('kv', 1))" in lost.detail


# -- RESP, the wire format ----------------------------------------------------------------------


def test_commands_and_replies_in_resp() -> None:
    assert encode("CLIENT", "KILL", "ID", 7) == b"*4\r\n$6\r\nCLIENT\r\n$4\r\nKILL\r\n$2\r\nID\r\n$1\r\n7\r\n"
    assert encode("HDEL", b"RAY@KV") == b"*2\r\n$4\r\nHDEL\r\n$6\r\nRAY@KV\r\n"  # bytes as they are
    reply = io.BytesIO(b"*3\r\n$7\r\ntimeout\r\n:12\r\n$-1\r\n")
    assert _read_reply(reply) == [b"timeout", 12, None]
    assert _read_reply(io.BytesIO(b"+OK\r\n")) == b"OK"
    with pytest.raises(RedisReplyError, match="ERR unknown command"):
        _read_reply(io.BytesIO(b"-ERR unknown command\r\n"))
    with pytest.raises(ConnectionResetError):
        _read_reply(io.BytesIO(b""))


# -- the faults on a real redis-server ------------------------------------------------------------


def test_fault_records_refuse_bad_values() -> None:
    for bad in (0, -1, 1.5, True, 601):
        with pytest.raises(InvalidFaultSpec, match="`timeout` must be"):
            RedisIdleTimeout(timeout=bad)  # type: ignore[arg-type]
    for bad in (0, -1, 601, float("nan"), True):
        with pytest.raises(InvalidFaultSpec, match=r"`seconds` must be a duration in \(0, 600\] seconds"):
            KillRedis(seconds=bad)
        with pytest.raises(InvalidFaultSpec, match="`seconds` must be"):
            RedisIdleTimeout(seconds=bad)
    with pytest.raises(InvalidFaultSpec, match="`keep_data` must be true or false"):
        KillRedis(keep_data="yes")  # type: ignore[arg-type]


def test_on_a_cluster_this_process_did_not_start_a_redis_fault_fails_journaled() -> None:
    """Scheduled like any fault, it needs the cluster's Redis: one it cannot reach is no pass."""
    chaos = Chaos(address="127.0.0.1:1")
    with pytest.raises(InvalidFaultSpec), chaos.inject(RedisClientKill()):
        pass
    assert [e.kind for e in chaos.journal.events] == []  # nothing happened, nothing injected


def test_a_redis_not_started_here_is_refused() -> None:
    with pytest.raises(InvalidFaultSpec, match="not started by this process"):
        redis_of("127.0.0.1:1")


def test_a_killed_redis_comes_back_with_its_data_or_empty_when_asked() -> None:
    events: list[RedisEvent] = []
    with redis_server() as address:
        server = redis_of(address)
        server.command("SET", "k", "v")
        with inject_redis_fault(KillRedis(), server, gcs_pid=os.getpid(), journal=events.append):
            assert not server.running()
            with pytest.raises(OSError):
                server.command("PING")
        assert server.command("GET", "k") == b"v"
        with inject_redis_fault(KillRedis(keep_data=False), server, gcs_pid=os.getpid(), journal=events.append):
            pass
        assert server.command("GET", "k") is None
    assert [(e.step, e.kind) for e in events] == [("inject", KILL), ("heal", KILL)] * 2
    assert "with its data: 1 entries" in events[1].detail and "without its data: 0 entries" in events[3].detail


def test_a_redis_that_comes_back_without_its_data_fails_the_heal() -> None:
    with redis_server() as address:
        server = redis_of(address)
        server.command("SET", "k", "v")
        with pytest.raises(FaultIneffective, match="holds 0 entries, not the 2 it held"), \
                inject_redis_fault(KillRedis(), server, gcs_pid=os.getpid(), journal=lambda e: None):
            shutil.rmtree(server.folder)  # its append-only file lost while it was down
            os.makedirs(server.folder)


def test_a_redis_that_comes_back_missing_entries_of_a_hash_fails_the_heal() -> None:
    # The GCS keeps a table as one hash: losing a field keeps the key count and the sentinel.
    lost = b"*4\r\n$4\r\nHSET\r\n$5\r\ntable\r\n$1\r\nc\r\n$1\r\n3\r\n"
    with redis_server() as address:
        server = redis_of(address)
        server.command("HSET", "table", "a", "1", "b", "2")
        server.command("HSET", "table", "c", "3")
        with pytest.raises(FaultIneffective, match="holds 3 entries, not the 4 it held when killed: its"), \
                inject_redis_fault(KillRedis(), server, gcs_pid=os.getpid(), journal=lambda e: None):
            logs = [p for p in Path(server.folder).rglob("*") if p.is_file() and lost in p.read_bytes()]
            assert logs, "no append-only file holds the write to lose"
            for path in logs:
                path.write_bytes(path.read_bytes().replace(lost, b""))


def test_client_kill_closes_exactly_the_connections_of_the_given_process() -> None:
    with redis_server() as address, socket.create_connection(("127.0.0.1", int(address.rpartition(":")[2]))) as ours:
        server = redis_of(address)
        ours.sendall(encode("PING"))
        assert ours.recv(16) == b"+PONG\r\n"
        assert len(gcs_connections(server, os.getpid())) == 1
        with inject_redis_fault(RedisClientKill(), server, gcs_pid=os.getpid(), journal=lambda e: None) as event:
            assert ours.recv(16) == b""  # closed by the server
            assert "closed all 1 connections" in event.detail
        # No connection left to kill: the fault cannot bite and says so.
        with pytest.raises(FaultIneffective, match="holds no connection"), \
                inject_redis_fault(RedisClientKill(), server, gcs_pid=os.getpid(), journal=lambda e: None):
            pass


def test_an_idle_timeout_is_confirmed_by_a_closed_idle_connection_and_set_back() -> None:
    events: list[RedisEvent] = []
    with redis_server() as address:
        server = redis_of(address)
        with inject_redis_fault(RedisIdleTimeout(timeout=1), server, gcs_pid=os.getpid(), journal=events.append):
            assert server.command("CONFIG", "GET", "timeout") == [b"timeout", b"1"]
        assert server.command("CONFIG", "GET", "timeout") == [b"timeout", b"0"]
    assert "an idle connection was closed by the server" in events[0].detail
    assert events[1].detail.startswith("timeout set back to 0")
