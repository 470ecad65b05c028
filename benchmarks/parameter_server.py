"""Parameter server benchmark: pushes/s, pulls/s, checkpoint cost and MTTR, ~1M parameters.

    python benchmarks/parameter_server.py [--quick]

Not a test: it prints figures, it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import numpy as np
import psutil

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _common import bare_mttr, console, fmt, machine, mttr_row, mttr_table, rate, table

from actors import CheckpointConfig, ParameterServer
from actors._spare import spares_of
from actors.spare import spare_actor_env, spare_job_env
from chaos import local_cluster

TIMEOUT = 60.0
MTTR_REPS = 5  #: restarts per actor; the table prints their median


def model() -> Any:
    import torch

    return torch.nn.Sequential(torch.nn.Linear(1024, 512), torch.nn.ReLU(), torch.nn.Linear(512, 1024))


#: What a restart of the server imports: torch, the _dynamo its optimizer's construction
#: imports (2.3 s here), and this package.
PRELOAD = ("torch", "torch._dynamo", "actors")


def start(root: str, durability: str, *, spare: bool = False) -> Any:
    import ray

    cfg = CheckpointConfig(storage=f"{root}/{durability}{'-spare' if spare else ''}", durability=durability,
                           every_n=10**9)
    options = {"runtime_env": spare_actor_env(*PRELOAD)} if spare else {}
    return ray.remote(max_restarts=-1, max_task_retries=-1, max_concurrency=4)(ParameterServer).options(
        **options).remote(model, checkpoint=cfg, optimizer="Adam", optimizer_kwargs={"lr": 1e-3},
                          spare_worker=spare)


def spare_ready() -> bool:
    """A spare of this job waits, its imports done: idle (Ray titles it before its setup hook
    runs, so the title alone is not enough) and under 0.05 s of CPU spent in 0.3 s."""
    import ray

    job = ray.get_runtime_context().get_job_id()
    spares = [psutil.Process(pid) for pid in spares_of({"RAY_JOB_ID": job, "RAYCHAOS_PRELOAD": ",".join(PRELOAD)},
                                                        starting=False)]
    before = [sum(p.cpu_times()[:2]) for p in spares]
    time.sleep(0.3)  # a sample window of CPU time, not a synchronisation
    return any(sum(p.cpu_times()[:2]) - b < 0.05 for p, b in zip(spares, before))  # importing: ~0.3


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


def mttr_rows(root: str, bare_times: list[float], *, spare: bool) -> list[list[str]]:
    """The server's MTTR rows, both durabilities, with a warm spare or without."""
    import ray

    rows = []
    for durability in ("policy", "wal"):
        ps = start(f"{root}/mttr", durability, spare=spare)  # inside the temporary directory, removed with it
        shapes = {n: tuple(w.shape) for n, w in ray.get(ps.weights.remote(), timeout=TIMEOUT).items()}
        grads = {n: np.full(s, 1e-3, np.float32) for n, s in shapes.items()}
        for seq in range(20):
            ray.get(ps.push.remote(grads, worker_id="w", seq=seq, base_version=seq), timeout=TIMEOUT)
        ray.get(ps.checkpoint.remote(), timeout=TIMEOUT)

        def correct() -> bool:  # the version, and the weights a pull hands out
            version, ref = ray.get(ps.pull.remote(20), timeout=TIMEOUT)
            return bool(version == 20 and ray.get(ref, timeout=TIMEOUT))

        rows.append(mttr_row(f"ParameterServer, {durability}{', warm spare' if spare else ''}", ps, correct,
                             bare_times, reps=MTTR_REPS, ready=spare_ready if spare else None))
        ray.kill(ps)
    return rows


def spare_section(root: str, bare_times: list[float]) -> list[list[str]]:
    """On a cluster whose job has spare_job_env(): a bare actor (what that env costs every
    worker start: Ray's runtime-env agent is asked, here ~0.8 s), then the server with spares."""
    import ray

    bare, here = bare_mttr(reps=MTTR_REPS)
    ray.kill(bare)
    ratio = statistics.median(here) / statistics.median(bare_times)
    return [["bare actor, in a job with spare_job_env()", fmt(statistics.median(here)), fmt(ratio)],
            *mttr_rows(root, bare_times, spare=True)]


def main() -> None:
    import ray

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter timing windows")
    seconds = 1.0 if parser.parse_args().quick else 3.0
    console.print(f"[bold]raychaos parameter server benchmark[/] on {machine()}")
    with tempfile.TemporaryDirectory(prefix="rc-bench-") as root:
        # The bare actor every MTTR is compared to runs in a job with no runtime env (any env,
        # spare_job_env()'s included, makes each worker start slower).
        with local_cluster(num_cpus=2, object_store_mb=512, log_to_driver=False):
            throughput(root, seconds)
            bare, bare_times = bare_mttr(reps=MTTR_REPS)
            ray.kill(bare)
            rows = mttr_rows(root, bare_times, spare=False)
        with local_cluster(num_cpus=2, object_store_mb=512, log_to_driver=False, runtime_env=spare_job_env()):
            rows += spare_section(root, bare_times)
        mttr_table(rows, bare_times)


if __name__ == "__main__":
    main()
