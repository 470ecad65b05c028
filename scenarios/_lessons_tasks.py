"""The lessons of the chapter's section 4.1 remote functions, and the tip on collecting results in batches.

Every figure is measured in the run (nothing is hard-coded); the tests assert only its
direction.
"""

from __future__ import annotations

import os

import numpy as np

from scenarios._lesson_kit import (
    TIMEOUT,
    Result,
    all_cpus_free,
    concurrency,
    io,
    remote,
    timed,
)
from scenarios._lesson_model import Lesson, Measure, lesson

_COUNTER = {"value": 0}


def _bump_global(n: int) -> int:
    _COUNTER["value"] += n  # lands in the worker's copy of the module, not the driver's
    return n


@lesson(id="01-global-state", section="4.1", title="Mutating a global inside a remote function",
        mistake="tasks add to a module-level counter", fix="tasks return their part; the driver sums",
        why="Each task runs in a worker process with its own copy of every global: the driver's stays "
            "as it was. Pass inputs as arguments and return outputs.")
def global_state(address: str) -> Result:
    import ray

    _COUNTER["value"] = 0
    task = remote(_bump_global)
    refs = [task.remote(1) for _ in range(20)]
    ray.get(refs, timeout=TIMEOUT)
    lost_mistake = 20 - _COUNTER["value"]
    lost_fix = 20 - sum(ray.get([task.remote(1) for _ in range(20)], timeout=TIMEOUT))
    return [Measure("updates lost", "of 20", lost_mistake, lost_fix)], []


@lesson(id="02-num-cpus", section="4.1", title="Ignoring num_cpus for I/O-bound tasks",
        mistake="I/O tasks at the default num_cpus=1", fix="the same tasks at num_cpus=0.5",
        why="Ray admits a task when its declared CPUs are free, not when a core is busy: I/O tasks "
            "that hold a whole CPU each halve how many run at once.")
def num_cpus(address: str) -> Result:
    n = 2 * all_cpus_free(address)  # twice what fits at 1 CPU each
    return [Measure(f"{n} I/O tasks running at once", "tasks", concurrency(n, 2.0, num_cpus=1),
                    concurrency(n, 2.0, num_cpus=0.5), better="higher")], []


@lesson(id="03-eager-get", section="4.1", title="Calling ray.get inside the submit loop",
        mistake="ray.get(f.remote(i)) for each i", fix="submit all, then one ray.get on the list",
        why="ray.get blocks until that one result exists, so the next task is not even submitted: "
            "the loop runs the tasks one after another.")
def eager_get(address: str) -> Result:
    import ray

    task = remote(io, num_cpus=0.5)
    eager = timed(lambda: [ray.get(task.remote(0.3), timeout=TIMEOUT) for _ in range(6)], warm=4)
    batch = timed(lambda: ray.get([task.remote(0.3) for _ in range(6)], timeout=TIMEOUT), warm=4)
    return [Measure("wall time for 6 × 0.3 s tasks", "s", eager, batch)], []




def _block(i: int) -> np.ndarray:
    return np.full(2**18, i, dtype=np.float32)  # 1 MiB


@lesson(id="t1-batches", section="4.1", title="Tip: collect results in batches with ray.wait",
        mistake="one ray.get of 120 × 1 MiB results", fix="ray.wait in batches of 10, each processed and dropped",
        why="One huge ray.get brings every value into the driver at once; batches bound the driver's "
            "memory by the batch size.", tip=True)
def batches(address: str) -> Result:
    import ray

    task = remote(_block)
    values = ray.get([task.remote(i) for i in range(120)], timeout=TIMEOUT)
    mistake = sum(v.nbytes for v in values)
    del values
    pending, peak = [task.remote(i) for i in range(120)], 0
    while pending:
        ready, pending = ray.wait(pending, num_returns=min(10, len(pending)), timeout=TIMEOUT)
        batch = ray.get(ready, timeout=TIMEOUT)
        peak = max(peak, sum(v.nbytes for v in batch))
        del batch
    return [Measure("result bytes held by the driver at once", "MiB", mistake / 2**20, peak / 2**20)], []


def _crash() -> None:
    os._exit(1)  # a worker that dies every time


LESSONS: tuple[Lesson, ...] = (global_state, num_cpus, eager_get, batches,)
