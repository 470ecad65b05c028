"""The watchdog: the "no silent hang" guarantee.

``watch(refs, deadline=...)`` waits for every ref at most ``deadline`` seconds; when some
are not resolved it raises :class:`HangError` naming each stuck task, its State API state
and the likely cause (an infeasible request, a dependency not done, an actor restarting
or dead, a worker that is paused). ``watch(..., raise_on_hang=False)`` is the quiet form:
it returns the same report.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from chaos._errors import HangError

__all__ = ["StuckTask", "WatchReport", "watch"]

CALL_TIMEOUT = 10.0
#: How long a stuck object with no task record is probed with ray.get (owner death: ~1 s).
OBJECT_PROBE = 2.0


@dataclass(frozen=True, slots=True)
class StuckTask:
    """One unresolved ref: its task, state, and the likely cause."""

    task_id: str
    name: str
    state: str
    cause: str


@dataclass(frozen=True, slots=True)
class WatchReport:
    """How many refs resolved, and a diagnosis of each one that did not."""

    ready: int
    stuck: tuple[StuckTask, ...]

    def message(self, deadline: float) -> str:
        lines = [f"{len(self.stuck)} of {self.ready + len(self.stuck)} refs not resolved within "
                 f"{deadline:g} s:"]
        lines += [f"  - task {s.name!r} ({s.task_id[:16]}): {s.state}: {s.cause}" for s in self.stuck]
        return "\n".join(lines)


def watch(refs: Sequence[Any], *, deadline: float, address: str,
          raise_on_hang: bool = True) -> WatchReport:
    """Wait at most ``deadline`` seconds for ``refs``; diagnose the ones still pending.

    Raises:
        HangError: some refs were not resolved in time (unless ``raise_on_hang=False``).
    """
    import ray

    ready, pending = ray.wait(list(refs), num_returns=len(refs), timeout=deadline)
    report = WatchReport(len(ready), tuple(diagnose(ref, address) for ref in pending))
    if report.stuck and raise_on_hang:
        raise HangError(report.message(deadline))
    return report


def diagnose(ref: Any, address: str) -> StuckTask:
    """Why is the task behind ``ref`` not done? Asks the State API at ``address``."""
    from ray.util.state import list_tasks

    task_id = ref.task_id().hex()
    rows = list_tasks(address=address, filters=[("task_id", "=", task_id)], detail=True,
                      raise_on_missing_output=False, timeout=CALL_TIMEOUT)
    if not rows:
        return StuckTask(task_id, "?", "UNKNOWN", _object_cause(ref))
    task = max(rows, key=lambda t: t.attempt_number)
    return StuckTask(task_id, task.name, task.state, _cause(task, address))


def _object_cause(ref: Any) -> str:
    """An object with no task behind it (``ray.put``, maybe by another process): ask ray.get.

    Measured on Ray 2.60: after its owner is killed, ``ray.wait`` over several refs can leave
    such an object out of ``ready`` for as long as it is given, while ``ray.get`` raises
    ``OwnerDiedError`` within about a second. A failed ref must not pass for a pending one.
    """
    import ray
    from ray.exceptions import GetTimeoutError, RayError

    try:
        ray.get(ref, timeout=OBJECT_PROBE)
    except GetTimeoutError:
        return "no task record: an object from ray.put, or the State API has not caught up yet"
    except RayError as exc:
        return (f"ray.get raises {type(exc).__name__}, yet ray.wait did not report it ready: "
                "a failed object (its owner may be dead); get it to see the error")
    return "ray.get returns it, yet ray.wait did not report it ready"


def _cause(task: Any, address: str) -> str:
    state = task.state
    if state == "PENDING_NODE_ASSIGNMENT":
        return _pending_resources(task.required_resources or {}, address)
    if state == "PENDING_ARGS_AVAIL":
        return ("waiting for a dependency: an argument ObjectRef has not been produced (its task "
                "is pending, stuck, paused, or being retried after its worker died)")
    actor = _actor(task.actor_id, address) if task.actor_id else None
    if actor is not None and actor.state in ("RESTARTING", "DEAD", "PENDING_CREATION"):
        return f"its actor {actor.class_name} ({actor.actor_id[:12]}) is {actor.state}"
    pid = task.worker_pid or (actor.pid if actor is not None else None)
    node = task.node_id or (actor.node_id if actor is not None else None)
    if pid and node and _paused(pid, node):
        return f"its worker process {pid} is paused (SIGSTOP): a straggler holds it"
    if actor is not None:
        return (f"queued or running on actor {actor.class_name} ({actor.actor_id[:12]}, pid "
                f"{actor.pid}); an earlier call on it may be long-running or blocked")
    return f"running on worker {pid}: the task itself is slow or blocked (no fault seen)"


def _pending_resources(required: dict[str, float], address: str) -> str:
    from ray.util.state import list_nodes

    nodes = list_nodes(address=address, filters=[("state", "=", "ALIVE")], detail=True,
                       raise_on_missing_output=False, timeout=CALL_TIMEOUT)
    totals = [n.resources_total or {} for n in nodes]
    if not any(all(t.get(k, 0.0) >= v for k, v in required.items()) for t in totals):
        largest = max(totals, key=lambda t: t.get("CPU", 0.0), default={})
        offer = {k: largest.get(k, 0.0) for k in required}
        return (f"infeasible resource request {required}: no node has that much "
                f"(the largest offers {offer}); it will wait forever")
    return (f"waiting for resources {required}: they exist but are all held (starvation, or "
            "too much work queued)")


def _actor(actor_id: str, address: str) -> Any:
    from ray.util.state import get_actor

    return get_actor(actor_id, address=address, timeout=CALL_TIMEOUT)


def _paused(pid: int, node_id: str) -> bool:
    import ray

    from chaos._agent import agent_for

    try:
        return ray.get(agent_for(node_id).status.remote(pid), timeout=CALL_TIMEOUT) == "stopped"
    except Exception:  # noqa: BLE001 - the node may be gone: then it is not "paused"
        return False
