"""Ray's own account of a run, from its State API: how many times Ray restarted the run's actors,
how many nodes it declared dead, how many task attempts it retried. They go into the run's
metrics (``ray actor restarts``, ``ray nodes dead``, ``ray task retries``), so ``raychaos
compare`` shows what Ray did under the same faults on two releases side by side.

Each count is the run's own: read when the run starts and again before its teardown, the
difference kept. A count the State API could not give whole (a listing that failed or was
truncated) is left out of the metrics: unknown, never zero.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from scenarios.model._workload import CALL_TIMEOUT

#: Rows asked of each listing (the most Ray's State API gives); a longer one is truncated and its count left out.
LIMIT = 10_000


def _actor_restarts(address: str, namespace: str) -> int:
    from ray.util.state import list_actors

    rows = list_actors(address=address, filters=[("ray_namespace", "=", namespace)], limit=LIMIT, detail=True,
                       timeout=CALL_TIMEOUT, raise_on_missing_output=True)
    return sum(int(r.num_restarts or 0) for r in rows)


def _nodes_dead(address: str, namespace: str) -> int:
    from ray.util.state import list_nodes

    rows = list_nodes(address=address, limit=LIMIT, timeout=CALL_TIMEOUT, raise_on_missing_output=True)
    return sum(1 for r in rows if r.state == "DEAD")


def _task_retries(address: str, namespace: str) -> int:
    from ray.util.state import list_tasks

    rows = list_tasks(address=address, limit=LIMIT, timeout=CALL_TIMEOUT, raise_on_missing_output=True)
    return sum(1 for r in rows if int(r.attempt_number or 0) > 0)


COUNTS: Mapping[str, Callable[[str, str], int]] = {
    "ray actor restarts": _actor_restarts,
    "ray nodes dead": _nodes_dead,
    "ray task retries": _task_retries,
}


def ray_counts(address: str, namespace: str) -> dict[str, int]:
    """Each count Ray gave whole now; a failed or truncated listing is absent."""
    counts = {}
    for name, count in COUNTS.items():
        try:
            counts[name] = count(address, namespace)
        except Exception:  # noqa: BLE001 - any failure of the State API leaves this count unknown
            continue
    return counts


def ray_events(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, float]:
    """What Ray did during the run: each count read at both ends, after minus before."""
    return {name: float(after[name] - before[name]) for name in COUNTS if name in before and name in after}
