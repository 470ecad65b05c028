"""Node-level faults beyond a kill, on the 3-node cluster: a node that stops answering, a node
drained and preempted at its deadline."""

from __future__ import annotations

import time
from typing import Any

import psutil
import pytest
import ray
from hypothesis import given
from hypothesis import strategies as st
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from ray.util.state import list_nodes

from actors import CheckpointedCounter
from chaos import Chaos, DrainNode, FreezeNode, KillNode, NodeTarget, wait_until
from chaos.cluster import ClusterHandle
from conftest import CALL_TIMEOUT, scaled
from scenarios.workloads._kit import DETECTION_BOUND
from scenarios.workloads.surface._objects import ObjectKind, Putter, combine, expected_outcome, produce
from test_chaos_multinode import Remote, replace_dead_worker, where

pytestmark = [pytest.mark.multinode, pytest.mark.slow]



def node_state(address: str, node_id: str) -> str:
    rows = list_nodes(address=address, filters=[("node_id", "=", node_id)], raise_on_missing_output=False)
    return rows[0].state if rows else "MISSING"


def test_a_frozen_node_is_declared_dead_its_actors_move_and_it_never_rejoins(
        ray_multinode_cluster: ClusterHandle) -> None:
    address, actor = ray_multinode_cluster.address, Remote.remote()
    old_pid, node = where(actor)
    chaos = Chaos(address=address)
    with chaos.inject(FreezeNode(seconds=DETECTION_BOUND + 4, target=NodeTarget(node))) as injection:
        raylet = psutil.Process(injection.processes[0].pid)
        assert raylet.status() == psutil.STATUS_STOPPED  # one machine: visible here
        frozen = time.monotonic()
        wait_until(lambda: node_state(address, node) == "DEAD", timeout=DETECTION_BOUND + 10,
                   interval=0.1, what="Ray's health check to declare the frozen node dead")
        detected = time.monotonic() - frozen
        pid, moved_to = where(actor)  # restarted elsewhere while the node is still frozen
        assert moved_to != node and pid != old_pid
    assert detected <= DETECTION_BOUND + 2, detected
    # Thawed, the raylet learns it was declared dead and exits instead of rejoining.
    wait_until(lambda: not raylet.is_running() or raylet.status() == psutil.STATUS_ZOMBIE,
               timeout=30, what="the thawed raylet to exit")
    assert node_state(address, node) == "DEAD" and where(actor)[1] != node
    # Ray 2.60 leaves the frozen node's workers running after its raylet exits: the actor's
    # old incarnation still runs beside the new one (README: "what Ray 2.60 did").
    assert psutil.pid_exists(old_pid) and psutil.Process(old_pid).status() != psutil.STATUS_ZOMBIE
    psutil.Process(old_pid).kill()
    ray.kill(actor)
    replace_dead_worker(ray_multinode_cluster, node)


def counter_on(node: str, storage: str, *, graceful: bool) -> Any:
    remote = ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0, resources={"worker": 1})(
        CheckpointedCounter)
    return remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=True)).remote(
        storage, durability="policy", every_n=1000, checkpoint_on_sigterm=graceful)


@pytest.mark.deep  # CI's budget: make slow runs the drain-preemption scenario
def test_a_preempted_node_loses_nothing_of_an_actor_that_checkpoints_on_sigterm(
        ray_multinode_cluster: ClusterHandle, tmp_path: Any) -> None:
    address = ray_multinode_cluster.address
    node = where(Remote.options(max_restarts=0).remote())[1]
    graceful = counter_on(node, str(tmp_path / "graceful"), graceful=True)
    plain = counter_on(node, str(tmp_path / "plain"), graceful=False)
    assert {ray.get(a.node_id.remote(), timeout=CALL_TIMEOUT) for a in (graceful, plain)} == {node}
    for seq in range(30):
        ray.get([a.add.remote(1, writer_id="w", seq=seq) for a in (graceful, plain)], timeout=CALL_TIMEOUT)
    Chaos(address=address).kill(DrainNode(deadline_s=2, target=NodeTarget(node), grace_s=5))
    assert node_state(address, node) == "DEAD"
    assert ray.get(graceful.get.remote(), timeout=60) == 30  # restored elsewhere, all of it
    assert ray.get(plain.get.remote(), timeout=60) == 0  # policy durability without the hook
    assert ray.get(graceful.node_id.remote(), timeout=CALL_TIMEOUT) != node
    for actor in (graceful, plain):
        ray.kill(actor)
    replace_dead_worker(ray_multinode_cluster, node)


# -- lost objects: a property over generated object graphs ----------------------------------------


@st.composite
def graphs(draw: Any) -> list[tuple[ObjectKind, int, tuple[int, ...]]]:
    """Objects as (how made, worker node 0 or 1, inputs): a task's inputs are earlier objects
    on its own node, so no input is ever copied to another node (the oracle stays exact)."""
    made: list[tuple[ObjectKind, int, tuple[int, ...]]] = []
    for _ in range(draw(st.integers(2, 7))):
        kind, node = draw(st.sampled_from(list(ObjectKind))), draw(st.integers(0, 1))
        local = [i for i, m in enumerate(made) if m[1] == node]
        inputs = tuple(draw(st.lists(st.sampled_from(local), max_size=2, unique=True))) \
            if local and kind is not ObjectKind.WORKER_PUT else ()
        made.append((kind, node, inputs))
    return made


def predicted(graph: list[tuple[ObjectKind, int, tuple[int, ...]]], dead: int) -> list[str]:
    """The oracle over a graph: an object on a live node keeps its value; on the dead node a
    task output with retries is rebuilt if every input can be; otherwise its own error (the
    leaf oracle), or, rebuilt over a lost input, some ObjectLostError."""
    out: list[str] = []
    for kind, node, inputs in graph:
        leaf = expected_outcome(kind, on_dead_node=node == dead)
        if leaf == "value" and node == dead and any(out[i] != "value" for i in inputs):
            leaf = "ObjectLostError"
        out.append(leaf)
    return out


def values(graph: list[tuple[ObjectKind, int, tuple[int, ...]]]) -> list[int]:
    """What each object holds (its first element) when it is whole."""
    out: list[int] = []
    for i, (_, _, inputs) in enumerate(graph):
        out.append(i + sum(out[j] for j in inputs))
    return out


def outcome(ref: Any, value: int) -> str:
    from ray.exceptions import ObjectLostError, OwnerDiedError

    try:
        got = ray.get(ref, timeout=60)
    except (OwnerDiedError, ObjectLostError) as exc:
        return type(exc).__name__
    return "value" if int(got[0]) == value else f"wrong value {int(got[0])}"


@pytest.mark.property
@scaled(2)
@given(graph=graphs(), dead=st.integers(0, 1))
def test_lost_objects_are_rebuilt_or_fail_as_the_oracle_predicts(
        ray_multinode_cluster: ClusterHandle, graph: list[tuple[ObjectKind, int, tuple[int, ...]]],
        dead: int) -> None:
    nodes = sorted(n["NodeID"] for n in ray.nodes() if n.get("Alive") and "worker" in n["Resources"])
    needs: dict[str, Any] = {"num_cpus": 0, "resources": {"worker": 0.01}}
    where = [NodeAffinitySchedulingStrategy(n, soft=True) for n in nodes]
    putters = [ray.remote(max_restarts=0, **needs)(Putter).options(scheduling_strategy=w).remote() for w in where]
    refs: list[Any] = []
    for i, (kind, node, inputs) in enumerate(graph):
        if kind is ObjectKind.WORKER_PUT:
            refs.append(ray.get(putters[node].put.remote(i), timeout=CALL_TIMEOUT)[0])
            continue
        task = ray.remote(combine).options(max_retries=3 if kind is ObjectKind.RETRIED_TASK else 0,
                                           scheduling_strategy=where[node], **needs)
        refs.append(task.remote(produce(i), *[refs[j] for j in inputs]))
    ray.wait(refs, num_returns=len(refs), timeout=CALL_TIMEOUT, fetch_local=False)
    assert [ray.get(p.node.remote(), timeout=CALL_TIMEOUT) for p in putters] == nodes
    Chaos(address=ray_multinode_cluster.address).kill(KillNode(NodeTarget(nodes[dead])))
    try:
        got = [outcome(ref, v) for ref, v in zip(refs, values(graph))]
        want = predicted(graph, dead)
        # "ObjectLostError" in the oracle: any of its kinds (Ray names the one it hit).
        assert all(g == w or (w == "ObjectLostError" and not g.startswith(("value", "wrong")))
                   for g, w in zip(got, want)), \
            list(zip(graph, got, want))
    finally:
        for putter in putters:
            ray.kill(putter)
        replace_dead_worker(ray_multinode_cluster, nodes[dead])
