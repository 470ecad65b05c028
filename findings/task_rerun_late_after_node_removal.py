"""Standalone reproduction: on Ray 2.50.1, a task that must run again after its node is removed
(its resources only that node had) runs only about 60 s later, though a replacement node with
those resources joins within seconds. Two ways: a task given a value lost with its node (the
value rebuilt by re-running the task that made it), and, with ``--retry --kill-worker``, the
removed node's own task, its worker SIGKILLed just after its raylet (two failures: Ray says
"There are 0 retries remaining, so the task will be retried", and retries it late). Found by
raychaos's hunt on Ray 2.50.1 as gets that neither returned nor raised within its 30 s bound
("task under object_node_removal: hang", "task under node_removal: hang"). On Ray 2.60 both run
within seconds of the replacement joining.

Ray's guides: "When an object value is lost from the object store, such as during node failures,
Ray will use lineage reconstruction to recover the object", re-executing the task that created
it; a task whose worker or node dies is retried; a task whose resources only a lost node had
waits until a node with them joins.

Each round starts a Ray of its own (``ray.cluster_utils.Cluster``, failure detection as in the
hunt: a dead node declared within seconds; ``--ray-detection``: Ray's defaults, about 20 s): a
head (1 CPU) and a node of 1 CPU holding the custom resource ``victim`` (a 75 MiB object store,
Ray's smallest). A task (``max_retries=1``) asking for ``victim`` returns a 256 KiB value (past
Ray's 100 KiB inline limit: it lives in that node's store) and ends; the node is removed
(``allow_graceful=False``), a task on the head is given the value, and after ``--late`` seconds a
replacement node with the same resources joins. A round reproduces when the head's task gives no
value within ``--bound`` s of the removal (30: the hunt's); a round whose replacement took more than
``--late`` + 10 s to join, or whose task did not end first, is not counted. ``--retry``: the task on the node is
held running (a file marks it started; it waits for a release file) when the node is removed, and
its own retry must return; ``--kill-worker``: its worker is SIGKILLed right after the removal, as
the hunt's node removal does (a raylet's workers end only once they notice it gone);
``--no-cpu``: the task asks for no CPU, as the hunt's held tasks do.

Seen on a 2-core machine, 2026-12-07. Ray 2.50.1: 5 of 5 rounds over three runs (given ``--bound
120``, the value came 60.2 s after the removal); with ``--ray-detection``, 5 of 5, and 1 of 1 with
``--late 0`` (the replacement at once). The head's raylet logged the resubmitted task's lease as
unschedulable 0.3 s after the node was declared dead, the replacement alive 1.9 s later, and
nothing more until the task ran. ``--retry --kill-worker``: 2 of 2, and 2 of 2 with ``--no-cpu``;
without ``--kill-worker``, 0 of 9 (``--ray-detection``: 0 of 5, 5.1-6.1 s; ``--no-cpu``: 0 of 2;
``--retry-delay-ms 4000 --late 8``, the retry asked for after the node was declared dead: 0 of 2,
8.1 and 9.1 s). Ray 2.51.2, 2.52.1, 2.55.1, 2.58.1 and 2.60.0: 0 of 2 each (2.60.0: 6.8-7.0 s
after the removal; with ``--ray-detection``, 0 of 3, 16-17 s), and ``--retry --kill-worker``: 0
of 2 each (2.50.1 in the same runs: 2 of 2); ``--retry --no-cpu --kill-worker`` on 2.51.2 and
2.60.0: 0 of 2 each (6.7-7.2 s).

    python findings/task_rerun_late_after_node_removal.py [--retry [--kill-worker] [--no-cpu]]
        [--late S] [--bound S] [--retry-delay-ms MS] [--ray-detection] [rounds]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import tempfile
import threading
import time

BOUND = 30.0  # seconds the hunt gives a get: past it, a hang
HOLD = 60.0  # seconds a held task waits for its release file
STORE = 75 * 1024 * 1024  # Ray's smallest object store
PAD = 256 * 1024  # past Ray's 100 KiB inline limit: the value lives in its node's store
JOIN_SLACK = 10.0  # seconds past --late a replacement may take to join for its round to count
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


def kill_started(folder: str) -> None:
    """SIGKILL the process the held task said it runs in, if it still does (the raylet's
    removal ends its workers only once they notice; the hunt's removal kills them too)."""
    for name in os.listdir(folder):
        if name.startswith("started-"):
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(name.removeprefix("started-")), signal.SIGKILL)


def one_round(*, late: float, lineage: bool, bound: float, config: dict[str, int],
              no_cpu: bool = False, kill_worker: bool = False) -> tuple[bool | None, str]:
    """Whether the round reproduced (None: not counted, its setup did not hold) and what was seen."""
    import ray
    from ray.cluster_utils import Cluster

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "resources": {"head": 1},
                                                            "_system_config": config})
    try:
        node = cluster.add_node(**node_args())
        head = {"_node_ip_address": cluster.head_node.node_ip_address} if old_ray() else {}
        ray.init(address=cluster.address, log_to_driver=False, **head)
        cluster.wait_for_nodes()
        with tempfile.TemporaryDirectory() as folder:
            needs = {"num_cpus": 0, "resources": {"victim": 0.01}} if no_cpu else {"resources": {"victim": 1}}
            task = ray.remote(held).options(max_retries=1, **needs)
            ref = task.remote(folder, PAD if lineage else 0)
            if lineage:
                open(os.path.join(folder, "release"), "w").close()
                ended, _ = ray.wait([ref], timeout=BOUND, fetch_local=False)  # its value on the node
                if not ended:  # a removal now would retry the task, not rebuild a lost value
                    return None, f"the task did not end within {BOUND:g} s: nothing lost, not counted"
            else:
                wait_for(lambda: started(folder), BOUND, "the task to start")
            cluster.remove_node(node, allow_graceful=False)
            if kill_worker:
                kill_started(folder)
            open(os.path.join(folder, "release"), "w").close()
            removed = time.monotonic()
            consumer = ray.remote(consume).options(resources={"head": 0.01}).remote(ref) if lineage else None
            threading.Event().wait(late)  # the replacement's lateness, the fault's own delay
            cluster.add_node(**node_args())
            joined = f"the replacement joined {time.monotonic() - removed:.1f} s after the removal"
            if time.monotonic() - removed > late + JOIN_SLACK:  # not "within seconds": no claim either way
                return None, f"{joined}: not counted"
            try:
                value = ray.get(consumer if consumer is not None else ref,
                                timeout=max(0.1, bound - (time.monotonic() - removed)))
            except ray.exceptions.GetTimeoutError:
                return True, f"no value within {bound:g} s of the removal ({joined})"
            except Exception as exc:  # noqa: BLE001 - what Ray raised, shown
                return False, f"raised {type(exc).__name__} ({joined})"
            return False, f"returned {len(value) if isinstance(value, bytes) else value!r} " \
                          f"{time.monotonic() - removed:.1f} s after the removal ({joined})"
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
    parser.add_argument("--ray-detection", action="store_true", help="Ray's default failure detection, not the hunt's")
    parser.add_argument("--no-cpu", action="store_true", help="the task asks for no CPU (as the hunt's held tasks)")
    parser.add_argument("--kill-worker", action="store_true", help="SIGKILL the held task's worker after the removal")
    args = parser.parse_args()
    if (args.kill_worker or args.no_cpu) and not args.retry:
        parser.error("--kill-worker and --no-cpu shape the held task of --retry: give --retry too")
    import ray

    variant = [name for name, on in (("--retry", args.retry), ("--kill-worker", args.kill_worker),
                                     ("--no-cpu", args.no_cpu), ("--ray-detection", args.ray_detection)) if on]
    print(f"Ray {ray.__version__}; late {args.late:g} s; {' '.join(variant) or 'lost value'}", flush=True)
    hung = counted = 0
    for number in range(1, args.rounds + 1):
        config = {**({} if args.ray_detection else CONFIG), "task_retry_delay_ms": args.retry_delay_ms}
        reproduced, what = one_round(late=args.late, lineage=not args.retry, bound=args.bound, config=config,
                                     no_cpu=args.no_cpu, kill_worker=args.kill_worker)
        hung, counted = hung + bool(reproduced), counted + (reproduced is not None)
        shown = "not counted" if reproduced is None else "HUNG" if reproduced else "ok"
        print(f"round {number}: {shown}: {what}", flush=True)
    print(f"REPRODUCED {hung} of {counted}")


if __name__ == "__main__":
    main()
