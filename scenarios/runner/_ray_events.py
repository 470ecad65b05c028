"""Ray's own account of a run, from its State API: how many times Ray restarted the run's actors,
how many nodes it declared dead, how many task attempts it retried. They go into the run's
metrics (``ray actor restarts``, ``ray nodes dead``, ``ray task retries``), so ``raychaos
compare`` shows what Ray did under the same faults on two releases side by side.

Each count is the run's own: read when the run starts and again before its teardown, the
difference kept. A count the State API could not give whole (a listing that failed or was
truncated) is left out of the metrics: unknown, never zero.
"""

from __future__ import annotations

import threading
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
    import ray
    from ray.util.state import list_tasks

    # This driver's tasks only: a long-lived cluster's whole history would pass the limit.
    job = ray.get_runtime_context().get_job_id()
    rows = list_tasks(address=address, filters=[("job_id", "=", job)], limit=LIMIT, timeout=CALL_TIMEOUT,
                      raise_on_missing_output=True)
    return sum(1 for r in rows if int(r.attempt_number or 0) > 0)


COUNTS: Mapping[str, Callable[[str, str], int]] = {
    "ray actor restarts": _actor_restarts,
    "ray nodes dead": _nodes_dead,
    "ray task retries": _task_retries,
}


#: Seconds all three listings may take together; what is not read by then is unknown.
BOUND = 30.0


def ray_counts(address: str, namespace: str, *, bound: float = BOUND) -> dict[str, int]:
    """Each count Ray gave whole within ``bound`` seconds; a failed, truncated or late listing
    is absent (a State API that cannot find the dashboard retries for longer than its timeout)."""
    counts: dict[str, int] = {}

    def read() -> None:
        for name, count in COUNTS.items():
            try:
                counts[name] = count(address, namespace)
            except Exception:  # noqa: BLE001 - any failure of the State API leaves this count unknown
                continue

    reader = threading.Thread(target=read, daemon=True, name="raychaos-ray-counts")
    reader.start()
    reader.join(timeout=bound)
    return dict(counts) if not reader.is_alive() else {}


def ray_events(before: Mapping[str, int], after: Mapping[str, int]) -> dict[str, float]:
    """What Ray did during the run: each count read at both ends, after minus before."""
    return {name: float(after[name] - before[name]) for name in COUNTS if name in before and name in after}
