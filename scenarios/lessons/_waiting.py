"""The lessons of the chapter's section 4.4 ray.wait and ray.get."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

from scenarios.lessons._kit import (
    TIMEOUT,
    Result,
    diagnose,
    io,
    remote,
    warm_up,
)
from scenarios.lessons._model import Lesson, Measure, lesson


def _process(value: float) -> None:
    time.sleep(0.1)  # the driver's own work on each result


def _io_then_clock(seconds: float) -> float:
    """An "I/O" task that returns the wall-clock time it ended."""
    time.sleep(seconds)
    return time.time()


def _left_after_last_task(task: Any, durations: Sequence[float], *, as_completed: bool) -> float:
    """Seconds the driver still worked after the last task had ended: the part of its work
    that did not overlap the cluster's. Its total time was the first measure, and a worker
    process starting late in either run decided it (in 3 of 8 runs here the fix came out
    slower); this part depends only on when the tasks ended, however late they began."""
    import ray

    refs = [task.remote(d) for d in durations]
    ends: list[float] = []
    if not as_completed:
        for end in ray.get(refs, timeout=TIMEOUT):
            _process(end)
            ends.append(float(end))
        return time.time() - max(ends)
    while refs:
        ready, refs = ray.wait(refs, num_returns=1, timeout=TIMEOUT)
        ends.append(float(ray.get(ready[0], timeout=TIMEOUT)))
        _process(ends[-1])
    return time.time() - max(ends)


@lesson(id="10-driver-bottleneck", section="4.4", title="ray.get on everything makes the driver the bottleneck",
        mistake="ray.get(all) then process each result", fix="ray.wait(num_returns=1) and process each as it lands",
        why="With one big ray.get the driver idles until the slowest task ends, then works alone; "
            "processing results as they complete overlaps its work with the cluster's.")
def driver_bottleneck(address: str) -> Result:
    task = remote(_io_then_clock, num_cpus=0.5)
    durations = [0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 0.3, 0.5]
    warm_up(8)
    mistake = _left_after_last_task(task, durations, as_completed=False)
    warm_up(8)
    fix = _left_after_last_task(task, durations, as_completed=True)
    # Ideally 0.8 s against 0.1 s; runs here vary by 0.07 s. Without a margin, the fix replaced
    # by the mistake still passed, 0.804 against 0.806: noise decided it.
    return [Measure(what="driver's work left once the last of 8 tasks ended (0.1 s a result)", unit="s",
                    mistake=mistake, fix=fix, margin=0.3)], []


@lesson(id="11-no-timeout", section="4.4", title="Waiting with no timeout",
        mistake="ray.get(all refs) with a straggler among them (bounded here to 3 s: it would wait forever)",
        fix="ray.wait(..., timeout=0.5) in a loop; the watchdog names the straggler",
        why="Without a timeout one straggler or lost task blocks the loop forever and says nothing. "
            "A timeout keeps the loop alive; chaos.watch says why the rest is pending.")
def no_timeout(address: str) -> Result:
    import ray
    from ray.exceptions import GetTimeoutError

    warm_up(4)
    task = remote(io, num_cpus=0.25)
    refs = [task.remote(0.1) for _ in range(7)] + [task.remote(120.0)]  # the last is the straggler
    start, got = time.monotonic(), 0
    try:
        got = len(ray.get(refs, timeout=3.0))
    except GetTimeoutError:
        pass
    blocked = time.monotonic() - start
    handled, pending, start, longest = 0, list(refs), time.monotonic(), 0.0
    while pending and time.monotonic() - start < 3.0:
        waited = time.monotonic()
        ready, pending = ray.wait(pending, num_returns=len(pending), timeout=0.5)
        longest, handled = max(longest, time.monotonic() - waited), handled + len(ready)
    notes = diagnose(pending, address)
    for ref in refs:
        ray.cancel(ref, force=True)
    return [Measure(what="results handled within 3 s", unit="of 8", mistake=got, fix=handled, better="higher"),
            # 3 s (the bound) against the 0.5 s timeout, ideally.
            Measure(what="longest the loop was blocked in one call", unit="s", mistake=blocked, fix=longest,
                    margin=1.0)], notes


def _maybe_fail(i: int) -> int:
    if i == 0:
        raise ValueError("task 0 failed")
    time.sleep(0.3)
    return i


@lesson(id="12-get-raises-first", section="4.4", title="ray.get on a list raises at the first failure",
        mistake="ray.get(refs) when one task raises", fix="ray.wait, then ray.get each ready ref in its own try",
        why="ray.get on a list raises the first error it meets and returns nothing, though the other "
            "results are there. ray.wait hands back each ref to handle on its own.")
def get_raises_first(address: str) -> Result:
    import ray
    from ray.exceptions import RayTaskError

    task = remote(_maybe_fail, max_retries=0)
    refs = [task.remote(i) for i in range(6)]
    try:
        mistake = len(ray.get(refs, timeout=TIMEOUT))
    except RayTaskError:
        mistake = 0
    refs, fix = [task.remote(i) for i in range(6)], 0
    while refs:
        ready, refs = ray.wait(refs, num_returns=1, timeout=TIMEOUT)
        try:
            ray.get(ready[0], timeout=TIMEOUT)
            fix += 1
        except RayTaskError:
            continue
    return [Measure(what="successful results recovered", unit="of 5", mistake=mistake, fix=fix, better="higher")], []


def _infer(state: int) -> int:
    time.sleep(0.02 * (state % 4))  # inference takes its own time per state
    return state * 2


def _batching(num_returns: Callable[[int], int]) -> tuple[int, str]:
    """The chapter's dynamic-batching loop over 10 states, the stream then ending (no new
    states); ``num_returns(len(pending))`` is what it asks ray.wait for."""
    import ray

    task, results = remote(_infer), {}
    pending = [task.remote(s) for s in range(10)]
    # A burst: every response is back before the loop looks (as under load), so each wait
    # returns a full batch of 4 and the pending list runs down to 2.
    ray.wait(pending, num_returns=len(pending), timeout=TIMEOUT)
    try:
        while pending:
            ready, pending = ray.wait(pending, num_returns=num_returns(len(pending)), timeout=0.1)
            if ready:
                for ref, result in zip(ready, ray.get(ready, timeout=TIMEOUT)):
                    results[ref] = result
    except ValueError as exc:
        return len(results), f"ValueError: {exc}"[:120]
    return len(results), "finished"


@lesson(id="17-dynamic-batching", section="4.4", title="The chapter's dynamic batching, run as printed",
        mistake="ray.wait(pending, num_returns=4, timeout=0.1) until the stream ends",
        fix="num_returns=min(4, len(pending))",
        why="Once fewer than 4 requests are pending, ray.wait refuses num_returns=4 with ValueError: the "
            "serving loop dies with results still in flight. Ask for at most what is pending.")
def dynamic_batching(address: str) -> Result:
    mistake, mistake_end = _batching(lambda pending: 4)
    fix, fix_end = _batching(lambda pending: min(4, pending))
    return ([Measure(what="inference results collected of 10", unit="results", mistake=mistake, fix=fix,
                     better="higher")],
            [f"as printed: {mistake_end}", f"fixed: {fix_end}"])


LESSONS: tuple[Lesson, ...] = (driver_bottleneck, no_timeout, get_raises_first, dynamic_batching)
