"""The oracle: each step's value computed directly, the exceptions the landed faults may cause
(a table), and the verdict on what a run observed, classified by signature. Pure Python."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from scenarios.hunt._model import (
    Actor,
    Arg,
    Call,
    Cancel,
    Drop,
    Fault,
    FaultKind,
    Program,
    Put,
    Step,
    StepKind,
    Stream,
    Task,
    Wait,
)


class ErrorKind(enum.Enum):
    """An exception a ray.get may raise, by its root cause (RayTaskError wrappers peeled)."""

    WORKER_CRASHED = "WorkerCrashedError"
    ACTOR_DIED = "ActorDiedError"
    ACTOR_UNAVAILABLE = "ActorUnavailableError"
    OWNER_DIED = "OwnerDiedError"
    TASK_CANCELLED = "TaskCancelledError"
    OBJECT_STORE_FULL = "ObjectStoreFullError"
    NODE_DIED = "NodeDiedError"
    TASK_UNSCHEDULABLE = "TaskUnschedulableError"
    ACTOR_UNSCHEDULABLE = "ActorUnschedulableError"
    REPLAY_INCONSISTENT = "StreamingGeneratorReplayInconsistentError"
    STREAM_ENDED = "StopIteration"  # a stream that ended before the driver took what it wanted
    OBJECT_LOST = "ObjectLostError"  # or a reconstruction failed for want of attempts (see _run._SPENT)
    VALUE_ERROR = "ValueError"  # the program's own flaky task

    @property
    def is_rays(self) -> bool:
        """One of Ray's exceptions (the program's own ValueError and a stream's end are not)."""
        return self not in (ErrorKind.VALUE_ERROR, ErrorKind.STREAM_ENDED)


class Situation(enum.Enum):
    """Where a step stands to a landed fault (or to the program's own cancel)."""

    KILLED_TASK = "a task whose worker was SIGKILLed, its retries spent"
    TASK_ON_REMOVED_NODE = "a task whose node was removed while it ran, its retries spent"
    OBJECT_ON_REMOVED_NODE = "a task's return whose only copy was on a removed node, its retries spent"
    OWNED_BY_KILLED = "a ref put by a process that was SIGKILLed"
    CALL_OF_DEAD_ACTOR = "a call of a SIGKILLed actor that may not restart"
    CALL_WITHOUT_RETRIES = "a call in flight or queued at a SIGKILL of its restartable actor, max_task_retries=0"
    CALL_OF_FAILED_ACTOR = "a call of an actor whose constructor's argument failed"
    CANCELLED = "a task cancelled with ray.cancel"
    FORCE_CANCELLED = "a task cancelled with ray.cancel(force=True)"
    SPILLED = "a value Ray spilled when the object store was filled past capacity"
    MADE_UNDER_PRESSURE = "a ref a worker put while the object store was filled past capacity"
    CALL_ON_FAILING_NODE = "a call of an actor on the node whose processes fail a share of their RPCs"
    RESTART_WITHOUT_ARGS = "a call of a killed actor whose constructor argument in the object store was dropped"
    INTERRUPTED_BY_RAY_KILL = "a call running on its actor when ray.kill killed it"
    CANCELLED_CALL = ("an actor call cancelled with ray.cancel while it ran (a regular actor's, flagged; an async "
                      "actor's, its asyncio task cancelled)")
    RETRIES_SPENT_RESTARTING = ("a call in flight or queued at a kill of its slowly restarting actor (a slow "
                                "constructor, the GCS down meanwhile, or its node's replacement late), its finite "
                                "max_task_retries spent while the actor was unavailable")
    PINNED_TASK_NOWHERE = ("a task pinned to a removed node by node affinity (soft=False) with an attempt left "
                           "for its retry or its return's reconstruction")
    REPLAYED_OTHERWISE = ("a stream's item lost with its node, rebuilt by a replay of its generator that yields "
                          "another number of items than its first run")
    PINNED_ACTOR_NOWHERE = ("a call of a restartable actor pinned to its removed node by node affinity "
                            "(soft=False): its restart has no node")


#: Which exception Ray documents for each situation (fault → situation → exception):
#: kill_worker → KILLED_TASK, OWNED_BY_KILLED; kill_actor → CALL_OF_DEAD_ACTOR,
#: CALL_WITHOUT_RETRIES, CALL_OF_FAILED_ACTOR; owner_death → OWNED_BY_KILLED too; the program's
#: own ray.cancel → CANCELLED, FORCE_CANCELLED (and OWNED_BY_KILLED with force=True);
#: object_store_pressure → SPILLED, MADE_UNDER_PRESSURE; node_removal → TASK_ON_REMOVED_NODE
#: (with retries left the task runs again on the replacement node, and returns its value);
#: actor_node_removal → as kill_actor (Ray's actor fault-tolerance guide: an actor whose
#: process or node died restarts up to max_restarts, else its calls raise ActorDiedError);
#: object_node_removal → OBJECT_ON_REMOVED_NODE, and OWNED_BY_KILLED for what the task put
#: (Ray's object fault-tolerance guide: a lost object is recovered by lineage reconstruction,
#: re-executing its task, up to the task's max_retries; past them ray.get raises an
#: ObjectReconstructionFailedError whose reason is MAX_ATTEMPTS_EXCEEDED or RETRIES_DISABLED);
#: ray_kill → as kill_actor, and INTERRUPTED_BY_RAY_KILL for the call it interrupted, retries or
#: not; ray_kill_no_restart → CALL_OF_DEAD_ACTOR whatever max_restarts; a cancel of a running
#: actor call (a regular actor's or an async one's) → CANCELLED_CALL. A late replacement of a removed node changes no
#: outcome: what waits for it (a retry, a restart, a reconstruction) runs once it joins. A removal's
#: victim pinned to the node by node affinity (soft=False) has nowhere to go, replacement or not:
#: a retry or a reconstruction → PINNED_TASK_NOWHERE, a restart → PINNED_ACTOR_NOWHERE. An actor
#: in a placement group's bundle restarts as any other: Ray places a dead node's bundles again
#: (the placement-group guide's fault tolerance). A GCS restart, or a Redis fault after which the
#: GCS was started again, changes nothing (the GCS fault-tolerance guide).
#: Anything else is a finding.
#:
#: A task whose node died raises NodeDiedError ("the node is either dead or unreachable", as
#: measured here); its worker's end may be seen first, a WorkerCrashedError, also documented for
#: a task whose worker died unexpectedly.
#:
#: Spilling is transparent: Ray's object-spilling guide says objects are spilled to external
#: storage once the store is full and restored when needed, so a spilled value must read back
#: (SPILLED allows nothing; an ObjectLostError there is a finding). ObjectStoreFullError is
#: documented for a creation that fails "because the object store is full even after multiple
#: retries": allowed only for a ref a worker put while the pressure was on.
#:
#: A cancelled task must raise, never return its value: Ray's ray.cancel reference promises
#: that a pending task "is cancelled and not executed", that a running one gets a
#: KeyboardInterrupt (force=False) or exits at once (force=True), and that ray.get then raises
#: TaskCancelledError ("WorkerCrashedError if force=True"). The hunt's cancelled task waits in
#: short slices, so a cancel that lands ends it; one that returns its value was lost
#: (Seen.CANCEL_LOST), as findings/cancel_lost_under_load.py and
#: findings/cancel_ignored_when_sigint_ignored.py reproduce.
TABLE: dict[Situation, frozenset[ErrorKind]] = {
    Situation.KILLED_TASK: frozenset({ErrorKind.WORKER_CRASHED}),
    Situation.TASK_ON_REMOVED_NODE: frozenset({ErrorKind.NODE_DIED, ErrorKind.WORKER_CRASHED}),
    Situation.OBJECT_ON_REMOVED_NODE: frozenset({ErrorKind.OBJECT_LOST}),
    Situation.OWNED_BY_KILLED: frozenset({ErrorKind.OWNER_DIED}),
    Situation.CALL_OF_DEAD_ACTOR: frozenset({ErrorKind.ACTOR_DIED, ErrorKind.ACTOR_UNAVAILABLE}),
    Situation.CALL_WITHOUT_RETRIES: frozenset({ErrorKind.ACTOR_DIED, ErrorKind.ACTOR_UNAVAILABLE}),
    Situation.CALL_OF_FAILED_ACTOR: frozenset({ErrorKind.ACTOR_DIED}),
    Situation.CANCELLED: frozenset({ErrorKind.TASK_CANCELLED}),
    Situation.FORCE_CANCELLED: frozenset({ErrorKind.TASK_CANCELLED, ErrorKind.WORKER_CRASHED}),
    Situation.SPILLED: frozenset(),
    Situation.MADE_UNDER_PRESSURE: frozenset({ErrorKind.OBJECT_STORE_FULL}),
    Situation.CALL_ON_FAILING_NODE: frozenset({ErrorKind.ACTOR_UNAVAILABLE}),
    Situation.RESTART_WITHOUT_ARGS: frozenset({ErrorKind.ACTOR_DIED}),
    Situation.INTERRUPTED_BY_RAY_KILL: frozenset({ErrorKind.ACTOR_DIED}),
    Situation.CANCELLED_CALL: frozenset({ErrorKind.TASK_CANCELLED}),
    Situation.RETRIES_SPENT_RESTARTING: frozenset({ErrorKind.ACTOR_DIED, ErrorKind.ACTOR_UNAVAILABLE}),
    Situation.PINNED_TASK_NOWHERE: frozenset({ErrorKind.TASK_UNSCHEDULABLE}),
    Situation.PINNED_ACTOR_NOWHERE: frozenset({ErrorKind.ACTOR_UNSCHEDULABLE}),
    Situation.REPLAYED_OTHERWISE: frozenset({ErrorKind.REPLAY_INCONSISTENT}),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Citation:
    """Where Ray documents what a situation may end in: the page, and its words."""

    page: str
    says: str


_API = "https://docs.ray.io/en/latest/ray-core/api/doc/ray.exceptions."
_FT = "https://docs.ray.io/en/latest/ray-core/fault_tolerance/"
#: Each row of ``TABLE`` with Ray's own words for it. A situation Ray's pages say nothing about
#: has no row here and no row in ``TABLE``: what it ends in is judged as outside the table.
CITATIONS: dict[Situation, Citation] = {
    Situation.KILLED_TASK: Citation(page=f"{_API}WorkerCrashedError.html",
                                    says="Indicates that the worker died unexpectedly while executing a task."),
    Situation.TASK_ON_REMOVED_NODE: Citation(page=f"{_FT}nodes.html", says=(
        "When a worker node fails, all the running tasks and actors will fail and all the objects owned by "
        "worker processes of this node will be lost.")),
    Situation.OBJECT_ON_REMOVED_NODE: Citation(page=f"{_API}ObjectLostError.html", says=(
        "Indicates that the object is lost from distributed memory, due to node failure or system error.")),
    Situation.OWNED_BY_KILLED: Citation(page=f"{_API}OwnerDiedError.html", says=(
        "Indicates that the owner of the object has died while there is still a reference to the object.")),
    Situation.CALL_OF_DEAD_ACTOR: Citation(page=f"{_API}RayActorError.html", says=(
        "This exception could happen because the actor process is dead, or is unavailable for the moment. Ray "
        "raises subclasses ActorDiedError and ActorUnavailableError respectively.")),
    Situation.CALL_WITHOUT_RETRIES: Citation(page=f"{_API}RayActorError.html", says=(
        "Indicates that the actor has outages unexpectedly before finishing a task. This exception could happen "
        "because the actor process is dead, or is unavailable for the moment.")),
    Situation.CALL_OF_FAILED_ACTOR: Citation(page=f"{_API}ActorDiedError.html", says=(
        "RayTaskError type means the actor has died because of an exception within __init__.")),
    Situation.CANCELLED: Citation(page=f"{_API}TaskCancelledError.html", says="Raised when this task is cancelled."),
    Situation.FORCE_CANCELLED: Citation(page="https://docs.ray.io/en/latest/ray-core/api/doc/ray.cancel.html", says=(
        "Calling ray.get on a cancelled Task raises a TaskCancelledError if the Task has been scheduled or "
        "interrupted. It raises a WorkerCrashedError if force=True.")),
    Situation.SPILLED: Citation(page="https://docs.ray.io/en/latest/ray-core/objects/object-spilling.html", says=(
        "Ray spills objects to a directory in the local filesystem once the object store is full.")),
    Situation.MADE_UNDER_PRESSURE: Citation(page=f"{_API}ObjectStoreFullError.html",
                                            says="Indicates that the object store is full."),
    Situation.CALL_ON_FAILING_NODE: Citation(page=f"{_API}ActorUnavailableError.html", says=(
        "Raised when the actor is temporarily unavailable but may be available later.")),
    # Ray's own warning (ray/_raylet, printed when such an actor is created), not a docs page.
    Situation.RESTART_WITHOUT_ARGS: Citation(page="https://github.com/ray-project/ray/issues/53727", says=(
        "has constructor arguments in the object store and max_restarts > 0. If the arguments in the object "
        "store go out of scope or are lost, the actor restart will fail.")),
    # max_task_retries counts each failed attempt, one that found the actor unavailable too; a
    # restart that takes seconds leaves room for more than one.
    Situation.RETRIES_SPENT_RESTARTING: Citation(page=f"{_API}RayActorError.html", says=(
        "This exception could happen because the actor process is dead, or is unavailable for the moment. Ray "
        "raises subclasses ActorDiedError and ActorUnavailableError respectively.")),
    Situation.INTERRUPTED_BY_RAY_KILL: Citation(page="https://docs.ray.io/en/latest/ray-core/api/doc/ray.kill.html",
                                                says=("This will interrupt any running tasks on the actor, causing "
                                                      "them to fail immediately.")),
    # A regular actor's running call is flagged, not interrupted, and the same reference says what a
    # get of a cancelled actor task that "has been scheduled" raises: a value is a lost cancel.
    Situation.CANCELLED_CALL: Citation(page="https://docs.ray.io/en/latest/ray-core/api/doc/ray.cancel.html", says=(
        "Calling ray.get on a cancelled Task raises a TaskCancelledError if the Task has been scheduled or "
        "interrupted. [...] If it is an async Actor, Ray cancels a asyncio.Task.")),
    # Ray 2.60's own exception (its docstring is the reference page): the replay is failed fast.
    Situation.REPLAYED_OTHERWISE: Citation(
        page="https://docs.ray.io/en/master/ray-core/api/doc/ray.exceptions.StreamingGeneratorReplayInconsistentError.html",
        says=("Raised when a streaming generator task's replay produces a different number of objects than the "
              "first successful attempt. This indicates the generator output is non-deterministic. The task is "
              "failed fast to prevent downstream consumers from hanging (when fewer objects are produced) or "
              "silently dropping data (when more objects are produced).")),
    Situation.PINNED_TASK_NOWHERE: Citation(page=f"{_API}TaskUnschedulableError.html", says=(
        "Raised when the task cannot be scheduled. One example is that the node specified through "
        "NodeAffinitySchedulingStrategy is dead.")),
    # Its restart cannot be scheduled: a call raises this, or finds the actor dead or unavailable for
    # the moment (CALL_OF_DEAD_ACTOR's row, which a pinned actor's calls may end in too).
    Situation.PINNED_ACTOR_NOWHERE: Citation(page=f"{_API}ActorUnschedulableError.html", says=(
        "Raised when the actor cannot be scheduled. One example is that the node specified through "
        "NodeAffinitySchedulingStrategy is dead.")),
}


@dataclass(frozen=True, slots=True)
class Expected:
    """What a step may end in, by the oracle's table: ``value`` (None: it must raise) or one of
    ``errors``. An expectation, not a verdict: :func:`judge` turns what was observed against it
    into failures, and the program's run is judged as the one verdict type
    (``ProgramVerdict.verdict``)."""

    value: int | tuple[int, ...] | None
    errors: frozenset[ErrorKind] = frozenset()

    def may(self, situation: Situation) -> Expected:
        return Expected(self.value, self.errors | TABLE[situation])

    def must(self, errors: frozenset[ErrorKind]) -> Expected:
        return Expected(None, self.errors | errors)


@dataclass(frozen=True, slots=True)
class Processes:
    """What the run's pid marks say about worker processes: which process put each boxed
    step's value (and so owns it), and which processes a landed kill_worker SIGKILLed or a
    force cancel ended. Facts for the oracle, which starts no process and reads no file."""

    #: (step index, pid of the process that put its boxed value): one pair per attempt that put.
    owners: frozenset[tuple[int, int]] = frozenset()
    killed: frozenset[int] = frozenset()

    def owned_by(self, index: int) -> frozenset[int]:
        return frozenset(pid for step, pid in self.owners if step == index)


def expect(program: Program, landed: Sequence[Fault], *, processes: Processes = Processes()) -> list[Expected | None]:
    """Each step's outcome, given the faults that landed and what the run recorded about its
    processes (None for a WAIT: checked apart)."""
    out: list[Expected | None] = []
    for index, step in enumerate(program.steps):
        out.append(_expect_step(program, index, step, landed, out, processes))
    return out


def spilled(program: Program, landed: Sequence[Fault]) -> frozenset[int]:
    """The steps whose value Ray spilled: each landed pressure's victim (a put, or the ref a
    boxed task put), since a pressure lands only once Ray says it spilled that very object
    (_pressure.Pressure.landed). Other values may have spilled too, unconfirmed: none is judged so."""
    return frozenset(f.victim for f in landed
                     if f.kind is FaultKind.OBJECT_STORE_PRESSURE and f.victim < len(program.steps))


def _expect_step(program: Program, index: int, step: Step, landed: Sequence[Fault],
                 out: list[Expected | None], processes: Processes) -> Expected | None:
    if isinstance(step, Put):
        plain = Expected(step.const)  # no error
        return plain.may(Situation.SPILLED) if index in spilled(program, landed) else plain
    if isinstance(step, Task):
        task = _task(program, index, step, landed, _args(step.args, out), processes)
        task = task.may(Situation.SPILLED) if index in spilled(program, landed) else task
        return _pressed(task, index, step, landed)
    if isinstance(step, Actor):
        return _actor(step, _args(step.args, out))
    if isinstance(step, Call):
        return _pressed(_call(program, index, step, landed, out), index, step, landed)
    if isinstance(step, Stream):
        items = _stream(step, index, _shifted(_args(step.args, out), step.const, step.take), landed)
        return _stream_lost(step, index, items, landed, pinned=index in program.pinned())
    if isinstance(step, Cancel):
        # The value stays for its consumers (a lost cancel is judged once, on the Cancel step:
        # see _judged); the step itself must raise.
        return Expected(step.const).may(Situation.FORCE_CANCELLED if step.force else Situation.CANCELLED)
    assert isinstance(step, Wait | Drop)  # a wait is checked apart; a drop has no value
    return None


def _pressed(result: Expected, index: int, step: Task | Call, landed: Sequence[Fault]) -> Expected:
    """A ref a worker put, or a return too big to inline (padded), may fail to be created while
    the store is over capacity: a boxed or padded step
    submitted by the pressure's moment may have run during it, but not the pressure's own
    victim (its put is awaited before the store is filled). Other values only spill."""
    pressed = any(f.kind is FaultKind.OBJECT_STORE_PRESSURE and index <= f.after and f.victim != index
                  for f in landed)
    made_in_store = step.boxed or step.size > 0  # a ref it put, or a return too big to inline
    here = not (isinstance(step, Task) and step.away)  # the pressure fills the head's store, not the removable node's
    return result.may(Situation.MADE_UNDER_PRESSURE) if made_in_store and pressed and here else result


def _args(args: tuple[Arg, ...], out: list[Expected | None]) -> Expected:
    """The args' sum, or the errors any of them may raise (a failed arg fails its consumer,
    whichever way it was passed: Ray's resolution or the callee's own ray.get)."""
    outcomes = [out[a.source] for a in args]
    errors = frozenset().union(*(o.errors for o in outcomes if o is not None))
    values = [o.value for o in outcomes if o is not None]
    if any(not isinstance(v, int) for v in values):
        return Expected(None, errors)
    return Expected(sum(v for v in values if isinstance(v, int)), errors)


def _shifted(args: Expected, const: int, take: int) -> Expected:
    """The items a stream's driver takes; taking none gets nothing, so nothing can fail."""
    if take == 0:
        return Expected(())
    if not isinstance(args.value, int):
        return args
    return Expected(tuple(args.value + const + i for i in range(take)), args.errors)


def _stream(step: Stream, index: int, items: Expected, landed: Sequence[Fault]) -> Expected:
    """A stream whose worker was SIGKILLed mid-stream: run again while a retry is left (Ray's
    generator guide: task fault tolerance works with generator tasks), else the item after the
    last one yielded raises; the driver took those before the kill."""
    killed = any(f.kind is FaultKind.KILL_WORKER and f.victim == index for f in landed)
    spent = attempts(step.max_retries, False, killed=killed, flaky=False) is not None
    if spent and isinstance(items.value, tuple) and step.take > step.held_at():
        return items.must(TABLE[Situation.KILLED_TASK])
    return items


def _stream_lost(step: Stream, index: int, items: Expected, landed: Sequence[Fault], *,
                 pinned: bool = False) -> Expected:
    """A finished stream whose taken items' only copies went with their node: rebuilt by running
    the generator again while a retry is left (Ray's generator guide: object fault tolerance works
    with generator tasks), else lost; ``pinned`` to that node, the replay has no node to run on.
    A replay that yields another number of items than the first run is failed (each item may
    have come back before that was seen), and an item past the replay's count cannot come back."""
    lost = any(f.kind is FaultKind.OBJECT_NODE_REMOVAL and f.victim == index for f in landed)
    if not (lost and isinstance(items.value, tuple) and step.take > 0):
        return items
    if step.max_retries == 0:
        return items.must(TABLE[Situation.OBJECT_ON_REMOVED_NODE])
    if pinned:
        return items.must(TABLE[Situation.PINNED_TASK_NOWHERE])
    if step.take > step.count + step.varying:
        return items.must(TABLE[Situation.REPLAYED_OTHERWISE])
    return items.may(Situation.REPLAYED_OTHERWISE) if step.varying else items


def _task(program: Program, index: int, step: Task, landed: Sequence[Fault], args: Expected,
          processes: Processes) -> Expected:
    if not isinstance(args.value, int):
        return args
    result = Expected(args.value + step.const, args.errors)
    killed = any(f.kind is FaultKind.KILL_WORKER and f.victim == index for f in landed)
    removed = any(f.kind is FaultKind.NODE_REMOVAL and f.victim == index for f in landed)
    failed = attempts(step.max_retries, step.retry_exceptions, killed=killed or removed, flaky=step.flaky)
    if removed and step.max_retries > 0 and index in program.pinned():  # its retry has no node
        failed, result = None, result.must(TABLE[Situation.PINNED_TASK_NOWHERE])
    if failed is not None:
        crash = TABLE[Situation.TASK_ON_REMOVED_NODE if removed else Situation.KILLED_TASK]
        result = result.must(crash if failed is ErrorKind.WORKER_CRASHED else frozenset({failed}))
    cancel = next((f for f in landed if f.kind.cancels and f.victim == index), None)
    if cancel is not None:  # cancelled while it ran: it raises, retries or not (ray.cancel's reference)
        forced = cancel.kind is FaultKind.FORCE_CANCEL
        result = result.must(TABLE[Situation.FORCE_CANCELLED if forced else Situation.CANCELLED])
    if step.boxed and _worker_killed_after(index, processes):
        result = result.may(Situation.OWNED_BY_KILLED)
    if any(f.kind is FaultKind.OBJECT_NODE_REMOVAL and f.victim == index for f in landed):
        result = _lost_with_node(result, index, step, landed, pinned=index in program.pinned())
    return result


def _lost_with_node(result: Expected, index: int, step: Task, landed: Sequence[Fault], *,
                    pinned: bool = False) -> Expected:
    """A finished task's return lost with its node: re-executed while an attempt is left (the
    first attempt, a killed one and a flaky one's retry spent theirs), else lost; ``pinned`` to
    that node, the re-execution has no node to run on. What it put died with it."""
    if not isinstance(result.value, int):
        return result  # it failed before the removal: its error is no stored object
    killed = any(f.kind in (FaultKind.KILL_WORKER, FaultKind.NODE_REMOVAL) and f.victim == index for f in landed)
    left = _retries_left(step, killed=killed)
    if left <= 0:
        result = result.may(Situation.OBJECT_ON_REMOVED_NODE)
    elif pinned:
        result = result.must(TABLE[Situation.PINNED_TASK_NOWHERE])
    return result.may(Situation.OWNED_BY_KILLED) if step.boxed else result


def attempts(max_retries: int, retry_exceptions: bool, *, killed: bool, flaky: bool) -> ErrorKind | None:
    """How a task's attempts end: its first attempt killed (if ``killed``), then a ValueError
    on the first attempt that runs (if ``flaky``); each failure spends a retry if it may."""
    budget = max_retries
    if killed:
        if budget == 0:
            return ErrorKind.WORKER_CRASHED
        budget -= 1
    if flaky and (not retry_exceptions or budget == 0):
        return ErrorKind.VALUE_ERROR
    return None


def _worker_killed_after(index: int, processes: Processes) -> bool:
    """Was the process that put task ``index``'s boxed value (and so owns it) SIGKILLed since,
    by a landed kill_worker or a force cancel? Workers are reused, so the run's pid marks say
    which process that was; a kill or a force cancel that ended another process loses nothing."""
    return bool(processes.owned_by(index) & processes.killed)


def _actor(step: Actor, args: Expected) -> Expected:
    if not isinstance(args.value, int):
        return Expected(None, args.errors | TABLE[Situation.CALL_OF_FAILED_ACTOR])
    result = Expected(args.value + step.const)
    return result.may(Situation.CALL_OF_FAILED_ACTOR) if args.errors else result


def _call(program: Program, index: int, step: Call, landed: Sequence[Fault],
          out: list[Expected | None]) -> Expected:
    actor, args = out[step.actor], _args(step.args, out)
    assert actor is not None
    if not isinstance(actor.value, int):
        return Expected(None, actor.errors | args.errors)
    # A failed argument fails the call, but the actor's fate still applies: a call of an actor
    # killed for good may find it dead before its argument is looked at.
    value = actor.value + args.value + step.const if isinstance(args.value, int) else None
    result = Expected(value, actor.errors | args.errors)
    spec = program.steps[step.actor]
    assert isinstance(spec, Actor)
    for fault in (f for f in landed if f.kind.kills_actor and program.actor_of(f) == step.actor):
        # The GCS taken down right after the kill (the same moment, landed after it): the restart
        # waits for it, the actor unavailable meanwhile. Later, the actor has restarted already.
        gcs_down = any(f.kind.restarts_gcs and f.after == fault.after and landed.index(f) > landed.index(fault)
                       for f in landed)
        # A late replacement of its removed node leaves the restart nowhere to go for seconds too.
        slow = bool(spec.slow_restart) or gcs_down or fault.replace_after > 0
        result = _call_under_kill(result, index, step, spec, fault, slow=slow)
        if _restarts(spec, fault) and _dropped_stored_args(program, spec):
            result = result.may(Situation.RESTART_WITHOUT_ARGS)
    if any(f.kind is FaultKind.CANCEL and f.victim == index for f in landed):
        result = result.must(TABLE[Situation.CANCELLED_CALL])  # seen while it ran: scheduled, so it raises
    failing = any(f.kind is FaultKind.RPC_FAILURES for f in landed) and step.actor in program.on_rpc_node()
    return result.may(Situation.CALL_ON_FAILING_NODE) if failing else result


def _dropped_stored_args(program: Program, spec: Actor) -> bool:
    """Does the actor's constructor take a value the driver dropped that lives in the object
    store (a put, or a padded return), which its restart needs and Ray does not keep?"""
    stored = {i for i, s in enumerate(program.steps) if isinstance(s, Put) or program.padded(i)}
    return any(a.source in program.dropped() & stored for a in spec.args)


def _restarts(spec: Actor, fault: Fault) -> bool:
    """Does the actor restart after ``fault``? Not without restarts, nor after ``ray.kill`` with
    ``no_restart`` (its reference: "Whether or not this actor should be restarted")."""
    return spec.max_restarts != 0 and fault.kind is not FaultKind.RAY_KILL_NO_RESTART


def _call_under_kill(result: Expected, index: int, step: Call, spec: Actor, fault: Fault, *,
                     slow: bool = False) -> Expected:
    """A call of a killed actor: dead for good without restarts; at most once without task
    retries; with finite ones, spent while a ``slow`` restart (a slow constructor, the GCS
    down at or after the kill, or a late replacement of its node) leaves the actor unavailable
    for seconds; what it put before the
    kill is lost with its owner; submitted before a ``ray.kill``
    (so maybe running at it), it may fail whatever its retries, or, retried (the actor
    fault-tolerance guide's at-least-once calls), return its value."""
    hit = index > fault.after or index == fault.victim  # queued after, or in flight at the kill
    if step.boxed and index <= fault.after and index != fault.victim:  # restarts or not
        result = result.may(Situation.OWNED_BY_KILLED)
    if not _restarts(spec, fault):
        return result.must(TABLE[Situation.CALL_OF_DEAD_ACTOR]) if hit else result.may(Situation.CALL_OF_DEAD_ACTOR)
    if fault.pinned:  # its restart has no node: dead, as one that may not restart
        result = result.may(Situation.PINNED_ACTOR_NOWHERE)
        return result.must(TABLE[Situation.CALL_OF_DEAD_ACTOR]) if hit else result.may(Situation.CALL_OF_DEAD_ACTOR)
    if fault.kind is FaultKind.RAY_KILL and index <= fault.after:  # it may have been running at the kill
        result = result.may(Situation.INTERRUPTED_BY_RAY_KILL)
    if spec.max_task_retries == 0 and (hit or index <= fault.after):
        result = result.may(Situation.CALL_WITHOUT_RETRIES)
    elif spec.max_task_retries > 0 and slow and (hit or index <= fault.after):
        result = result.may(Situation.RETRIES_SPENT_RESTARTING)  # a finite budget, seconds unavailable
    return result


# -- verdicts ---------------------------------------------------------------------------------


class Seen(enum.Enum):
    """What a step did that its outcome did not allow."""

    WRONG_VALUE = "wrong value"
    VALUE_NOT_ERROR = "a value where an error was due"
    CANCEL_LOST = "a cancelled task returned its value (the cancel was lost)"
    OUTSIDE_TABLE = "an exception outside the table"
    #: A Ray exception where Ray's docs say nothing either way: not a pass, not a bug, counted apart.
    UNDOCUMENTED = "an outcome Ray's docs are silent on"
    HANG = "hang"
    WAIT_CONTRACT = "ray.wait broke its contract"
    DRIVER_CRASH = "the driver raised"
    CLUSTER_UNUSABLE = "the cluster did not answer afterwards"


@dataclass(frozen=True, slots=True)
class Observed:
    """What a step ended in: a value, an exception (its kind if the table knows it, always its
    type name), or nothing within the bound (``hung``)."""

    value: int | tuple[int, ...] | None = None
    error: ErrorKind | None = None
    error_type: str = ""
    hung: bool = False
    seconds: float = 0.0


@dataclass(frozen=True, slots=True)
class WaitSeen:
    """What a ray.wait returned, as indices into its sources."""

    ready: tuple[int, ...]
    not_ready: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Signature:
    """A failure class: counted once however many programs show it."""

    step: StepKind | None
    faults: tuple[FaultKind, ...]
    seen: Seen
    detail: str = ""  # the exception's type name, when it is one

    def label(self) -> str:
        faults = "+".join(f.value for f in self.faults) or "no fault"
        step = self.step.value if self.step else "program"
        return f"{step} under {faults}: {self.seen.value}" + (f" ({self.detail})" if self.detail else "")


@dataclass(frozen=True, slots=True)
class Failure:
    """One step's failure: its class and what was expected and seen, for people."""

    signature: Signature
    step: int
    message: str


@dataclass(frozen=True, slots=True)
class KnownFinding:
    """A failure class already reduced to a Ray-only reproduction in ``findings/``: a run that
    shows it is not ok, but it is reported as known (with its script), apart from new classes."""

    step: StepKind
    seen: Seen
    script: str
    #: Faults that must all have landed in the program: the class is known only under them.
    under: frozenset[FaultKind] = frozenset()
    #: Known only for a step that ran on the node failing RPCs (a call: its actor), as its script's does.
    on_rpc_node: bool = False
    #: Faults at least one of which must have landed (empty: none needed).
    under_any: frozenset[FaultKind] = frozenset()
    #: Known only for a call of an actor in a placement group, made before a fault of ``under_any``
    #: and faulted by nothing else, as its script's is.
    of_grouped_actor: bool = False
    #: Known only on Ray releases before this (major, minor): one fixed since is new again after it.
    before: tuple[int, int] | None = None
    #: Known only for a task given, as a top-level argument, the value of a task with a retry left
    #: that a fault of ``under`` is aimed at: the lost value's consumer, as its script's is.
    of_lost_value: bool = False
    #: Known only for a task with a retry left that is itself a victim of a fault of ``under``, as
    #: its script's is.
    of_victim: bool = False

    def explains(self, failure: Failure, program: Program | None = None) -> bool:
        """Does it explain ``failure``? One known only on the node failing RPCs, or for a
        grouped actor's call, needs the ``program`` to say where, or of what, the failed step
        was (without it: not explained)."""
        from chaos.cluster import ray_minor

        signature, faults = failure.signature, set(failure.signature.faults)
        if not (signature.step is self.step and signature.seen is self.seen and self.under <= faults):
            return False
        if self.before is not None and not (0, 0) < ray_minor() < self.before:
            return False  # a release since, or one not known (fail closed: a class not known)
        if self.under_any and not self.under_any & faults:
            return False
        if self.on_rpc_node and not (program is not None and _ran_on_rpc_node(program, failure.step)):
            return False
        if self.of_lost_value and not (program is not None and _given_lost_value(program, failure.step, self.under)):
            return False
        if self.of_victim and not (program is not None and _victim_task(program, failure.step, self.under)):
            return False
        return not self.of_grouped_actor or (program is not None and _of_grouped_actor(program, failure.step,
                                                                                        self.under_any))


def _of_grouped_actor(program: Program, index: int, under: frozenset[FaultKind]) -> bool:
    """Is step ``index`` a call of an actor in a placement group, made (the actor) before a fault
    of ``under`` in the program, with no fault of its own (a kill, its node's removal)?"""
    step = program.steps[index] if 0 <= index < len(program.steps) else None
    if not isinstance(step, Call):
        return False
    actor = program.steps[step.actor]
    made_before = any(f.kind in under and step.actor <= f.after for f in program.faults)
    faulted = any(f.kind.kills_actor and program.actor_of(f) == step.actor for f in program.faults)
    return isinstance(actor, Actor) and actor.grouped and made_before and not faulted


def _given_lost_value(program: Program, index: int, under: frozenset[FaultKind]) -> bool:
    """Is step ``index`` a task given, as a top-level argument, the value of a task with a retry
    left that a fault of ``under`` is aimed at (the value rebuilt by re-running that task)?"""
    step = program.steps[index] if 0 <= index < len(program.steps) else None
    victims = {f.victim for f in program.faults if f.kind in under and _retry_left(program, f.victim)}
    return isinstance(step, Task) and any(a.source in victims and not a.nested for a in step.args)


def _victim_task(program: Program, index: int, under: frozenset[FaultKind]) -> bool:
    """Is step ``index`` a task with a retry left that a fault of ``under`` is aimed at?"""
    return _retry_left(program, index) and any(f.victim == index for f in program.faults if f.kind in under)


def _retry_left(program: Program, index: int) -> bool:
    """Is step ``index`` a task with a retry its flaky first attempt does not spend?"""
    step = program.steps[index] if 0 <= index < len(program.steps) else None
    return isinstance(step, Task) and _retries_left(step, killed=False) >= 1


def _retries_left(step: Task, *, killed: bool) -> int:
    """A task's retries once a landed kill of it (``killed``) and a flaky first attempt that
    raises into ``retry_exceptions`` have spent theirs."""
    return step.max_retries - (1 if killed else 0) - (1 if step.flaky and step.retry_exceptions else 0)


def _ran_on_rpc_node(program: Program, index: int) -> bool:
    """Did step ``index`` run on the node failing RPCs (a call runs where its actor lives)?"""
    step = program.steps[index] if 0 <= index < len(program.steps) else None
    return step is not None and (step.actor if isinstance(step, Call) else index) in program.on_rpc_node()


#: The failure classes Ray 2.60 is known to show here, each with the script that reproduces it
#: without raychaos. A lost cancel is rare (about 1 in 100 rounds under load, with force or not);
#: an actor call on a node failing RPCs may hang (about 1 try in 8 with Ray alone, through a GCS
#: restart or not; the hunt has seen it with and without one), so it is known under RPC failures;
#: a stream there may give its first item only after the hunt's 30 s bound (1 try in 60 with Ray
#: alone, with store pressure on the head or without; 0 of 30 without the knob), known there too;
#: a call of an actor in a placement group made just before a GCS restart (or a Redis fault, after
#: which the GCS exits and is started again) may hang, the actor pending for ever (3 of 3 rounds
#: with Ray alone through Redis connection kills, 1 of 2 through SIGKILLs, 0 of 2 without a group);
#: before Ray 2.51, a task that must run again after its node's removal (to rebuild a value a
#: task was given, or the node's own task retried after its worker and raylet died) may run only
#: a minute later (5 of 5 and 4 of 4 rounds with Ray 2.50.1 alone; 0 of 2 of each on each later
#: release measured: 2.51, 2.52, 2.55, 2.58 and 2.60), known there for those tasks only.
KNOWN: tuple[KnownFinding, ...] = (
    KnownFinding(StepKind.CANCEL, Seen.CANCEL_LOST, "findings/cancel_lost_under_load.py"),
    KnownFinding(step=StepKind.CALL, seen=Seen.HANG,
                 script="findings/actor_call_hangs_after_gcs_restart_with_rpc_failures.py",
                 under=frozenset({FaultKind.RPC_FAILURES}), on_rpc_node=True),
    KnownFinding(step=StepKind.STREAM, seen=Seen.HANG, script="findings/stream_item_late_with_rpc_failures.py",
                 under=frozenset({FaultKind.RPC_FAILURES}), on_rpc_node=True),
    KnownFinding(step=StepKind.CALL, seen=Seen.HANG, script="findings/group_actor_pending_after_gcs_restart.py",
                 under_any=frozenset({FaultKind.GCS_RESTART, FaultKind.REDIS_CLIENT_KILL}), of_grouped_actor=True),
    KnownFinding(step=StepKind.TASK, seen=Seen.HANG, script="findings/task_rerun_late_after_node_removal.py",
                 under=frozenset({FaultKind.OBJECT_NODE_REMOVAL}), before=(2, 51), of_lost_value=True),
    KnownFinding(step=StepKind.TASK, seen=Seen.HANG, script="findings/task_rerun_late_after_node_removal.py",
                 under=frozenset({FaultKind.NODE_REMOVAL}), before=(2, 51), of_victim=True),
)


def known_finding(failure: Failure, program: Program | None = None,
                  others: Sequence[Failure] = ()) -> KnownFinding | None:
    """The known finding that explains ``failure`` in ``program`` (where its step ran), if any.
    A hang of a step that waits on a step whose hang a known finding explains (one of
    ``others``, the same run's failures) is that finding's too: it cannot end before what it
    waits on does."""
    found = next((k for k in KNOWN if k.explains(failure, program)), None)
    if found is not None or failure.signature.seen is not Seen.HANG or program is None:
        return found
    waits_on = program.depends(failure.step) if 0 <= failure.step < len(program.steps) else frozenset()
    return next((k for other in others if other.signature.seen is Seen.HANG and other.step in waits_on
                 for k in KNOWN if k.explains(other, program)), None)


def judge_step(outcome: Expected, seen: Observed) -> tuple[Seen, str] | None:
    """None when ``seen`` is allowed by ``outcome``; else what was wrong and the type's name."""
    if seen.hung:
        return Seen.HANG, ""
    if seen.error_type:
        if seen.error is not None and seen.error in outcome.errors:
            return None
        return Seen.OUTSIDE_TABLE, seen.error_type
    if outcome.value is None:
        return Seen.VALUE_NOT_ERROR, ""
    return None if seen.value == outcome.value else (Seen.WRONG_VALUE, "")


def judge_wait(step: Wait, seen: WaitSeen) -> bool:
    """Does a ray.wait's answer keep its contract? Input order kept, a partition of its
    sources, at most ``num_returns`` ready, and exactly that many when it had no timeout
    (every source ends: a failed ref counts as ready)."""
    everything = list(range(len(step.sources)))
    if sorted(seen.ready + seen.not_ready) != everything:
        return False
    if list(seen.ready) != sorted(seen.ready) or list(seen.not_ready) != sorted(seen.not_ready):
        return False
    if len(seen.ready) > step.num_returns:
        return False
    return step.timeout is not None or len(seen.ready) == step.num_returns


def judge(program: Program, landed: Sequence[Fault], seen: dict[int, Observed | WaitSeen], *,
          processes: Processes = Processes()) -> list[Failure]:
    """Every step the run observed against the oracle's outcome for it."""
    faults = tuple(sorted({f.kind for f in landed}, key=lambda k: k.value))
    clean = expect(program, (), processes=processes)  # what each step gives without a fault
    cancelled = {f.victim: f.kind is FaultKind.FORCE_CANCEL for f in landed if f.kind.cancels}
    failures = []
    for index, outcome in enumerate(expect(program, landed, processes=processes)):
        step, observed = program.steps[index], seen.get(index)
        if observed is None:
            continue
        wrong = _judged(step, outcome, observed, cancelled=cancelled.get(index)) or _taken_before(
            step, clean[index], observed)
        if wrong is not None:
            what, detail = wrong
            if what is Seen.OUTSIDE_TABLE and _undocumented(program, landed, index, observed):
                what = Seen.UNDOCUMENTED
            failures.append(Failure(Signature(step=step.kind, faults=faults, seen=what, detail=detail), index,
                                    f"step {index} {step}: expected {outcome}, saw {observed}"))
    return failures


def _taken_before(step: Step, clean: Expected | None, observed: Observed | WaitSeen) -> tuple[Seen, str] | None:
    """A stream that raised after the driver took some of its items: those items must be its
    first ones (a worker killed mid-stream yielded them before it died)."""
    if not (isinstance(step, Stream) and isinstance(observed, Observed) and observed.error_type):
        return None
    taken, want = observed.value, clean.value if clean is not None else None
    if not isinstance(taken, tuple) or not taken or not isinstance(want, tuple) or taken == want[:len(taken)]:
        return None
    return Seen.WRONG_VALUE, f"items {taken!r} before {observed.error_type}, not {want[:len(taken)]!r}"


def _undocumented(program: Program, landed: Sequence[Fault], index: int, observed: Observed | WaitSeen) -> bool:
    """Is a disallowed exception of this step one Ray's docs are silent on? Only when the one kind
    of fault that landed is Ray's RPC failure knob (a testing knob whose effects Ray's docs do not
    describe; an RPC delay beside it changes nothing), the step ran on that node (a call where its
    actor lives), and the exception is a kind of Ray's the table names; or a non-deterministic
    stream's retry ended at its own count (:func:`_retry_yielded_fewer`). Another landed fault has
    documented outcomes to judge by; the program's own ValueError, an exception the table does not
    name, a hang: failure classes."""
    if _retry_yielded_fewer(program, landed, index, observed):
        return True
    kinds = {f.kind for f in landed}  # a delay beside the failures changes nothing of its own
    if FaultKind.RPC_FAILURES not in kinds or kinds - {FaultKind.RPC_FAILURES, FaultKind.RPC_DELAY}:
        return False
    error = observed.error if isinstance(observed, Observed) else None
    return _ran_on_rpc_node(program, index) and error is not None and error.is_rays


def _retry_yielded_fewer(program: Program, landed: Sequence[Fault], index: int,
                         observed: Observed | WaitSeen) -> bool:
    """A stream whose runs after the first yield fewer items, run again after its worker was
    killed mid-stream (or a call of its failed on the node failing RPCs, which may retry it),
    that ended exactly at its retry's count, before the driver took what it wanted. Ray fails a
    replay that differs from the first *successful* run; of a retry after a failed one its docs
    say nothing (Ray 2.60 keeps the retry's count, as measured). Any other early end (without a
    retry, a retry yielding more, fewer items than the retry's) is a failure class."""
    step = program.steps[index] if 0 <= index < len(program.steps) else None
    if not (isinstance(step, Stream) and step.max_retries > 0 and step.varying < 0
            and isinstance(observed, Observed) and observed.error is ErrorKind.STREAM_ENDED):
        return False
    retried = any(f.kind in (FaultKind.KILL_WORKER, FaultKind.RPC_FAILURES) and f.victim == index for f in landed)
    shorter = step.count + step.varying
    taken = observed.value if isinstance(observed.value, tuple) else ()
    return retried and step.take > shorter and len(taken) == shorter


def _judged(step: Step, outcome: Expected | None, observed: Observed | WaitSeen, *,
            cancelled: bool | None = None) -> tuple[Seen, str] | None:
    """What was wrong with a step, if anything; ``cancelled``: a cancel fault landed on it (with
    force, or not), so a value it returns is a lost cancel."""
    if isinstance(step, Wait):
        if isinstance(observed, WaitSeen):
            return None if judge_wait(step, observed) else (Seen.WAIT_CONTRACT, "")
        return (Seen.HANG, "") if observed.hung else (Seen.OUTSIDE_TABLE, observed.error_type)
    assert outcome is not None and isinstance(observed, Observed)
    if isinstance(step, Cancel) and not observed.hung and not observed.error_type:
        return (Seen.CANCEL_LOST, f"force={step.force}") if observed.value == step.const else (Seen.WRONG_VALUE, "")
    if cancelled is not None and not observed.hung and not observed.error_type:
        return Seen.CANCEL_LOST, f"force={cancelled}"
    return judge_step(outcome, observed)
