"""Network faults on one real network cluster (a head and two worker nodes in namespaces),
shared by the module: each cut, loss and cap confirmed across the link, healed, journaled; a
cut that does not take is ineffective. Every fault here is shorter than Ray's health check, so
the nodes stay alive for the next test."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

import chaos.net._faults as net_faults
from chaos import Chaos, ChaosError, local_cluster
from chaos.cluster import ClusterHandle
from chaos.errors import FaultIneffective
from chaos.journal import FaultEvent
from chaos.net._faults import Bandwidth, FlappingLink, PacketLoss, Partition
from chaos.net._lab import NetLab, NetNode, in_namespace, network_leftovers, network_missing

pytestmark = [pytest.mark.ray, pytest.mark.slow,
              pytest.mark.skipif(bool(network_missing()), reason="the network lab needs root, nft, ip and tc")]


@pytest.fixture(scope="module")
def cluster(no_shared_cluster: None) -> Iterator[ClusterHandle]:
    with local_cluster(nodes=3, num_cpus=1, network=True, log_to_driver=False) as handle:
        yield handle
    assert network_leftovers() == []


def _lab(cluster: ClusterHandle) -> NetLab:
    assert cluster.lab is not None
    return cluster.lab


def _reaches(lab: NetLab, node: NetNode, to: NetNode, *, timeout: float = 0.3) -> bool:
    assert node.namespace is not None
    sock = in_namespace(node.namespace, socket.socket)
    with sock:
        sock.settimeout(timeout)
        try:
            sock.connect((to.address, lab.probe_ports[to.index]))
        except OSError:
            return False
    return True


def _kinds(chaos: Chaos) -> list[str]:
    return [e.kind for e in chaos.journal.events if isinstance(e, FaultEvent)]


def test_a_partition_cuts_the_node_from_every_other_and_heals(cluster: ClusterHandle) -> None:
    lab = _lab(cluster)
    chaos = Chaos(address=cluster.address)
    n1, n2 = lab.workers
    with chaos.inject(Partition(seconds=1, target=_target(lab, n1))) as injection:
        assert not _reaches(lab, n1, lab.head) and not _reaches(lab, n1, n2)
        assert _reaches(lab, n2, lab.head)  # the other node is untouched
    assert injection.processes[0].node_id == lab.id_of(n1)
    assert _reaches(lab, n1, lab.head) and _reaches(lab, n1, n2)
    assert _kinds(chaos) == ["inject", "heal"]


def test_a_partition_from_the_head_only_leaves_the_workers_talking(cluster: ClusterHandle) -> None:
    lab = _lab(cluster)
    n1, n2 = lab.workers
    with Chaos(address=cluster.address).inject(Partition(seconds=1, count=2, peers="head")):
        assert not _reaches(lab, n1, lab.head) and not _reaches(lab, n2, lab.head)
        assert _reaches(lab, n1, n2) and _reaches(lab, n2, n1)
    assert _reaches(lab, n1, lab.head) and _reaches(lab, n2, lab.head)


def test_a_one_way_partition_drops_only_what_the_node_sends(cluster: ClusterHandle) -> None:
    lab = _lab(cluster)
    n1, _ = lab.workers
    seen = []
    real = net_faults.dropped

    def spy(node: NetNode, name: str, chain: str | None = None) -> int:
        seen.append((real(node, name, "output"), real(node, name, "input")))
        return real(node, name, chain)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(net_faults, "dropped", spy)
        with Chaos(address=cluster.address).inject(Partition(seconds=1, target=_target(lab, n1),
                                                              direction="outgoing")):
            assert not _reaches(lab, n1, lab.head)
    out, into = seen[-1]
    assert out > 0 and into == 0


def test_a_cut_that_does_not_take_is_ineffective_and_leaves_no_table(cluster: ClusterHandle,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    lab = _lab(cluster)
    n1, _ = lab.workers
    real = net_faults.drop_table
    # The rule is there, in chains that no hook consults: no packet ever meets it.
    monkeypatch.setattr(net_faults, "drop_table", lambda *a, **k: real(*a, **{**k, "hooked": False}))
    chaos = Chaos(address=cluster.address)
    with pytest.raises(FaultIneffective, match="completed through the cut"), \
            chaos.inject(Partition(seconds=1, target=_target(lab, n1))):
        pass
    assert _kinds(chaos)[-1] == "ineffective"
    assert n1.namespace is not None
    assert "table" not in net_faults.run(["nft", "list", "tables"], namespace=n1.namespace)


def test_packet_loss_drops_about_its_share(cluster: ClusterHandle) -> None:
    lab = _lab(cluster)
    n1, _ = lab.workers
    fault = PacketLoss(percent=30, seconds=1, target=_target(lab, n1))
    chaos = Chaos(address=cluster.address)
    with chaos.inject(fault):
        table = f"rc-{lab.name}-f{lab._next_table}"
        before = net_faults.dropped(n1, table, "output")
        _, sent = net_faults.confirm_loss(lab, n1, table, 1.0)  # 2063 more datagrams
        share = (net_faults.dropped(n1, table, "output") - before) / sent
    assert 0.25 < share < 0.35, share
    assert _reaches(lab, n1, lab.head)


def _transfer(lab: NetLab, node: NetNode, size: int) -> float:
    assert node.namespace is not None
    sock = in_namespace(node.namespace, socket.socket)
    start = time.monotonic()
    with sock:
        sock.settimeout(10)
        sock.connect((lab.head.address, lab.probe_ports[0]))
        sock.sendall(b"\0" * size)
        sock.shutdown(socket.SHUT_WR)
        sock.recv(1)  # the listener closes once it has read everything
    return time.monotonic() - start


def test_a_bandwidth_cap_slows_a_transfer_to_its_rate(cluster: ClusterHandle) -> None:
    lab = _lab(cluster)
    n1, _ = lab.workers
    size = 1_000_000  # 0.4 s at 20 Mbit/s
    with Chaos(address=cluster.address).inject(Bandwidth(mbit=20, seconds=2, target=_target(lab, n1))):
        capped = _transfer(lab, n1, size)
    free = _transfer(lab, n1, size)
    assert capped >= 0.8 * size * 8 / 20e6, capped
    assert free < capped / 3, (free, capped)


def test_a_flapping_link_goes_down_and_up(cluster: ClusterHandle) -> None:
    lab = _lab(cluster)
    n1, _ = lab.workers
    states = []
    with Chaos(address=cluster.address).inject(FlappingLink(period=0.6, seconds=2.4, target=_target(lab, n1))):
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            states.append(_reaches(lab, n1, lab.head, timeout=0.05))
    assert False in states and True in states, states
    assert _reaches(lab, n1, lab.head)


def test_a_network_fault_on_a_cluster_without_a_network_is_refused() -> None:
    with pytest.raises(ChaosError, match=r"network faults need a cluster from chaos.local_cluster"):
        net_faults.lab_of("127.0.0.1:1")


def _target(lab: NetLab, node: NetNode):  # type: ignore[no-untyped-def]
    from chaos import NodeTarget

    return NodeTarget(node_id=lab.id_of(node))
