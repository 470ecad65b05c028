"""The network lab on its own (no Ray): made and deleted whole, its leftovers found by the leak
check, and refused in one line where it cannot be made. Real namespaces, links and tables."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from chaos import local_cluster
from chaos.errors import InvalidConfig
from chaos.net._lab import (
    NEEDS,
    PREFIX,
    NetworkUnavailable,
    _enter,
    in_namespace,
    network_lab,
    network_leftovers,
    network_missing,
    run,
)

needs_net = pytest.mark.skipif(bool(network_missing()), reason=f"the network lab needs {NEEDS}")


def _connect(namespace: str | None, address: str, port: int) -> None:
    def make() -> socket.socket:
        return socket.socket()
    sock = make() if namespace is None else in_namespace(namespace, make)
    with sock:
        sock.settimeout(2.0)
        sock.connect((address, port))


@needs_net
def test_lab_connects_every_node_and_leaves_nothing() -> None:
    with network_lab(2) as lab:
        made = network_leftovers()
        assert sum(m.startswith("namespace") for m in made) == 2
        assert any(m.startswith("bridge") for m in made)
        n1, n2 = lab.workers
        _connect(n1.namespace, n2.address, lab.probe_ports[2])  # worker to worker over the bridge
        _connect(n2.namespace, lab.head.address, lab.probe_ports[0])  # worker to the head
        _connect(None, n1.address, lab.probe_ports[1])  # the head to a worker
    assert network_leftovers() == []


@needs_net
def test_lab_kills_what_runs_in_its_namespaces() -> None:
    with network_lab(1) as lab:
        (node,) = lab.workers
        assert node.namespace is not None
        proc = subprocess.Popen(["sleep", "300"], preexec_fn=lambda: _enter(node.namespace))
        assert lab.namespace_pids(node) == [proc.pid]
    # Gone with the lab, long before its 300 s (the lab's kill reaped it, so no exit code here).
    proc.wait(timeout=10)
    assert network_leftovers() == []


@needs_net
def test_leakcheck_reports_a_namespace_a_link_and_a_table_left_behind() -> None:
    name = f"{PREFIX}leaktest"
    try:
        run(["ip", "netns", "add", name])
        run(["ip", "link", "add", f"{name}-l", "type", "veth", "peer", "name", f"{name}-p"])
        run(["nft", "add", "table", "inet", name])
        # No grace: the session's own cluster may be up, and would be waited out for nothing.
        found = subprocess.run([sys.executable, "-m", "chaos.leakcheck", "--grace", "0"], capture_output=True,
                               text=True, timeout=120)
        assert found.returncode == 1
        for line in (f"namespace {name}", f"link {name}-l", f"nftables table inet {name}"):
            assert line in found.stderr
    finally:
        run(["ip", "netns", "del", name], check=False)
        run(["ip", "link", "del", f"{name}-l"], check=False)
        run(["nft", "delete", "table", "inet", name], check=False)
    assert network_leftovers() == []


def test_without_root_the_lab_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(NetworkUnavailable, match="needs root and the nft, ip and tc commands") as caught, \
            network_lab(1):
        pass
    assert "missing here: root" in str(caught.value) and "\n" not in str(caught.value)


def test_a_network_cluster_is_refused_before_ray_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(NetworkUnavailable, match=r"local_cluster\(network=True\) needs root"), \
            local_cluster(nodes=3, network=True):
        pass
    assert issubclass(NetworkUnavailable, InvalidConfig)  # the CLI's exit 2 for refused runs


@needs_net
def test_a_network_cluster_needs_a_worker_node() -> None:
    with pytest.raises(InvalidConfig, match="nodes >= 2"), local_cluster(nodes=1, network=True):
        pass


@needs_net
def test_as_a_user_without_root_the_refusal_names_root() -> None:
    """Really not root: the refusal from a process that dropped to ``nobody``."""
    code = ("from chaos.net._lab import require_network\n"
            "try:\n    require_network()\nexcept Exception as exc:\n    print(exc)\n")
    # Still allowed to read any file (an ambient capability, not root): a checkout in a private
    # folder (mktemp -d makes it 0700) must not turn the refusal into an import error.
    done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search",
                           sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert "missing here: root" in done.stdout, done.stderr
