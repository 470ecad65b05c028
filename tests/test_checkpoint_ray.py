"""Checkpointed actors under real SIGKILLs, on real Ray processes."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import ray
from ray import cloudpickle
from ray.exceptions import ActorDiedError

from actors import CheckpointedCounter
from chaos import wait_until
from chaos.cluster import ClusterHandle
from conftest import CALL_TIMEOUT, actor_pid
from test_replay_actor import DiesAfterAcking

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/

MAX_RESTARTS = 3
EVERY_N = 5


class CounterModel:
    """What a policy-mode counter must hold after each restart."""

    def __init__(self) -> None:
        self.value = self.checkpointed = self.since = 0

    def add(self, k: int) -> None:
        self.value += k
        self.since += 1
        if self.since >= EVERY_N:
            self.checkpointed, self.since = self.value, 0

    def restart(self, durability: str) -> None:
        if durability == "policy":
            self.value = self.checkpointed
        self.since = 0


def start_counter(storage: str, durability: str, **options: Any) -> Any:
    cls = ray.remote(max_restarts=MAX_RESTARTS, max_task_retries=-1, **options)(CheckpointedCounter)
    return cls.remote(storage, durability=durability, every_n=EVERY_N)


def adds(counter: Any, model: CounterModel, ks: list[int]) -> None:
    for k in ks:
        assert ray.get(counter.add.remote(k), timeout=CALL_TIMEOUT) == model.value + k
        model.add(k)


# policy: the slow tier (make test's budget)
@pytest.mark.parametrize("durability", [pytest.param("policy", marks=pytest.mark.slow), "wal"])
def test_counter_survives_max_restarts_kills_then_dies(
    ray_cluster: ClusterHandle, storage: str, durability: str, sigkill: Callable[..., int]
) -> None:
    counter, model = start_counter(storage, durability), CounterModel()
    for round_ in range(MAX_RESTARTS):
        adds(counter, model, [1, 2, 3, 4, 5, 6, 7][: 3 + 2 * round_])
        sigkill(counter)
        model.restart(durability)
        assert ray.get(counter.get.remote(), timeout=CALL_TIMEOUT) == model.value
    # The 4th kill exceeds max_restarts: every call must fail fast with ActorDiedError.
    import os
    import signal

    os.kill(actor_pid(counter), signal.SIGKILL)
    with pytest.raises(ActorDiedError):
        ray.get(counter.get.remote(), timeout=CALL_TIMEOUT)


def test_wal_mode_equals_the_pre_kill_state_exactly(
    ray_cluster: ClusterHandle, storage: str, sigkill: Callable[..., int]
) -> None:
    counter = start_counter(storage, "wal")
    for k in range(1, 8):
        ray.get(counter.add.remote(k), timeout=CALL_TIMEOUT)
    before = ray.get(counter.digest.remote(), timeout=CALL_TIMEOUT)
    sigkill(counter)
    assert ray.get(counter.digest.remote(), timeout=CALL_TIMEOUT) == before
    info = ray.get(counter.restored.remote(), timeout=CALL_TIMEOUT)
    assert info.restored and info.replayed == 2  # checkpoint after 5 adds, 2 replayed from the log
    ray.kill(counter)


def test_a_new_actor_over_a_dead_ones_checkpoints_is_refused_not_started_fresh(
    ray_cluster: ClusterHandle, storage: str
) -> None:
    """Inside a real actor Ray says "first start": over checkpoints, ``restore="auto"`` refuses
    rather than commit 0 as the newest; the storage still restores what was acknowledged."""
    counter = start_counter(storage, "policy")
    adds(counter, CounterModel(), [1, 2, 3, 4, 5])  # the fifth add checkpoints 15
    ray.kill(counter, no_restart=True)
    again = start_counter(storage, "policy")
    with pytest.raises(ActorDiedError, match="StorageNotFresh"):
        ray.get(again.get.remote(), timeout=CALL_TIMEOUT)
    resumed = ray.remote(CheckpointedCounter).remote(storage, every_n=EVERY_N, restore="always")
    assert ray.get(resumed.get.remote(), timeout=CALL_TIMEOUT) == 15
    ray.kill(resumed)


class CounterDiesAfterAcking(DiesAfterAcking, CheckpointedCounter):
    pass


@pytest.mark.parametrize("durability", ["policy", "wal"])
def test_an_add_delivered_again_after_the_counter_died_counts_once(
    ray_cluster: ClusterHandle, storage: str, tmp_path: Path, durability: str
) -> None:
    marker = tmp_path / "died"
    cls = ray.remote(max_restarts=1, max_task_retries=-1)(CounterDiesAfterAcking)
    # every_n=1 in policy mode, so the add is durable before the crash in both modes.
    counter = cls.remote(storage, durability=durability, every_n=1, marker=str(marker))
    assert ray.get(counter.add.remote(5, writer_id="driver", seq=0), timeout=CALL_TIMEOUT) == 5
    assert marker.exists(), "the counter did not die after applying the add"
    assert ray.get(counter.duplicates.remote(), timeout=CALL_TIMEOUT) == 1
    assert ray.get(counter.add.remote(1, writer_id="driver", seq=1), timeout=CALL_TIMEOUT) == 6
    ray.kill(counter)


def test_an_add_without_ids_is_applied_again_when_delivered_again(
    ray_cluster: ClusterHandle, storage: str, tmp_path: Path
) -> None:
    """Why the ids exist: at-least-once delivery counts a plain add twice."""
    cls = ray.remote(max_restarts=1, max_task_retries=-1)(CounterDiesAfterAcking)
    counter = cls.remote(storage, durability="wal", every_n=1, marker=str(tmp_path / "died"))
    assert ray.get(counter.add.remote(5), timeout=CALL_TIMEOUT) == 10
    ray.kill(counter)


def test_an_add_with_a_writer_but_no_seq_is_refused(ray_cluster: ClusterHandle, storage: str) -> None:
    counter = start_counter(storage, "wal")
    with pytest.raises(ValueError, match=r"give both writer_id and seq .* got writer_id='w', seq=None"):
        ray.get(counter.add.remote(1, writer_id="w"), timeout=CALL_TIMEOUT)
    assert ray.get(counter.get.remote(), timeout=CALL_TIMEOUT) == 0
    ray.kill(counter)


@pytest.mark.slow  # make test's budget: kill_node and the node-loss plant cover a node's death there
@pytest.mark.multinode
# policy: make deep (the node-loss and drain-preemption scenarios restore policy counters on
# another node in make slow)
@pytest.mark.parametrize("durability", [pytest.param("policy", marks=pytest.mark.deep), "wal"])
def test_counter_restarts_on_another_node_when_its_node_is_removed(
    ray_multinode_cluster: ClusterHandle, storage: str, durability: str
) -> None:
    cluster = ray_multinode_cluster.cluster
    # Only worker nodes carry the "worker" resource: the head, and this driver, are spared.
    counter, model = start_counter(storage, durability, resources={"worker": 1}), CounterModel()
    adds(counter, model, [1, 2, 3, 4, 5, 6, 7])
    node_id = ray.get(counter.node_id.remote(), timeout=CALL_TIMEOUT)
    victim = next(n for n in cluster.worker_nodes if n.node_id == node_id)
    cluster.remove_node(victim, allow_graceful=False)
    model.restart(durability)
    new_node = wait_until(
        lambda: (n := ray.get(counter.node_id.remote(), timeout=CALL_TIMEOUT)) != node_id and n,
        timeout=60, what="the counter to restart on another node")
    assert new_node != node_id
    assert ray.get(counter.get.remote(), timeout=CALL_TIMEOUT) == model.value
    ray.kill(counter)
    cluster.add_node(num_cpus=1, resources={"worker": 100.0})  # back to 3 nodes for the next test
    cluster.wait_for_nodes(timeout=60)
