"""What each kind of fault needs of a node, and how a missing need is said: per node, fault kinds
and need, before any fault (the check on a real cluster: tests/test_attack_bare.py)."""

from __future__ import annotations

import pytest

from chaos import Schedule
from chaos._faults import FaultKind
from chaos._preflight import ClusterUnfit, Missing, Need, _facts_missing, _kinds_by_need, find_missing, needs_of
from chaos.agents._agent import NodeFacts
from chaos.cluster import ClusterHandle
from chaos.errors import ChaosError


def test_every_kind_of_fault_says_what_it_needs() -> None:
    NEEDS = {kind: needs_of(kind) for kind in FaultKind}
    acting_on_processes = {FaultKind.KILL, FaultKind.PAUSE, FaultKind.KILL_NODE, FaultKind.FREEZE_NODE,
                           FaultKind.DRAIN_NODE, FaultKind.LIMIT_OPEN_FILES}
    assert {k for k, needs in NEEDS.items() if Need.CONTROL in needs} == acting_on_processes
    assert {k for k, needs in NEEDS.items() if Need.PROC in needs} == acting_on_processes
    assert {k for k, needs in NEEDS.items() if Need.GCS in needs} == {
        FaultKind.KILL_GCS, FaultKind.KILL_REDIS, FaultKind.REDIS_CLIENT_KILL, FaultKind.REDIS_IDLE_TIMEOUT}
    assert {k for k, needs in NEEDS.items() if Need.RAYCHAOS in needs} == {FaultKind.MEMORY}
    assert NEEDS[FaultKind.RPC_FAILURE] == frozenset()  # set up with the cluster, not on one someone runs


def test_network_faults_are_refused_on_a_cluster_someone_else_runs() -> None:
    from chaos import Partition

    schedule = Schedule.explicit([(0.0, Partition(seconds=1.0))])
    (missing,) = find_missing(schedule, address="127.0.0.1:1")
    assert missing.where == "the cluster" and missing.kinds == (FaultKind.PARTITION,) and missing.need is Need.NETWORK


def test_needs_are_grouped_with_the_kinds_that_need_them() -> None:
    by_need = _kinds_by_need([FaultKind.PAUSE, FaultKind.KILL, FaultKind.CPU])
    assert by_need[Need.AGENT] == (FaultKind.CPU, FaultKind.KILL, FaultKind.PAUSE)
    assert by_need[Need.CONTROL] == (FaultKind.KILL, FaultKind.PAUSE)
    assert Need.GCS not in by_need


def test_what_a_node_does_not_allow_is_named_per_node_and_need() -> None:
    needs = _kinds_by_need([FaultKind.KILL, FaultKind.CPU])
    denied = NodeFacts(1000, proc="PermissionError: /proc/42/fd", control="PermissionError: [Errno 1]")
    found = _facts_missing("node 3f2a (10.0.0.2)", denied, needs)
    assert [m.line() for m in found] == [
        "node 3f2a (10.0.0.2): kill: needs /proc readable by the agent: PermissionError: /proc/42/fd",
        "node 3f2a (10.0.0.2): kill: needs permission over the node's Ray processes (the agent runs as their "
        "user, or as root): PermissionError: [Errno 1] (the agent runs as uid 1000)"]
    assert _facts_missing("n", NodeFacts(0, "", ""), needs) == []
    assert _facts_missing("n", denied, _kinds_by_need([FaultKind.CPU])) == []  # a hog needs neither


def test_the_refusal_lists_every_missing_need() -> None:
    missing = [Missing("node a", (FaultKind.KILL,), Need.AGENT, "the chaos agent did not answer within 5 s"),
               Missing("the cluster", (FaultKind.KILL_GCS,), Need.GCS, "not started by this process")]
    with pytest.raises(ClusterUnfit, match="none was injected") as caught:
        raise ClusterUnfit(missing)
    assert isinstance(caught.value, ChaosError) and isinstance(caught.value, RuntimeError)
    assert caught.value.missing == tuple(missing)
    assert str(caught.value).splitlines()[1:] == [f"  {m.line()}" for m in missing]


def test_a_schedule_without_faults_needs_nothing() -> None:
    assert find_missing(Schedule(()), address="127.0.0.1:1") == []  # nothing asked of the cluster


@pytest.mark.ray
def test_node_and_redis_faults_are_refused_on_one_node_without_redis(ray_cluster: ClusterHandle) -> None:
    """The two needs a cluster's shape decides: a worker node besides the head (KillNode), a Redis
    behind the GCS (KillRedis). The plugin's collection check and the attack's preflight read them."""
    from chaos import KillNode
    from chaos.gcs import KillRedis

    missing = find_missing(Schedule.explicit([(0.0, KillNode()), (0.0, KillRedis(seconds=1.0))]),
                           address=ray_cluster.address)
    by_need = {m.need: m for m in missing}
    assert set(by_need) == {Need.WORKER_NODE, Need.REDIS}, missing
    assert by_need[Need.WORKER_NODE].kinds == (FaultKind.KILL_NODE,)
    assert "only the head is alive" in by_need[Need.WORKER_NODE].detail
    assert by_need[Need.REDIS].kinds == (FaultKind.KILL_REDIS,)
    assert "keeps its GCS's tables in memory, not in a Redis" in by_need[Need.REDIS].detail
