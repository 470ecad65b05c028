"""What a fault hits: target specs (records) and their resolution to processes.

Every lookup goes through the State API at the cluster's explicit address, so targets
work for any Ray application on the cluster, not only actors this driver created.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from chaos._errors import InvalidFaultSpec, TargetNotFound
from chaos._json import JsonValue
from chaos._ray_state import short

__all__ = [
    "ActorTarget",
    "NodeTarget",
    "RayProcess",
    "Target",
    "TaskTarget",
    "WorkerTarget",
    "target_from_dict",
]

Pick = Literal["one", "all"]


@dataclass(frozen=True, slots=True)
class ActorTarget:
    """An actor by id (``ActorTarget.of(handle)``), by name and namespace, or by class name.

    With ``class_name``, ``pick="one"`` chooses one live actor of that class at random
    (seeded), ``"all"`` hits every one. ``namespace`` and ``job`` (a job id as the State API
    shows it, ``02000000``, or a submission id, ``raysubmit_...``) keep a shared cluster's other
    programs out of reach; ``max_targets`` and ``max_share`` (of the live actors that match)
    cap how many one fault hits, chosen at random (seeded) beyond the cap.
    """

    actor_id: str | None = None
    name: str | None = None
    namespace: str | None = None
    class_name: str | None = None
    pick: Pick = "one"
    job: str | None = None
    max_targets: int | None = None
    max_share: float | None = None

    def __post_init__(self) -> None:
        given = [k for k in ("actor_id", "name", "class_name") if getattr(self, k)]
        if len(given) != 1:
            raise InvalidFaultSpec(
                f"an actor target needs exactly one of actor_id, name, class_name; got {given or 'none'}")
        if self.pick not in ("one", "all"):
            raise InvalidFaultSpec(f"unknown pick {self.pick!r}; use 'one' or 'all'", field="pick")
        _check_scope(self.job)
        if self.max_targets is not None and (isinstance(self.max_targets, bool) or not isinstance(
                self.max_targets, int) or self.max_targets < 1):
            raise InvalidFaultSpec(f"max_targets = {self.max_targets!r}: a whole number >= 1 (the most actors one "
                                   "fault may hit)", field="max_targets")
        if self.max_share is not None and (isinstance(self.max_share, bool) or not isinstance(
                self.max_share, int | float) or not 0 < self.max_share <= 1):
            raise InvalidFaultSpec(f"max_share = {self.max_share!r}: a share above 0 and at most 1 of the matching "
                                   "actors one fault may hit", field="max_share")

    def cap(self, matching: int) -> int:
        """How many of ``matching`` live actors one fault may hit (0: none, the fault is refused)."""
        wanted = matching if self.pick == "all" else min(1, matching)
        share = matching if self.max_share is None else math.floor(self.max_share * matching + 1e-9)
        return min(wanted, self.max_targets or matching, share)

    def scoped(self) -> bool:
        """Whether another program's actors are kept out of reach (by name, id, job or namespace)."""
        return self.class_name is None or bool(self.job or self.namespace)

    @classmethod
    def of(cls, handle: Any) -> ActorTarget:
        return cls(actor_id=handle._actor_id.hex())

    def label(self) -> str:
        scope = _scope_label(self.namespace if self.class_name else None, self.job)
        return (f"actor {short(self.actor_id)}" if self.actor_id else
                f"actor {self.namespace or ''}/{self.name}" if self.name else
                f"{self.pick} actor(s) of class {self.class_name}") + scope


def _scope_label(namespace: str | None, job: str | None) -> str:
    said = [*([f"namespace {namespace}"] if namespace else []), *([f"job {job}"] if job else [])]
    return f" in {' and '.join(said)}" if said else ""


@dataclass(frozen=True, slots=True)
class TaskTarget:
    """The worker running a task (or actor method) of this name, e.g. ``"collect"``."""

    name: str
    #: Only the tasks of this job (a job id, or a submission id).
    job: str | None = None

    def __post_init__(self) -> None:
        _check_scope(self.job)

    def label(self) -> str:
        return f"worker of task {self.name!r}" + (f" of job {self.job}" if self.job else "")

    def scoped(self) -> bool:
        return bool(self.job)


@dataclass(frozen=True, slots=True)
class WorkerTarget:
    """A random worker process that runs an actor or a task right now (agents excluded)."""

    #: Only the workers of this job (a job id, or a submission id).
    job: str | None = None

    def __post_init__(self) -> None:
        _check_scope(self.job)

    def label(self) -> str:
        return "a random busy worker" + (f" of job {self.job}" if self.job else "")

    def scoped(self) -> bool:
        return bool(self.job)


def _check_scope(job: object) -> None:
    if job is not None and (not isinstance(job, str) or not job.strip()):
        raise InvalidFaultSpec(f"job = {job!r}: a job id (02000000) or submission id (raysubmit_...)", field="job")


@dataclass(frozen=True, slots=True)
class NodeTarget:
    """A whole node (its raylet). ``node_id=None``: a random one. The head only if allowed."""

    node_id: str | None = None
    allow_head: bool = False

    def label(self) -> str:
        return f"node {short(self.node_id)}" if self.node_id else "a random worker node"


Target = ActorTarget | TaskTarget | WorkerTarget | NodeTarget
_KINDS: dict[str, type] = {"actor": ActorTarget, "task": TaskTarget, "worker": WorkerTarget,
                           "node": NodeTarget}


def target_to_dict(target: Target) -> dict[str, JsonValue]:
    kind = next(k for k, v in _KINDS.items() if isinstance(target, v))
    return {"kind": kind, **asdict(target)}


def target_from_dict(data: object) -> Target:
    """Rebuild a target from :func:`target_to_dict`'s output (validated again)."""
    if not isinstance(data, Mapping):
        raise InvalidFaultSpec(f"a target must be a table such as {{ kind = \"actor\", name = \"x\" }}, "
                               f"got {data!r}")
    fields = {str(k): v for k, v in data.items()}
    kind = fields.pop("kind", None)
    if kind not in _KINDS:
        raise InvalidFaultSpec(f"unknown target kind {kind!r}; use one of {sorted(_KINDS)}")
    target: Target = _KINDS[kind](**fields)
    return target


@dataclass(frozen=True, slots=True)
class RayProcess:
    """A resolved target: the process to act on, where it runs, and what it is.

    ``name`` is the actor's or task's name when it has one: a seeded pick among named
    candidates chooses the same one in every run (pids and actor ids differ between runs).
    """

    pid: int
    node_id: str
    label: str
    actor_id: str | None = None
    name: str | None = None
    #: The job it belongs to, when the State API says (an actor's, a task's).
    job_id: str | None = None


#: A task target may be between two tasks when a fault comes, an actor target restarting or
#: being created: it is looked for this long. A target with nothing on its way fails at once.
PATIENCE = 5.0


class _OnItsWay(TargetNotFound):
    """Nothing to act on yet, but something is on its way: a matching actor restarting or being
    created, or only processes the State API still shows that have exited since (it lags)."""


def resolve(target: Target, *, address: str, rng: random.Random,
            exclude_pids: frozenset[int] = frozenset()) -> list[RayProcess]:
    """The live processes ``target`` names now, or within ``PATIENCE`` for a task target and
    for a target of which a match is on its way (an actor restarting, being created; every
    match already found gone, in ``exclude_pids``, while the State API still shows it).

    Raises:
        TargetNotFound: nothing alive matches (e.g. a class name with no live actors).
    """
    if not isinstance(target, TaskTarget):
        try:
            return _resolve_now(target, address, rng, exclude_pids)
        except _OnItsWay:
            pass  # e.g. a fault scheduled just after a kill: the actor is coming back
    return _patiently(target, address, rng, exclude_pids)


def _patiently(target: Target, address: str, rng: random.Random, exclude_pids: frozenset[int]) -> list[RayProcess]:
    from chaos._errors import HangError
    from chaos._wait import wait_until

    try:
        return wait_until(lambda: _resolve_now(target, address, rng, exclude_pids),
                          timeout=PATIENCE, interval=0.1, what=target.label())
    except HangError as exc:
        if isinstance(exc.__cause__, TargetNotFound) and not isinstance(exc.__cause__, _OnItsWay):
            raise exc.__cause__ from None
        raise TargetNotFound(f"no live process matches {target.label()} within "
                             f"{PATIENCE:g} s on the cluster at {address}") from exc


def _resolve_now(target: Target, address: str, rng: random.Random,
                 exclude_pids: frozenset[int]) -> list[RayProcess]:
    found = candidates(target, address=address, exclude_pids=exclude_pids)
    if isinstance(target, ActorTarget):
        return _capped(target, found, rng)
    return [rng.choice(found)]


def candidates(target: Target, *, address: str, exclude_pids: frozenset[int] = frozenset()) -> list[RayProcess]:
    """Every live process ``target`` matches now, sorted; a fault hits one of them (or, for an
    actor target, as many as :meth:`ActorTarget.cap` allows). No choice is made, nothing touched.

    Raises:
        TargetNotFound: nothing alive matches.
    """
    if isinstance(target, ActorTarget):
        found = _actors(target, address)
    elif isinstance(target, TaskTarget):
        found = _tasks(target.name, address, target.job)
    elif isinstance(target, WorkerTarget):
        found = _busy_workers(address, exclude_pids, target.job)
    else:
        found = _nodes(target, address)
    live = [p for p in found if p.pid not in exclude_pids]
    if found and not live:
        raise _OnItsWay(f"every process matching {target.label()} has exited, or moved on, since the "
                        f"State API saw it (pids {sorted(p.pid for p in found)})")
    if not live:
        raise TargetNotFound(f"no live process matches {target.label()} on the cluster at "
                             f"{address}; check the name, or that it is running yet")
    return sorted(live, key=lambda p: (p.name or "", p.pid))


def _capped(target: ActorTarget, found: list[RayProcess], rng: random.Random) -> list[RayProcess]:
    """The live matches one fault hits: all, or one, within the target's caps (seeded beyond them)."""
    allowed = target.cap(len(found))
    if allowed == 0:
        raise TargetNotFound(f"max_share = {target.max_share:g} of the {len(found)} live actor(s) matching "
                             f"{target.label()} allows none: the fault would hit nothing; raise max_share or "
                             "give max_targets")
    if allowed == len(found):
        return found
    if allowed == 1:
        return [rng.choice(found)]
    return sorted(rng.sample(found, allowed), key=lambda p: (p.name or "", p.pid))


#: The states of an actor that is on its way to ALIVE.
_COMING = frozenset({"RESTARTING", "PENDING_CREATION", "DEPENDENCIES_UNREADY"})


def _actors(target: ActorTarget, address: str) -> list[RayProcess]:
    from ray.util.state import list_actors

    filters: list[tuple[str, str, str]] = [("state", "!=", "DEAD")]
    if target.actor_id:
        filters.append(("actor_id", "=", target.actor_id))
    if target.name:
        filters.append(("name", "=", target.name))
    if target.namespace:
        filters.append(("ray_namespace", "=", target.namespace))
    rows = list_actors(address=address, filters=filters, limit=10_000, raise_on_missing_output=False)
    rows = _in_job(rows, target.job, address)
    if target.class_name:  # Ray records the qualified name: "f.<locals>.Flock" matches "Flock"
        rows = [a for a in rows if target.class_name in (a.class_name, a.class_name.rsplit(".", 1)[-1])]
    alive = [RayProcess(pid=a.pid, node_id=a.node_id, label=f"{a.class_name} {short(a.actor_id)} pid {a.pid}",
                        actor_id=a.actor_id, name=a.name or None, job_id=a.job_id or None)
             for a in rows if a.state == "ALIVE" and _placed(a.pid, a.node_id)]
    if not alive and any(a.state in _COMING for a in rows):
        raise _OnItsWay(f"no live process matches {target.label()} yet: "
                        f"{sorted({a.state for a in rows})} on the cluster at {address}")
    return alive


def _placed(pid: int | None, node_id: str | None) -> bool:
    """Whether a State API row names both a process and its node. A row of a task being
    retried can show RUNNING with its worker's pid before its node id (a kill of it would fail
    on the missing node): no agent can act on it."""
    return bool(pid) and bool(node_id)


def job_ids(job: str, address: str) -> frozenset[str]:
    """The ids of the driver jobs ``job`` names, as the State API shows them: itself when it is
    one, the job a submission of that id started (none before its driver starts)."""
    from ray.util.state import list_jobs

    rows = list_jobs(address=address, limit=10_000, raise_on_missing_output=False)
    found = frozenset(str(j.job_id) for j in rows if j.job_id and job in (j.job_id, j.submission_id))
    if not found:
        raise _OnItsWay(f"no job {job!r} on the cluster at {address} yet (a job id such as 02000000, or the "
                        "submission id `ray job submit` printed)")
    return found


def _in_job(rows: list[Any], job: str | None, address: str) -> list[Any]:
    if job is None:
        return rows
    jobs = job_ids(job, address)  # one listing of the jobs, not one per row
    return [r for r in rows if r.job_id in jobs]


def _tasks(name: str, address: str, job: str | None = None) -> list[RayProcess]:
    from ray.util.state import list_tasks

    rows = _in_job(list_tasks(address=address, filters=[("name", "=", name), ("state", "=", "RUNNING")],
                              limit=10_000, raise_on_missing_output=False), job, address)
    return [RayProcess(pid=t.worker_pid, node_id=t.node_id, label=f"task {t.name} pid {t.worker_pid}",
                       actor_id=t.actor_id, name=t.name, job_id=t.job_id or None)
            for t in rows if _placed(t.worker_pid, t.node_id)]


def _busy_workers(address: str, exclude: frozenset[int], job: str | None = None) -> list[RayProcess]:
    from ray.util.state import list_actors, list_tasks

    actors = _in_job(list_actors(address=address, filters=[("state", "=", "ALIVE")], limit=10_000,
                                 raise_on_missing_output=False), job, address)
    tasks = _in_job(list_tasks(address=address, filters=[("state", "=", "RUNNING")], limit=10_000,
                               raise_on_missing_output=False), job, address)
    found = {a.pid: RayProcess(pid=a.pid, node_id=a.node_id, label=f"{a.class_name} pid {a.pid}", actor_id=a.actor_id)
             for a in actors if _placed(a.pid, a.node_id) and not a.class_name.startswith("ChaosAgent")}
    found.update({t.worker_pid: RayProcess(t.worker_pid, t.node_id, f"task {t.name} pid {t.worker_pid}")
                  for t in tasks if _placed(t.worker_pid, t.node_id) and t.worker_pid not in found
                  and not (t.name or "").startswith("ChaosAgent")})
    return list(found.values())


def _nodes(target: NodeTarget, address: str) -> list[RayProcess]:
    from ray.util.state import list_nodes

    rows = list_nodes(address=address, filters=[("state", "=", "ALIVE")], limit=10_000,
                      raise_on_missing_output=False)
    if target.node_id:
        rows = [n for n in rows if n.node_id == target.node_id]
        if rows and rows[0].is_head_node and not target.allow_head:
            raise InvalidFaultSpec(f"node {short(target.node_id)} is the head node; pass "
                                   "allow_head=True to kill it (it ends the cluster)")
    elif not target.allow_head:
        rows = [n for n in rows if not n.is_head_node]
    # pid 0: the raylet's pid is found by the agent on that node.
    return [RayProcess(0, n.node_id, f"node {short(n.node_id)}") for n in rows]
