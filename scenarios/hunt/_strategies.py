"""Hypothesis strategies for small Ray programs with faults drawn into the same example."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from scenarios.hunt._model import (
    BEYOND,
    BLOCKING,
    GETTABLE,
    ITEM_SIZES,
    LATE_REPLACEMENT,
    MAX_REPEATS,
    REDIS_FAULTS,
    SIZES,
    SLOW_RESTART,
    Actor,
    Arg,
    Call,
    Cancel,
    Drop,
    Fault,
    FaultKind,
    Naming,
    Program,
    Put,
    Step,
    StepKind,
    Stream,
    Task,
    Wait,
)

#: The most steps a program has: each costs a worker or an actor on a small cluster.
MAX_STEPS = 7


def _gettable(steps: list[Step] | tuple[Step, ...]) -> list[int]:
    """The values a later step can name: gettable ones the driver has not dropped."""
    dropped = {s.source for s in steps if isinstance(s, Drop)}
    return [i for i, s in enumerate(steps) if s.kind in GETTABLE and i not in dropped]


def _size(draw: Any, sizes: tuple[int, ...]) -> int:
    """No padding more often than not, else one of the sizes that live in the object store."""
    return int(draw(st.sampled_from((0,) * (len(sizes) - 1) + sizes)))


def _args(draw: Any, steps: list[Step]) -> tuple[Arg, ...]:
    sources = _gettable(steps)
    if not sources:
        return ()
    chosen = draw(st.lists(st.sampled_from(sources), max_size=2, unique=True))
    return tuple(Arg(i, draw(st.booleans())) for i in chosen)


def _unordered_safe(steps: list[Step], actor: int, args: tuple[Arg, ...]) -> tuple[Arg, ...]:
    """``args`` without a borrowed ref that waits on a call of ``actor`` when that actor retries
    its calls. Ray documents that such an actor's calls may run out of order once a retry occurs
    (actors/task-orders), and a restart retries: the call could run first and, single-threaded,
    wait inside for one queued behind it. A deadlock of the program, not Ray's (docs/how-to/hunt.md)."""
    retries = steps[actor]
    if not isinstance(retries, Actor) or retries.max_task_retries == 0:
        return args
    program = Program(tuple(steps))
    return tuple(a for a in args if not (a.nested and program.waits_on_actor(a.source, actor)))


def _step(draw: Any, steps: list[Step]) -> Step:
    actors = [i for i, s in enumerate(steps) if s.kind is StepKind.ACTOR]
    gettable = _gettable(steps)
    droppable = [i for i in gettable if steps[i].kind is not StepKind.CANCEL]  # a cancel's value is judged
    kinds = [StepKind.PUT, StepKind.TASK, StepKind.TASK, StepKind.ACTOR, StepKind.STREAM, StepKind.CANCEL]
    kinds += [StepKind.CALL] * 4 if actors else []  # calls are where restarts and owners meet
    kinds += [StepKind.WAIT] if gettable else []
    kinds += [StepKind.DROP] if droppable else []
    kind, const = draw(st.sampled_from(kinds)), draw(st.integers(0, 9))
    if kind is StepKind.PUT:
        return Put(const, size=BEYOND if draw(st.integers(0, 9)) == 9 else _size(draw, SIZES))
    if kind is StepKind.DROP:
        return Drop(draw(st.sampled_from(droppable)))
    if kind is StepKind.TASK:
        # One task in five runs on the removable node, its store the smallest: one in three of
        # those returns a value bigger than that store.
        away = bool(draw(st.sampled_from([False] * 4 + [True])))
        size = draw(st.sampled_from([0, 0, BEYOND])) if away else _size(draw, SIZES)
        return Task(const=const, args=_args(draw, steps), max_retries=draw(st.sampled_from([0, 0, 1, 2])),
                    retry_exceptions=draw(st.booleans()), flaky=draw(st.booleans()), boxed=draw(st.booleans()),
                    size=size, away=away)
    if kind is StepKind.ACTOR:
        restarts = draw(st.sampled_from([0, 1, -1]))
        slow = draw(st.sampled_from([0.0, SLOW_RESTART])) if restarts != 0 else 0.0
        args, naming, grouped = _args(draw, steps), draw(st.sampled_from(list(Naming))), draw(
            st.sampled_from([False, False, False, True]))
        # Another job's actor costs that job's start (2 to 3 s): one such detached actor in two.
        by_job = naming is Naming.DETACHED and not args and not grouped and draw(st.booleans())
        return Actor(const=const, args=args, max_restarts=restarts, max_task_retries=draw(st.sampled_from([0, 1, -1])),
                     naming=naming, slow_restart=slow, asynchronous=draw(st.sampled_from([False, False, False, True])),
                     grouped=grouped, by_job=by_job)
    if kind is StepKind.CALL:
        actor = draw(st.sampled_from(actors))
        return Call(actor=actor, const=const, args=_unordered_safe(steps, actor, _args(draw, steps)),
                    boxed=draw(st.booleans()), size=_size(draw, SIZES))
    if kind is StepKind.STREAM:
        count = draw(st.integers(1, 4))
        return Stream(const=const, count=count, take=draw(st.integers(0, count)), args=_args(draw, steps),
                      size=_size(draw, ITEM_SIZES), max_retries=draw(st.sampled_from([0, 1, 3])),
                      varying=draw(st.sampled_from([0, 0, 0, 1, -1])))
    if kind is StepKind.WAIT:
        sources = tuple(sorted(draw(st.lists(st.sampled_from(gettable), min_size=1, max_size=3, unique=True))))
        return Wait(sources=sources, num_returns=draw(st.integers(1, len(sources))),
                    timeout=draw(st.sampled_from([None, 0.0, 0.5])), fetch_local=draw(st.booleans()))
    return Cancel(const, draw(st.booleans()))


def _moment(draw: Any, steps: tuple[Step, ...], victim: int) -> int:
    """After which step the fault lands: from its victim's submission up to the step before
    the next one the driver blocks in (a held victim must be released before it)."""
    limit = next((i - 1 for i in range(victim + 1, len(steps)) if steps[i].kind in BLOCKING), len(steps) - 1)
    return int(draw(st.integers(victim, limit)))


def _fault(draw: Any, program: Program, *, gcs_restart: bool, rpc_failures: bool,
           rpc_delay: bool = False) -> Fault | None:
    """One more fault: object-store pressure on a stored value now and then (one a program:
    each fills the whole store), a GCS restart, RPC failures and RPC delays (one a program
    each) where asked for, else a kill."""
    if draw(st.integers(0, 3)) == 0 and (fault := _pressure(draw, program)) is not None:
        return fault
    if gcs_restart and draw(st.integers(0, 3)) == 0 and (fault := _gcs(draw, program)) is not None:
        return fault
    placed = [k for k, on in ((FaultKind.RPC_FAILURES, rpc_failures), (FaultKind.RPC_DELAY, rpc_delay)) if on]
    if placed and draw(st.integers(0, 3)) == 0 and (fault := _rpc(draw, program, draw(st.sampled_from(placed)))):
        return fault
    return _kill(draw, program)


def _rpc(draw: Any, program: Program, kind: FaultKind = FaultKind.RPC_FAILURES) -> Fault | None:
    """RPC failures (or delays, ``kind``) under a task, a stream, or an actor and its calls
    (drawn on the actor or one of its calls) that no other fault has, once a program."""
    if any(f.kind is kind for f in program.faults):
        return None
    steps, taken = program.steps, _taken(program)
    candidates = [i for i, s in enumerate(steps)
                  if s.kind in (StepKind.TASK, StepKind.STREAM, StepKind.ACTOR, StepKind.CALL)
                  and (s.actor if isinstance(s, Call) else i) not in taken | _placed_elsewhere(program)
                  and i not in taken]
    if not candidates:
        return None
    victim = draw(st.sampled_from(candidates))
    return Fault(kind, victim, victim)


def _placed_elsewhere(program: Program) -> set[int]:
    """The steps that run where something else puts them: the actors another driver job makes
    (that job's choice), the tasks that run away on the removable node."""
    return {i for i, s in enumerate(program.steps) if isinstance(s, Actor) and s.by_job} | program.away()


#: The most GCS restarts one program has (each at its own moment).
MAX_GCS_RESTARTS = 2


def _gcs(draw: Any, program: Program) -> Fault | None:
    """A GCS restart after any step (drawn for that step, landing once it or a later one is
    submitted), at most :data:`MAX_GCS_RESTARTS` a program, each after a step of its own: a
    SIGKILL of the GCS two times in three, else a fault of its Redis (the GCS exits, and is
    started again)."""
    restarts = {f.after for f in program.faults if f.kind.restarts_gcs}
    if len(restarts) >= MAX_GCS_RESTARTS:
        return None
    victim = draw(st.integers(0, len(program.steps) - 1))
    after = draw(st.integers(victim, len(program.steps) - 1))
    # A Redis fault costs 5 to 8 s (the GCS's exit, 3.7 s after its connection drops, and its
    # restart) against a GCS restart's 1 s: one draw in three, so they do not take the hunt's time.
    kind = draw(st.sampled_from([FaultKind.GCS_RESTART] * 6 + list(REDIS_FAULTS)))
    return None if after in restarts else Fault(kind, victim, after)


def _taken(program: Program) -> set[int]:
    """The victims faults have already: an actor kill's actor, what runs on the node failing
    RPCs (a step there is no other fault's: it would be placed on two nodes), else the victim
    step; and the values the driver drops (a fault's victim is a value it still holds)."""
    faulted = {program.actor_of(f) if f.kind.kills_actor else f.victim for f in program.faults}
    cancelled_calls = {s.actor for f in program.faults if f.kind.cancels
                       and isinstance(s := program.steps[f.victim], Call)}  # its actor is held busy
    return faulted | cancelled_calls | program.on_rpc_node() | program.on_rpc_node(FaultKind.RPC_DELAY) | \
        program.dropped()


def _pressure(draw: Any, program: Program) -> Fault | None:
    """Pressure on a value the object store holds: a put, or the ref a boxed task put (a small
    task return lives in its owner's memory, never in the store), at any later moment."""
    steps = program.steps
    if any(f.kind is FaultKind.OBJECT_STORE_PRESSURE for f in program.faults):
        return None
    taken = _taken(program)
    candidates = [i for i, s in enumerate(steps)  # not an away task's: the pressure fills the head's store
                  if (isinstance(s, Put) or (isinstance(s, Task) and s.boxed and not s.away)) and i not in taken]
    if not candidates:
        return None
    victim = draw(st.sampled_from(candidates))
    return Fault(FaultKind.OBJECT_STORE_PRESSURE, victim, draw(st.integers(victim, len(steps) - 1)))


def _kill(draw: Any, program: Program) -> Fault | None:
    """A kill of a victim no fault has yet (one fault per actor), whose wait does not depend
    on another held step (it could not start before that one's fault)."""
    steps, taken, held = program.steps, _taken(program), program.held()
    candidates = [i for i, s in enumerate(steps)
                  if s.kind in (StepKind.TASK, StepKind.ACTOR, StepKind.CALL, StepKind.STREAM)
                  and (s.actor if isinstance(s, Call) else i) not in taken and i not in taken
                  and not (program.depends(i) & held)]
    if not candidates:
        return None
    victim = draw(st.sampled_from(candidates))
    if isinstance(stream := steps[victim], Stream):  # as the driver consumes it: killed mid-stream, or lost
        losable = stream.take > 0 and not _removed(program) and not program.depends(victim) & program.dropped()
        kind = draw(st.sampled_from([FaultKind.KILL_WORKER] * 2 + [FaultKind.OBJECT_NODE_REMOVAL] * losable))
        return Fault(kind, victim, victim, _replacement(draw, kind), pinned=_pinned(draw, kind),
                     spilled=_spilled(draw, kind))
    after = _moment(draw, steps, victim)
    if steps[victim].kind is StepKind.TASK:
        # Lineage reconstruction runs the task again, which needs its arguments: not one the driver dropped.
        rebuildable = not program.depends(victim) & program.dropped()
        removals = [] if _removed(program) else [FaultKind.NODE_REMOVAL] + [FaultKind.OBJECT_NODE_REMOVAL] * rebuildable
        cancels = [FaultKind.CANCEL, FaultKind.FORCE_CANCEL]
        kind = draw(st.sampled_from([FaultKind.KILL_WORKER] * 3 + removals + cancels))
        # Its value's only copy is lost once the task ends, before a later step pulls a second one.
        return Fault(kind, victim, victim if kind is FaultKind.OBJECT_NODE_REMOVAL else after,
                     _replacement(draw, kind), pinned=_pinned(draw, kind), repeats=_repeats(draw, kind),
                     spilled=_spilled(draw, kind))
    actor = steps[victim].actor if isinstance(steps[victim], Call) else victim
    owns = any(isinstance(s, Call) and s.actor == actor and s.boxed and i <= after and i != victim
               for i, s in enumerate(steps))
    kill = FaultKind.OWNER_DEATH if owns else FaultKind.KILL_ACTOR
    kinds = [kill] * 3 + [FaultKind.RAY_KILL, FaultKind.RAY_KILL_NO_RESTART]
    kinds += [] if _removed(program) else [FaultKind.ACTOR_NODE_REMOVAL]
    kinds += [FaultKind.CANCEL] if isinstance(steps[victim], Call) else []  # flagged, or an async one's cancelled
    kind = draw(st.sampled_from(kinds))
    # One scheduling strategy: its group's; another job's actor runs where that job put it.
    unpinnable = isinstance(spec := steps[actor], Actor) and (spec.grouped or spec.by_job)
    return Fault(kind, victim, after, _replacement(draw, kind), pinned=not unpinnable and _pinned(draw, kind),
                 repeats=_repeats(draw, kind))


def _replacement(draw: Any, kind: FaultKind) -> float:
    """When a removed node's replacement joins: at once more often than not, else late."""
    return float(draw(st.sampled_from([0.0, 0.0, LATE_REPLACEMENT]))) if kind.removes_node else 0.0


def _pinned(draw: Any, kind: FaultKind) -> bool:
    """Is a removal's victim pinned to its node (no node for its retry, ever)? One in three."""
    return bool(draw(st.sampled_from([False, False, True]))) if kind.removes_node else False


def _spilled(draw: Any, kind: FaultKind) -> bool:
    """Is a lost value spilled on its node before the node goes? One object node removal in three."""
    return bool(draw(st.sampled_from([False, False, True]))) if kind is FaultKind.OBJECT_NODE_REMOVAL else False


def _repeats(draw: Any, kind: FaultKind) -> int:
    """How many times a cancel calls ray.cancel: once more often than not, else twice or thrice."""
    return int(draw(st.sampled_from([1, 1, 2, MAX_REPEATS]))) if kind.cancels else 1


def _removed(program: Program) -> bool:
    """Is the cluster's one removable node spoken for: a fault removes it already, or a task runs
    there away (a removal would take it along, a bystander the oracle does not judge)?"""
    return any(f.kind.removes_node for f in program.faults) or bool(program.away())


def _no_held_dependents(program: Program) -> bool:
    """No held victim, nor a task whose end an object node removal or a pressure waits for (a
    pressure's boxed task must have put its value before the store is filled), waits on a held
    step (it could not start, or end, before that one's fault)."""
    held = program.held()
    pressed = {f.victim for f in program.faults
               if f.kind is FaultKind.OBJECT_STORE_PRESSURE and isinstance(program.steps[f.victim], Task)}
    return all(not (program.depends(i) & held) for i in held | program.stored_on_node() | pressed)


@st.composite
def programs(draw: Any, *, max_steps: int = MAX_STEPS, max_faults: int = 2, gcs_restart: bool = False,
             rpc_failures: bool = False, rpc_delay: bool = False) -> Program:
    """Small Ray programs (2..``max_steps`` steps) and 1..``max_faults`` faults where the
    program has a victim for one (a task, an actor, a call or a stored value); ``max_faults=0``: none.
    ``gcs_restart``: GCS restarts are drawn too (for a cluster whose GCS keeps its tables on
    Redis: :func:`run_program`'s ``gcs_restart``). ``rpc_failures``: RPC failures are drawn too
    (for a cluster with the node that fails them: :func:`run_program`'s ``rpc_failures``);
    ``rpc_delay``: RPC delays, for a cluster with the node that delays them (``rpc_delay``)."""
    steps: list[Step] = []
    for _ in range(draw(st.integers(2, max_steps))):
        steps.append(_step(draw, steps))
    program = Program(tuple(steps))
    for _ in range(draw(st.integers(min(1, max_faults), max_faults))):
        fault = _fault(draw, program, gcs_restart=gcs_restart, rpc_failures=rpc_failures, rpc_delay=rpc_delay)
        if fault is None:
            break
        candidate = Program(program.steps, (*program.faults, fault))
        if _no_held_dependents(candidate):
            program = candidate
    return program
