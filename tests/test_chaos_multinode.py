"""Faults on the 3-node cluster: agents act on remote nodes; a whole node can be killed."""

from __future__ import annotations

import os
from typing import Any

import psutil
import pytest
import ray
from hypothesis import example, given
from hypothesis import strategies as st
from ray.exceptions import NodeDiedError, ObjectLostError, WorkerCrashedError
from ray.util.state import list_nodes

from chaos import ActorTarget, Chaos, Kill, KillNode, NodeTarget, Pause, wait_until, watch
from chaos.cluster import ClusterHandle
from chaos.errors import InvalidFaultSpec
from conftest import CALL_TIMEOUT, scaled

# make test's budget: the 3-node cluster starts in make slow only (its tests there use it too).
pytestmark = [pytest.mark.multinode, pytest.mark.slow]


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
    pid, node = where(actor)
    with chaos.inject(KillNode(NodeTarget(node))) as injection:
        # Confirmed only once Ray's GCS calls the node dead: the actor's worker is gone, the
        # raylet too, and what the block reads of the cluster is a lost node.
        assert not running(pid)
        assert not running(injection.processes[0].pid, stopped_is_alive=False)
        rows = list_nodes(address=ray_multinode_cluster.address, filters=[("node_id", "=", node)],
                          raise_on_missing_output=False)
        assert [n.state for n in rows] == ["DEAD"]
    wait_until(lambda: where(actor)[1] != node, timeout=60, what="the actor to move to another node")
    ray.kill(actor)
    replace_dead_worker(ray_multinode_cluster, node)


def running(pid: int, *, stopped_is_alive: bool = True) -> bool:
    try:
        status = psutil.Process(pid).status()
    except psutil.NoSuchProcess:
        return False
    ended = {psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD} | (set() if stopped_is_alive else {psutil.STATUS_STOPPED})
    return status not in ended


# -- no silent hang when a node dies, at max_retries=0 ----------------------------------------


@ray.remote(max_retries=0, num_cpus=0)
def on_node(index: int, kind: str, release: str) -> int:
    if kind == "value_error":
        raise ValueError(f"node task {index}")
    if kind == "slow":  # still running when its node dies
        wait_until(lambda: os.path.exists(release), timeout=60, interval=0.05, what="release")
    return index


@ray.remote(max_retries=0, num_cpus=0)
def after(value: int) -> int:
    return value + 1


def pinned(node_id: str) -> Any:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return NodeAffinitySchedulingStrategy(node_id, soft=False)


def replace_dead_worker(cluster_handle: ClusterHandle, node_id: str) -> None:
    cluster = cluster_handle.cluster
    dead = next(n for n in cluster.worker_nodes if n.node_id == node_id)
    (row,) = list_nodes(address=cluster_handle.address, filters=[("node_id", "=", node_id)],
                        raise_on_missing_output=False)
    pin = {r: 1.0 for r in row.resources_total if r.startswith("rc_node")}  # what pins to it finds one again
    cluster.remove_node(dead, allow_graceful=False)  # only its bookkeeping is left: drop it
    cluster.add_node(num_cpus=1, resources={"worker": 100.0, **pin})  # back to 3 live nodes
    cluster.wait_for_nodes(timeout=60)


@pytest.mark.slow  # make test's budget: kill_node and the node-loss plant cover a node's death there
@pytest.mark.property
@example(kinds=["slow", "ok", "value_error"])  # a task still running when its node dies, every run
@scaled(2)
@given(kinds=st.lists(st.sampled_from(["ok", "slow", "value_error"]), min_size=1, max_size=4))
def test_nothing_hangs_silently_when_a_node_dies(ray_multinode_cluster: ClusterHandle,
                                                 tmp_path_factory: Any, kinds: list[str]) -> None:
    address = ray_multinode_cluster.address
    victim = next(n.node_id for n in list_nodes(address=address, filters=[("state", "=", "ALIVE")],
                                                raise_on_missing_output=False)
                  if not n.is_head_node)
    root = tmp_path_factory.mktemp("node")
    tasks = [on_node.options(scheduling_strategy=pinned(victim)).remote(i, kind, str(root / "never"))
             for i, kind in enumerate(kinds)]
    dependents = [after.remote(ref) for ref in tasks]  # scheduled anywhere, waiting on the victim
    Chaos(address=address).kill(KillNode(NodeTarget(victim)))
    watch(tasks + dependents, deadline=60, address=address)  # all end, or HangError names them
    for ref, dep, kind in zip(tasks, dependents, kinds):
        for r in (ref, dep):  # a slow one dies with its node; the others may have finished first
            try:
                ray.get(r, timeout=CALL_TIMEOUT)
                assert kind == "ok", f"a {kind} task returned a value"
            except ValueError:
                assert kind == "value_error"
            except (NodeDiedError, WorkerCrashedError, ObjectLostError):
                assert kind != "value_error"
    replace_dead_worker(ray_multinode_cluster, victim)


@pytest.mark.chaos(seed=2, faults=[(0.5, KillNode(NodeTarget()))])
def test_the_marker_kills_a_node_of_the_multinode_cluster_the_test_asked_for(
        ray_multinode_cluster: ClusterHandle, chaos: Chaos) -> None:
    """Before, the ``chaos`` fixture stood on the one-node cluster: asking for it swapped the
    test's three nodes for one, and the node fault found no worker node to kill."""
    assert chaos.address == ray_multinode_cluster.address
    assert len(alive_nodes(chaos.address)) == 3
    PINS.update(pins(chaos.address))
    wait_until(lambda: len(alive_nodes(chaos.address)) == 2, timeout=60,
               what="the marker's KillNode to leave two live nodes")


#: The rc_node<i> resources the live worker nodes held before the marker's KillNode.
PINS: set[str] = set()


def alive_nodes(address: str) -> list[Any]:
    return [n for n in list_nodes(address=address, raise_on_missing_output=False) if n.state == "ALIVE"]


def pins(address: str) -> set[str]:
    return {r for n in alive_nodes(address) for r in n.resources_total if r.startswith("rc_node")}


def test_a_node_a_test_killed_is_replaced_before_the_next_test(ray_multinode_cluster: ClusterHandle) -> None:
    """The plugin replaces the dead node after the test, with the rc_node<i> resource it had."""
    rows = alive_nodes(ray_multinode_cluster.address)
    assert len(rows) == 3 and sum(not n.is_head_node for n in rows) == 2, rows
    assert PINS and pins(ray_multinode_cluster.address) == PINS
