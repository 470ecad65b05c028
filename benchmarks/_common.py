"""Shared helpers of the benchmark scripts: timing, machine description, table output."""

from __future__ import annotations

import os
import platform
import signal
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table

console = Console(width=120)


def machine() -> str:
    cpu = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return f"{cpu}, {os.cpu_count()} cores, {mem:.0f} GiB, Python {platform.python_version()}"


def rate(fn: Callable[[], object], *, seconds: float = 2.0, per_call: int = 1, reps: int = 3) -> float:
    """Calls of ``fn`` per second (times ``per_call``), the median of ``reps`` timed runs."""
    fn()  # warm-up
    rates = []
    for _ in range(reps):
        count, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < seconds / reps:
            fn()
            count += 1
        rates.append(count * per_call / elapsed)
    return statistics.median(rates)


def median_seconds(fn: Callable[[], object], *, reps: int = 5) -> float:
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def table(title: str, columns: list[str], rows: list[list[str]]) -> None:
    t = Table(title=title, title_justify="left")
    for i, col in enumerate(columns):
        t.add_column(col, justify="left" if i == 0 else "right")
    for row in rows:
        t.add_row(*row)
    console.print(t)


def fmt(x: float, unit: str = "") -> str:
    if x >= 100:
        return f"{x:,.0f}{unit}"
    if x >= 1:
        return f"{x:.2f}{unit}"
    return f"{x:.3f}{unit}"


def mttr(actor: Any, check: Callable[[bool], object], *, timeout: float = 60.0,
         ready: Callable[[], bool] | None = None) -> float:
    """SIGKILL the actor's process, once ``ready()`` (when given) holds; seconds until
    ``check(pid changed)`` is truthy."""
    import ray

    from chaos import wait_until

    if ready is not None:
        wait_until(ready, timeout=timeout, interval=0.1, what="ready to be killed")
    pid = ray.get(actor.pid.remote(), timeout=timeout)
    start = time.perf_counter()
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: check(ray.get(actor.pid.remote(), timeout=timeout) != pid),
               timeout=timeout, interval=0.005, what="restart")
    return time.perf_counter() - start


def bare_mttr(reps: int = 3) -> tuple[Any, list[float]]:
    """A stateless actor's restart times after SIGKILL: the floor every MTTR is compared to."""
    import ray

    @ray.remote(max_restarts=-1, max_task_retries=-1)
    class Bare:
        def pid(self) -> int:
            return os.getpid()

    bare = Bare.remote()
    return bare, [mttr(bare, bool) for _ in range(reps)]


def mttr_row(label: str, actor: Any, correct: Callable[[], bool], bare_times: list[float],
             *, reps: int = 3, ready: Callable[[], bool] | None = None) -> list[str]:
    """A table row: median seconds from SIGKILL until ``correct()`` holds again, and the ratio
    to a bare actor's restart."""
    times = [mttr(actor, lambda new: new and correct(), ready=ready) for _ in range(reps)]
    median = statistics.median(times)
    return [label, fmt(median), fmt(median / statistics.median(bare_times))]


def mttr_table(rows: list[list[str]], bare_times: list[float]) -> None:
    table(f"MTTR: SIGKILL to first correct answer (median of {len(bare_times)})", ["actor", "seconds", "vs bare actor"],
          [["bare actor (no state)", fmt(statistics.median(bare_times)), "1.00"], *rows])


def interleaved(fns: Sequence[Callable[[], object]], *, seconds: float, per_call: int = 1,
                slices: int = 20) -> list[float]:
    """Rates of workloads timed in alternating slices: a busy spell of the machine (this one
    has them) slows them all, so their ratios hold still where back-to-back runs drift."""
    counts, spent = [0] * len(fns), [0.0] * len(fns)
    for fn in fns:
        fn()  # warm-up
    for _ in range(slices):
        for k, fn in enumerate(fns):
            start = time.perf_counter()
            while (elapsed := time.perf_counter() - start) < seconds / slices:
                fn()
                counts[k] += 1
            spent[k] += elapsed
    return [c * per_call / t for c, t in zip(counts, spent)]
