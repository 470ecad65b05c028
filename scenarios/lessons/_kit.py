"""What the lessons share: remote helpers, the "I/O" they schedule, and timing.

Sleeps inside remote tasks stand for I/O or for work of a known length: they are the
workload being scheduled, not synchronisation.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

from chaos import HangError, wait_until, watch
from scenarios.lessons._model import Measure

__all__ = [
    "TIMEOUT",
    "Result",
    "actor_state",
    "all_cpus_free",
    "concurrency",
    "diagnose",
    "free_cpus",
    "heap_bytes",
    "io",
    "io_until",
    "remote",
    "timed",
    "warm_up",
]

TIMEOUT = 30.0
#: How long the concurrency lessons' I/O tasks last: long enough that every worker process they
#: need has started (starting 8 took over 2 s on a loaded 2-core machine, and a task that starts
#: after the count is not counted).
HOLD = 4.0
Result = tuple[Sequence[Measure], Sequence[str]]


def remote(fn: Any, **options: Any) -> Any:
    import ray

    return ray.remote(fn).options(**options) if options else ray.remote(fn)


def io(seconds: float) -> float:
    time.sleep(seconds)  # the "I/O" being scheduled
    return seconds


def warm_up(workers: int) -> None:
    """Have ``workers`` worker processes running, so neither side pays for process start-up.

    Ray keeps about one idle worker per CPU and stops the others after a second idle, so
    each side warms up right before it is timed. A round of short tasks does not do it: while
    the missing workers start, the driver runs the round on the ones it has, one task after
    another (measured: after lesson 03's eager loop, with one CPU burner, its 4 warm-up tasks
    ran on 2 processes and its timed batch took 1.8-2.0 s instead of 0.6). Rounds of tasks
    that all last until one instant leave nothing to run after another; while a round ends
    on fewer processes, the next lasts twice as long, for workers that start slowly.
    """
    deadline, hold = time.monotonic() + TIMEOUT, 0.5
    while len(_round(workers, hold)) < workers:
        if time.monotonic() + 2 * hold > deadline:
            raise HangError(f"{workers} worker processes did not run at once within {TIMEOUT:g} s: "
                            "the machine starts Ray's workers too slowly for a timed lesson")
        hold *= 2


def _round(workers: int, hold: float) -> set[int]:
    """The worker processes that ran ``workers`` tasks lasting until ``hold`` seconds from now."""
    import ray

    task = remote(_pid_until, num_cpus=0.01)
    until = time.time() + hold
    return set(ray.get([task.remote(until) for _ in range(workers)], timeout=TIMEOUT + hold))


def _pid_until(until: float) -> int:
    time.sleep(max(0.0, until - time.time()))  # held to one instant: no task of the round ends before another starts
    return os.getpid()


def io_until(until: float) -> tuple[float, float]:
    """An "I/O" task that lasts until the wall-clock time ``until``; returns when it ran."""
    start = time.time()
    time.sleep(max(0.0, until - start))  # the "I/O" being scheduled
    return start, time.time()


def concurrency(n: int, hold: float, **options: Any) -> int:
    """How many of ``n`` I/O tasks, declared with ``options``, run at one instant.

    Every task lasts until one wall-clock time, ``hold`` seconds after submission, and the
    count is taken just before it: a worker process that starts late still counts, and a
    task admitted only once another has finished (freeing its CPUs) never does.
    """
    import ray

    warm_up(n)
    until = time.time() + hold
    task = remote(io_until, **options)
    spans = ray.get([task.remote(until) for _ in range(n)], timeout=TIMEOUT)
    instant = until - 0.1
    return sum(1 for start, end in spans if start <= instant < end)


def timed(fn: Any, *, warm: int = 0) -> float:
    if warm:
        warm_up(warm)
    start = time.monotonic()
    fn()
    return time.monotonic() - start


def all_cpus_free(address: str) -> int:
    """The cluster's CPU count, once every CPU is free (what ran before has let go)."""
    import ray

    total = float(ray.cluster_resources().get("CPU", 0.0))
    wait_until(lambda: free_cpus(address) >= total, timeout=TIMEOUT, what=f"all {total:g} CPUs to be free")
    return int(total)


def free_cpus(address: str) -> float:
    import ray

    return float(ray.available_resources().get("CPU", 0.0))


def diagnose(pending: Sequence[Any], address: str) -> list[str]:
    try:
        watch(pending, deadline=1.0, address=address)
    except HangError as exc:
        report = str(exc).splitlines()  # the watchdog's diagnosis, shown as it wrote it
        return [f"watchdog: {line.strip()}" for line in report if line.strip()][:4]
    return []


def heap_bytes() -> int:
    """This process's private resident memory (Linux ``RssAnon``): the values it holds. Pages
    of Ray's object store it has read are shared (``RssShmem``) and stay mapped after the
    values are dropped, so the whole RSS would count them too."""
    with open("/proc/self/status", encoding="ascii") as f:
        line = next(line for line in f if line.startswith("RssAnon:"))
    return int(line.split()[1]) * 1024


def actor_state(address: str, handle: Any) -> str:
    """The actor's state as the State API reports it (``ALIVE``, ``DEAD``...)."""
    from ray.util.state import get_actor

    actor = get_actor(handle._actor_id.hex(), address=address, timeout=TIMEOUT)
    return str(actor.state) if actor else "unknown"
