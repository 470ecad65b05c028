"""The lessons of the chapter's section 4.1 remote functions, and the tip on collecting results in batches."""

from __future__ import annotations

import time
from typing import Any

from scenarios.lessons._kit import (
    HOLD,
    TIMEOUT,
    Result,
    all_cpus_free,
    concurrency,
    heap_bytes,
    io,
    remote,
    timed,
)
from scenarios.lessons._model import Lesson, Measure, lesson

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
    return [Measure(what="updates lost", unit="of 20", mistake=lost_mistake, fix=lost_fix)], []


@lesson(id="02-num-cpus", section="4.1", title="Ignoring num_cpus for I/O-bound tasks",
        mistake="I/O tasks at the default num_cpus=1", fix="the same tasks at num_cpus=0.5",
        why="Ray admits a task when its declared CPUs are free, not when a core is busy: I/O tasks "
            "that hold a whole CPU each halve how many run at once.")
def num_cpus(address: str) -> Result:
    n = 2 * all_cpus_free(address)  # twice what fits at 1 CPU each
    return [Measure(what=f"{n} I/O tasks running at once", unit="tasks", mistake=concurrency(n, HOLD, num_cpus=1),
                    fix=concurrency(n, HOLD, num_cpus=0.5), better="higher")], []


@lesson(id="03-eager-get", section="4.1", title="Calling ray.get inside the submit loop",
        mistake="ray.get(f.remote(i)) for each i", fix="submit all, then one ray.get on the list",
        why="ray.get blocks until that one result exists, so the next task is not even submitted: "
            "the loop runs the tasks one after another.")
def eager_get(address: str) -> Result:
    import ray

    at_once = min(6, 2 * all_cpus_free(address))  # tasks of half a CPU that run together
    task = remote(io, num_cpus=0.5)
    eager = timed(lambda: [ray.get(task.remote(0.3), timeout=TIMEOUT) for _ in range(6)], warm=at_once)
    # Warmed to as many workers as run together: on 4 CPUs, 4 warm workers left the batch's other
    # two to start cold (1.5 s on 2 cores, against 0.3).
    batch = timed(lambda: ray.get([task.remote(0.3) for _ in range(6)], timeout=TIMEOUT), warm=at_once)
    # Ideally 1.8 s against 0.6 s on 2 CPUs (two waves of four), 0.3 s on 4. The fix must win by
    # two tasks' length: with no margin, a fix no better than the mistake would pass half the time.
    return [Measure(what="wall time for 6 × 0.3 s tasks", unit="s", mistake=eager, fix=batch, margin=0.6)], []


def _block(i: int) -> bytes:
    return bytes([i % 256]) * 2**20  # 1 MiB that ray.get copies into the driver's heap


def _all_at_once(task: Any) -> int:
    """The driver's heap growth while it holds every result (bytes)."""
    import ray

    base = heap_bytes()
    values = ray.get([task.remote(i) for i in range(120)], timeout=TIMEOUT)
    held = heap_bytes() - base
    sum(v[0] for v in values)  # processed only once all are in memory
    del values
    return held


def _in_batches(task: Any) -> int:
    """The driver's largest heap growth while it holds one batch (bytes)."""
    import ray

    base, peak = heap_bytes(), 0
    pending = [task.remote(i) for i in range(120)]
    while pending:
        ready, pending = ray.wait(pending, num_returns=min(10, len(pending)), timeout=TIMEOUT)
        batch = ray.get(ready, timeout=TIMEOUT)
        peak = max(peak, heap_bytes() - base)
        sum(v[0] for v in batch)  # processed, then dropped before the next batch
        del batch
    return peak


@lesson(id="t1-batches", section="4.1", title="Tip: collect results in batches with ray.wait",
        mistake="one ray.get of 120 × 1 MiB results", fix="ray.wait in batches of 10, each processed and dropped",
        why="One huge ray.get brings every value into the driver at once; batches bound the driver's "
            "memory by the batch size.", tip=True)
def batches(address: str) -> Result:
    task = remote(_block)
    # The fix first: heap the mistake's values leave to the allocator would hide the fix's growth.
    fix = _in_batches(task)
    mistake = _all_at_once(task)
    # Ideally 120 MiB against 10; the allocator moves either by a few MiB.
    return [Measure(what="driver heap growth while it holds results (RssAnon)", unit="MiB", mistake=mistake / 2**20,
                    fix=fix / 2**20, margin=30)], []


def _evaluate(cfg: int, fail: bool) -> float:
    """One policy evaluation: a length of its own, and (``fail``) an environment that diverges."""
    time.sleep(0.04 * (cfg % 5))  # the episode being played
    if fail:
        raise ValueError(f"environment {cfg} diverged")
    return float(cfg)


def _as_printed(refs: list[Any]) -> tuple[int, str]:
    """The chapter's loop as printed; returns how many results it collected and what ended it."""
    import ray
    from ray.exceptions import RayError

    results: list[float] = []
    try:
        while refs:
            done_refs, refs = ray.wait(refs, num_returns=10, timeout=5)
            results.extend(ray.get(done_refs))
    except (ValueError, RayError) as exc:
        return len(results), f"{type(exc).__name__}: {str(exc).splitlines()[0][:90]}"
    return len(results), "finished"


def _fixed(refs: list[Any]) -> tuple[int, int]:
    """At most what is left, and each result apart: (results collected, evaluations failed)."""
    import ray
    from ray.exceptions import RayError

    collected, failed = 0, 0
    while refs:
        done, refs = ray.wait(refs, num_returns=min(10, len(refs)), timeout=5)
        for ref in done:
            try:
                ray.get(ref, timeout=TIMEOUT)
                collected += 1
            except RayError:
                failed += 1
    return collected, failed


@lesson(id="16-wait-num-returns", section="4.1", title="The chapter's policy evaluation, run as printed",
        mistake="ray.wait(refs, num_returns=10, timeout=5), then ray.get(done_refs), over 25 evaluations",
        fix="num_returns=min(10, len(refs)), and each result fetched apart",
        why="ray.wait raises ValueError once fewer refs remain than num_returns (25 is not a multiple "
            "of 10), and one failed evaluation makes ray.get on the batch raise, losing the rest.")
def wait_num_returns(address: str) -> Result:
    task = remote(_evaluate, max_retries=0)
    clean_mistake, clean_end = _as_printed([task.remote(i, False) for i in range(25)])
    clean_fix, _ = _fixed([task.remote(i, False) for i in range(25)])
    failing_mistake, failing_end = _as_printed([task.remote(i, i == 0) for i in range(25)])
    failing_fix, failed = _fixed([task.remote(i, i == 0) for i in range(25)])
    return ([Measure(what="evaluations collected of 25", unit="results", mistake=clean_mistake, fix=clean_fix,
                     better="higher"),
             Measure(what="collected of 25, one environment failing", unit="results", mistake=failing_mistake,
                     fix=failing_fix, better="higher")],
            [f"as printed, all succeeding: {clean_end}", f"as printed, one failing: {failing_end}",
             f"fixed, one failing: {failing_fix} results and {failed} failure reported"])


LESSONS: tuple[Lesson, ...] = (global_state, num_cpus, eager_get, wait_num_returns, batches)
