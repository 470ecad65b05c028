"""Parameter server benchmark: pushes/s, pulls/s, checkpoint cost and MTTR, ~1M parameters.

    python benchmarks/parameter_server.py [--quick]

Not a test: it prints figures, it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from typing import Any

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _common import bare_mttr, console, fmt, machine, mttr_row, mttr_table, rate, table

from actors import CheckpointConfig, ParameterServer
from chaos import local_cluster

TIMEOUT = 60.0
MTTR_REPS = 5  #: restarts per actor; the table prints their median


def model() -> Any:
    import torch

    return torch.nn.Sequential(torch.nn.Linear(1024, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1024))


def start(root: str, durability: str) -> Any:
    import ray

    cfg = CheckpointConfig(storage=f"{root}/{durability}", durability=durability, every_n=10**9)
    return ray.remote(max_restarts=-1, max_task_retries=-1, max_concurrency=4)(ParameterServer).remote(
        model, checkpoint=cfg, optimizer="Adam", optimizer_kwargs={"lr": 1e-3})


def throughput(root: str, seconds: float) -> None:
    import ray

    rows = []
    for durability in ("policy", "wal"):
        ps = start(root, durability)
        shapes = {n: tuple(w.shape) for n, w in ray.get(ps.weights.remote(), timeout=TIMEOUT).items()}
        grads = {n: np.random.default_rng(0).standard_normal(s).astype(np.float32)
                 for n, s in shapes.items()}
        seq = iter(range(10**9))

        def push() -> None:
            v = next(seq)
            ray.get(ps.push.remote(grads, worker_id="bench", seq=v, base_version=v), timeout=TIMEOUT)

        pushes = rate(push, seconds=seconds)
        pull_ref = rate(lambda: ray.get(ps.pull.remote(), timeout=TIMEOUT), seconds=seconds)

        def pull_weights() -> None:
            _, ref = ray.get(ps.pull.remote(), timeout=TIMEOUT)
            ray.get(ref, timeout=TIMEOUT)

        pulls = rate(pull_weights, seconds=seconds)
        ckpt = [ray.get(ps.checkpoint.remote(), timeout=TIMEOUT) for _ in range(3)]
        rows.append([durability, fmt(pushes), fmt(pull_ref), fmt(pulls),
                     fmt(float(np.median([c.seconds for c in ckpt]))),
                     fmt(ckpt[-1].nbytes / 2**20)])
        ray.kill(ps)
    n_params = sum(int(np.prod(s)) for s in shapes.values())
    table(f"Parameter server, {n_params:,} parameters (Adam), one driver",
          ["durability", "pushes/s", "pulls/s (ref)", "pulls/s (ref + weights)",
           "checkpoint s", "checkpoint MiB"], rows)


def mttr_section(root: str) -> None:
    import ray

    bare, bare_times = bare_mttr(reps=MTTR_REPS)
    rows = []
    for durability in ("policy", "wal"):
        ps = start(f"{root}/mttr", durability)  # inside the temporary directory, removed with it
        shapes = {n: tuple(w.shape) for n, w in ray.get(ps.weights.remote(), timeout=TIMEOUT).items()}
        grads = {n: np.full(s, 1e-3, np.float32) for n, s in shapes.items()}
        for seq in range(20):
            ray.get(ps.push.remote(grads, worker_id="w", seq=seq, base_version=seq), timeout=TIMEOUT)
        ray.get(ps.checkpoint.remote(), timeout=TIMEOUT)
        rows.append(mttr_row(f"ParameterServer, {durability}", ps,
                             lambda: ray.get(ps.version.remote(), timeout=TIMEOUT) == 20, bare_times,
                             reps=MTTR_REPS))
        ray.kill(ps)
    ray.kill(bare)
    mttr_table(rows, bare_times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter timing windows")
    seconds = 1.0 if parser.parse_args().quick else 3.0
    console.print(f"[bold]raychaos parameter server benchmark[/] on {machine()}")
    with tempfile.TemporaryDirectory(prefix="rc-bench-") as root, \
            local_cluster(num_cpus=2, object_store_mb=512, log_to_driver=False):
        throughput(root, seconds)
        mttr_section(root)


if __name__ == "__main__":
    main()
