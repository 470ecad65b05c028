"""Ray worker nodes inside the network lab's namespaces: each one a ``ray start`` run in its
own namespace, with its own address, joining a head on the lab's bridge.

``ray start`` leaves its processes running and exits, so they are not this process's
children: they are found, and killed, as the processes of their namespace.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Mapping

from chaos._errors import InvalidConfig
from chaos._ray_state import NodeRow, live_nodes
from chaos._reclaim._owner import OWNER_ENV, me
from chaos._wait import wait_until
from chaos.net._lab import NetLab, NetNode, _enter, kill_node_processes

__all__ = ["join_workers", "kill_workers", "map_node_ids", "rejoin", "worker_environment"]

#: Seconds the worker nodes' ``ray start`` may take, all of them at once, on a busy host.
START_TIMEOUT = 120.0


def worker_environment(extra: Mapping[str, str]) -> dict[str, str]:
    """The worker nodes' environment: this process's, the caller's ``extra``, and this
    process's own authentication mode. Ray reads the mode once per process: a node in token
    mode joining a head started without it fails every RPC with ``InvalidAuthToken`` (seen
    here), so the workers follow the mode this process (and so the head it started) has; the
    token itself is read where the head read it (``RAY_AUTH_TOKEN``, ``~/.ray/auth_token``).
    Each node's processes carry this driver's owner label (:data:`OWNER_ENV`): ``ray start``
    leaves them running apart from it, and ``raychaos cleanup`` finds them by it once it ends."""
    from chaos._ray_compat import token_auth_enabled

    return {**os.environ, **extra, "RAY_AUTH_MODE": "token" if token_auth_enabled() else "disabled",
            OWNER_ENV: str(me())}


def _start_command(node: NetNode, address: str, num_cpus: int, store: int,
                   resources: Mapping[str, float]) -> list[str]:
    ray_cli = os.path.join(os.path.dirname(sys.executable), "ray")
    return [ray_cli, "start", "--address", address, "--node-ip-address", node.address,
            "--num-cpus", str(num_cpus), "--object-store-memory", str(store),
            "--resources", json.dumps(dict(resources)), "--disable-usage-stats"]


def join_workers(lab: NetLab, address: str, *, num_cpus: int, store: int,
                 resources: Mapping[int, Mapping[str, float]], env: Mapping[str, str]) -> None:
    """Start a Ray node in each worker namespace of ``lab``, joining the head at ``address``.

    One at a time: the nodes share the session's directory, and two ``ray start`` at once
    raced for the same socket names there (the second raylet never registered: seen here).

    Raises:
        InvalidConfig: a node did not start (its output's last lines are in the message).
    """
    environment = worker_environment(env)
    for node in lab.workers:
        lab.started_with[node.index] = (_start_command(node, address, num_cpus, store, resources[node.index]),
                                        environment)
        _start(lab, node)


def _start(lab: NetLab, node: NetNode) -> None:
    """Run the node's ``ray start`` in its namespace, as ``join_workers`` first did."""
    namespace = node.namespace
    assert namespace is not None
    command, environment = lab.started_with[node.index]
    proc = subprocess.Popen(command, env=environment, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, preexec_fn=functools.partial(_enter, namespace))
    try:
        output, _ = proc.communicate(timeout=START_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        output = _rest_of(proc)
    if proc.returncode != 0:
        tail = "\n".join(output.strip().splitlines()[-8:])
        raise InvalidConfig(f"the Ray node in {node.label} did not start (`ray start` exited "
                            f"{proc.returncode}):\n{tail}")


def rejoin(lab: NetLab, node: NetNode, *, timeout: float = 60.0) -> str:
    """Start a worker node again, as a new Ray node in the same namespace and address: what is
    left of the old one (Ray declared it dead; its processes outlive that) is killed first.
    Returns the new node's id, which replaces the old one's in ``lab.node_ids``.

    Raises:
        InvalidConfig: ``ray start`` failed.
        HangError: the new node was not alive within ``timeout``.
    """

    old = {nid for nid, n in lab.node_ids.items() if n == node}
    kill_node_processes(lab, node)
    _start(lab, node)

    def joined() -> str:
        return next((row.node_id for row in live_nodes() if row.node_id not in old and row.address == node.address), "")

    new = wait_until(joined, timeout=timeout, interval=0.2, what=f"{node.label} alive again as a new node")
    with lab._lock:  # the lab's own lock: map_node_ids and the faults read node_ids too
        for nid in old:
            del lab.node_ids[nid]
        lab.node_ids[new] = node
    return new


def _rest_of(proc: subprocess.Popen[str]) -> str:
    """What a killed ``ray start`` printed; bounded, since daemons it started may still hold
    the pipe open."""
    try:
        return proc.communicate(timeout=10)[0]
    except subprocess.TimeoutExpired:
        return f"(no output within 10 s of killing `ray start` after {START_TIMEOUT:g} s)"


def map_node_ids(lab: NetLab, *, nodes: int, timeout: float = 60.0) -> None:
    """Wait until ``nodes`` nodes are alive, and record each lab node's Ray node id."""

    def alive() -> list[NodeRow]:
        found = live_nodes()
        return found if len(found) >= nodes else []

    by_address = {n.address: n for n in lab.nodes}
    for row in wait_until(alive, timeout=timeout, interval=0.2,
                          what=f"{nodes} nodes of the network cluster alive"):
        node = by_address.get(row.address)
        if node is not None:
            lab.node_ids[row.node_id] = node


def kill_workers(lab: NetLab) -> None:
    """SIGKILL every process of every worker namespace (the worker nodes, at once)."""
    for node in lab.workers:
        kill_node_processes(lab, node)
