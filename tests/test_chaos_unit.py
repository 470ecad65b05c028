"""Chaos engine pieces that need no cluster: validation, schedules, journal, delays, strategies."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from pydantic import ValidationError

from chaos import (
    ActorTarget,
    CpuHog,
    FillObjectStore,
    Kill,
    KillNode,
    Latency,
    MemoryPressure,
    NodeTarget,
    Pause,
    Schedule,
    Starve,
    TaskTarget,
    delayed,
    strategies,
)
from chaos._process_faults import PauseObserved
from chaos._resource_faults import MemoryObserved
from chaos.engine import FaultStatus, MemoryOutcome, fault_from_dict, fault_to_dict, rpc_delay_env
from chaos.errors import InvalidFaultSpec, JournalCorrupt
from chaos.journal import (
    EndEvent,
    FaultEvent,
    Journal,
    Observed,
    RecoverEvent,
    StartEvent,
    VerdictEntry,
    read_journal,
)
from conftest import scaled

A = ActorTarget(class_name="Worker")


@pytest.mark.parametrize(
    ("make", "message"),
    [(lambda: Pause(A, seconds=-1.0), r"`seconds` must be a duration in \(0, 3600\] seconds, got -1.0"),
     (lambda: Pause(A, seconds=float("inf")), "every fault is bounded in time"),
     (lambda: Kill(A, signal="SIGHUP"), "unknown signal 'SIGHUP'; use 'SIGKILL' or 'SIGTERM'"),
     (lambda: MemoryPressure(fraction=0.9, seconds=1.0, host_cap=0.8),
      "memory `fraction` 0.9 is above the host cap 0.8"),
     (lambda: MemoryPressure(fraction=1.5, seconds=1.0), r"`fraction` must be a fraction in \(0, 1\]"),
     (lambda: CpuHog(cores=0, seconds=1.0), r"`cores` must be a whole number in \[1, 256\], got 0"),
     (lambda: FillObjectStore(fraction=9.0, seconds=1.0), r"must be in \(0, 4\]"),
     (lambda: Starve(seconds=1.0), "starvation needs cpus > 0 or positive resources"),
     (lambda: ActorTarget(), "an actor target needs exactly one of actor_id, name, class_name"),
     (lambda: ActorTarget(class_name="X", pick="some"), "unknown pick 'some'"),
     (lambda: Schedule.random([Kill(A)], rate=2.0, duration=10, seed=1), r"`rate` must be in \(0, 1\], got 2.0"),
     (lambda: Schedule.interval([Kill(A)], every=1.0, duration=5, jitter=1.5), r"`jitter` must be in \[0, 1\)"),
     (lambda: Latency("gamma", 1.0), "unknown latency kind 'gamma'"),
     (lambda: fault_from_dict({"kind": "flood"}), "unknown fault kind 'flood'")],
)
def test_bad_specs_are_refused(make: Any, message: str) -> None:
    with pytest.raises(InvalidFaultSpec, match=message):
        make()


def test_the_same_seed_gives_the_same_schedule() -> None:
    menu = [Kill(A), Pause(TaskTarget("collect"), seconds=1.0), KillNode(NodeTarget())]
    a = Schedule.random(menu, rate=0.5, duration=60, seed=7)
    assert a == Schedule.random(menu, rate=0.5, duration=60, seed=7)
    assert a != Schedule.random(menu, rate=0.5, duration=60, seed=8)
    assert 10 < len(a.entries) < 60 and all(0 <= e.at < 60 for e in a.entries)
    b = Schedule.interval(menu, every=2.0, duration=20, jitter=0.25, seed=3)
    assert b == Schedule.interval(menu, every=2.0, duration=20, jitter=0.25, seed=3)
    assert [type(e.fault) for e in b.entries[:3]] == [Kill, Pause, KillNode]


def test_a_chaos_marker_whose_menu_drew_nothing_is_told_apart() -> None:
    from chaos._marker import parse_marker

    kill = Kill(ActorTarget(name="victim"))
    drawn = parse_marker((), {"menu": [kill], "rate": 0.5, "duration": 5.0})
    # At the defaults a draw is empty one time in twelve: seed 2 is such a draw.
    assert drawn.drew_nothing(drawn.schedule(2)) and not drawn.drew_nothing(drawn.schedule(0))
    assert "8.2% of the time" in drawn.nothing_drawn(2) and "strict=False" in drawn.nothing_drawn(2)
    both = parse_marker((), {"menu": [kill], "faults": [(1.0, kill)]})
    assert both.drew_nothing(both.schedule(2))  # the explicit fault is not the random one asked for
    assert not parse_marker((), {"faults": [(1.0, kill)]}).drew_nothing(Schedule(()))  # no menu: nothing asked
    assert not parse_marker((), {"seed": 3}).drew_nothing(Schedule(()))  # the engine alone, for the body


@pytest.mark.parametrize("fault", [
    Kill(ActorTarget(name="buf", namespace="ns"), "SIGTERM"), Pause(TaskTarget("collect"), 1.5),
    KillNode(NodeTarget("abc", allow_head=True)), MemoryPressure(0.5, 3.0, 0.7, NodeTarget()),
    CpuHog(2, 1.0), FillObjectStore(1.5, 2.0), Starve(1.0, cpus=2, resources={"gpu": 1.0})])
def test_faults_round_trip_through_json(fault: Any) -> None:
    assert fault_from_dict(json.loads(json.dumps(fault_to_dict(fault)))) == fault


def test_journal_replays_its_schedule(tmp_path: Path) -> None:
    path = str(tmp_path / "journal.jsonl")
    schedule = Schedule.explicit([(0.5, Kill(A)), (2.0, Pause(A, seconds=1.0))])
    with Journal(path) as journal:
        for entry in schedule.entries:
            journal.record(FaultEvent(kind="inject", at=entry.at, fault=entry.fault, pid=123))
            journal.record(FaultEvent(kind="heal", at=entry.at, fault=entry.fault))
    with open(path, "a") as f:
        f.write('{"kind": "inj')  # a run killed mid-write leaves a torn line
    events = list(read_journal(path))
    assert [e.kind for e in events] == ["inject", "heal", "inject", "heal"]
    assert Schedule.from_journal(events) == schedule


def test_a_damaged_line_before_the_last_is_an_error_not_a_skip(tmp_path: Path) -> None:
    # A journal that silently drops a middle line replays another schedule than the one run.
    path = tmp_path / "journal.jsonl"
    with Journal(str(path)) as journal:
        journal.record(FaultEvent(kind="inject", at=0.5, fault=Kill(A)))
        journal.record(FaultEvent(kind="heal", at=0.5, fault=Kill(A)))
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0][:20] + "\n" + lines[1])
    with pytest.raises(JournalCorrupt, match=r"journal\.jsonl:1 is not a journal event"):
        list(read_journal(str(path)))
    path.write_text(lines[0] + '{"kind": "inject", "mono": 1, "wall": 1, "fault": {"kind": "kill"}, "zap": 1}\n')
    with pytest.raises(JournalCorrupt, match=r"journal\.jsonl:2 is not a journal event"):
        list(read_journal(str(path)))


def test_every_event_kind_reads_back_as_written(tmp_path: Path) -> None:
    path = str(tmp_path / "journal.jsonl")
    schedule = Schedule.explicit([(0.5, Kill(A)), (1.0, CpuHog(cores=1, seconds=2.0))])
    events = [StartEvent(seed=7, schedule=schedule.planned(), scenario="s", source="builtin:s", run="chaos"),
              FaultEvent(kind="inject", at=0.5, fault=Kill(A), pid=9, observed=Observed(pids=(1, 2), name="w")),
              FaultEvent(kind="heal", at=1.0, fault=MemoryPressure(fraction=0.1, seconds=2.0),
                         observed=MemoryObserved(memory_outcome=MemoryOutcome.OOM_KILLED, peak_bytes=3)),
              RecoverEvent(at=0.5, fault=Kill(A), outcome="recovered", seconds=0.25),
              EndEvent(outcome="completed", faults=(FaultStatus.INJECTED,),
                       verdicts=(VerdictEntry(name="x", held=False, detail="d"),))]
    with Journal(path) as journal:
        for event in events:
            journal.record(event)
    read = list(read_journal(path))
    assert read == events
    assert type(read[2].observed) is MemoryObserved  # type: ignore[union-attr]  # its kind's own type
    assert Schedule.from_journal(events) == Schedule(schedule.entries)


def test_a_journal_that_lists_every_kinds_facts_reads_back_as_each_kinds_own(tmp_path: Path) -> None:
    """Journals written before observations were typed per kind list every fact, absent as null."""
    facts = {"name": "w", "resume_by": 9.5, "pids": [], "bytes": None, "capacity": None, "cpus": None,
             "resources": {}, "memory_outcome": None, "peak_bytes": None, "new_pid": None, "limit": None,
             "old_limit": None}
    old = json.dumps({"mono": 1.0, "wall": 2.0, "kind": "inject", "at": 0.5, "outcome": "SIGSTOP",
                      "fault": fault_to_dict(Pause(A, seconds=1.0)), "observed": facts})
    path = tmp_path / "journal.jsonl"
    path.write_text(old + "\n")
    (event,) = read_journal(str(path))
    assert isinstance(event, FaultEvent) and event.observed == PauseObserved(name="w", resume_by=9.5)


def test_an_event_observes_only_what_its_kind_observes(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="a cpu event's observation is Observed, not MemoryObserved"):
        FaultEvent(kind="heal", fault=CpuHog(cores=1, seconds=2.0), observed=MemoryObserved(peak_bytes=3))
    path = tmp_path / "journal.jsonl"
    line = FaultEvent(kind="heal", fault=MemoryPressure(fraction=0.1, seconds=2.0),
                      observed=MemoryObserved(peak_bytes=3)).model_dump_json()
    path.write_text(line + "\n" + line.replace('"memory"', '"cpu"', 1).replace(
        '"fraction":0.1', '"cores":1').replace(',"host_cap":0.8,"node":null', '') + "\n")
    with pytest.raises(JournalCorrupt, match=r"journal\.jsonl:2 is not a journal event"):
        list(read_journal(str(path)))


def test_delays_are_seeded_and_reproducible(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr("chaos._delay.time.sleep", slept.append)  # record, do not wait
    for _ in range(2):
        fn = delayed(Latency("uniform", 0.1, 0.2), seed=5)(lambda x: x * 2)
        assert [fn(i) for i in range(3)] == [0, 2, 4]
    assert slept[:3] == slept[3:] and all(0.1 <= s <= 0.2 for s in slept)
    off = delayed(Latency("fixed", 0.5, probability=0.0), seed=5)(lambda: "ran")
    assert off() == "ran" and len(slept) == 6


def test_rpc_delay_env_names_rays_testing_knob() -> None:
    assert rpc_delay_env(min_us=100, max_us=200) == {"RAY_testing_asio_delay_us": "*=100:200"}


@scaled(25)
@given(schedule=strategies.schedules(strategies.faults(targets=[A, TaskTarget("t")]), max_faults=4))
def test_strategies_build_valid_sorted_schedules(schedule: Schedule) -> None:
    ats = [e.at for e in schedule.entries]
    assert ats == sorted(ats) and len(ats) <= 4
    for entry in schedule.entries:
        assert fault_from_dict(fault_to_dict(entry.fault)) == entry.fault


# -- the set checker over concurrent histories ------------------------------------------------


def _history(ok: list[int], failed: list[int] = (), unknown: list[int] = ()) -> Any:
    from chaos import History
    from chaos.history import OpStatus

    history = History()
    for keys, status in ((ok, OpStatus.OK), (failed, OpStatus.FAIL), (unknown, OpStatus.INFO)):
        for key in keys:
            history.invoke(key, "c")
            history.complete(key, status)
    return history.ops()


def test_the_set_checker_holds_when_every_acknowledged_write_is_stored_once() -> None:
    from chaos import check_set

    verdict = check_set(_history([1, 2], unknown=[3]), [2, 1])  # an unknown write may be absent
    assert verdict.ok and (verdict.acknowledged, verdict.stored, verdict.indeterminate) == (2, 2, 1)
    assert check_set(_history([1], unknown=[3]), [1, 3]).ok  # ... or present


@pytest.mark.parametrize(("stored", "broken"), [
    ([1], "lost"), ([1, 2, 2], "duplicated"), ([1, 2, 9], "unexpected"), ([1, 2, 4], "unexpected"),
])
def test_the_set_checker_names_what_broke(stored: list[int], broken: str) -> None:
    from chaos import check_set

    verdict = check_set(_history([1, 2], failed=[4]), stored)
    assert not verdict.ok and getattr(verdict, broken) and broken in verdict.explain()


def test_an_allowed_loss_is_a_bound_not_a_pass() -> None:
    from chaos import check_set

    assert check_set(_history([1, 2, 3]), [1], allowed_loss=2).ok
    assert not check_set(_history([1, 2, 3]), [], allowed_loss=2).ok


def test_a_history_refuses_a_key_invoked_twice() -> None:
    from chaos import History

    history = History()
    history.invoke(("w", 0), "w")
    with pytest.raises(ValueError, match="invoked twice"):
        history.invoke(("w", 0), "w")


def test_a_state_row_without_its_node_is_no_target() -> None:
    """A retried task's row can show a worker pid before a node id; an agent needs both."""
    from chaos._targets import _placed

    assert _placed(123, "ab" * 28)
    assert not _placed(123, None) and not _placed(123, "") and not _placed(0, "ab" * 28)


def test_a_runtime_env_whose_env_vars_are_not_a_mapping_is_refused(tmp_path: Path) -> None:
    from chaos.errors import InvalidConfig
    from chaos.failpoints import FailpointPlan, failpoint_env

    plan = FailpointPlan((), evidence_dir=str(tmp_path))
    with pytest.raises(InvalidConfig, match=r"runtime_env env_vars = \['A=1'\]: must be a mapping"):
        failpoint_env(plan, {"env_vars": ["A=1"]})
    assert failpoint_env(plan, {"env_vars": {"A": "1"}})["env_vars"]["A"] == "1"  # type: ignore[index]


def test_a_target_that_is_not_a_table_is_refused() -> None:
    from chaos._targets import target_from_dict

    with pytest.raises(InvalidFaultSpec, match="a target must be a table"):
        target_from_dict("actor:replay")
    with pytest.raises(InvalidFaultSpec, match="a target must be a table"):
        fault_from_dict({"kind": "kill", "target": ["actor", "replay"]})


REPORT = '{"resident": 7, "host_used": 0.5, "cannot": false, "blocks": 2, "seconds": 1, "slowest": 0.25}'


@pytest.mark.parametrize("text", ["[1, 2]", REPORT.replace("7", '"many"'), REPORT.replace(', "slowest": 0.25', ""),
                                  REPORT.replace('"blocks": 2', '"blocks": 2.5'), REPORT.replace("false", "0"),
                                  "{not json"])
def test_a_memory_report_that_is_not_one_reads_as_none(tmp_path: Path, text: str) -> None:
    from chaos.agents._memory import MemoryProgress, read_progress

    path = tmp_path / "progress.json"
    path.write_text(text)
    assert read_progress(str(path)) is None
    path.write_text(REPORT)
    assert read_progress(str(path), remove=True) == MemoryProgress(7, 0.5, False, 2, 1.0, 0.25)
    assert not path.exists()


def test_the_allocation_reports_its_pace(tmp_path: Path) -> None:
    # About two blocks' headroom past what the host uses now: its report says how many blocks
    # it made resident, when the last one was, and how long the slowest one took.
    import psutil

    from chaos.agents._memory import STEP, allocate, read_progress

    vm = psutil.virtual_memory()
    path = str(tmp_path / "progress.json")
    held = allocate((vm.total - vm.available + 2.5 * STEP) / vm.total, 1.0, 0.3, path)
    progress = read_progress(path)
    # The host's other processes come and go (a block more or less): the report matches itself.
    assert progress is not None and not progress.cannot and 1 <= progress.blocks == held // STEP, progress
    assert progress.resident >= 0.9 * held, progress
    assert 0 < progress.slowest <= progress.seconds <= 0.3 + progress.slowest, progress
    assert re.fullmatch(rf"{progress.blocks} blocks of 64 MiB in \d\.\d s, the slowest \d\.\d\d s", progress.pace())


def test_warm_up_readies_each_kind_through_its_own_spec(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before time zero each kind readies its faults (the engine names none): two fills map the
    store once per chunk size; a kind with nothing to ready is passed over."""
    import ray.util.state

    from chaos import Chaos, FillObjectStore, Schedule, Starve, _resource_faults

    monkeypatch.setattr(ray.util.state, "list_nodes", lambda **_: [])  # the State API's first call
    warmed: list[int] = []
    monkeypatch.setattr(_resource_faults, "_warm_store", warmed.append)
    schedule = Schedule.explicit([(1.0, FillObjectStore(fraction=0.5, seconds=1, chunk_mb=8)),
                                  (2.0, Starve(seconds=1, cpus=1)),
                                  (3.0, FillObjectStore(fraction=0.5, seconds=1, chunk_mb=16)),
                                  (4.0, FillObjectStore(fraction=0.2, seconds=1, chunk_mb=8))])
    Chaos(address="fake:6379").warm_up(schedule)
    assert sorted(warmed) == [8, 16]


def test_a_cluster_start_that_fails_carries_its_gcs_log(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Why a GCS did not come up is in its log, which the failed start's teardown removes: the
    error keeps its tail; the start waits longer than Ray's 30 s unless the user set the knob."""
    from chaos.cluster._cluster import GCS_START_PATIENCE, _gcs_log_on_failure, _start_patience

    logs = tmp_path / "session_1" / "logs"
    logs.mkdir(parents=True)
    (logs / "gcs_server.err").write_text("early line\nbind failed: address in use\n")
    with pytest.raises(RuntimeError) as caught, _gcs_log_on_failure(str(tmp_path)):
        raise RuntimeError("Timed out waiting for file gcs_server_port")
    assert any("bind failed: address in use" in note for note in caught.value.__notes__)
    monkeypatch.delenv("RAY_gcs_server_port_wait_time_s", raising=False)
    assert _start_patience() == {"RAY_gcs_server_port_wait_time_s": str(GCS_START_PATIENCE)}
    monkeypatch.setenv("RAY_gcs_server_port_wait_time_s", "5")
    assert _start_patience() == {}


def test_the_ray_release_facts_follow_the_installed_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """Token authentication (and grpc_utils) came in Ray 2.52: before it there is no token to send."""
    from chaos import _ray_compat

    assert _ray_compat.ray_minor() >= (2, 50)
    _ray_compat.ray_minor.cache_clear()
    monkeypatch.setattr(_ray_compat, "version", lambda name: "2.51.2")
    try:
        assert _ray_compat.ray_minor() == (2, 51) and not _ray_compat.token_auth()
        assert _ray_compat.token_auth_enabled() is False and _ray_compat.auth_headers() == {}
        _ray_compat.ray_minor.cache_clear()
        monkeypatch.setattr(_ray_compat, "version", lambda name: "2.60.0rc1")
        assert _ray_compat.ray_minor() == (2, 60) and _ray_compat.token_auth()
    finally:
        _ray_compat.ray_minor.cache_clear()


@pytest.mark.parametrize(("release", "token", "mode"), [
    ("2.51.2", True, None),  # no token authentication at all
    ("2.55.1", False, None),  # token mode would fail a cluster without it: asked only with a token
    ("2.55.1", True, "token"),
    ("2.60.0", False, "token"),  # a token-mode client works with either cluster
])
def test_a_client_asks_for_token_mode_only_where_its_ray_can_use_any_cluster(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, release: str, token: bool, mode: str | None) -> None:
    """Ray 2.52-2.58: a client in token mode with a cluster without token authentication loses
    its actors (ActorDiedError: 2.53, 2.54, 2.57, 2.58) or waits (2.52); measured with `ray start` heads."""
    from chaos import _ray_compat

    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    if token:
        (tmp_path / ".ray").mkdir()
        (tmp_path / ".ray" / "auth_token").write_text("x" * 32)
    _ray_compat.ray_minor.cache_clear()
    monkeypatch.setattr(_ray_compat, "version", lambda name: release)
    try:
        assert _ray_compat.client_auth_mode() == mode
    finally:
        _ray_compat.ray_minor.cache_clear()


def test_a_kinds_module_imported_again_registers_without_conflict_and_a_second_kind_is_refused() -> None:
    import dataclasses
    import importlib
    import sys

    from chaos._kinds import FaultKind, fault_specs, register

    module = sys.modules["chaos.net._faults"]
    theirs = [spec for spec in fault_specs().values() if spec.record.__module__ == module.__name__]
    before = fault_specs()[FaultKind.PARTITION].record
    try:
        # pytester restores sys.modules after an in-process run: the module is imported afresh.
        del sys.modules["chaos.net._faults"]
        importlib.import_module("chaos.net._faults")
        again = fault_specs()[FaultKind.PARTITION]
        assert again.record is not before and again.record.__qualname__ == before.__qualname__
        impostor = type(before.__name__, (before,), {"__module__": "somewhere.else"})
        with pytest.raises(InvalidFaultSpec, match="registered twice"):
            register(dataclasses.replace(again, record=impostor))
    finally:
        sys.modules["chaos.net._faults"] = module  # the rest of the session keeps the classes it holds
        register(*theirs)
    assert fault_specs()[FaultKind.PARTITION].record is before
