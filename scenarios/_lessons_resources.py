"""The lessons of the chapter's section 4.5 resources, and the tip on max_retries=0.

Every figure is measured in the run (nothing is hard-coded); the tests assert only its
direction.
"""

from __future__ import annotations

import os
import time
from typing import Any

from scenarios._lesson_kit import (
    TIMEOUT,
    Result,
    all_cpus_free,
    concurrency,
    diagnose,
    io,
    remote,
    timed,
)
from scenarios._lesson_model import Lesson, Measure, lesson


@lesson(id="13-undeclared-gpu", section="4.5", title="Not declaring resources: GPU work as plain CPU tasks",
        mistake="2 training tasks at the default num_cpus=1 beside 4 env tasks",
        fix="training declares num_gpus=1, num_cpus=0",
        why="Ray schedules by what is declared. Undeclared GPU work queues for CPUs beside the env "
            "workers while the GPU stays idle. (This cluster has one logical GPU; the work is simulated.)",
        num_gpus=1)
def undeclared_gpu(address: str) -> Result:
    import ray

    env = remote(io, num_cpus=1)

    def makespan(train: Any) -> float:
        return timed(lambda: ray.get([train.remote(1.0) for _ in range(2)] + [env.remote(1.0) for _ in range(4)],
                                      timeout=TIMEOUT), warm=6)


    mistake_train, fix_train = remote(_train, num_cpus=1), remote(_train, num_cpus=0, num_gpus=1)
    mistake, fix = makespan(mistake_train), makespan(fix_train)

    def on_gpu(train: Any) -> float:
        return float(sum(ray.get([train.remote(0.0) for _ in range(2)], timeout=TIMEOUT)))

    return [Measure("time for 2 training + 4 env tasks", "s", mistake, fix),
            Measure("training tasks that got the GPU", "of 2", on_gpu(mistake_train), on_gpu(fix_train),
                    better="higher")], []


def _train(seconds: float) -> int:
    """Simulated training; returns how many GPUs Ray assigned to it."""
    import ray

    time.sleep(seconds)
    return len(ray.get_gpu_ids())


@lesson(id="14-over-request", section="4.5", title="Over-requesting resources",
        mistake="I/O tasks that ask for num_cpus=2", fix="ask for what they use: num_cpus=0.5",
        why="Declared CPUs are reserved whether used or not: a task that waits on I/O holding two CPUs "
            "keeps three other tasks out.")
def over_request(address: str) -> Result:
    n = 2 * all_cpus_free(address)
    return [Measure(f"{n} I/O tasks running at once", "tasks", concurrency(n, 2.0, num_cpus=2),
                    concurrency(n, 2.0, num_cpus=0.5), better="higher")], []


class _Peer:
    def node(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())


def _nodes_spanned(options: dict[str, Any]) -> int:
    import ray

    peers = [remote(_Peer, num_cpus=0.5, **options).remote() for _ in range(2)]
    nodes = set(ray.get([p.node.remote() for p in peers], timeout=TIMEOUT))
    for peer in peers:
        ray.kill(peer)
    return len(nodes)


@lesson(id="15-placement-groups", section="4.5", title="Ignoring placement groups",
        mistake="two communicating actors placed freely (SPREAD here)",
        fix="a STRICT_PACK placement group: both on one node",
        why="Without a placement group nothing keeps cooperating actors together: across nodes every "
            "call pays the network. STRICT_PACK reserves the bundles on one node, atomically.",
        nodes=3)
def placement_groups(address: str) -> Result:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    scattered = _nodes_spanned({"scheduling_strategy": "SPREAD"})
    group = placement_group([{"CPU": 0.5}, {"CPU": 0.5}], strategy="STRICT_PACK")
    ray.get(group.ready(), timeout=TIMEOUT)
    packed = _nodes_spanned({"scheduling_strategy": PlacementGroupSchedulingStrategy(group)})
    remove_placement_group(group)
    return [Measure("nodes the two actors span", "nodes", scattered, packed)], []


def _crash() -> None:
    os._exit(1)  # a worker that dies every time


@lesson(id="t2-max-retries-0", section="4.5", title="Tip: max_retries=0 while watching the cluster",
        mistake="a task whose worker always crashes, retried without end (max_retries=-1)",
        fix="max_retries=0: WorkerCrashedError surfaces at once",
        why="Retries hide a failure that will not go away: the task just stays pending. During "
            "development run with max_retries=0 and watch the cluster, so failures surface.", tip=True)
def max_retries_zero(address: str) -> Result:
    import ray
    from ray.exceptions import WorkerCrashedError

    hidden, start = remote(_crash, max_retries=-1).remote(), time.monotonic()
    ready, _ = ray.wait([hidden], timeout=5.0)  # bounded: it would stay hidden forever
    mistake = time.monotonic() - start
    notes = diagnose([hidden], address) if not ready else []
    ray.cancel(hidden, force=True)
    start = time.monotonic()
    try:
        ray.get(remote(_crash, max_retries=0).remote(), timeout=TIMEOUT)
    except WorkerCrashedError:
        pass
    fix = time.monotonic() - start
    return [Measure("time until the crash is visible", "s", mistake, fix)], notes


LESSONS: tuple[Lesson, ...] = (undeclared_gpu, over_request, placement_groups, max_retries_zero,)
