"""Faults on the 3-node cluster: agents act on remote nodes; a whole node can be killed."""

from __future__ import annotations

import os
from typing import Any

import psutil
import pytest
import ray
from ray.util.state import list_nodes

from chaos import (
    ActorTarget,
    Chaos,
    ClusterHandle,
    InvalidFaultSpec,
    Kill,
    KillNode,
    NodeTarget,
    Pause,
    wait_until,
)
from conftest import CALL_TIMEOUT

pytestmark = pytest.mark.multinode


@ray.remote(max_restarts=-1, max_task_retries=-1, resources={"worker": 1})
class Remote:
    def where(self) -> tuple[int, str]:
        return os.getpid(), ray.get_runtime_context().get_node_id()


def where(actor: Any) -> tuple[int, str]:
    return ray.get(actor.where.remote(), timeout=CALL_TIMEOUT)


def head_id(address: str) -> str:
    return next(n.node_id for n in list_nodes(address=address) if n.is_head_node)


def test_kill_and_pause_act_through_the_agent_on_the_targets_node(
        ray_multinode_cluster: ClusterHandle) -> None:
    chaos = Chaos(address=ray_multinode_cluster.address)
    actor = Remote.remote()
    pid, node = where(actor)
    assert node != head_id(ray_multinode_cluster.address)
    with chaos.inject(Pause(ActorTarget.of(actor), seconds=20)) as injection:
        assert injection.processes[0].node_id == node
        assert psutil.Process(pid).status() == psutil.STATUS_STOPPED  # one machine: visible here
    chaos.kill(Kill(ActorTarget.of(actor)))
    wait_until(lambda: where(actor)[0] != pid, timeout=60, what="restart after a remote kill")
    ray.kill(actor)


def test_the_head_is_spared_unless_asked(ray_multinode_cluster: ClusterHandle) -> None:
    chaos = Chaos(address=ray_multinode_cluster.address)
    with pytest.raises(InvalidFaultSpec, match="is the head node; pass allow_head=True"):
        chaos.kill(KillNode(NodeTarget(head_id(ray_multinode_cluster.address))))


def test_kill_node_takes_the_node_and_its_actors_down(ray_multinode_cluster: ClusterHandle) -> None:
    chaos = Chaos(address=ray_multinode_cluster.address)
    actor = Remote.remote()
    _, node = where(actor)
    chaos.kill(KillNode(NodeTarget(node)))
    wait_until(lambda: any(n.node_id == node and n.state == "DEAD"
                           for n in list_nodes(address=ray_multinode_cluster.address)),
               timeout=60, what="the node to be declared dead")
    wait_until(lambda: where(actor)[1] != node, timeout=60, what="the actor to move to another node")
    ray.kill(actor)
    cluster = ray_multinode_cluster.cluster
    dead = next(n for n in cluster.worker_nodes if n.node_id == node)
    cluster.remove_node(dead, allow_graceful=False)  # only its bookkeeping is left: drop it
    cluster.add_node(num_cpus=1, resources={"worker": 100.0})  # back to 3 live nodes
    cluster.wait_for_nodes(timeout=60)
