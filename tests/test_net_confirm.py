"""Each network fault's record claims only what was read back and pushed through, each way it
claims: on a network lab of two worker namespaces (root, no Ray). A cut, a loss and a cap that
act one way only are refused where they claim both; a flapping link's halves are each
confirmed; a heal of several nodes heals every node whatever another's heal raised."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest

import chaos.net._faults as net_faults
from chaos._errors import FaultIneffective
from chaos.net import LinkState
from chaos.net._faults import (
    CHAINS,
    Flaps,
    PacketLoss,
    _flap,
    _tables,
    burst_bytes,
    confirm_capped,
    confirm_cut,
    confirm_loss,
    confirm_rules,
    drop_table,
    heal_each,
    parse_table,
    read_link,
    read_table,
    rules_problem,
)
from chaos.net._lab import NetLab, NetNode, network_lab, network_missing, registered, run

pytestmark = pytest.mark.skipif(bool(network_missing()), reason="the network lab needs root, nft, ip and tc")


@pytest.fixture(scope="module")
def lab() -> Iterator[NetLab]:
    with network_lab(2) as made:
        yield made


def _table(lab: NetLab, node: NetNode, direction: str, *, percent: float | None = None) -> str:
    name = lab.table_name()
    net_faults.add_table(node, drop_table(name, [lab.head.address], direction, percent=percent))  # type: ignore[arg-type]
    return name


def test_a_cut_each_way_is_confirmed_each_way_by_its_own_chain(lab: NetLab) -> None:
    node = lab.workers[0]
    table = _table(lab, node, "both")
    try:
        took = confirm_cut(lab, node, table, "both")
        assert set(took) == {"output", "input"}
        assert all(r.packets > 0 for r in read_table(node, table) or ())  # each chain's rule met a probe
        confirm_rules(node, table, "both", [lab.head.address], None)
    finally:
        net_faults.delete_table(node, table)


def test_a_cut_written_one_way_is_refused_where_it_claims_both(lab: NetLab) -> None:
    """The old confirmation probed from the node only: a table that drops what the node sends
    passed as a cut "both" ways. The probe from the head meets no input rule, and the read-back
    finds one chain, not two."""
    node = lab.workers[0]
    table = _table(lab, node, "outgoing")
    try:
        assert set(confirm_cut(lab, node, table, "outgoing")) == {"output"}
        with pytest.raises(FaultIneffective, match=r"from the head to .* met the cut's input rule"):
            confirm_cut(lab, node, table, "both")
        with pytest.raises(FaultIneffective, match="0 input rules a hook consults"):
            confirm_rules(node, table, "both", [lab.head.address], None)
    finally:
        net_faults.delete_table(node, table)


def test_packet_loss_claimed_both_ways_is_confirmed_on_both_chains(lab: NetLab) -> None:
    node = lab.workers[0]
    both = _table(lab, node, "both", percent=30)
    out_only = _table(lab, lab.workers[1], "outgoing", percent=30)
    try:
        for chain in CHAINS["both"]:
            lost, sent = confirm_loss(lab, node, both, 30, chain)
            assert 0 < lost < sent
        confirm_loss(lab, lab.workers[1], out_only, 30, "output")  # all the old confirmation looked at
        with pytest.raises(FaultIneffective, match=r"none of .* datagrams from the head to .* met the loss rule"):
            confirm_loss(lab, lab.workers[1], out_only, 30, "input")
    finally:
        net_faults.delete_table(node, both)
        net_faults.delete_table(lab.workers[1], out_only)


def _tbf(namespace: str | None, link: str, mbit: float) -> None:
    tbf = ["tbf", "rate", f"{mbit}mbit", "burst", str(burst_bytes(mbit)), "latency", "200ms"]
    run(["tc", "qdisc", "replace", "dev", link, "root", *tbf] if namespace is None
        else ["tc", "-n", namespace, "qdisc", "replace", "dev", link, "root", *tbf])


def _untbf(namespace: str | None, link: str) -> None:
    run(["tc", "qdisc", "del", "dev", link, "root"] if namespace is None
        else ["tc", "-n", namespace, "qdisc", "del", "dev", link, "root"], check=False)


def test_a_cap_on_one_side_of_the_link_is_refused_where_it_claims_each_way(lab: NetLab) -> None:
    """The old confirmation read back and pushed through the namespace's side only, and recorded
    the cap "each way": a bucket on that side alone passed."""
    node = lab.workers[0]
    assert node.namespace is not None and node.link is not None and node.host_link is not None
    _tbf(node.namespace, node.link, 20)
    try:
        assert confirm_capped(lab, node, 20, upload=True) > 0
        with pytest.raises(FaultIneffective, match="no token bucket at 20 Mbit/s for what it receives"):
            confirm_capped(lab, node, 20, upload=False)
        _tbf(None, node.host_link, 20)
        assert confirm_capped(lab, node, 20, upload=False) > 0  # both sides: each way, pushed through
        with pytest.raises(FaultIneffective, match="read back: tbf, 20 Mbit/s"):
            confirm_capped(lab, node, 5, upload=False)  # a bucket at another rate is not this cap
    finally:
        _untbf(node.namespace, node.link)
        _untbf(None, node.host_link)


def test_a_flapping_links_halves_are_each_confirmed_and_one_that_is_not_ends_it(lab: NetLab) -> None:
    """The old flapper deleted its table without checking, and counted the half all the same."""
    node = lab.workers[0]
    table = lab.table_name()
    text = drop_table(table, [lab.head.address], "both")
    net_faults.add_table(node, text)
    flaps, stop = Flaps(), threading.Event()
    flapper = threading.Thread(target=_flap, args=(lab, node, table, text, 0.15, stop, flaps))
    flapper.start()
    try:
        threading.Event().wait(1.0)  # the flapping's own rhythm: a few halves
    finally:
        stop.set()
        flapper.join(timeout=30)
        net_faults.delete_table(node, table)
    assert flaps.ups >= 2 and flaps.downs >= 1 and not flaps.errors, flaps
    # A table the up half cannot delete (another name than the flapper's): its first half fails.
    broken = Flaps()
    stop = threading.Event()
    gone = threading.Thread(target=_flap, args=(lab, node, lab.table_name(), text, 0.05, stop, broken))
    gone.start()
    gone.join(timeout=30)
    assert broken.ups == 0 and broken.errors and "No such file or directory" in str(broken.errors[0])


class _Chaos:
    """A FaultContext that keeps what the injectors journal: its address, a record of each step, its heals."""

    def __init__(self, address: str) -> None:
        self.address, self.records = address, []  # type: list[tuple[str, str]]

    def record(self, kind: str, fault: Any, at: float | None, proc: Any, outcome: str, observed: Any = None) -> None:
        self.records.append((kind, outcome))

    @contextmanager
    def on_heal(self, heal: Callable[[], None]) -> Iterator[None]:
        try:
            yield
        finally:
            heal()


def test_a_heal_of_several_nodes_heals_every_one_and_names_each_failure(lab: NetLab,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The old heal stopped at the first node whose confirmation raised and left the others cut."""
    chaos = _Chaos(f"netconfirm-{lab.name}")
    first, second = lab.workers
    confirmed: list[NetNode] = []

    def fails_on_the_first(lab_: NetLab, node: NetNode) -> float:
        confirmed.append(node)
        if node == first:
            raise FaultIneffective("the link carried no connection after its heal (planted)")
        return 0.001

    monkeypatch.setattr(net_faults, "confirm_open", fails_on_the_first)
    table = lab.table_name()
    fault = PacketLoss(percent=10, seconds=1)
    blocks: AbstractContextManager[list[NetNode]]
    with registered(chaos.address, lab), pytest.raises(FaultIneffective) as failed:  # type: ignore[arg-type]
        blocks = _tables(chaos, fault, 0.0, [first, second], table, drop_table(table, [lab.head.address], "both"))
        with blocks:
            present = [read_table(node, table) is not None for node in (first, second)]
    assert present == [True, True]  # the table was on each node while the block ran
    assert confirmed == [first, second]
    assert read_table(first, table) is None and read_table(second, table) is None  # both deleted
    assert "failed on 1 of 2 nodes" in str(failed.value) and first.label in str(failed.value)
    assert [k for k, _ in chaos.records] == ["heal"]  # the second node's heal was journaled


def test_heal_each_heals_all_and_reports_every_failure() -> None:
    healed: list[str] = []

    def heal(node: Any) -> None:
        healed.append(node.label)
        if node.label != "b":
            raise RuntimeError(f"{node.label} would not heal")

    nodes = [type("N", (), {"label": label})() for label in "abc"]
    with pytest.raises(FaultIneffective) as failed:
        heal_each(nodes, heal, what="the heal")  # type: ignore[arg-type]
    assert healed == ["a", "b", "c"]
    assert "a would not heal" in str(failed.value) and "c would not heal" in str(failed.value)


def test_a_links_state_is_read_back_from_its_namespace_and_the_hosts_side(lab: NetLab) -> None:
    node = lab.workers[0]
    assert node.namespace is not None and node.link is not None
    before = read_link(node)
    table = _table(lab, node, "both", percent=30.0)
    _tbf(node.namespace, node.link, 20)
    try:
        on = read_link(node)
    finally:
        net_faults.delete_table(node, table, check=True)
        _untbf(node.namespace, node.link)
    assert (before.loss, before.sends_mbit, before.receives_mbit) == (0.0, 0.0, 0.0)
    assert (on.loss, on.sends_mbit, on.receives_mbit) == (30.0, 20.0, 0.0)  # one side capped: read so
    assert on.retransmitted >= before.retransmitted >= 0
    assert read_link(node) == LinkState(retransmitted=read_link(node).retransmitted)


def test_a_link_that_cannot_be_read_is_not_read_as_unfaulted(lab: NetLab) -> None:
    from chaos.net._lab import NetCommandFailed

    gone = NetNode(index=9, address="10.0.0.9", namespace=f"{lab.workers[0].namespace}-gone",
                   host_link="rc-gone-h", link="rc-gone-n")
    with pytest.raises(NetCommandFailed):
        read_link(gone)


def test_a_tables_rules_read_back_typed() -> None:
    text = ('{"nftables": [{"chain": {"name": "output", "hook": "output"}}, {"chain": {"name": "input"}},'
            ' {"rule": {"chain": "output", "expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip",'
            ' "field": "daddr"}}, "right": {"set": ["10.1.1.2", "10.1.1.3"]}}}, {"match": {"op": "<", "left":'
            ' {"numgen": {"mode": "random", "mod": 10000}}, "right": 3000}}, {"counter": {"packets": 7}},'
            ' {"drop": null}]}}, {"rule": {"chain": "input", "expr": [{"match": {"op": "==", "left": {"payload":'
            ' {"protocol": "ip", "field": "saddr"}}, "right": "10.1.1.2"}}, {"counter": {"packets": 0}},'
            ' {"drop": null}]}}]}')
    out, into = parse_table(text)
    assert (out.chain, out.hooked, out.addresses, out.percent, out.packets) == (
        "output", True, frozenset({"10.1.1.2", "10.1.1.3"}), 30.0, 7)
    assert (into.chain, into.hooked, into.addresses, into.percent) == ("input", False, frozenset({"10.1.1.2"}), None)
    assert rules_problem((out,), "outgoing", ["10.1.1.2", "10.1.1.3"], 30.0) is None
    assert "drops 30 % of" in str(rules_problem((out,), "outgoing", ["10.1.1.2"], 30.0))
    assert "0 input rules" in str(rules_problem((out, into), "both", ["10.1.1.2", "10.1.1.3"], 30.0))
    assert "it has input rules it was not asked for" in str(rules_problem(
        (out, into), "outgoing", ["10.1.1.2", "10.1.1.3"], 30.0))
    assert rules_problem(None, "both", [], None) == "its table is not there"
