"""Standalone reproduction: on Ray 2.50.1, a task given a value that was lost with its node (its
producing task needs a resource only that node had) gets it only about 60 s after the node is
removed, though a replacement node with that resource joins within seconds; Ray 2.51 on return
it within seconds of the replacement joining. Found by raychaos's hunt on Ray 2.50.1, as a get
that neither returned nor raised within the hunt's 30 s bound ("task under object_node_removal:
hang"). ``--retry``: a task of its own on the removed node, retried on the replacement (the
hunt's "task under node_removal: hang" on Ray 2.50.1, once): not reproduced here.

Ray's object fault tolerance guide: "When an object value is lost from the object store, such as
during node failures, Ray will use lineage reconstruction to recover the object", re-executing
the task that created it; a task whose resources only a lost node had waits until a node with
them joins.

Each round starts a Ray of its own (``ray.cluster_utils.Cluster``, failure detection as in the
hunt: a dead node declared within seconds): a head (1 CPU) and a node of 1 CPU holding the custom
resource ``victim`` (a 75 MiB object store, Ray's smallest). A task (``max_retries=1``) asking
for ``victim`` returns a 256 KiB value (past Ray's 100 KiB inline limit: it lives in that node's
store) and ends; the node is removed (``allow_graceful=False``), a task on the head is given the
value, and after ``--late`` seconds a replacement node with the same resources joins. A round
reproduces when the head's task gives no value within ``--bound`` s of the removal (30: the
hunt's). ``--retry``: the task on the node is held running (a file marks it started; it waits
for a release file) when the node is removed, and its own retry must return.

Seen on a 2-core machine, 2026-12-07: Ray 2.50.1, 5 of 5 rounds with Ray's default failure
detection and 2 of 2 with the hunt's; with ``--bound 120`` the value came 60.2 s after the
removal; with ``--late 0`` (the replacement at once) still past 30 s; the head's raylet logged the
resubmitted task's lease as unschedulable 0.3 s after the node was declared dead, then the
replacement alive 1.9 s later, and nothing more until the task ran. ``--retry``: 0 of 5
(5.1-6.1 s); with ``--retry-delay-ms 4000 --late 8`` (the retry asked for after the node was
declared dead), 0 of 2 (8.1 and 9.1 s: it ran as the replacement joined). Ray 2.51.2, 2.52.1,
2.55.1, 2.58.1 and 2.60.0: 0 of 2 each (2.60.0: 6.8-6.9 s after the removal; 16-17 s with Ray's
default failure detection).

    python findings/lost_object_rebuilt_late_after_node_removal.py [--retry] [--late S] [--bound S] [rounds]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time

BOUND = 30.0  # seconds the hunt gives a get: past it, a hang
HOLD = 60.0  # seconds a held task waits for its release file
STORE = 75 * 1024 * 1024  # Ray's smallest object store
PAD = 256 * 1024  # past Ray's 100 KiB inline limit: the value lives in its node's store
#: The hunt's cluster settings: a dead node declared within seconds (Ray's defaults: about 20 s).
CONFIG = {"health_check_initial_delay_ms": 1000, "health_check_period_ms": 1000, "health_check_timeout_ms": 2000,
          "health_check_failure_threshold": 3, "task_retry_delay_ms": 100}


def held(folder: str, pad: int) -> bytes:
    """Mark that it runs (by pid), then wait (bounded) for the release file; a value of ``pad`` bytes."""
    with open(os.path.join(folder, f"started-{os.getpid()}"), "w"):
        pass
    deadline = time.monotonic() + HOLD
    while not os.path.exists(os.path.join(folder, "release")) and time.monotonic() < deadline:
        time.sleep(0.01)  # the poll's pace
    return b"x" * pad


def consume(value: bytes) -> int:
    return len(value)


def started(folder: str) -> bool:
    return any(name.startswith("started-") for name in os.listdir(folder))


def wait_for(check: object, bound: float, what: str) -> None:
    deadline = time.monotonic() + bound
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not happen within {bound:g} s")
        time.sleep(0.05)  # the poll's pace


def old_ray() -> bool:
    """Before Ray 2.54 a driver attaches to any node of its IP address, the removable one too:
    that node is put at the loopback address, and the driver is told the head's."""
    import ray

    return int(ray.__version__.split(".")[1]) < 54


def node_args() -> dict[str, object]:
    loopback = {"node_ip_address": "127.0.0.1"} if old_ray() else {}
    return {"num_cpus": 1, "object_store_memory": STORE, "resources": {"victim": 100}, **loopback}


def one_round(late: float, lineage: bool, bound: float, retry_delay_ms: int) -> tuple[bool, str]:
    import ray
    from ray.cluster_utils import Cluster

    config = {**CONFIG, "task_retry_delay_ms": retry_delay_ms}
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"head": 1},
                                                            "_system_config": config})
    try:
        node = cluster.add_node(**node_args())
        head = {"_node_ip_address": cluster.head_node.node_ip_address} if old_ray() else {}
        ray.init(address=cluster.address, log_to_driver=False, **head)
        cluster.wait_for_nodes()
        with tempfile.TemporaryDirectory() as folder:
            task = ray.remote(held).options(max_retries=1, resources={"victim": 1})
            ref = task.remote(folder, PAD if lineage else 0)
            if lineage:
                open(os.path.join(folder, "release"), "w").close()
                ray.wait([ref], timeout=BOUND, fetch_local=False)  # ended, its value on the node
            else:
                wait_for(lambda: started(folder), BOUND, "the task to start")
            cluster.remove_node(node, allow_graceful=False)
            open(os.path.join(folder, "release"), "w").close()
            removed = time.monotonic()
            consumer = ray.remote(consume).options(resources={"head": 0.01}).remote(ref) if lineage else None
            threading.Event().wait(late)  # the replacement's lateness, the fault's own delay
            cluster.add_node(**node_args())
            try:
                value = ray.get(consumer if consumer is not None else ref,
                                timeout=max(0.1, bound - (time.monotonic() - removed)))
            except ray.exceptions.GetTimeoutError:
                return True, f"no value within {bound:g} s of the removal"
            except Exception as exc:  # noqa: BLE001 - what Ray raised, shown
                return False, f"raised {type(exc).__name__}"
            return False, f"returned {len(value) if isinstance(value, bytes) else value!r} " \
                          f"{time.monotonic() - removed:.1f} s after the removal"
    finally:
        ray.shutdown()
        cluster.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", nargs="?", type=int, default=5)
    parser.add_argument("--late", type=float, default=5.0, help="seconds before the replacement joins")
    parser.add_argument("--retry", action="store_true", help="the removed node's own task retried, no lost value")
    parser.add_argument("--bound", type=float, default=BOUND, help="seconds the get waits after the removal")
    parser.add_argument("--retry-delay-ms", type=int, default=100, help="Ray's task_retry_delay_ms (the hunt's: 100)")
    args = parser.parse_args()
    import ray

    print(f"Ray {ray.__version__}; late {args.late:g} s; {'retry' if args.retry else 'lost value'}", flush=True)
    hung = 0
    for number in range(1, args.rounds + 1):
        reproduced, what = one_round(args.late, not args.retry, args.bound, args.retry_delay_ms)
        hung += reproduced
        print(f"round {number}: {'HUNG' if reproduced else 'ok'}: {what}", flush=True)
    print(f"REPRODUCED {hung} of {args.rounds}")


if __name__ == "__main__":
    main()
