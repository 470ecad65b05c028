"""The program model: a program is a list of steps over named values (each step's value is
named by its index), plus the faults drawn into it. Pure data: nothing here imports Ray."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from chaos.errors import InvalidConfig


class StepKind(enum.Enum):
    """What a step does; its value is named by the step's index."""

    PUT = "put"  # the driver's ray.put
    TASK = "task"  # a task over earlier values
    ACTOR = "actor"  # an actor whose constructor takes earlier values
    CALL = "call"  # a method of an earlier actor over earlier values
    STREAM = "stream"  # a streaming generator, consumed partly or fully
    WAIT = "wait"  # ray.wait over earlier refs
    CANCEL = "cancel"  # a task that runs until cancelled (or a short bound), cancelled at once
    DROP = "drop"  # the driver drops its ref to an earlier value (del, then a garbage collection)


class FaultKind(enum.Enum):
    """A fault drawn into a program; OWNER_DEATH is an actor kill of an actor that owns refs."""

    KILL_WORKER = "kill_worker"  # SIGKILL the worker of a task while it runs
    KILL_ACTOR = "kill_actor"  # SIGKILL an actor's process
    OWNER_DEATH = "owner_death"  # SIGKILL an actor that has put objects the program holds
    OBJECT_STORE_PRESSURE = "object_store_pressure"  # fill the store past capacity: it spills
    NODE_REMOVAL = "node_removal"  # remove the node a task is pinned to while it runs; add another
    ACTOR_NODE_REMOVAL = "actor_node_removal"  # remove the node an actor lives on; add another
    OBJECT_NODE_REMOVAL = "object_node_removal"  # remove the node holding a task's return, its only copy
    GCS_RESTART = "gcs_restart"  # SIGKILL the GCS and start it again (it keeps its tables on Redis)
    RPC_FAILURES = "rpc_failures"  # run the victim on the node whose processes fail a share of their RPCs
    RPC_DELAY = "rpc_delay"  # run the victim on the node whose processes delay their RPC handlers
    CANCEL = "cancel"  # ray.cancel(ref) of a task while it runs (held), at a drawn moment
    FORCE_CANCEL = "force_cancel"  # ray.cancel(ref, force=True) of a task while it runs
    RAY_KILL = "ray_kill"  # ray.kill(actor): it restarts as max_restarts allows
    RAY_KILL_NO_RESTART = "ray_kill_no_restart"  # ray.kill(actor, no_restart=True): dead for good
    REDIS_CLIENT_KILL = "redis_client_kill"  # CLIENT KILL the GCS's Redis connections; the GCS restarted if it exits
    REDIS_IDLE_TIMEOUT = "redis_idle_timeout"  # Redis closes idle connections after 1 s; as above
    REDIS_RESTART = "redis_restart"  # SIGKILL the GCS's Redis, start it again with its data; as above

    @property
    def restarts_gcs(self) -> bool:
        """Does it take the GCS down and bring it back (its tables kept on Redis)? Its victim
        only dates it, and it changes no step's outcome."""
        return self in (FaultKind.GCS_RESTART, *REDIS_FAULTS)

    @property
    def redis(self) -> bool:
        """Is it a fault of the Redis that keeps the GCS's tables?"""
        return self in REDIS_FAULTS

    @property
    def kills_actor(self) -> bool:
        return self in (FaultKind.KILL_ACTOR, FaultKind.OWNER_DEATH, FaultKind.ACTOR_NODE_REMOVAL,
                        FaultKind.RAY_KILL, FaultKind.RAY_KILL_NO_RESTART)

    @property
    def ray_kills(self) -> bool:
        """Is it Ray's own ``ray.kill`` rather than a signal from outside?"""
        return self in (FaultKind.RAY_KILL, FaultKind.RAY_KILL_NO_RESTART)

    @property
    def cancels(self) -> bool:
        return self in (FaultKind.CANCEL, FaultKind.FORCE_CANCEL)

    @property
    def removes_node(self) -> bool:
        """Does it take the cluster's one removable node (once a program)?"""
        return self in (FaultKind.NODE_REMOVAL, FaultKind.ACTOR_NODE_REMOVAL, FaultKind.OBJECT_NODE_REMOVAL)

    @property
    def holds(self) -> bool:
        """Does its victim wait running until it lands? Pressure's and an object node removal's
        victim is a value, not a process; a GCS restart's is the step it follows, whatever that
        step still runs."""
        return not self.restarts_gcs and not self.placed and self not in (FaultKind.OBJECT_STORE_PRESSURE,
                                                                          FaultKind.OBJECT_NODE_REMOVAL)

    @property
    def placed(self) -> bool:
        """Is it where its victim runs (a node started with one of Ray's RPC testing knobs)?"""
        return self in (FaultKind.RPC_FAILURES, FaultKind.RPC_DELAY)

    def __repr__(self) -> str:  # a program's repr is the Python that replays it
        return f"FaultKind.{self.name}"


#: The faults of the Redis behind the GCS: the GCS exits when its connection drops
#: (findings/gcs_exits_when_redis_connection_drops.py), and the hunt starts it again, as a supervisor would.
REDIS_FAULTS = (FaultKind.REDIS_CLIENT_KILL, FaultKind.REDIS_IDLE_TIMEOUT, FaultKind.REDIS_RESTART)


class Naming(enum.Enum):
    """How an actor is known: by its creator's handle only, by a name its calls look it up by
    (``ray.get_actor``), or by a name and detached from its creator's lifetime."""

    ANONYMOUS = "anonymous"
    NAMED = "named"
    DETACHED = "detached"

    def __repr__(self) -> str:
        return f"Naming.{self.name}"


@dataclass(frozen=True, slots=True)
class Arg:
    """An earlier step's value passed on: as a top-level argument (Ray resolves it) or
    ``nested`` in a list (the callee borrows the ref and gets it itself)."""

    source: int
    nested: bool = False


#: Bytes a value may be padded with: none (a small task or call return is inlined in its owner's
#: memory; a put is in the object store whatever its size), then past Ray's 100 KiB inline limit
#: (``max_direct_call_object_size``: the value lives in an object store), a few store chunks, and
#: a quarter of the hunt's 96 MiB store.
SIZES = (0, 200 * 1024, 4 * 1024 * 1024, 24 * 1024 * 1024)
#: Bytes of a value bigger than the removable node's store (Ray's smallest, 75 MiB) and within the
#: other nodes' (96 MiB): a put, or a task's return, the removable node receives or makes.
BEYOND = 80 * 1024 * 1024
#: Seconds a slow actor's constructor takes when it runs again after a restart.
SLOW_RESTART = 2.0
#: A stream item's padding: a stream of 4 such items stays well within a store.
ITEM_SIZES = (0, 200 * 1024, 1024 * 1024)


@dataclass(frozen=True, slots=True)
class Put:
    """``ray.put(const)`` by the driver; ``size`` > 0: ``[const, size zero bytes]``."""

    const: int
    size: int = 0
    kind: StepKind = field(default=StepKind.PUT, repr=False)


@dataclass(frozen=True, slots=True)
class Task:
    """A task returning ``const + sum(args)``, or, ``boxed``, a list holding a ref it put.
    ``flaky``: raises ValueError on its first attempt (``retry_exceptions`` decides a retry).
    ``size`` > 0: its return is ``[that, size zero bytes]``. ``away``: it runs on the removable
    node, whose store is the cluster's smallest, though nothing removes that node: an argument
    or a return of :data:`BEYOND` bytes is bigger than the store it goes to or is made in."""

    const: int
    args: tuple[Arg, ...] = ()
    max_retries: int = 0
    retry_exceptions: bool = False
    flaky: bool = False
    boxed: bool = False
    size: int = 0
    away: bool = False
    kind: StepKind = field(default=StepKind.TASK, repr=False)


@dataclass(frozen=True, slots=True)
class Actor:
    """An actor whose base is ``const + sum(args)`` (its constructor gets the args); named or
    detached, its calls go through the handle ``ray.get_actor`` returns for its name.
    ``slow_restart`` seconds: its constructor takes that long when it runs again after a
    restart, so calls arrive while the actor is restarting. ``asynchronous``: its method is a
    coroutine, so Ray makes it an async actor: its calls run concurrently on its event loop (a
    held one waits there while later ones run), and a cancel cancels a running call's asyncio task.
    ``grouped``: it runs in the one bundle of a placement group of its own (on the node it would
    run on anyway); when that node is removed, Ray places the bundle again and restarts the actor in it.
    ``by_job`` (a detached actor without args): a second driver job makes it and ends before the
    next step (``_job``); the program's driver looks it up by name, so its later GCS faults fall
    across two jobs, one of them ended."""

    const: int
    args: tuple[Arg, ...] = ()
    max_restarts: int = 0
    max_task_retries: int = 0
    naming: Naming = Naming.ANONYMOUS
    slow_restart: float = 0.0
    asynchronous: bool = False
    grouped: bool = False
    by_job: bool = False
    kind: StepKind = field(default=StepKind.ACTOR, repr=False)

    def __post_init__(self) -> None:
        if self.by_job and (self.naming is not Naming.DETACHED or self.args or self.grouped):
            raise InvalidConfig(f"{self!r}: by_job=True is for a detached actor without args outside a placement "
                                "group (it outlives the job that makes it; a ref or a group is the driver's own, "
                                "not that job's): give naming=Naming.DETACHED, args=(), grouped=False")


@dataclass(frozen=True, slots=True)
class Call:
    """A method of the actor made by step ``actor``: ``base + const + sum(args)``, or,
    ``boxed``, a list holding a ref the actor put (the actor owns it); ``size`` as a task's."""

    actor: int
    const: int
    args: tuple[Arg, ...] = ()
    boxed: bool = False
    size: int = 0
    kind: StepKind = field(default=StepKind.CALL, repr=False)


@dataclass(frozen=True, slots=True)
class Stream:
    """A generator yielding ``const + sum(args) + i`` for i < count; the driver takes ``take``.
    ``size`` > 0: each item is ``[that, size zero bytes]``. ``max_retries``: Ray's task option
    (its default, 3, unless drawn): a worker killed mid-stream runs the generator again.
    A KILL_WORKER's victim, it yields :meth:`held_at` items, then is held until the kill; the
    driver takes what it wants of those first. An OBJECT_NODE_REMOVAL's victim, it runs on the
    removable node with items too big to inline (only there), and the driver takes their refs,
    gets their values only once the node is gone: Ray rebuilds them by running it again.
    ``varying``: every run after the first yields that many more items (fewer, negative): a
    non-deterministic generator, whose replay Ray fails (StreamingGeneratorReplayInconsistentError)."""

    const: int
    count: int
    take: int
    args: tuple[Arg, ...] = ()
    size: int = 0
    max_retries: int = 3
    varying: int = 0
    kind: StepKind = field(default=StepKind.STREAM, repr=False)

    def __post_init__(self) -> None:
        if self.count + self.varying < 0:
            raise InvalidConfig(f"{self!r}: a run after the first would yield {self.count + self.varying} items; "
                                f"give varying >= {-self.count}")

    def held_at(self) -> int:
        """How many items a held stream yields before it waits for its fault: half of them."""
        return self.count // 2


@dataclass(frozen=True, slots=True)
class Wait:
    """``ray.wait`` over earlier refs with ``num_returns`` and ``timeout`` (None: unbounded)."""

    sources: tuple[int, ...]
    num_returns: int
    timeout: float | None
    fetch_local: bool = True
    kind: StepKind = field(default=StepKind.WAIT, repr=False)


@dataclass(frozen=True, slots=True)
class Cancel:
    """A task that runs until cancelled (or :data:`CANCEL_HOLD` seconds, then returns
    ``const``), cancelled at once with ``force``."""

    const: int
    force: bool = False
    kind: StepKind = field(default=StepKind.CANCEL, repr=False)


@dataclass(frozen=True, slots=True)
class Drop:
    """The driver drops its ref to step ``source``'s value (``del``, then ``gc.collect()``):
    later steps cannot name it, and its value is not observed. Ray keeps an object while any
    reference to it lives (a borrower's, a pending task's argument's), so dropping changes no
    other step's outcome, with one exception Ray states: an actor whose constructor argument in
    the object store goes out of scope cannot be restarted (ray-project/ray#53727; the oracle's
    ``Situation.RESTART_WITHOUT_ARGS``)."""

    source: int
    kind: StepKind = field(default=StepKind.DROP, repr=False)


Step = Put | Task | Actor | Call | Stream | Wait | Cancel | Drop
#: Steps whose value is a ref the driver (or a callee) can get.
GETTABLE = (StepKind.PUT, StepKind.TASK, StepKind.CALL, StepKind.CANCEL)
#: Steps during which the driver blocks: a fault on a held step must land before them.
BLOCKING = (StepKind.STREAM, StepKind.WAIT)
#: How long a cancelled task runs when its cancel never lands (then it returns its value).
CANCEL_HOLD = 3.0
#: Seconds a late replacement of a removed node waits before it joins: what was on the node
#: (a task's retry, an actor's restart, a lost object's reconstruction) has nowhere to go meanwhile.
LATE_REPLACEMENT = 5.0
#: The most times a cancel fault calls ``ray.cancel`` on its victim.
MAX_REPEATS = 3


@dataclass(frozen=True, slots=True)
class Fault:
    """A fault on step ``victim``, landing once step ``after`` has been submitted.

    KILL_WORKER: ``victim`` is a task, held running until the kill, or a stream, held mid-stream
    (``after`` is the stream: it lands as the driver consumes it). KILL_ACTOR / OWNER_DEATH:
    ``victim`` is an actor step (no call in flight) or a call (held in flight at the kill).
    OBJECT_STORE_PRESSURE: ``victim`` is a value in the object store (a put, or a task's boxed
    ref, once the task has put it), not held: the store is filled past its capacity, so Ray
    spills what it holds. It lands when the victim's owner says Ray spilled the victim's object.
    NODE_REMOVAL: ``victim`` is a task pinned to the cluster's one removable node, held running
    until that node is removed (a replacement is added at once, so a retry has somewhere to run).
    ACTOR_NODE_REMOVAL: as KILL_ACTOR, but the actor lives on the removable node and the whole
    node is removed (raylet, workers, object store); a restart finds the replacement.
    OBJECT_NODE_REMOVAL: ``victim`` is a task pinned to the removable node whose return is too
    big to be inlined (Ray stores it in that node's object store, its only copy); once it has
    finished, the node is removed. A get must find the value again by lineage reconstruction
    (the task runs again on the replacement) while the task has retries left. Its victim may be
    a stream placed there (its items too big to inline): once the stream has ended with the
    driver holding the refs of the items it takes (their values not got), the node is removed,
    and the gets rebuild them by running the generator again.
    GCS_RESTART: the GCS is SIGKILLed and started again once step ``after`` is submitted, while
    the steps before it may still run; ``victim`` is the step it was drawn for, not held. On a
    cluster whose GCS keeps its tables on Redis it changes no step's outcome (Ray's GCS fault
    tolerance guide: tasks, actors and objects stay; what needs the GCS waits for it).
    RPC_FAILURES: ``victim`` (a task, a stream, or an actor with its calls) runs on the node
    whose processes were started with Ray's RPC failure knob for every method (``*``): a share
    of their requests and replies fail, some while the server still runs them. A call there may
    find its actor unavailable (Ray's exceptions reference); nothing else changes. It lands when a
    call made for a step there failed while the step ran, by the process that ran it (a stream's
    item reported back, a borrowed ref asked of its owner, a put pinned) or by that node's raylet
    (an actor call's args arrived, its objects moved): ``_rpc.WORKER_METHODS``,
    ``_rpc.RAYLET_METHODS``. Their background calls do not count. ``after`` is its victim.
    Ray retries its RPCs (its own chaos tests inject failures into every RPC), so it changes no
    step's outcome.
    RPC_DELAY: as RPC_FAILURES, on the node whose processes were started with Ray's RPC delay knob
    (``RAY_testing_asio_delay_us``): every task or call pushed to a worker there waits a fixed
    time before it runs (``CoreWorkerService.grpc_server.PushTask``), and a lease, an object pull
    and a stream item's reply each a drawn time. It lands once a process that ran a step placed
    there is seen started with the knob (its pid mark's environment): the fixed delay then held
    up every task it ran. A delay changes no step's outcome.
    CANCEL / FORCE_CANCEL: ``victim`` is a task, held running until ``ray.cancel`` of its ref
    (with ``force`` for FORCE_CANCEL), issued once step ``after`` is submitted (its dependents
    and borrowers may exist by then); the driver releases it only once it ended (bounded). Ray's
    ``ray.cancel`` reference: a running task gets a KeyboardInterrupt (or its worker exits, with
    ``force``), ``ray.get`` raises TaskCancelledError (or WorkerCrashedError), and cancelled
    tasks are not retried, whatever their ``max_retries``. A CANCEL's victim may be an actor call
    (held running): a regular actor's Ray does not interrupt but flags
    (``ray.get_runtime_context().is_canceled()``), and it lands once the call saw the flag; an
    async actor's Ray cancels as an asyncio task, and it lands once the call's await raised
    CancelledError.
    RAY_KILL / RAY_KILL_NO_RESTART: as KILL_ACTOR, by ``ray.kill(actor)`` (``no_restart=True``
    for the latter: the actor is dead for good whatever its ``max_restarts``); it lands once the
    actor's process has exited.
    ``replace_after`` (node removals only): seconds before the removed node's replacement joins
    (0: at once; :data:`LATE_REPLACEMENT`: a late one, so what the node ran waits for somewhere to go;
    the driver goes on submitting steps meanwhile, and adds it, its delay over, before it blocks).
    ``pinned`` (node removals only): the victim is pinned to the removable node by node affinity
    (``soft=False``), so its retry, restart or reconstruction has no node to go to once that node
    is gone: a replacement is another node. Ray's NodeAffinitySchedulingStrategy reference: "If
    the node doesn't exist or is infeasible, the task or actor will fail if soft is False".
    ``spilled`` (OBJECT_NODE_REMOVAL only): before the node is removed, its object store is
    filled past capacity (by a task there), so Ray spills the victim's value on that node first:
    the node then takes the spilled copy with it. It lands only once the victim's owner says it
    was spilled.
    ``repeats`` (cancels only): how many times ``ray.cancel`` is called, back to back, with the
    same ``force`` (a force cancel right after a plain one crashes the driver:
    findings/force_cancel_after_cancel_crashes_driver.py; the hunt's driver is the hunt).
    REDIS_CLIENT_KILL / REDIS_IDLE_TIMEOUT / REDIS_RESTART: as GCS_RESTART, through the Redis
    that keeps the GCS's tables: its connections killed (``CLIENT KILL``), closed once idle
    for a second (``timeout 1``), or the server SIGKILLed and started again with its data.
    The GCS exits when its connection drops (findings/gcs_exits_when_redis_connection_drops.py);
    the driver starts it again, as the head's supervisor would. It lands once the fault was
    confirmed on Redis and the GCS answers again; landed, it changes no step's outcome."""

    kind: FaultKind
    victim: int
    after: int
    replace_after: float = 0.0
    pinned: bool = False
    repeats: int = 1
    spilled: bool = False

    def __post_init__(self) -> None:
        if self.replace_after and not self.kind.removes_node:
            raise InvalidConfig(f"{self!r}: replace_after={self.replace_after!r} is for node removals only "
                                "(a replacement node joins after them); leave it 0 for other faults")
        if self.replace_after < 0:
            raise InvalidConfig(f"{self!r}: replace_after={self.replace_after!r} seconds; give 0 (at once) or more")
        if self.pinned and not self.kind.removes_node:
            raise InvalidConfig(f"{self!r}: pinned=True is for node removals only (their victim is pinned to the "
                                "removed node); leave it False for other faults")
        if self.spilled and self.kind is not FaultKind.OBJECT_NODE_REMOVAL:
            raise InvalidConfig(f"{self!r}: spilled=True is for OBJECT_NODE_REMOVAL only (its victim's value is "
                                "spilled on the node before it goes); leave it False for other faults")
        if self.repeats != 1 and not (self.kind.cancels and 1 <= self.repeats <= MAX_REPEATS):
            raise InvalidConfig(f"{self!r}: repeats={self.repeats!r}; ray.cancel is repeated for cancels only, "
                                f"1 to {MAX_REPEATS} times: give repeats=1 for other faults")


@dataclass(frozen=True, slots=True)
class Program:
    """Steps over named values and the faults drawn into the same example."""

    steps: tuple[Step, ...]
    faults: tuple[Fault, ...] = ()

    def __post_init__(self) -> None:
        """A program written by hand (a report's replay, edited) names no value its driver
        dropped: such a step would fail in the driver, not in Ray."""
        for index, step in enumerate(self.steps):
            if isinstance(step, Drop) and not (0 <= step.source < index and self.steps[step.source].kind in GETTABLE):
                raise InvalidConfig(f"step {index} {step!r} drops step {step.source}, which is not an earlier "
                                    "put, task, call or cancel; drop an earlier value")
            dropped = {s.source for s in self.steps[:index] if isinstance(s, Drop)}
            named = {a.source for a in getattr(step, "args", ())} | set(getattr(step, "sources", ()))
            if named & dropped:
                raise InvalidConfig(f"step {index} {step!r} names step(s) {sorted(named & dropped)}, which an earlier "
                                    "Drop dropped; name a value the driver still holds, or drop it later")
        for fault in (f for f in self.faults if isinstance(self.steps[f.victim], Stream)
                      and not f.kind.restarts_gcs):  # a GCS restart's victim only dates it
            stream_faults = (FaultKind.KILL_WORKER, FaultKind.OBJECT_NODE_REMOVAL, FaultKind.RPC_FAILURES,
                             FaultKind.RPC_DELAY)
            if fault.kind not in stream_faults or fault.after != fault.victim:
                raise InvalidConfig(f"{fault!r} falls on the stream at step {fault.victim}; a stream's fault is a "
                                    "KILL_WORKER, OBJECT_NODE_REMOVAL, RPC_FAILURES or RPC_DELAY landing as it is "
                                    "consumed: after=victim")
        for fault in (f for f in self.faults if f.kind.cancels):
            victim = self.steps[fault.victim]
            if not (isinstance(victim, Task) or (isinstance(victim, Call) and fault.kind is FaultKind.CANCEL)):
                raise InvalidConfig(f"{fault!r} cancels step {fault.victim} {victim!r}; a cancel's victim is a task, "
                                    "or an actor call without force (Ray refuses force=True for actor calls)")
        if (away := self.away()) and (faults := [f for f in self.faults if f.kind.removes_node or
                                                 (f.kind.placed and f.victim in away)]):
            raise InvalidConfig(f"{faults[0]!r} with the task(s) at step(s) {sorted(away)} running away on the "
                                "removable node: an away task is no node removal's bystander, nor an RPC fault's "
                                "victim (placed on a node of its own); give away=False, or drop the fault")
        for fault in (f for f in self.faults if f.pinned or f.kind.placed):
            step = self.steps[fault.victim]
            maker = step.actor if isinstance(step, Call) else fault.victim
            if isinstance(made := self.steps[maker], Actor) and made.by_job:
                raise InvalidConfig(f"{fault!r} places (or pins) the actor at step {maker}, which another driver "
                                    "job makes where it runs (on the head, or the removable node for a removal): "
                                    "fault another actor, or make this one by the driver")
        for fault in (f for f in self.faults if f.pinned and f.kind is FaultKind.ACTOR_NODE_REMOVAL):
            actor = self.steps[self.actor_of(fault)]
            if isinstance(actor, Actor) and actor.grouped:
                raise InvalidConfig(f"{fault!r} pins the actor at step {self.actor_of(fault)}, which runs in a "
                                    "placement group: an actor has one scheduling strategy; pin it or group it")
        if victims := {f.victim for f in self.faults if not f.kind.restarts_gcs} & self.dropped():
            raise InvalidConfig(f"faults on step(s) {sorted(victims)}, whose value the program drops; a fault's "
                                "victim is a value the driver holds: drop another, or fault another step")

    def held(self) -> frozenset[int]:
        """Steps held running until their fault lands (so the fault finds them in flight)."""
        return frozenset(f.victim for f in self.faults
                         if f.kind.holds and self.steps[f.victim].kind is not StepKind.ACTOR)

    def away(self) -> frozenset[int]:
        """The tasks that run on the removable node though nothing removes it (``Task.away``)."""
        return frozenset(i for i, s in enumerate(self.steps) if isinstance(s, Task) and s.away)

    def dropped(self) -> frozenset[int]:
        """The steps whose value the driver drops (by a :class:`Drop` step)."""
        return frozenset(s.source for s in self.steps if isinstance(s, Drop))

    def size(self, index: int) -> int:
        """The bytes step ``index``'s value (each item, for a stream) is padded with."""
        return int(getattr(self.steps[index], "size", 0))

    def padded(self, index: int) -> bool:
        """Does step ``index``'s value travel as ``[value, padding]`` (drawn a size, or made big
        to stay on the removable node)?"""
        return self.size(index) > 0 or index in self.stored_on_node()

    def on_rpc_node(self, kind: FaultKind = FaultKind.RPC_FAILURES) -> frozenset[int]:
        """Steps that run on the node failing RPCs: an RPC_FAILURES victim (an actor for a call);
        ``kind=RPC_DELAY``: on the node delaying them, an RPC_DELAY victim."""
        found = set()
        for fault in (f for f in self.faults if f.kind is kind):
            step = self.steps[fault.victim]
            found.add(step.actor if isinstance(step, Call) else fault.victim)
        return frozenset(found)

    def pinned(self) -> frozenset[int]:
        """Steps pinned to the removable node by node affinity: a pinned removal's victim (an
        actor, for an actor node removal)."""
        return frozenset(self.actor_of(f) if f.kind.kills_actor else f.victim for f in self.faults if f.pinned)

    def stored_on_node(self) -> frozenset[int]:
        """Tasks whose return (streams whose items) are made big and kept on the removable
        node: an object node removal's victims."""
        return frozenset(f.victim for f in self.faults if f.kind is FaultKind.OBJECT_NODE_REMOVAL)

    def waits_on_actor(self, index: int, actor: int) -> bool:
        """Does step ``index``'s value wait on a call of ``actor`` (is one, or depends on one)?"""
        waited = (self.steps[i] for i in {index} | self.depends(index))
        return any(isinstance(s, Call) and s.actor == actor for s in waited)

    def depends(self, index: int) -> frozenset[int]:
        """The steps ``index`` waits for, transitively: its args, its actor, and the calls
        queued before it on that actor (an actor runs its calls in order; one that retries its
        calls may not once a retry occurs, which the generator keeps clear of: ``_unordered_safe``)."""
        step, found = self.steps[index], set()
        direct = {a.source for a in getattr(step, "args", ())} | set(getattr(step, "sources", ()))
        if isinstance(step, Call):
            direct |= {step.actor} | {i for i, s in enumerate(self.steps[:index])
                                      if isinstance(s, Call) and s.actor == step.actor}
        for d in direct:
            found |= {d} | self.depends(d)
        return frozenset(found)

    def actor_of(self, fault: Fault) -> int:
        """The actor step a KILL_ACTOR / OWNER_DEATH / ACTOR_NODE_REMOVAL fault kills."""
        assert fault.kind.kills_actor, f"{fault.kind!r} kills no actor"
        step = self.steps[fault.victim]
        return step.actor if isinstance(step, Call) else fault.victim
