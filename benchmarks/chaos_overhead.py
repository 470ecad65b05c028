"""Cost of the chaos instrumentation with no faults, on a simple task workload.

    python benchmarks/chaos_overhead.py [--quick]

Plain: batches of tiny tasks collected with ``ray.get``. Instrumented: the same tasks
wrapped with ``chaos.delayed`` (probability 0), agents running on every node, an engine
with a journal, an (empty) schedule runner thread, and every batch collected through
``chaos.watch``. Alternating rounds, medians reported. Not a test: it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _common import console, fmt, machine, table

from chaos import Chaos, Latency, Schedule, delayed, local_cluster, watch
from chaos.agents import agent_for
from chaos.engine import run_schedule
from chaos.journal import Journal

BATCH, TIMEOUT = 200, 60.0


def tiny(x: int) -> int:
    return x + 1


def rate(task: object, batches: int, collect: object) -> float:
    start = time.perf_counter()
    for _ in range(batches):
        collect([task.remote(i) for i in range(BATCH)])  # type: ignore[attr-defined]
    return batches * BATCH / (time.perf_counter() - start)


def main() -> None:
    import ray
    from ray.util.state import list_nodes

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    rounds = 3 if parser.add_argument("--quick", action="store_true") and \
        parser.parse_args().quick else 7
    console.print(f"[bold]raychaos instrumentation overhead[/] on {machine()}")
    with tempfile.TemporaryDirectory() as root, local_cluster(num_cpus=2, log_to_driver=False) as c:
        plain = ray.remote(tiny)
        wrapped = ray.remote(delayed(Latency("fixed", 0.0, probability=0.0))(tiny))
        for node in list_nodes(address=c.address):
            ray.get(agent_for(node.node_id).where.remote(), timeout=TIMEOUT)
        chaos = Chaos(address=c.address, journal=Journal(f"{root}/journal.jsonl"))
        stop = threading.Event()
        runner = threading.Thread(target=run_schedule, args=(chaos, Schedule(())), kwargs={"stop": stop})
        runner.start()
        get = lambda refs: ray.get(refs, timeout=TIMEOUT)  # noqa: E731
        watched = lambda refs: watch(refs, deadline=TIMEOUT, address=c.address)  # noqa: E731
        rate(plain, 5, get)
        rate(wrapped, 5, watched)
        base, inst = [], []
        for _ in range(rounds):  # alternate, so drift hits both alike
            base.append(rate(plain, 10, get))
            inst.append(rate(wrapped, 10, watched))
        stop.set()
        runner.join(timeout=TIMEOUT)
    b, i = statistics.median(base), statistics.median(inst)
    table(f"Tiny tasks, batches of {BATCH}, median of {rounds} alternating rounds",
          ["workload", "tasks/s", "vs plain"],
          [["plain ray.get", fmt(b), "1.00"],
           ["instrumented (agents, journal, watch, delayed p=0)", fmt(i), fmt(i / b)],
           ["overhead", fmt(100 * (1 - i / b), " %"), ""]])


if __name__ == "__main__":
    main()
