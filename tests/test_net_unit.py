"""The network faults' records and scenario fields, Ray-free: validated on construction,
round-tripped through the journal's dict, refused in a scenario without a network cluster."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from chaos import Bandwidth, FaultKind, FlappingLink, NodeTarget, PacketLoss, Partition
from chaos.engine import fault_from_dict, fault_to_dict
from chaos.errors import InvalidFaultSpec
from chaos.net import LinkState
from chaos.net._faults import drop_table, loss_probes, parse_link
from scenarios.model._scenario import ScenarioError, load_scenario
from scenarios.workloads.net._partition_worker import LogLine, superseded_writes


@pytest.mark.parametrize("fault", [
    Partition(seconds=3, count=2, peers="head", direction="incoming"),
    PacketLoss(percent=12.5, seconds=2), Bandwidth(mbit=5, seconds=2), FlappingLink(period=1, seconds=4),
])
def test_network_faults_round_trip(fault: object) -> None:
    assert fault_from_dict(fault_to_dict(fault)) == fault  # type: ignore[arg-type]


@pytest.mark.parametrize(("make", "match"), [
    (lambda: Partition(seconds=1, peers="gcs"), "unknown `peers`"),  # type: ignore[arg-type]
    (lambda: Partition(seconds=1, direction="up"), "unknown `direction`"),  # type: ignore[arg-type]
    (lambda: Partition(seconds=1, count=0), "`count` must be"),
    (lambda: Partition(seconds=1, target=NodeTarget(allow_head=True)), "cut the workers from it"),
    (lambda: Partition(seconds=1, target=NodeTarget(node_id="ab"), count=2), "names one node"),
    (lambda: PacketLoss(percent=0, seconds=1), "`percent` must be in"),
    (lambda: PacketLoss(percent=101, seconds=1), "`percent` must be in"),
    (lambda: Bandwidth(mbit=0, seconds=1), "`mbit` must be"),
    (lambda: FlappingLink(period=5, seconds=2), "`period` must be"),
    (lambda: Partition(seconds=0), "`seconds` must be"),
])
def test_network_faults_are_validated(make: object, match: str) -> None:
    with pytest.raises(InvalidFaultSpec, match=match):
        make()  # type: ignore[operator]


def test_a_cut_table_drops_each_way_it_is_asked() -> None:
    both = drop_table("rc-x", ["10.0.0.1"], "both")
    assert "hook output" in both and "hook input" in both and "numgen" not in both
    out = drop_table("rc-x", ["10.0.0.1"], "outgoing", percent=2.5)
    assert "hook input" not in out and "numgen random mod 10000 < 250 counter drop" in out
    assert "hook" not in drop_table("rc-x", ["10.0.0.1"], "both", hooked=False)


def test_loss_probes_make_a_miss_unlikely() -> None:
    assert loss_probes(100) == 1
    assert 0.9 ** loss_probes(10) < 1e-9 < 0.9 ** (loss_probes(10) - 1)


def _scenario(tmp_path, body: str) -> str:  # type: ignore[no-untyped-def]
    path = tmp_path / "s.toml"
    path.write_text('name = "n"\nworkload = "node-loss"\nduration = 10\n' + body)
    return str(path)


def test_a_scenario_asks_for_a_network_cluster(tmp_path) -> None:  # type: ignore[no-untyped-def]
    source = _scenario(tmp_path, 'nodes = 3\nnetwork = true\n[[faults]]\nat = 1\nkind = "partition"\nseconds = 2\n')
    assert load_scenario(source).network
    assert not load_scenario("node-unresponsive").network


def test_a_network_cluster_needs_worker_nodes(tmp_path) -> None:  # type: ignore[no-untyped-def]
    source = _scenario(tmp_path, 'network = true\n[[faults]]\nat = 1\nkind = "kill"\ntarget = { kind = "worker" }\n')
    with pytest.raises(ScenarioError, match="set nodes >= 2"):
        load_scenario(source)


def test_a_link_that_did_not_flap_as_recorded_makes_the_fault_ineffective() -> None:
    from chaos._errors import FaultIneffective
    from chaos.net._faults import Flaps, _flapped

    fault = FlappingLink(period=1.0, seconds=5.0)
    _flapped(fault, Flaps(ups=5, downs=4), held=5.0)  # every half second, less the last: as recorded
    with pytest.raises(FaultIneffective, match=r"flapped 2 times in 5\.0 s"):
        _flapped(fault, Flaps(ups=1, downs=1), held=5.0)
    # A half not confirmed (its table still there, no connection through) fails it, however many came.
    with pytest.raises(FaultIneffective, match="failed after 3 up and 2 down halves confirmed: RuntimeError"):
        _flapped(fault, Flaps(ups=3, downs=2, errors=[RuntimeError("nft: no such table")]), held=5.0)


def test_a_lab_listing_that_fails_is_a_leftover_not_a_clean_bill(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The leak check fails closed: an `ip` that cannot list (broken, no permission) leaves
    namespaces unknown, which is reported, never read as none."""
    from chaos.net._lab import network_leftovers

    fake = tmp_path / "ip"
    fake.write_text("#!/bin/sh\necho 'cannot open netns dir' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    found = network_leftovers()
    assert found and all(line.startswith("unlisted: `ip ") for line in found if "ip " in line), found
    assert any("cannot open netns dir" in line for line in found), found


def _line(kind: str, pid: int, at: float) -> LogLine:
    return LogLine(kind, pid, 0 if kind == "write" else -1, at)


def test_a_write_by_an_incarnation_after_its_replacement_started_is_superseded() -> None:
    lines = [_line("start", 1, 0.0), _line("write", 1, 1.0), _line("start", 2, 2.0),
             _line("write", 2, 3.0), _line("write", 1, 2.5), _line("tick", 1, 4.0)]
    assert superseded_writes(lines) == [_line("write", 1, 2.5), _line("tick", 1, 4.0)]


def test_writes_before_the_replacement_started_and_by_the_replacement_are_not() -> None:
    lines = [_line("start", 1, 0.0), _line("write", 1, 1.9), _line("start", 2, 2.0), _line("write", 2, 2.1),
             _line("start", 3, 5.0), _line("write", 3, 6.0)]
    assert superseded_writes(lines) == []
    # An incarnation two generations back is superseded by the first replacement already.
    assert superseded_writes([*lines, _line("write", 1, 3.0)]) == [_line("write", 1, 3.0)]


def test_dead_node_detected_needs_the_node_that_was_cut_and_no_other() -> None:
    """Ray declaring a node dead is the cut's trace only when it is the node that was cut: the
    rule that took any writer's node declared dead held when another node died instead."""
    from scenarios.model._records import Validity
    from scenarios.workloads._kit import node_detected

    cuts = {"n1": 4.0}
    assert node_detected(cuts, {"n1": 8.5}, within=10.0, fault="cut").held
    other = node_detected(cuts, {"n2": 8.5}, within=10.0, fault="cut")
    assert not other.held and "n1, its cut at 4.0 s, never declared dead" in other.detail
    assert "n2 declared dead at 8.5 s, which no cut hit" in other.detail
    assert not node_detected(cuts, {"n1": 8.5, "n2": 9.0}, within=10.0, fault="cut").held  # and a node not cut with it
    assert not node_detected(cuts, {"n1": 3.0}, within=10.0, fault="cut").held  # dead before its cut: not the cut's
    assert not node_detected(cuts, {"n1": 15.0}, within=10.0, fault="cut").held  # past the bound
    assert node_detected({}, {"n1": 8.5}, within=10.0, fault="cut").validity is Validity.UNKNOWN  # no cut confirmed


def test_the_nodes_a_partition_cut_are_read_from_what_it_hit() -> None:
    from chaos.engine import Injection, RayProcess
    from chaos.net._faults import Partition
    from scenarios.model._workload import FaultWindow
    from scenarios.workloads._kit import nodes_hit

    hit = Injection(Partition(seconds=1), (RayProcess(0, "n1", "node n1"),))
    windows = [FaultWindow(FaultKind.PARTITION, 4.0, 9.0, injection=hit),
               FaultWindow(FaultKind.PARTITION, 12.0, 14.0, injection=hit)]
    assert nodes_hit(windows) == {"n1": 4.0}
    assert nodes_hit([FaultWindow(FaultKind.PARTITION, 4.0, 9.0, planned=True)]) == {}  # the twin's: no node hit


# -- a link read back -------------------------------------------------------------------------------

#: ``nft -j list ruleset`` of two fault tables: each has a chain named ``output``, and only the
#: first table's is hooked (what the other drops, no packet meets); and another tool's table.
RULESET = (
    '{"nftables": [{"metainfo": {"version": "1.0.6"}}, {"table": {"family": "inet", "name": "rc-a"}},'
    ' {"chain": {"family": "inet", "table": "rc-a", "name": "output", "type": "filter", "hook": "output",'
    ' "prio": 0, "policy": "accept"}}, {"rule": {"family": "inet", "table": "rc-a", "chain": "output", "expr":'
    ' [{"match": {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": {"set":'
    ' ["10.245.165.1", "10.245.165.12"]}}}, {"match": {"op": "<", "left": {"numgen": {"mode": "random",'
    ' "mod": 10000, "offset": 0}}, "right": 3000}}, {"counter": {"packets": 4, "bytes": 9}}, {"drop": null}]}},'
    ' {"table": {"family": "inet", "name": "rc-b"}}, {"chain": {"family": "inet", "table": "rc-b",'
    ' "name": "output"}}, {"rule": {"family": "inet", "table": "rc-b", "chain": "output", "expr": [{"match":'
    ' {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": "10.245.165.1"}},'
    ' {"match": {"op": "<", "left": {"numgen": {"mode": "random", "mod": 10000, "offset": 0}}, "right": 6000}},'
    ' {"counter": {"packets": 0, "bytes": 0}}, {"drop": null}]}},'
    # another tool's table in the namespace: a prefix match raychaos never writes, not read
    ' {"table": {"family": "ip", "name": "nat"}}, {"chain": {"family": "ip", "table": "nat", "name": "output",'
    ' "hook": "output"}}, {"rule": {"family": "ip", "table": "nat", "chain": "output", "expr": [{"match":'
    ' {"op": "==", "left": {"payload": {"protocol": "ip", "field": "daddr"}}, "right": {"prefix":'
    ' {"addr": "10.0.0.0", "len": 8}}}}, {"match": {"op": "<", "left": {"numgen": {"mode": "random",'
    ' "mod": 10000, "offset": 0}}, "right": 9000}}, {"drop": null}]}}]}')
TBF = '[{"kind":"tbf","handle":"801e:","root":true,"refcnt":3,"options":{"rate":10000000,"burst":200000}}]'
NOQUEUE = '[{"kind":"noqueue","handle":"0:","root":true,"refcnt":2,"options":{}}]'
SNMP = ("Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab "
        "InSegs OutSegs RetransSegs InErrs\nTcp: 1 200 120000 -1 12 3 0 0 9 4410 4520 37 0\n")


def test_a_links_state_is_read_back_typed_from_its_hooked_rules_its_buckets_and_the_kernel() -> None:
    state = parse_link(ruleset=RULESET, sends=TBF, receives=NOQUEUE, snmp=SNMP)
    assert state == LinkState(loss=30.0, sends_mbit=80.0, receives_mbit=0.0, retransmitted=37)
    assert parse_link(ruleset=RULESET, sends=NOQUEUE, receives=TBF, snmp="").receives_mbit == 80.0


def test_a_link_with_nothing_on_it_reads_back_as_no_fault() -> None:
    assert parse_link(ruleset="", sends=NOQUEUE, receives=NOQUEUE, snmp=SNMP) == LinkState(retransmitted=37)
    assert parse_link(ruleset="", sends="", receives="", snmp="") == LinkState()
