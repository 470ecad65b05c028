"""Ray under a partition: a worker node cut from the rest, measured per health-check setting.

    python benchmarks/partition_measure.py

For each (period, failure threshold) of Ray's health check, a network cluster (head + two
worker nodes in namespaces, ``local_cluster(network=True)``) runs an actor with
``max_restarts=-1`` and a task output on worker node 1; node 1 is cut from every other node
(:class:`chaos.Partition`). Measured: seconds from the cut until the GCS lists the node DEAD,
until the actor answers from another node, what ``ray.get`` of the task output does, and,
after the heal, which of the old node's processes are still running in its namespace.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np
import psutil
import ray
from _common import console, machine, table
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from chaos import Chaos, NodeTarget, Partition, local_cluster, wait_until
from chaos.cluster import TEST_SYSTEM_CONFIG

SETTINGS = ((1000, 3), (1000, 5), (2000, 3))
AFTER_HEAL = 15.0


class Where:
    def node(self) -> str:
        return ray.get_runtime_context().get_node_id()


def output(size: int) -> Any:
    return np.ones(size, dtype=np.uint8)


def _names(pids: list[int]) -> list[str]:
    found = []
    for pid in pids:
        try:
            found.append(psutil.Process(pid).name())
        except psutil.Error:
            continue
    return sorted(found)


def measure(period_ms: int, threshold: int) -> list[str]:
    config = {**TEST_SYSTEM_CONFIG, "health_check_period_ms": period_ms,
              "health_check_failure_threshold": threshold}
    with local_cluster(nodes=3, num_cpus=1, network=True, log_to_driver=False, system_config=config,
                       worker_resources={"worker": 10}) as cluster:
        lab = cluster.lab
        assert lab is not None
        cut = lab.workers[0]
        cut_id = lab.id_of(cut)
        on_cut = NodeAffinitySchedulingStrategy(cut_id, soft=True)
        # A sliver of a resource with the affinity: Ray places a request for nothing anywhere.
        actor = ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0)(Where).options(
            scheduling_strategy=on_cut, resources={"worker": 0.01}).remote()
        assert ray.get(actor.node.remote(), timeout=60) == cut_id
        ref = ray.remote(output).options(scheduling_strategy=on_cut, num_cpus=0,
                                         resources={"worker": 0.01}).remote(4 * 2**20)
        ray.wait([ref], fetch_local=False, timeout=60)
        with Chaos(address=cluster.address).inject(Partition(seconds=60, target=NodeTarget(node_id=cut_id))):
            start = time.monotonic()
            wait_until(lambda: not next(n["Alive"] for n in ray.nodes() if n["NodeID"] == cut_id),
                       timeout=90, interval=0.1, what="the cut node DEAD")
            dead = time.monotonic() - start
            moved = wait_until(lambda: ray.get(actor.node.remote(), timeout=5) != cut_id, timeout=60,
                               interval=0.1, what="the actor elsewhere")
            actor_back = time.monotonic() - start
            try:
                got = ray.get(ref, timeout=60)
                obj = f"value ({'reconstructed' if got.nbytes else '?'}) after {time.monotonic() - start:.1f} s"
            except Exception as exc:  # noqa: BLE001 - what Ray raises is the measurement
                obj = f"{type(exc).__name__} after {time.monotonic() - start:.1f} s"
        time.sleep(AFTER_HEAL)  # what the old node does in the seconds after the heal is the figure
        left = _names(lab.namespace_pids(cut))
        still_alive = next(n["Alive"] for n in ray.nodes() if n["NodeID"] == cut_id)
    return [f"{period_ms} ms × {threshold}", f"{dead:.1f}", f"{actor_back:.1f}", str(bool(moved)), obj,
            "rejoined" if still_alive else "stays DEAD",
            ", ".join(f"{n}" for n in sorted(set(left))) or "none"]


def main() -> None:
    console.print(f"[bold]Ray under a partition[/] on {machine()}")
    rows = [measure(period, threshold) for period, threshold in SETTINGS]
    table("worker node 1 cut from every other node (both ways)",
          ["health check", "declared dead, s", "actor answers elsewhere, s", "moved", "task output (ray.get)",
           "after heal", f"old node's processes {AFTER_HEAL:g} s after heal"], rows)


if __name__ == "__main__":
    main()
