"""The watchdog: the "no silent hang" guarantee.

``watch(refs, deadline=...)`` waits for every ref at most ``deadline`` seconds; when some
are not resolved it raises :class:`HangError` naming each stuck task, its State API state
and the likely cause (an infeasible request, a dependency not done, an actor restarting
or dead, a worker that is paused). ``watch(..., raise_on_hang=False)`` is the quiet form:
it returns the same report.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from chaos._errors import HangError
from chaos._ray_state import short

__all__ = ["StuckCause", "StuckTask", "WatchReport", "watch"]

CALL_TIMEOUT = 10.0
#: How long a stuck object with no task record is probed with ray.get (owner death: ~1 s).
OBJECT_PROBE = 2.0


class StuckCause(StrEnum):
    """Why a ref is not resolved, as the watchdog decided it (code decides on this, never
    on the wording of ``StuckTask.cause``)."""

    INFEASIBLE = "infeasible"  #: asks for more resources than any node has: waits for ever
    RESOURCES_HELD = "resources_held"  #: the resources exist but are all held
    DEPENDENCY = "dependency"  #: an argument has not been produced
    ACTOR_UNAVAILABLE = "actor_unavailable"  #: its actor is restarting, dead or not yet created
    PAUSED = "paused"  #: its worker process is stopped (SIGSTOP)
    ACTOR_BUSY = "actor_busy"  #: queued or running on a live actor
    RUNNING = "running"  #: running with no fault seen: slow or blocked
    FAILED_OBJECT = "failed_object"  #: ray.get raises, yet ray.wait did not report it ready
    NO_TASK_RECORD = "no_task_record"  #: an object with no task behind it, still pending
    CANCEL_LOST = "cancel_lost"  #: ray.cancel was called on it, yet its task runs on
    INFEASIBLE_GROUP = "infeasible_group"  #: its placement group can never be placed
    GROUP_PENDING = "group_pending"  #: its placement group waits for resources or a node


@dataclass(frozen=True, slots=True)
class StuckTask:
    """One unresolved ref: its task, state, the likely cause in words, and its kind."""

    task_id: str
    name: str
    state: str
    cause: str
    kind: StuckCause = StuckCause.RUNNING


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


def watch(refs: Sequence[Any], *, deadline: float, address: str, raise_on_hang: bool = True,
          cancelled: Sequence[Any] = ()) -> WatchReport:
    """Wait at most ``deadline`` seconds for ``refs``; diagnose the ones still pending.

    Args:
        refs: ObjectRefs, and placement groups (each must be placed within the deadline).
        cancelled: refs the caller has called ``ray.cancel`` on: one still running is
            ``CANCEL_LOST`` (Ray 2.60 can lose a cancel issued before its task starts).

    Raises:
        HangError: some refs were not resolved in time (unless ``raise_on_hang=False``).
    """
    import ray

    groups = [r for r in refs if _is_group(r)]
    plain = [r for r in refs if not _is_group(r)]
    end = time.monotonic() + deadline
    ready, pending = ray.wait(plain, num_returns=len(plain), timeout=deadline) if plain else ([], [])
    asked = {ref.task_id().hex() for ref in cancelled}
    stuck = [diagnose(ref, address, cancelled=asked) for ref in pending]
    for group in groups:  # its ready() object has no task record: ask the group itself
        if group.wait(timeout_seconds=max(0.0, end - time.monotonic())):
            ready.append(group)
        else:
            stuck.append(_group_stuck(group.id.hex(), address))
    report = WatchReport(len(ready), tuple(stuck))
    if report.stuck and raise_on_hang:
        raise HangError(report.message(deadline))
    return report


def diagnose(ref: Any, address: str, *, cancelled: frozenset[str] | set[str] = frozenset()) -> StuckTask:
    """Why is the task behind ``ref`` not done? Asks the State API at ``address``.
    ``cancelled``: ids of the tasks the caller asked Ray to cancel."""
    from ray.util.state import list_tasks

    task_id = ref.task_id().hex()
    rows = list_tasks(address=address, filters=[("task_id", "=", task_id)], detail=True,
                      raise_on_missing_output=False, timeout=CALL_TIMEOUT)
    if not rows:
        kind, cause = _object_cause(ref)
        return StuckTask(task_id=task_id, name="?", state="UNKNOWN", cause=cause, kind=kind)
    task = max(rows, key=lambda t: t.attempt_number)
    if task_id in cancelled and task.state == "RUNNING":
        return StuckTask(task_id=task_id, name=task.name, state=task.state, cause=(
            f"ray.cancel was called on it, yet it is still RUNNING (attempt {task.attempt_number}, "
            f"worker {task.worker_pid}): the cancel was lost; cancel it again or kill its worker"),
            kind=StuckCause.CANCEL_LOST)
    kind, cause = _cause(task, address)
    return StuckTask(task_id=task_id, name=task.name, state=task.state, cause=cause, kind=kind)


def _object_cause(ref: Any) -> tuple[StuckCause, str]:
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
        return StuckCause.NO_TASK_RECORD, ("no task record: an object from ray.put, or the State "
                                           "API has not caught up yet")
    except RayError as exc:
        return StuckCause.FAILED_OBJECT, (
            f"ray.get raises {type(exc).__name__}, yet ray.wait did not report it ready: "
            "a failed object (its owner may be dead); get it to see the error")
    return StuckCause.FAILED_OBJECT, "ray.get returns it, yet ray.wait did not report it ready"


def _cause(task: Any, address: str) -> tuple[StuckCause, str]:
    state = task.state
    if state == "PENDING_NODE_ASSIGNMENT" and getattr(task, "placement_group_id", None):
        return _group_cause(task.placement_group_id, address)
    if state == "PENDING_NODE_ASSIGNMENT":
        return _pending_resources(task.required_resources or {}, address)
    if state == "PENDING_ARGS_AVAIL":
        return StuckCause.DEPENDENCY, (
            "waiting for a dependency: an argument ObjectRef has not been produced (its task "
            "is pending, stuck, paused, or being retried after its worker died)")
    actor = _actor(task.actor_id, address) if task.actor_id else None
    if actor is not None and actor.state in ("RESTARTING", "DEAD", "PENDING_CREATION"):
        return StuckCause.ACTOR_UNAVAILABLE, f"its actor {actor.class_name} ({short(actor.actor_id)}) is {actor.state}"
    pid = task.worker_pid or (actor.pid if actor is not None else None)
    node = task.node_id or (actor.node_id if actor is not None else None)
    if pid and node and _paused(pid, node):
        return StuckCause.PAUSED, f"its worker process {pid} is paused (SIGSTOP): a straggler holds it"
    if actor is not None:
        return StuckCause.ACTOR_BUSY, (
            f"queued or running on actor {actor.class_name} ({short(actor.actor_id)}, pid "
            f"{actor.pid}); an earlier call on it may be long-running or blocked")
    return StuckCause.RUNNING, f"running on worker {pid}: the task itself is slow or blocked (no fault seen)"


def _pending_resources(required: dict[str, float], address: str) -> tuple[StuckCause, str]:
    from ray.util.state import list_nodes

    nodes = list_nodes(address=address, filters=[("state", "=", "ALIVE")], detail=True,
                       raise_on_missing_output=False, timeout=CALL_TIMEOUT)
    totals = [n.resources_total or {} for n in nodes]
    if not any(all(t.get(k, 0.0) >= v for k, v in required.items()) for t in totals):
        largest = max(totals, key=lambda t: t.get("CPU", 0.0), default={})
        offer = {k: largest.get(k, 0.0) for k in required}
        return StuckCause.INFEASIBLE, (f"infeasible resource request {required}: no node has that "
                                       f"much (the largest offers {offer}); it will wait forever")
    return StuckCause.RESOURCES_HELD, (f"waiting for resources {required}: they exist but are all "
                                       "held (starvation, or too much work queued)")


def _is_group(item: Any) -> bool:
    from ray.util.placement_group import PlacementGroup

    return isinstance(item, PlacementGroup)


def _group_stuck(group_id: str, address: str) -> StuckTask:
    kind, cause = _group_cause(group_id, address)
    return StuckTask(task_id=group_id, name="placement group", state="PENDING", cause=cause, kind=kind)


def _group_cause(group_id: str, address: str) -> tuple[StuckCause, str]:
    """A task waiting for its placement group: can the group ever be placed on the live nodes?
    (The group's strategy is in the GCS table this driver reads, not in the State API.)"""
    from ray.util.placement_group import placement_group_table
    from ray.util.state import list_nodes

    group = placement_group_table().get(group_id)
    if group is None:
        return StuckCause.GROUP_PENDING, f"its placement group {short(group_id)} is not known to the GCS (removed?)"
    bundles = list(group["bundles"].values())
    nodes = list_nodes(address=address, filters=[("state", "=", "ALIVE")], detail=True,
                       raise_on_missing_output=False, timeout=CALL_TIMEOUT)
    totals = [n.resources_total or {} for n in nodes]
    if not group_fits(bundles, group["strategy"], totals):
        return StuckCause.INFEASIBLE_GROUP, (
            f"placement group {short(group_id)} ({group['strategy']}, bundles {bundles}) can never be "
            f"placed: no set of live nodes offers that much; it is {group['state']} and will wait forever")
    return StuckCause.GROUP_PENDING, (f"waiting for its placement group {short(group_id)} ({group['state']}): "
                                      "its resources are held, or a node that held a bundle is being replaced")


def group_fits(bundles: Sequence[dict[str, float]], strategy: str, totals: Sequence[dict[str, float]]) -> bool:
    """Whether the live nodes' total resources could ever hold ``bundles`` under ``strategy``
    (held resources aside): each bundle on some node, all on one for STRICT_PACK, each on its
    own node for STRICT_SPREAD."""
    def fits(need: dict[str, float], node: dict[str, float]) -> bool:
        return all(node.get(k, 0.0) >= v for k, v in need.items())

    if strategy == "STRICT_PACK":
        whole: dict[str, float] = {}
        for bundle in bundles:
            for k, v in bundle.items():
                whole[k] = whole.get(k, 0.0) + v
        return any(fits(whole, t) for t in totals)
    if strategy == "STRICT_SPREAD" and len(bundles) > len(totals):
        return False
    return all(any(fits(b, t) for t in totals) for b in bundles)


def _actor(actor_id: str, address: str) -> Any:
    from ray.util.state import get_actor

    return get_actor(actor_id, address=address, timeout=CALL_TIMEOUT)


def _paused(pid: int, node_id: str) -> bool:
    import ray

    from chaos.agents._agent import agent_for

    try:
        return bool(ray.get(agent_for(node_id).status.remote(pid), timeout=CALL_TIMEOUT) == "stopped")
    except Exception:  # noqa: BLE001 - the node may be gone: then it is not "paused"
        return False
