"""Kill-restore cycles per minute: how fast the stateful chaos suite can hit an actor.

    python benchmarks/stateful_throughput.py [--cycles N]

One cycle is what ``ActorChaosMachine.kill`` does: SIGKILL through the agent, wait for the
restart in the State API, then a read that must equal the model. Not a test.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np
from _common import console, fmt, machine, table

from actors import CheckpointConfig, CheckpointedCounter, ReplayBufferActor
from chaos import ActorTarget, Chaos, Kill, local_cluster

TIMEOUT = 60.0


def cycles(chaos: Chaos, actor: object, read: object, expected: object, n: int) -> float:
    import ray

    start = time.perf_counter()
    for _ in range(n):
        injection = chaos.kill(Kill(ActorTarget.of(actor)))
        chaos.wait_restarted(injection.processes[0], timeout=TIMEOUT)
        assert ray.get(read(), timeout=TIMEOUT) == expected  # type: ignore[operator]
    return n / (time.perf_counter() - start) * 60


def main() -> None:
    import ray

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=20)
    n = parser.parse_args().cycles
    console.print(f"[bold]raychaos kill-restore throughput[/] on {machine()}")
    with tempfile.TemporaryDirectory() as root, local_cluster(num_cpus=2, log_to_driver=False) as c:
        chaos = Chaos(address=c.address)
        opts = {"max_restarts": -1, "max_task_retries": -1}
        counter = ray.remote(**opts)(CheckpointedCounter).remote(f"{root}/c", durability="wal")
        ray.get(counter.add.remote(5), timeout=TIMEOUT)
        rows = [["CheckpointedCounter (WAL)", fmt(cycles(chaos, counter, counter.get.remote, 5, n))]]
        buffer = ray.remote(**opts)(ReplayBufferActor).remote(
            1024, checkpoint=CheckpointConfig(storage=f"{root}/b", durability="wal"), seed=0)
        ray.get(buffer.add.remote({"x": np.arange(100.0)}), timeout=TIMEOUT)
        rows.append(["ReplayBufferActor 100 items (WAL)",
                     fmt(cycles(chaos, buffer, buffer.size.remote, 100, n))])
    table(f"Kill-restore cycles per minute ({n} cycles each)", ["actor", "cycles/min"], rows)


if __name__ == "__main__":
    main()
