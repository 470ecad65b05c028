"""Ray's own account of a run, from its State API: how many times Ray restarted the run's actors,
how many nodes it declared dead, how many failed task attempts it ran again. They go into the
run's metrics (``ray actor restarts``, ``ray nodes dead``, ``ray task retries``), so ``raychaos
compare`` shows what Ray did under the same faults on two releases side by side.

Each figure is the run's own: read when the run starts and again before its teardown. Restarts
and dead nodes are counts, the difference kept. Retries are read from the cluster's *failed*
task attempts, every job's (a user's job under ``run --job`` or an attack is not this driver's;
the state filter is applied at the source, so a long history of finished tasks does not fill the
listing): of the attempts that failed during the run, those with a later attempt of the same
task. A figure the State API could not give whole is left out of the metrics, unknown, never
zero: a listing that failed or was cut at its limit, too many tasks to look up, or every failed
attempt seen at the start gone at the end (Ray's task events were reset: a GCS restart, whose
task events live in its memory only, loses the run's failures before it too).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from scenarios.model._workload import CALL_TIMEOUT

#: Rows asked of each listing (the most Ray's State API gives); a listing that fills it is truncated: unknown.
LIMIT = 10_000
#: Failed tasks looked up one by one for a later attempt; a run with more leaves its retries unknown.
MAX_LOOKUPS = 200
#: Seconds one account may take; what is not read by then is unknown.
BOUND = 30.0

Attempt = tuple[str, int]  # (task id, attempt number)


def _actor_restarts(address: str, namespace: str) -> int:
    from ray.util.state import list_actors

    rows = list_actors(address=address, filters=[("ray_namespace", "=", namespace)], limit=LIMIT, detail=True,
                       timeout=CALL_TIMEOUT, raise_on_missing_output=True)
    return sum(int(r.num_restarts or 0) for r in rows)


def _nodes_dead(address: str, namespace: str) -> int:
    from ray.util.state import list_nodes

    rows = list_nodes(address=address, limit=LIMIT, timeout=CALL_TIMEOUT, raise_on_missing_output=True)
    return sum(1 for r in rows if r.state == "DEAD")


COUNTS: Mapping[str, Callable[[str, str], int]] = {
    "ray actor restarts": _actor_restarts,
    "ray nodes dead": _nodes_dead,
}
RETRIES = "ray task retries"


def _tasks(address: str, filters: list[tuple[str, str, str]]) -> list[Any]:
    from ray.util.state import list_tasks

    rows: list[Any] = list_tasks(address=address, filters=filters, limit=LIMIT, timeout=CALL_TIMEOUT,
                      raise_on_missing_output=True)
    if len(rows) >= LIMIT:
        raise OverflowError(f"{len(rows)} task rows fill the State API's limit: the listing may be cut")
    return rows


def _failed_attempts(address: str) -> frozenset[Attempt]:
    # FAILED only, filtered at the source, before Ray's row limit; every job's.
    rows = _tasks(address, [("state", "=", "FAILED")])
    return frozenset((r.task_id, int(r.attempt_number or 0)) for r in rows)


def _retried(address: str, failed: frozenset[Attempt]) -> int:
    """How many of these failed attempts Ray ran again: the same task has the next attempt."""
    tasks = sorted({task for task, _ in failed})
    if len(tasks) > MAX_LOOKUPS:
        raise OverflowError(f"{len(tasks)} failed tasks to look up, more than {MAX_LOOKUPS}")
    retried = 0
    for task in tasks:
        numbers = {int(r.attempt_number or 0) for r in _tasks(address, [("task_id", "=", task)])}
        retried += sum(1 for t, n in failed if t == task and n + 1 in numbers)
    return retried


@dataclass(frozen=True, kw_only=True, slots=True)
class RayAccount:
    """What Ray's State API said at one moment; what it could not give whole is absent or None."""

    counts: Mapping[str, int] = field(default_factory=dict)
    failed: frozenset[Attempt] | None = None  # the cluster's failed task attempts
    retried: int | None = None  # of those failed since the account it was read against, how many Ray retried


class _Reading:
    """An account being read in a thread: what it has read so far, under a lock, so a reading
    cut by its bound still gives what it had."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.counts: dict[str, int] = {}
        self.failed: frozenset[Attempt] | None = None
        self.retried: int | None = None

    def account(self) -> RayAccount:
        with self.lock:
            return RayAccount(counts=dict(self.counts), failed=self.failed, retried=self.retried)


def _read_counts(address: str, namespace: str, reading: _Reading) -> None:
    for name, count in COUNTS.items():
        try:
            value = count(address, namespace)
        except Exception:  # noqa: BLE001 - any failure of the State API leaves this count unknown
            continue
        with reading.lock:
            reading.counts[name] = value


def _forgotten(start: frozenset[Attempt], end: frozenset[Attempt]) -> bool:
    """Ray's task events were reset between the two reads: every failed attempt seen at the start
    is gone at the end (a GCS that restarted, which took the run's own failures before it too).
    Some gone and some kept is read as the GCS evicting events it holds too many of: those seen
    at the start are older than the run's and belong mostly to jobs already finished, which its
    eviction favours; that it never takes a running run's failures first is an assumption."""
    return bool(start) and not start & end


def _read(address: str, namespace: str, since: RayAccount | None, reading: _Reading) -> None:
    _read_counts(address, namespace, reading)
    try:
        failed = _failed_attempts(address)
        with reading.lock:
            reading.failed = failed
        if since is None or since.failed is None or _forgotten(since.failed, failed):
            return  # nothing to read against, or Ray's task events were reset: unknown
        retried = _retried(address, failed - since.failed)
        with reading.lock:
            reading.retried = retried
    except Exception:  # noqa: BLE001 - unknown, as above
        return


def ray_account(address: str, namespace: str, *, since: RayAccount | None = None,
                bound: float = BOUND) -> RayAccount:
    """Ray's account within ``bound`` seconds (a State API that cannot find the dashboard retries
    for longer than its timeout): what was read by then; with ``since``, also the retries of the
    attempts failed after it."""
    reading = _Reading()
    reader = threading.Thread(target=_read, args=(address, namespace, since, reading), daemon=True,
                              name="raychaos-ray-account")
    reader.start()
    reader.join(timeout=bound)
    return reading.account()


def ray_events(before: RayAccount, after: RayAccount, *, task_events_kept: bool = True) -> dict[str, float]:
    """What Ray did during the run: each count read at both ends, after minus before; the retries,
    unless a fault of the run made the GCS forget task events (``task_events_kept=False``)."""
    events = {name: float(after.counts[name] - before.counts[name])
              for name in COUNTS if name in before.counts and name in after.counts}
    if after.retried is not None and task_events_kept:
        events[RETRIES] = float(after.retried)
    return events
