"""Run a program on the connected Ray cluster with its faults, observe every step within a
bound, and judge it against the oracle."""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import gc
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from chaos.cluster import shared_host_worker_args
from chaos.history import Verdict
from scenarios.hunt._model import (
    BLOCKING,
    CANCEL_HOLD,
    GETTABLE,
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
    Stream,
    Task,
    Wait,
)
from scenarios.hunt._oracle import (
    ErrorKind,
    Failure,
    Observed,
    Processes,
    Seen,
    Signature,
    WaitSeen,
    judge,
    known_finding,
)
from scenarios.hunt._rpc import (
    HUNT_RPC,
    HUNT_SLOW,
    PUSH_DELAY_S,
    Injected,
    Injections,
    Window,
    delayed_process,
    rpc_raylet,
)

T = TypeVar("T")

#: Seconds every get of a program shares: past it, what has not ended is a hang.
BOUND = 30.0
#: The least a get waits once the shared bound is spent (so one hang does not hide the rest).
LAST_LOOK = 0.2
#: Seconds a trivial task and a fresh actor have to answer after a program (a worker to start).
PROBE_BOUND = 30.0
#: The custom resource of the one node a node removal removes (only its victims ask for it).
HUNT_NODE = "hunt_node"
#: The resource the head of a ``local_cluster`` of several nodes has: every other step asks for it.
HEAD = "rc_head"
#: The probe actor's runtime env: no worker the pool started ahead (for the job's own env) matches
#: it, so the raylet starts one for it, and the pool keeps its count.
PROBE_ENV = {"env_vars": {"RAYCHAOS_HUNT_PROBE": "1"}}
#: This driver's probe actor, by its cluster's address and the driver's worker id (a driver of
#: another connection is another key): one at a time, as a driver is connected to one cluster.
_PROBE: dict[tuple[str, str], Any] = {}
#: Seconds an actor seen ALIVE has to answer a method call before it counts as never constructed.
READY_BOUND = 5.0
#: Seconds one read of the GCS's actor table may take (the GCS answers in milliseconds when up).
ROW_BOUND = 5.0
#: Seconds a GCS restart keeps the GCS down before starting it again.
GCS_DOWN = 0.5
#: Seconds a cancelled running task has to end before the driver releases it anyway (then a
#: value it returns is a lost cancel).
CANCEL_BOUND = 10.0
#: Seconds the replacement of a removed node has to join.
NODE_BOUND = 60.0
#: Seconds an actor's process has to exit after ``ray.kill`` (else the kill is missed).
KILL_BOUND = 10.0
#: Seconds the GCS has to exit once its Redis connection dropped (Ray 2.60's exits about 3.7 s
#: after: findings/gcs_exits_when_redis_connection_drops.py); one that does not kept serving.
GCS_EXIT_BOUND = 8.0
#: Seconds a Redis idle timeout of 1 s stays set: what the GCS left idle meanwhile is closed.
IDLE_HOLD = 2.0
#: Seconds a placement group's bundle has to be placed before its node's removal is missed.
GROUP_BOUND = 30.0
#: The removable node's object store (bytes), and each replacement's: Ray's smallest, under the
#: hunt's other nodes' 96 MiB, so a value the head holds can be bigger than the store it is sent to.
REMOVABLE_STORE = 75 * 1024 * 1024
#: The object store (bytes) of the hunt cluster's other nodes: small, so pressure fills one fast.
NODE_STORE = 96 * 1024 * 1024
#: Bytes an object node removal's victim pads its return with: past Ray's 100 KiB inline
#: limit (``max_direct_call_object_size``), so the value lives in its node's object store.
STORED_PAD = 256 * 1024


class Phase(enum.Enum):
    """A part of a program's run, timed."""

    DRIVE = "submit and land faults"
    OBSERVE = "get every value"
    CLEAN_UP = "release, cancel, kill actors"
    REPLACE = "wait for a late replacement node"
    PROBE = "probe the cluster"
    WARM = "start workers ahead"


class _Phases:
    """Seconds per phase of one run."""

    def __init__(self) -> None:
        self.spent: dict[Phase, float] = {}

    def timed(self, phase: Phase, work: Callable[[], T]) -> T:
        started = time.monotonic()
        try:
            return work()
        finally:
            self.spent[phase] = self.spent.get(phase, 0.0) + time.monotonic() - started

    def seconds(self) -> tuple[tuple[Phase, float], ...]:
        return tuple(self.spent.items())


@dataclass(frozen=True, slots=True)
class ProgramVerdict:
    """One program's run: the faults that landed and missed, its failures, and the slowest
    get (seconds: Hypothesis's target() steers towards long recoveries)."""

    program: Program
    landed: tuple[Fault, ...]
    missed: tuple[Fault, ...]
    failures: tuple[Failure, ...]
    slowest: float
    #: Seconds the run spent in each phase (where a hunt's time goes: benchmarks/hunt.py sums them).
    phases: tuple[tuple[Phase, float], ...] = ()
    #: Seconds each fault took to land or miss (part of the DRIVE phase), by its kind.
    landing: tuple[tuple[FaultKind, float], ...] = ()
    #: The away tasks seen to take or make a value bigger than their node's store (confirmed: each
    #: returned its value, and one of its processes was a worker of the removable node).
    beyond: tuple[int, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.failures

    def verdict(self) -> Verdict:
        """The program's run as the one verdict type: broken by a failure no known finding
        explains; unknown when it showed an outcome Ray's docs are silent on, or when every fault
        it drew missed (it tested nothing of them); else held (a known finding's failure is
        reported, not counted again)."""
        known = len(self.failures) - len(self.new) - len(self.undocumented)
        detail = f"{len(self.landed)} faults landed, {len(self.missed)} missed, {len(self.failures)} failures" + (
            f" ({known} known, {len(self.undocumented)} undocumented)" if self.failures else "")
        if self.new:
            return Verdict.of("program", False, f"{detail}: {self.new[0].signature.label()}", len(self.landed))
        if self.undocumented:
            return Verdict.unknown("program", f"{detail}: {self.undocumented[0].signature.label()}", len(self.landed))
        if self.missed and not self.landed:
            return Verdict.unknown("program", f"{detail}: no fault it drew landed", 0)
        return Verdict.of("program", True, detail, len(self.landed))

    @property
    def new(self) -> tuple[Failure, ...]:
        """The failures no known finding explains (see ``findings/``): what a hunt is for. An
        outcome Ray's docs are silent on is counted apart (:attr:`undocumented`)."""
        return tuple(f for f in self.failures
                     if known_finding(f, self.program, self.failures) is None
                     and f.signature.seen is not Seen.UNDOCUMENTED)

    @property
    def undocumented(self) -> tuple[Failure, ...]:
        """Outcomes Ray's docs neither allow nor forbid: no pass and no bug, a class of their own."""
        return tuple(f for f in self.failures if f.signature.seen is Seen.UNDOCUMENTED)

    def report(self) -> str:
        """The failures (a known one with its reproduction) and the program that replays them
        (its repr is a valid Program)."""
        lines = [f"{f.signature.label()}: {f.message}" + _known_note(f, self.program, self.failures)
                 for f in self.failures]
        return "\n".join([*lines, f"replay: run_program({self.program!r})"])


def _known_note(failure: Failure, program: Program, others: Sequence[Failure] = ()) -> str:
    known = known_finding(failure, program, others)
    return f" [known: {known.script}]" if known else ""


@dataclass
class _Taking:
    """A stream being consumed: its generator, when it started, the refs taken so far and the
    values got of them (all of them, but for a stream whose items are got after their node is gone)."""

    gen: Any
    started: float
    refs: list[Any] = field(default_factory=list)
    items: list[int] = field(default_factory=list)


@dataclass
class Interpreter:
    """Submits a program's steps in order, lands each fault once its step is submitted, then
    gets every value. One per program run; its methods are the seams tests plant bugs in."""

    program: Program
    address: str
    bound: float = BOUND
    cluster: Any = None  # a ray.cluster_utils.Cluster with one HUNT_NODE worker: node removals land
    gcs_restart: bool = False  # the cluster's GCS keeps its tables on Redis: GCS restarts land
    rpc_failures: bool = False  # the cluster has a HUNT_RPC node (see _rpc.add_rpc_node): RPC failures land
    rpc_delay: bool = False  # the cluster has a HUNT_SLOW node (see _rpc.add_slow_node): RPC delays land
    marks: str = ""
    refs: dict[int, Any] = field(default_factory=dict)
    #: A named actor's handle as ``ray.get_actor`` returned it: its calls go through it.
    handles: dict[int, Any] = field(default_factory=dict)
    seen: dict[int, Observed | WaitSeen] = field(default_factory=dict)
    landed: list[Fault] = field(default_factory=list)
    missed: list[Fault] = field(default_factory=list)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    #: When each step was submitted and its result came back (``time.time()``): its own window.
    submitted: dict[int, float] = field(default_factory=dict)
    ended: dict[int, float] = field(default_factory=dict)
    #: The processes landed worker kills SIGKILLed (each the held attempt's, by its started mark).
    kills: set[int] = field(default_factory=set)
    #: The raylet of the HUNT_RPC node (its pid): it leases, feeds and answers the steps placed there.
    rpc_raylet: int | None = None
    #: When a late replacement of the removed node is due (``time.monotonic()``), until it joins.
    replacement_due: float | None = None
    #: Why a replacement did not join (the probe reports it: later programs have no removable node).
    replacement_failed: str | None = None
    #: Streams being consumed: their generator, and the items taken so far.
    streams: dict[int, _Taking] = field(default_factory=dict)
    #: The cluster's probe actor (or what making it raised): made after the first program's faults, kept.
    probe: Any = None
    #: Seconds each fault took to land (or miss), by its kind, in the order they came.
    landing: list[tuple[FaultKind, float]] = field(default_factory=list)
    #: A grouped actor's placement group (by the actor's step), removed once the program has run.
    groups: dict[int, Any] = field(default_factory=dict)
    #: The tasks that filled the removable node's store (``Fault.spilled``), cancelled at clean-up.
    fillers: list[Any] = field(default_factory=list)

    def run(self) -> ProgramVerdict:
        injections = self._injections()
        clock, beyond = _Phases(), tuple[int, ...]()
        with tempfile.TemporaryDirectory(prefix="hunt-") as marks:
            self.marks = marks
            try:
                failures = clock.timed(Phase.DRIVE, self._drive)
                clock.timed(Phase.PROBE, self._start_probe)  # faults landed: a new one starts as the gets wait
                clock.timed(Phase.REPLACE, lambda: self.replace_late(due_or_not=True))
                failures += clock.timed(Phase.OBSERVE, self._observe_all)
                beyond = self._beyond_store()  # while the processes that ran them live
            finally:
                self._judge_rpc_delay()  # while the processes that ran its victims live
                clock.timed(Phase.REPLACE, lambda: self.replace_late(due_or_not=True))
                clock.timed(Phase.CLEAN_UP, self._clean_up)
            self._judge_rpc_failures(injections)  # before the probe: its failures carry the fault
            unusable = clock.timed(Phase.PROBE, self._cluster_usable)  # once what it left running is cancelled
            failures += unusable
            if not unusable:  # every fault has landed and the probe answered: workers for the next program
                clock.timed(Phase.WARM, self._warm)
            processes = self.processes()  # while the marks are there
        failures = [*judge(self.program, self.landed, self.seen, processes=processes), *failures]
        slowest = max((o.seconds for o in self.seen.values() if isinstance(o, Observed)), default=0.0)
        return ProgramVerdict(program=self.program, landed=tuple(self.landed), missed=tuple(self.missed),
                              failures=tuple(failures), slowest=slowest, phases=clock.seconds(),
                              landing=tuple(self.landing), beyond=beyond)

    def _drive(self) -> list[Failure]:
        """Submit every step and land every fault; a raise here is the driver crashing."""
        try:
            for index, step in enumerate(self.program.steps):
                # A step the driver blocks in waits on what the late replacement brings back.
                self.replace_late(due_or_not=step.kind in BLOCKING)
                self.submitted[index] = time.time()
                self.refs[index] = self.submit(index, step)
                for fault in (f for f in self.program.faults if f.after == index):
                    self.replace_late(due_or_not=True)  # its victim may wait on the removed node's work
                    started = time.monotonic()
                    self.land(fault)
                    self.landing.append((fault.kind, time.monotonic() - started))
                if isinstance(step, Stream):  # consumed as it is submitted (a held one, after its fault)
                    self.finish(index, step)
                    self.ended[index] = time.time()
        except Exception as exc:  # noqa: BLE001 - the driver must never raise: a finding
            return [Failure(Signature(step=None, faults=self._fault_kinds(), seen=Seen.DRIVER_CRASH,
                                      detail=type(exc).__name__),
                            -1, f"the driver raised {exc!r}")]
        return []

    # -- submitting ------------------------------------------------------------------------

    def submit(self, index: int, step: Step) -> Any:
        import ray

        from scenarios.hunt._remote import padded

        if isinstance(step, Put):
            return ray.put(padded(step.const, step.size))
        if isinstance(step, Task):
            return self.submit_task(index, step)
        if isinstance(step, Actor):
            return self.submit_actor(index, step)
        if isinstance(step, Call):
            held = index in self.program.held()
            actor = self.handles.get(step.actor, self.refs[step.actor])
            return actor.call.remote(index, step.const, self.marks, held, step.boxed, *self.args(step.args),
                                     pad=step.size)
        if isinstance(step, Stream):
            return self.consume(index, step)
        if isinstance(step, Wait):
            return self.wait(index, step)
        if isinstance(step, Drop):
            return self.drop(step)
        assert isinstance(step, Cancel)
        return self.submit_cancel(index, step)

    def drop(self, step: Drop) -> None:
        """Drop the driver's ref to ``step.source`` and collect, so Ray hears it is gone now."""
        del self.refs[step.source]
        gc.collect()

    def args(self, args: tuple[Arg, ...]) -> list[Any]:
        return [[self.refs[a.source]] if a.nested else self.refs[a.source] for a in args]

    def submit_task(self, index: int, step: Task) -> Any:
        from scenarios.hunt._remote import hunt_task, remote

        held = index in self.program.held()
        options = remote(hunt_task).options(max_retries=step.max_retries, retry_exceptions=step.retry_exceptions,
                                    name=self.name(index), num_cpus=0 if held else 1, **self.where(index))
        pad = max(step.size, STORED_PAD if index in self.program.stored_on_node() else 0)
        return options.remote(index, step.const, self.marks, held, step.flaky, step.boxed, *self.args(step.args),
                              pad=pad)

    def submit_actor(self, index: int, step: Actor) -> Any:
        """The actor; named or detached, its calls' handle is the one its name looks up (Ray
        registers a name as the actor is created, so the lookup finds it at once)."""
        import ray

        from scenarios.hunt._remote import HuntActor, HuntAsyncActor, remote

        if step.by_job:
            return self.made_by_job(index, step)
        named = {} if step.naming is Naming.ANONYMOUS else {"name": f"hunt-{self.run_id}-{index}"}
        detached = {"lifetime": "detached"} if step.naming is Naming.DETACHED else {}
        cls = HuntAsyncActor if step.asynchronous else HuntActor
        if step.grouped:
            self.groups[index] = self.group(index)
        options = remote(cls).options(max_restarts=step.max_restarts, max_task_retries=step.max_task_retries,
                                      num_cpus=0, **self.where(index), **named, **detached)
        actor = options.remote(step.const, *self.args(step.args), slow_restart=step.slow_restart)
        if named:
            self.handles[index] = ray.get_actor(named["name"])
        return actor

    def made_by_job(self, index: int, step: Actor) -> Any:
        """Actor ``index`` made by a second driver job, once the GCS says that job ended: its
        handle, by its name. A job that failed or did not end raises ``JobFailed`` (the driver
        cannot go on, a finding), its actor killed if it was made."""
        import ray

        from scenarios.hunt._job import JobFailed, JobSpec, make_by_job

        try:
            made = make_by_job(JobSpec(address=self.address, namespace=ray.get_runtime_context().namespace,
                                       node_ip=ray.util.get_node_ip_address(), name=self.name(index),
                                       const=step.const, max_restarts=step.max_restarts,
                                       max_task_retries=step.max_task_retries, slow_restart=step.slow_restart,
                                       asynchronous=step.asynchronous, resources=self.placement(index)))
            handle = ray.get_actor(self.name(index))
            if handle._actor_id.hex() != made.actor:  # fail closed: the name must find that job's actor
                raise JobFailed(f"the name {self.name(index)!r} found actor {handle._actor_id.hex()}, not "
                                f"{made.actor}, the one the job made")
        except Exception:
            with contextlib.suppress(Exception):  # best effort: a detached actor outlives the job
                ray.kill(ray.get_actor(self.name(index)))
            raise
        self.handles[index] = handle
        return handle

    def submit_cancel(self, index: int, step: Cancel) -> Any:
        import ray

        from scenarios.hunt._remote import hunt_cancellable, remote

        ref = remote(hunt_cancellable).options(max_retries=0, num_cpus=0, resources=self.placement(-1)).remote(
            step.const, CANCEL_HOLD, marks=self.marks, index=index)
        ray.cancel(ref, force=step.force)
        return ref

    def consume(self, index: int, step: Stream) -> Any:
        """Start a streaming generator and take its first items: all ``step.take`` of them, or,
        held for a fault, those it yields before it waits (:meth:`finish` takes the rest)."""
        from scenarios.hunt._remote import hunt_stream, remote

        held, stored = index in self.program.held(), index in self.program.stored_on_node()
        gen = remote(hunt_stream).options(num_returns="streaming", max_retries=step.max_retries,
                                          name=self.name(index), **self.where(index)).remote(
            step.const, step.count, *self.args(step.args), marks=self.marks, index=index,
            pad=max(step.size, STORED_PAD if stored else 0), held_at=step.held_at() if held else -1,
            varying=step.varying)
        self.streams[index] = _Taking(gen=gen, started=time.monotonic())
        self.take(index, step, min(step.take, step.held_at()) if held else step.take)
        if stored:  # the node goes once the stream has ended: its first run then succeeded
            import ray

            ray.wait([gen.completed()], timeout=self.remaining(self.streams[index].started), fetch_local=False)
        return gen

    def finish(self, index: int, step: Stream) -> None:
        """Take the rest of the stream's ``take`` items (after its fault, if it was held), get the
        values of those taken as refs only (once their node is gone), and record them. The driver
        blocks here: a late replacement joins first (what it takes may be rebuilt there)."""
        self.replace_late(due_or_not=True)
        self.take(index, step, step.take)
        taking = self.streams[index]
        if index in self.program.stored_on_node():  # its gets wait for a rebuild: their bound starts now
            taking.started = time.monotonic()
        self.attempt(index, lambda: taking.items.extend(self._item(r, index, taking.started)
                                                        for r in taking.refs[len(taking.items):]))
        self.streams.pop(index)
        if index not in self.seen:
            self.seen[index] = Observed(value=tuple(taking.items), seconds=time.monotonic() - taking.started)

    def take(self, index: int, step: Stream, upto: int) -> None:
        """Take items until ``upto`` are in (bounded); a hang, an exception or the stream's end
        (fewer items than it was to yield) is the step's outcome. A stream whose items are to be
        lost with their node: their refs only, got after the fault (:meth:`finish`)."""
        taking, deferred = self.streams[index], index in self.program.stored_on_node()

        def more() -> None:
            while index not in self.seen and len(taking.refs) < upto:
                try:
                    ref = self.next_item(taking.gen, taking.started)
                except StopIteration:  # deferred: an error it yielded, not its end, is then the outcome
                    taking.items.extend(self._item(r, index, taking.started) for r in taking.refs[len(taking.items):])
                    raise
                if ref is None:
                    self.seen[index] = Observed(hung=True, seconds=time.monotonic() - taking.started)
                    return
                taking.refs.append(ref)
                if not deferred:
                    taking.items.append(self._item(ref, index, taking.started))

        self.attempt(index, more)

    def attempt(self, index: int, work: Callable[[], None]) -> None:
        """Run ``work`` on stream ``index``; what it raises is the step's outcome, with the items
        taken before it (the stream's end, StopIteration, as :attr:`ErrorKind.STREAM_ENDED`)."""
        taking = self.streams[index]
        try:
            if index not in self.seen:
                work()
        except Exception as exc:  # noqa: BLE001 - judged against the table, and the items taken before it
            self.seen[index] = dataclasses.replace(observed_error(exc, taking.started), value=tuple(taking.items))

    def _item(self, ref: Any, index: int, started: float) -> int:
        item = self._get(ref, started)
        return int(item[0] if self.program.padded(index) else item)

    def next_item(self, gen: Any, started: float) -> Any:
        """The generator's next ref within the shared bound, or None when none came: Ray 2.60's
        ``_next_sync`` returns a nil ref at its timeout, where ``next(gen)`` waits for ever. A
        generator left waiting is cancelled (best effort) so it does not outlive the program."""
        import ray

        ref = gen._next_sync(timeout_s=self.remaining(started))
        if not ref.is_nil():
            return ref
        try:
            ray.cancel(gen, force=True)
        except Exception:  # noqa: BLE001 - best effort: the hang is what is recorded
            pass
        return None

    def wait(self, index: int, step: Wait) -> None:
        """ray.wait within the bound; with no timeout, fewer ready than asked is a hang."""
        import ray

        refs = [self.refs[s] for s in step.sources]
        timeout = self.bound if step.timeout is None else step.timeout
        ready, not_ready = ray.wait(refs, num_returns=step.num_returns, timeout=timeout,
                                    fetch_local=step.fetch_local)
        seen = WaitSeen(tuple(_positions(refs, ready)), tuple(_positions(refs, not_ready)))
        short = step.timeout is None and len(seen.ready) < step.num_returns
        self.seen[index] = Observed(hung=True, seconds=self.bound) if short else seen

    def placement(self, index: int) -> dict[str, float]:
        """On a cluster with a removable node: a node removal's victim runs there, and an away
        task; every other step on the head (so only the victim dies with the node)."""
        if self.cluster is None:
            return {}
        removed = any((f.kind in (FaultKind.NODE_REMOVAL, FaultKind.OBJECT_NODE_REMOVAL) and f.victim == index)
                      or (f.kind is FaultKind.ACTOR_NODE_REMOVAL and self.program.actor_of(f) == index)
                      for f in self.program.faults)
        if removed or index in self.program.away():
            return {HUNT_NODE: 0.01}
        if self.rpc_delay and index in self.program.on_rpc_node(FaultKind.RPC_DELAY):
            return {HUNT_SLOW: 0.01}
        return {HUNT_RPC: 0.01} if self.rpc_failures and index in self.program.on_rpc_node() else {HEAD: 0.001}

    def where(self, index: int) -> dict[str, Any]:
        """Step ``index``'s placement options: its resources (:meth:`placement`), and its
        scheduling strategy: a pinned removal's victim is pinned to the removable node by node
        affinity (``soft=False``), a grouped actor runs in its placement group's one bundle."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy, PlacementGroupSchedulingStrategy

        found: dict[str, Any] = {"resources": self.placement(index)}
        nodes = self._removable()
        if index in self.program.pinned() and len(nodes) == 1:  # no removable node: its removal is missed
            found["scheduling_strategy"] = NodeAffinitySchedulingStrategy(nodes[0].node_id, soft=False)
        if index in self.groups:
            found["scheduling_strategy"] = PlacementGroupSchedulingStrategy(self.groups[index],
                                                                            placement_group_bundle_index=0)
        return found

    def group(self, index: int) -> Any:
        """A placement group of one bundle for actor ``index``, holding what the actor asks for
        where it would run anyway (a share of a CPU without a cluster: a bundle holds something)."""
        from ray.util import placement_group

        return placement_group([self.placement(index) or {"CPU": 0.01}], name=f"{self.name(index)}-group")

    def name(self, index: int) -> str:
        return f"hunt-{self.run_id}-{index}"

    # -- faults ----------------------------------------------------------------------------

    def land(self, fault: Fault) -> None:
        """Inject ``fault`` once its victim is in flight, then release the victim; a victim
        that ended first (its args failed) or vanished makes the fault missed."""
        from chaos import ActorTarget, Chaos, Kill, TaskTarget
        from chaos.errors import ChaosError

        if fault.kind is FaultKind.OBJECT_STORE_PRESSURE:
            self.press(fault)
            return
        if fault.kind.restarts_gcs:
            restarted = self.redis_fault(fault.kind) if fault.kind.redis else self.restart_gcs()
            (self.landed if restarted else self.missed).append(fault)
            return
        if fault.kind.placed:
            return  # its node fails or delays RPCs all along: landed or missed once the program has run
        if fault.kind.cancels:
            self.cancel(fault)
            return
        if fault.kind is FaultKind.OBJECT_NODE_REMOVAL:
            stored = self.cluster is not None and _confirmed(lambda: self._stored(fault.victim))  # no node: missed
            spilled = stored and _confirmed(lambda: self._spilled_on_node(fault))
            (self.landed if spilled and self.remove_node(fault.replace_after) else self.missed).append(fault)
            Path(self.marks, f"release-{fault.victim}").touch()  # a filler of a node that stays ends
            return
        held = fault.victim in self.program.held()
        try:
            if held and not self._started(fault.victim):
                self.missed.append(fault)
                return
            if fault.kind.removes_node:  # an actor's (and a grouped one's bundle) must be on the node removed
                placed = _confirmed(lambda: self._actor_on_node(fault) and self._grouped_on_node(fault))
                (self.landed if placed and self.remove_node(fault.replace_after) else self.missed).append(fault)
                return
            if fault.kind.ray_kills:
                (self.landed if self.ray_kill(fault) else self.missed).append(fault)
                return
            target = (TaskTarget(self.name(fault.victim)) if fault.kind is FaultKind.KILL_WORKER
                      else ActorTarget.of(self.refs[self.program.actor_of(fault)]))
            running = self._running(fault.victim)  # read before the kill: a retry writes its own
            Chaos(address=self.address).kill(Kill(target))
            if fault.kind is FaultKind.KILL_WORKER and running is not None:
                self.kills.add(running)
            self.landed.append(fault)
        except ChaosError:  # nothing alive to kill (e.g. an actor whose constructor failed)
            self.missed.append(fault)
        finally:
            Path(self.marks, f"release-{fault.victim}").touch()

    def cancel(self, fault: Fault) -> None:
        """``ray.cancel`` the held task once it runs (landed), wait (bounded) for it to end, then
        release it: released first, it could return before the cancel reached it. A task that
        ended before it started (its args failed) makes the cancel missed."""
        import ray

        force = fault.kind is FaultKind.FORCE_CANCEL
        try:
            if not self._started(fault.victim):
                self.missed.append(fault)
                return
            if isinstance(self.program.steps[fault.victim], Call):
                (self.landed if self.cancel_call(fault) else self.missed).append(fault)
                return
            running, ref = self._running(fault.victim), self.refs[fault.victim]
            for _ in range(fault.repeats):  # back to back, each with the same force
                ray.cancel(ref, force=force)
            self.landed.append(fault)
            if force and running is not None:
                self.kills.add(running)  # the worker exits: what it put is lost with it
            ray.wait([ref], timeout=CANCEL_BOUND, fetch_local=False)
        finally:
            Path(self.marks, f"release-{fault.victim}").touch()

    def cancel_call(self, fault: Fault) -> bool:
        """``ray.cancel`` a held actor call: Ray flags a regular actor's running call rather than
        interrupting it, and cancels an async actor's as an asyncio task, so it lands once the
        call saw the flag or the CancelledError (its ``flagged`` or ``cancelled`` mark, within
        :data:`CANCEL_BOUND`); the caller releases it either way."""
        import ray

        from chaos import wait_until
        from chaos.errors import HangError

        call = self.program.steps[fault.victim]
        actor = self.program.steps[call.actor] if isinstance(call, Call) else None
        for _ in range(fault.repeats):
            ray.cancel(self.refs[fault.victim], force=False)
        seen = "cancelled" if isinstance(actor, Actor) and actor.asynchronous else "flagged"
        mark = Path(self.marks, f"{seen}-{fault.victim}")
        try:
            wait_until(mark.exists, timeout=CANCEL_BOUND, interval=0.01,
                       what=f"call {fault.victim} to see its cancel")
        except HangError:
            return False
        return True

    def ray_kill(self, fault: Fault) -> bool:
        """``ray.kill`` the fault's actor (``no_restart`` for RAY_KILL_NO_RESTART); landed once
        the process it ran in has exited (within :data:`KILL_BOUND`), else missed."""
        import ray

        actor = self.program.actor_of(fault)
        pid = self._running(fault.victim) if fault.victim != actor else None
        pid = pid if pid is not None else self._actor_pid(actor)
        if pid is None:
            return False
        ray.kill(self.refs[actor], no_restart=fault.kind is FaultKind.RAY_KILL_NO_RESTART)
        return _exits_within(pid, KILL_BOUND)

    def _actor_pid(self, index: int) -> int | None:
        """The process actor ``index`` runs in now (the GCS's actor table), once it is alive and
        came up there (bounded); None when it did not, or moved to another process meanwhile."""
        from chaos import wait_until
        from chaos.errors import HangError

        actor_id = self.refs[index]._actor_id.hex()

        def alive() -> int | None:
            """Its pid once alive; -1 once dead (for good: its constructor failed), so the wait ends."""
            row = actor_row(actor_id)
            if row is not None and row.state == "DEAD":
                return -1
            return row.pid if row is not None and row.state == "ALIVE" and row.pid else None

        try:
            pid = int(wait_until(alive, timeout=self.bound, interval=0.05, what=f"actor {index} to be alive"))
        except HangError:
            return None  # it never came up within the bound: nothing to kill
        if pid <= 0 or not self._came_up(index, pid):
            return None  # dead, or never constructed: nothing to kill
        row = actor_row(actor_id)  # fail closed: a restart while it was asked is another process
        return pid if row is not None and row.state == "ALIVE" and row.pid == pid else None

    def _came_up(self, index: int, pid: int) -> bool:
        """Did actor ``index``'s constructor run, in process ``pid``? ALIVE is no evidence: the
        GCS shows an actor whose constructor's argument failed ALIVE for a moment before DEAD
        (Ray 2.60; a poll of every 50 ms saw it). One of its calls ran there (its pid mark, also
        a call held running), or a method call answers within :data:`READY_BOUND`, as only a
        constructed actor's does (one queued behind a call still waiting on its arguments does
        not: not up, so the fault is missed)."""
        import ray

        calls = [i for i, step in enumerate(self.program.steps) if isinstance(step, Call) and step.actor == index]
        if any(pid in self._pids(i) for i in calls):
            return True
        try:
            ray.get(self.refs[index].__ray_ready__.remote(), timeout=READY_BOUND)
        except Exception:  # noqa: BLE001 - its constructor failed, or it never answered: not up
            return False
        return True

    def remove_node(self, replace_after: float = 0.0) -> bool:
        """Remove the cluster's one HUNT_NODE node at once (its raylet and workers SIGKILLed),
        then add a replacement with the same resource, at once or ``replace_after`` seconds later
        (:meth:`replace_late`); False (missed) without such a node."""
        nodes = self._removable()
        if len(nodes) != 1:
            return False
        workers = _confirmed_list(lambda: _node_workers(nodes[0]))  # Ray's removal kills its own, not workers
        try:
            self.cluster.remove_node(nodes[0], allow_graceful=False)  # asserts its processes are gone
        except Exception:  # noqa: BLE001 - fail closed: a removal not confirmed is missed
            if nodes[0] in self.cluster.worker_nodes:
                return False  # still there: nothing to replace
            outlived = True  # taken out of the cluster, its processes not confirmed gone: replace it anyway
        else:
            outlived = False
        outlived = bool(_killed_all(workers)) or outlived  # as a node's failure: a worker left could still reply
        self.replacement_due = time.monotonic() + replace_after
        if not replace_after:
            self.replace_late(due_or_not=True)
        return not outlived  # fail closed: a worker of the removed node that outlived it

    def _replace(self) -> None:
        add_removable_node(self.cluster)

    def replace_late(self, *, due_or_not: bool) -> None:
        """Add the late replacement once it is due; ``due_or_not``: now, waiting out its delay
        first (the driver is about to block on what may need it: a stream, a wait, the gets).
        Ray starts a node from the main thread only (it installs signal handlers), so the driver
        adds it between steps rather than a timer thread."""
        if self.replacement_due is None:
            return
        left = self.replacement_due - time.monotonic()
        if left > 0 and not due_or_not:
            return
        threading.Event().wait(max(0.0, left))  # the fault's own delay, drawn with the program
        self.replacement_due = None
        try:
            self._replace()
        except Exception as exc:  # noqa: BLE001 - the cluster lost its removable node: judged by the probe
            self.replacement_failed = f"the removed node's replacement did not join within {NODE_BOUND:g} s: {exc!r}"

    def restart_gcs(self) -> bool:
        """SIGKILL the GCS and start it again (:class:`chaos.KillGcs`, confirmed answering with
        its nodes alive); False (missed) unless the run was told its GCS keeps its tables on Redis."""
        from chaos import Chaos, KillGcs

        if not self.gcs_restart:
            return False
        try:
            with Chaos(address=self.address).inject(KillGcs(seconds=GCS_DOWN)):
                threading.Event().wait(GCS_DOWN)  # the fault's length: the GCS stays down meanwhile
        except Exception:  # noqa: BLE001 - fail closed: a restart not confirmed is missed
            return False
        return True

    def redis_fault(self, kind: FaultKind) -> bool:
        """A fault of the Redis behind the GCS (:mod:`chaos.gcs`, confirmed on Redis and healed),
        then the GCS started again once it exited (within :data:`GCS_EXIT_BOUND`), as the head's
        supervisor would; landed once the GCS answers. Missed without a GCS on Redis, when the
        fault or the restart was not confirmed, and for an idle timeout that closed nothing of the
        GCS's (it did not exit): a GCS busy all along never idled."""
        from chaos import Chaos
        from chaos.gcs import KillRedis, RedisClientKill, RedisIdleTimeout, head_of

        if not self.gcs_restart:
            return False
        records = {FaultKind.REDIS_CLIENT_KILL: RedisClientKill(),
                   FaultKind.REDIS_IDLE_TIMEOUT: RedisIdleTimeout(timeout=1, seconds=IDLE_HOLD),
                   FaultKind.REDIS_RESTART: KillRedis(seconds=GCS_DOWN)}
        try:
            head = head_of(self.address)
            pid = head.gcs_pid()
        except Exception:  # noqa: BLE001 - fail closed: no GCS of this process's to fault
            return False
        try:
            with Chaos(address=self.address).inject(records[kind]):
                threading.Event().wait(IDLE_HOLD if kind is FaultKind.REDIS_IDLE_TIMEOUT else GCS_DOWN)
        except Exception:  # noqa: BLE001 - fail closed: missed, but it may have dropped the GCS's connections
            _confirmed(lambda: self._supervise(head, pid))
            return False
        try:
            exited = self._supervise(head, pid)
        except Exception:  # noqa: BLE001 - fail closed: a restart not confirmed is missed
            return False
        return exited or kind is not FaultKind.REDIS_IDLE_TIMEOUT

    def _supervise(self, head: Any, pid: int) -> bool:
        """As the head's supervisor: wait (:data:`GCS_EXIT_BOUND`) for GCS ``pid`` to exit, and
        start it again (confirmed answering) if it did, or if it lives on with no connection to
        its Redis (it would exit later, and the driver with it); True if it exited."""
        from chaos.gcs import gcs_connections, redis_of

        exited = _exits_within(pid, GCS_EXIT_BOUND)
        if exited or not gcs_connections(redis_of(head.node.redis_address), pid):
            head.node.kill_gcs_server(check_alive=False)  # clears Ray's record of the exited one
            head.restart_gcs(self.address)  # confirmed answering with its nodes alive
        return exited

    def _spilled_on_node(self, fault: Fault) -> bool:
        """True unless ``fault`` is to spill its victim on the removable node first and Ray did
        not: a task there fills that node's store past its capacity (:func:`_remote.hunt_fill`),
        and the victim's owner must say each of its values (a stream's taken items) was spilled
        (``_pressure.was_spilled``); the filler holds its refs until the node goes."""
        from chaos import wait_until
        from scenarios.hunt._pressure import CHUNK, OVERFILL, was_spilled
        from scenarios.hunt._remote import hunt_fill, remote

        if not fault.spilled:
            return True
        taking, node = self.streams.get(fault.victim), self._removable()[0]
        refs = taking.refs if taking is not None else [self.refs[fault.victim]]
        capacity = int(node._ray_params.object_store_memory or REMOVABLE_STORE)
        filler = remote(hunt_fill).options(num_cpus=0, max_retries=0, resources={HUNT_NODE: 0.01}).remote(
            int(capacity * OVERFILL), CHUNK, self.marks, fault.victim)
        filled = Path(self.marks, f"filled-{fault.victim}")
        try:
            wait_until(lambda: filled.exists() or bool(_ended(filler)), timeout=self.bound, interval=0.05,
                       what="the removable node's store to be filled")
            spilled = filled.exists() and all(was_spilled(r) for r in refs)
        finally:
            self.fillers.append(filler)  # cancelled at clean-up, if its node stayed
        return spilled

    def _actor_on_node(self, fault: Fault) -> bool:
        """True unless ``fault`` removes an actor's node and the actor is not alive there (the
        GCS's actor table, within the bound): a removal before it came up, or of another node,
        would hit nothing the oracle judges (its creation would be rescheduled, not a restart)."""
        if not fault.kind.kills_actor:
            return True
        index, nodes = self.program.actor_of(fault), self._removable()
        pid = self._actor_pid(index) if len(nodes) == 1 else None
        row = actor_row(self.refs[index]._actor_id.hex()) if pid is not None else None
        return row is not None and row.state == "ALIVE" and row.pid == pid and row.node_id == nodes[0].node_id

    def _grouped_on_node(self, fault: Fault) -> bool:
        """True unless ``fault`` removes a grouped actor's node and its bundle is not placed
        there (within :data:`GROUP_BOUND`): the loss of a bundle's node needs the bundle on it."""
        from ray.util import placement_group_table

        group = self.groups.get(self.program.actor_of(fault)) if fault.kind.kills_actor else None
        if group is None:
            return True
        nodes = self._removable()
        if len(nodes) != 1 or not group.wait(timeout_seconds=GROUP_BOUND):
            return False
        return bool(placement_group_table(group).get("bundles_to_node_id", {}).get(0) == nodes[0].node_id)

    def press(self, fault: Fault) -> None:
        """Fill the object store past capacity; landed only if the store says it spilled and
        the victim's owner says the victim's object was spilled. A victim with no object in the
        store (a boxed task that failed, or did not end within the bound) is missed unpressed."""
        from scenarios.hunt._pressure import press

        try:
            victim = self._in_store(fault.victim)
            landed = victim is not None and press(self.address, victim=victim).landed
        except Exception:  # noqa: BLE001 - fail closed: e.g. ObjectStoreFullError on a pressure put
            landed = False
        (self.landed if landed else self.missed).append(fault)

    def _in_store(self, index: int) -> Any:
        """The ref to step ``index``'s value in the object store: a put's own ref, or the ref a
        boxed task put, once the task has ended (bounded); None when there is none."""
        import ray

        step, ref = self.program.steps[index], self.refs[index]
        if isinstance(step, Put):
            return ref
        if not (isinstance(step, Task) and step.boxed) or not ray.wait([ref], timeout=self.bound)[0]:
            return None
        try:
            box = ray.get(ref, timeout=self.bound)
        except Exception:  # noqa: BLE001 - it failed: it put nothing (the failure is judged when observed)
            return None
        box = box[0] if self.program.padded(index) and isinstance(box, list) else box
        return box[0] if isinstance(box, list) and box else None

    def _injections(self) -> Injections | None:
        """The RPC failures injected from now on (and the HUNT_RPC node's raylet); None without
        that node or without an RPC_FAILURES fault in the program."""
        if not self.rpc_failures or self.cluster is None or not self.program.on_rpc_node():
            return None
        self.rpc_raylet = rpc_raylet(self.cluster)
        return Injections.from_now(self.cluster.head_node.get_logs_dir_path())

    def _judge_rpc_failures(self, injections: Injections | None) -> None:
        """RPC_FAILURES landed if Ray's knob failed a call made for a step on the HUNT_RPC node
        (``_rpc.WORKER_METHODS`` by the process that ran it, its pid mark; ``_rpc.RAYLET_METHODS``
        by that node's raylet) while it ran (from its submission to its result); else missed.
        Fail closed: background calls (task events, GCS pubsub, a start-up), a call before the
        step or after it, or a victim run elsewhere or never, tested nothing the oracle judges."""
        faults = [f for f in self.program.faults if f.kind is FaultKind.RPC_FAILURES]
        found = injections.new() if injections is not None and faults else []
        hit = any(self._own(record) for record in found)
        (self.landed if hit else self.missed).extend(faults)

    def _own(self, record: Injected) -> bool:
        """Was ``record`` a failure of a call made for a step on the HUNT_RPC node, by the
        process that ran it or by that node's raylet, while the step ran?"""
        by_raylet = record.pid == self.rpc_raylet
        return record.made_for_a_step(by_raylet=by_raylet) and any(
            (by_raylet or record.pid in self._pids(i)) and self._window(i).holds(record.at) for i in self._rpc_steps())

    def _judge_rpc_delay(self) -> None:
        """RPC_DELAY landed if a step placed on the HUNT_SLOW node ran in a process started with
        its delay knob (the node was confirmed to apply it: ``_rpc.add_slow_node``) and took at
        least the knob's fixed push delay from its submission to its result; else missed: the
        victim ran elsewhere, never, too fast to have been delayed, or in a process gone before
        it was read."""
        faults = [f for f in self.program.faults if f.kind is FaultKind.RPC_DELAY]
        if not faults:
            return
        hit = self.rpc_delay and any(
            self._window(i).end - self._window(i).start >= PUSH_DELAY_S and any(map(delayed_process, self._pids(i)))
            for i in self._rpc_steps(FaultKind.RPC_DELAY))
        (self.landed if hit else self.missed).extend(faults)

    def _rpc_steps(self, kind: FaultKind = FaultKind.RPC_FAILURES) -> set[int]:
        """The steps placed on the HUNT_RPC node (the HUNT_SLOW one, for RPC_DELAY): a victim,
        or an actor victim's calls."""
        on_node, dropped = self.program.on_rpc_node(kind), self.program.dropped()  # a dropped step is not judged
        return {i for i, s in enumerate(self.program.steps)
                if (i in on_node or (isinstance(s, Call) and s.actor in on_node)) and i not in dropped}

    def _pids(self, index: int) -> set[int]:
        """The processes that ran step ``index`` (each attempt's pid mark)."""
        return {int(p.name.rsplit("-", 1)[1]) for p in Path(self.marks).glob(f"pid-{index}-*")}

    def _window(self, index: int) -> Window:
        """From step ``index``'s submission to its result (now, for one with none yet)."""
        now = time.time()
        return Window(self.submitted.get(index, now), self.ended.get(index, now))

    def processes(self) -> Processes:
        """What the pid marks say (read before they go): which process put each boxed value,
        and which processes were ended: by a landed worker kill, or by a force cancel (the
        process that ran the cancelled task, when it ran)."""
        owners = {(int(step), int(pid)) for step, pid in
                  (p.name.split("-")[1:] for p in Path(self.marks).glob("owner-*-*"))}
        forced = {pid for i, s in enumerate(self.program.steps) if isinstance(s, Cancel) and s.force
                  for pid in self._pids(i)}
        return Processes(owners=frozenset(owners), killed=frozenset(self.kills | forced))

    def _running(self, index: int) -> int | None:
        """The process a held step said it started in (its started mark), if it says one."""
        try:
            return int(Path(self.marks, f"started-{index}").read_text())
        except (OSError, ValueError):
            return None

    def _stored(self, index: int) -> bool:
        """Wait (bounded) until task ``index`` has finished, its return left where it was made
        (``fetch_local=False``), then ask where its copies are: True only if the removable node
        holds the only one, the padded value (a task that raised left a small error inlined
        in its owner, and one another step already pulled has a second copy: missed). A stream's:
        each item the driver took (as a ref); one that took none has nothing to lose (missed)."""
        import ray
        from ray.experimental import get_object_locations

        taking, nodes = self.streams.get(index), self._removable()
        refs = taking.refs if taking is not None else [self.refs[index]]  # a stream's items taken as refs
        if not refs or len(nodes) != 1:
            return False
        if taking is not None and (index in self.seen or not ray.wait([taking.gen.completed()], timeout=0)[0]):
            return False  # it failed, or runs still: a loss now would make a retry, not a replay
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=self.bound, fetch_local=False)
        if len(ready) < len(refs):
            return False
        found = get_object_locations(refs, timeout_ms=int(self.bound * 1000))
        return all(found.get(r, {}).get("node_ids") == [nodes[0].node_id]
                   and (found.get(r, {}).get("object_size") or 0) > STORED_PAD for r in refs)

    def _beyond_store(self) -> tuple[int, ...]:
        """The away tasks that returned their value, one of whose processes is a worker of the
        removable node, and whose return or an argument is bigger than that node's store: a task
        that returned took each argument (Ray's or its own get) and made its return there
        (``ProgramVerdict.beyond``). None when that store's size is not known."""
        nodes = self._removable()
        store = int(nodes[0]._ray_params.object_store_memory or 0) if len(nodes) == 1 else 0
        if not store:
            return ()
        workers = {p.pid for p in _node_workers(nodes[0])}
        return tuple(i for i in sorted(self.program.away()) if self._returned(i) and self._pids(i) & workers
                     and max(self.program.size(j) for j in (i, *(a.source for a in getattr(
                         self.program.steps[i], "args", ())))) > store)

    def _returned(self, index: int) -> bool:
        """Did step ``index``'s get give a value (no exception, no hang)?"""
        seen = self.seen.get(index)
        return isinstance(seen, Observed) and seen.value is not None and not (seen.error_type or seen.hung)

    def _removable(self) -> list[Any]:
        """The cluster's nodes holding HUNT_NODE (one, or none without a cluster): not the HUNT_RPC one."""
        nodes = self.cluster.worker_nodes if self.cluster is not None else ()
        return [n for n in nodes if HUNT_NODE in (n._ray_params.resources or {})]

    def _started(self, index: int) -> bool:
        """Wait until the held step says it started (True) or its ref ended first (False); a
        stream's generator, when its task has ended (an item ready is no end)."""
        import ray

        from chaos import wait_until

        marker, ref = Path(self.marks, f"started-{index}"), self.refs[index]
        ref = ref.completed() if index in self.streams else ref

        def decided() -> str | None:
            if marker.exists():
                return "started"
            return "ended" if ray.wait([ref], timeout=0)[0] else None

        return wait_until(decided, timeout=self.bound, interval=0.01, what=f"step {index} to start") == "started"

    # -- observing -------------------------------------------------------------------------

    def _observe_all(self) -> list[Failure]:
        started = time.monotonic()
        for index, step in enumerate(self.program.steps):
            if step.kind in GETTABLE and index in self.refs:  # a dropped value is not the driver's to get
                self.seen[index] = self.observe(index, step, started)
                self.ended[index] = time.time()
        return []

    def observe(self, index: int, step: Step, started: float) -> Observed:
        """Get a step's value (and a boxed value's inner ref) within the shared bound."""
        t0 = time.monotonic()
        try:
            value = self._get(self.refs[index], started)
            if self.program.padded(index):
                value = value[0]  # [value, padding]
            if getattr(step, "boxed", False):
                value = self._get(value[0], started)
        except Exception as exc:  # noqa: BLE001 - judged against the table
            return observed_error(exc, t0)
        return Observed(value=value, seconds=time.monotonic() - t0)

    def _get(self, ref: Any, started: float) -> Any:
        import ray

        return ray.get(ref, timeout=self.remaining(started))

    def remaining(self, started: float) -> float:
        return max(LAST_LOOK, self.bound - (time.monotonic() - started))

    def _start_probe(self) -> None:
        """The cluster's probe actor (on the head, no CPU): made once every fault of the driver's
        first program on the cluster has landed (it starts while the gets wait), then kept and
        asked after every program (:meth:`_cluster_usable`); one that did not answer is killed,
        and the next program makes a new one. In a program in which a GCS or Redis fault landed
        it is made afresh once its faults have landed, and that program's end asks the new one: it
        shows the GCS still places an actor and a worker still starts after such a fault. Its
        runtime env (:data:`PROBE_ENV`) is its own, so it never takes a worker started ahead
        (:meth:`_warm`)."""
        from scenarios.hunt._remote import HuntProbe, remote

        key = _probe_key(self.address)
        if any(f.kind.restarts_gcs for f in self.landed):
            self._forget_probe()
        if _PROBE.get(key) is None:
            _PROBE.clear()  # one driver, one cluster: another key's probe went with its cluster
            try:  # on the head: the probe asks whether the cluster answers, not the faulty nodes
                _PROBE[key] = remote(HuntProbe).options(resources=self.placement(-1), runtime_env=PROBE_ENV).remote()
            except Exception as exc:  # noqa: BLE001 - a finding, whatever it is: judged by the probe
                self.probe = exc
                return
        self.probe = _PROBE[key]

    def _warm(self) -> None:
        """Top the head's idle workers up (``_pool``) for the next program's actors and held
        tasks; best effort, as their absence only slows it: nothing it raises reaches the run.
        Only on a cluster this process started (its head raylet is a process here, whose idle
        workers it counts; its address is the node's own, no GCS asked)."""
        from ray._private import ray_constants

        from scenarios.hunt._pool import top_up

        if self.cluster is None:
            return
        try:
            head = self.cluster.head_node
            raylets = head.all_processes.get(ray_constants.PROCESS_TYPE_RAYLET, [])
            if raylets:
                top_up(f"{head.node_ip_address}:{head.node_manager_port}", raylets[0].process.pid)
        except Exception:  # noqa: BLE001 - best effort, see above
            pass

    def _cluster_usable(self) -> list[Failure]:
        """A trivial task and the cluster's probe actor (:meth:`_start_probe`) answer within :data:`PROBE_BOUND`."""
        import ray

        from scenarios.hunt._remote import hunt_ping, remote

        try:
            if isinstance(self.probe, Exception) or self.probe is None:
                raise self.probe or RuntimeError("no probe actor was made")
            ping = remote(hunt_ping).options(resources=self.placement(-1)).remote(7)
            answers = ray.get([ping, self.probe.ping.remote(8)], timeout=PROBE_BOUND)
        except Exception as exc:  # noqa: BLE001 - a finding, whatever it is
            answers = [repr(exc)]
        lost = [] if self.replacement_failed is None else [
            Failure(Signature(None, self._fault_kinds(), Seen.CLUSTER_UNUSABLE), -1, self.replacement_failed)]
        if answers == [7, 8]:
            return lost
        self._forget_probe()
        return [*lost, Failure(Signature(None, self._fault_kinds(), Seen.CLUSTER_UNUSABLE), -1,
                               f"a trivial task and actor answered {answers!r} within {PROBE_BOUND:g} s")]

    def _forget_probe(self) -> None:
        """Kill the kept probe actor (best effort: a cluster that lost it already is judged), so
        a new one is made rather than it asked again."""
        import ray

        stale = _PROBE.pop(_probe_key(self.address), None)
        if stale is not None:
            with contextlib.suppress(Exception):
                ray.kill(stale)

    def _fault_kinds(self) -> tuple[FaultKind, ...]:
        return tuple(sorted({f.kind for f in self.landed}, key=lambda k: k.value))

    def _clean_up(self) -> None:
        """Release every held step, cancel what still runs, kill the program's actors."""
        import ray

        for index in self.program.held():
            Path(self.marks, f"release-{index}").touch()
        for index, step in enumerate(self.program.steps):
            ref = self.refs.get(index)
            if ref is None:
                continue
            try:
                if isinstance(step, Actor):
                    ray.kill(ref)
                elif step.kind in GETTABLE and not ray.wait([ref], timeout=0)[0]:
                    ray.cancel(ref, force=not isinstance(step, Call))
            except Exception:  # noqa: BLE001 - best effort: the next program starts clean anyway
                pass
        for filler in self.fillers:
            with contextlib.suppress(Exception):  # best effort, as above: its node may be gone with it
                ray.cancel(filler, force=True)
        self._remove_groups()

    def _remove_groups(self) -> None:
        """Remove the program's placement groups, once their actors are killed (best effort)."""
        from ray.util import remove_placement_group

        for group in self.groups.values():
            try:
                remove_placement_group(group)
            except Exception:  # noqa: BLE001 - best effort: a group outlives its job at most
                pass


def add_removable_node(cluster: Any) -> None:
    """Add to ``cluster`` (a ``ray.cluster_utils.Cluster``) the node node removals remove: 1 CPU,
    :data:`HUNT_NODE`, a store of :data:`REMOVABLE_STORE`; once it has joined (or raise)."""
    cluster.add_node(num_cpus=1, object_store_memory=REMOVABLE_STORE, resources={HUNT_NODE: 100.0},
                     **shared_host_worker_args())
    cluster.wait_for_nodes(timeout=NODE_BOUND)


@dataclass(frozen=True, slots=True, kw_only=True)
class ActorRow:
    """An actor as the GCS's actor table has it: its state (``ALIVE``, ``RESTARTING``, ``DEAD``,
    ...), the pid it runs in (0 before it does) and its node's id."""

    state: str
    pid: int
    node_id: str


def actor_row(actor_id: str) -> ActorRow | None:
    """Actor ``actor_id`` (hex) as the connected driver's GCS has it, None when it knows none or
    did not answer within :data:`ROW_BOUND`: one GCS call, where the State API's ``get_actor``
    goes through the dashboard (about 30 ms of its CPU and the driver's each, polled every 50 ms
    while a fault waits for its victim). Ray's accessor waits on the GCS without a deadline, so
    the read is :func:`scenarios.model._bounded.bounded` (a daemon thread: one left waiting on a
    GCS that never answers holds no exit)."""
    from ray._private import state

    from scenarios.model._bounded import bounded

    try:
        row = bounded(lambda: state.state.actor_table(actor_id), what=f"the GCS's row of actor {actor_id}",
                      seconds=ROW_BOUND)
    except Exception:  # noqa: BLE001 - no answer in time, or the read failed: the poll asks again
        return None
    if not row:
        return None
    return ActorRow(state=str(row["State"]), pid=int(row["Pid"]), node_id=str(row["Address"]["NodeID"]))


def _probe_key(address: str) -> tuple[str, str]:
    import ray

    return address, ray.get_runtime_context().get_worker_id()


def _ended(ref: Any) -> bool:
    """Has ``ref`` ended (a value or an error), without waiting?"""
    import ray

    return bool(ray.wait([ref], timeout=0, fetch_local=False)[0])


def _node_workers(node: Any) -> list[Any]:
    """The worker processes of ``node`` (a ``ray._private.node.Node`` this process started): its
    raylet's children that are not Ray's own node processes."""
    import psutil
    from ray._private import ray_constants

    raylets = node.all_processes.get(ray_constants.PROCESS_TYPE_RAYLET, [])
    if not raylets:
        return []
    own = {info.process.pid for infos in node.all_processes.values() for info in infos}
    try:
        children = psutil.Process(raylets[0].process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []
    return [c for c in children if c.pid not in own]


def _killed_all(processes: list[Any]) -> list[Any]:
    """SIGKILL ``processes`` (gone already is fine); those that have not exited (a zombie not yet
    reaped has) within :data:`KILL_BOUND`."""
    import psutil

    from chaos import wait_until
    from chaos.errors import HangError

    for process in processes:
        with contextlib.suppress(psutil.Error):
            process.kill()
    with contextlib.suppress(HangError):
        wait_until(lambda: all(_exited(p.pid) for p in processes), timeout=KILL_BOUND, interval=0.05,
                   what="the removed node's workers to exit")
    return [p for p in processes if not _exited(p.pid)]


def _confirmed_list(listing: Callable[[], list[Any]]) -> list[Any]:
    """``listing()``, or [] when it raises (best effort: what it lists is then not checked)."""
    try:
        return listing()
    except Exception:  # noqa: BLE001 - see above
        return []


def _confirmed(check: Callable[[], bool]) -> bool:
    """``check()``, False when it raises: a landing that could not be confirmed is missed, never
    a driver crash (a Ray call may fail under the program's own faults)."""
    try:
        return check()
    except Exception:  # noqa: BLE001 - fail closed, see above
        return False


def _exits_within(pid: int, bound: float) -> bool:
    """Does process ``pid`` exit within ``bound`` seconds?"""
    from chaos import wait_until
    from chaos.errors import HangError

    try:
        wait_until(lambda: _exited(pid), timeout=bound, interval=0.05, what=f"process {pid} to exit")
    except HangError:
        return False
    return True


def _exited(pid: int) -> bool:
    """Has process ``pid`` exited (gone, or a zombie its parent has not reaped yet)?"""
    import psutil

    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return True


def _positions(refs: list[Any], subset: list[Any]) -> list[int]:
    ids = [r.hex() for r in refs]
    return [ids.index(r.hex()) for r in subset]


def classify(exc: BaseException) -> ErrorKind | None:
    """The table's kind of an exception, by its root cause (RayTaskError wrappers peeled);
    None for anything the table does not know."""
    from ray import exceptions as rx

    cause: BaseException = exc
    while isinstance(cause, rx.RayTaskError) and cause.cause is not None:
        cause = cause.cause
    kinds: list[tuple[type[BaseException], ErrorKind]] = [
        (rx.WorkerCrashedError, ErrorKind.WORKER_CRASHED), (rx.ActorDiedError, ErrorKind.ACTOR_DIED),
        (rx.ActorUnavailableError, ErrorKind.ACTOR_UNAVAILABLE), (rx.OwnerDiedError, ErrorKind.OWNER_DIED),
        (rx.TaskCancelledError, ErrorKind.TASK_CANCELLED), (rx.ObjectStoreFullError, ErrorKind.OBJECT_STORE_FULL),
        (rx.NodeDiedError, ErrorKind.NODE_DIED), (rx.TaskUnschedulableError, ErrorKind.TASK_UNSCHEDULABLE),
        (rx.ActorUnschedulableError, ErrorKind.ACTOR_UNSCHEDULABLE), (ValueError, ErrorKind.VALUE_ERROR),
        (StopIteration, ErrorKind.STREAM_ENDED)]
    if type(cause).__name__ == "StreamingGeneratorReplayInconsistentError":  # not in every Ray the hunt runs on
        return ErrorKind.REPLAY_INCONSISTENT
    if _retries_spent(cause):
        return ErrorKind.OBJECT_LOST
    return next((kind for cls, kind in kinds if isinstance(cause, cls)), None)


#: Why a lost object's reconstruction may fail by Ray's documentation: its task's retries are
#: spent (or were none). Its other reasons (a lineage evicted, a reference not found, ...) and
#: ObjectLostError's other subclasses (a ref-counting assertion, a freed object) are findings.
_SPENT = ("OBJECT_UNRECONSTRUCTABLE_MAX_ATTEMPTS_EXCEEDED", "OBJECT_UNRECONSTRUCTABLE_RETRIES_DISABLED")


def _retries_spent(cause: BaseException) -> bool:
    """A lost object Ray gave up on because its task had no attempt left (or plain ObjectLostError)."""
    from ray import exceptions as rx

    if type(cause) is rx.ObjectLostError:
        return True
    return isinstance(cause, rx.ObjectReconstructionFailedError) and _reason(cause) in _SPENT


def _reason(exc: BaseException) -> str:
    from ray.core.generated.common_pb2 import ErrorType

    reason = getattr(exc, "reason", None)
    return str(ErrorType.Name(reason)) if reason is not None else "UNKNOWN"


def root_name(exc: BaseException) -> str:
    """The root cause's type name; a failed reconstruction's with its reason, which decides."""
    from ray.exceptions import ObjectReconstructionFailedError, RayTaskError

    while isinstance(exc, RayTaskError) and exc.cause is not None:
        exc = exc.cause
    name = type(exc).__name__
    return f"{name}[{_reason(exc)}]" if isinstance(exc, ObjectReconstructionFailedError) else name


def observed_error(exc: BaseException, started: float) -> Observed:
    """A get's exception; the driver's own get timing out is a hang, not an exception (a
    callee's timed-out get arrives wrapped, and is judged as an exception)."""
    from ray.exceptions import GetTimeoutError, RayTaskError

    seconds = time.monotonic() - started
    if isinstance(exc, GetTimeoutError) and not isinstance(exc, RayTaskError):
        return Observed(hung=True, seconds=seconds)
    return Observed(error=classify(exc), error_type=root_name(exc), seconds=seconds)


def run_program(program: Program, *, address: str, bound: float = BOUND, cluster: Any = None,
                gcs_restart: bool = False, rpc_failures: bool = False, rpc_delay: bool = False) -> ProgramVerdict:
    """Run ``program`` with its faults on the connected cluster at ``address``; judge it.
    ``cluster``: its ``ray.cluster_utils.Cluster`` with one worker node holding :data:`HUNT_NODE`
    (:func:`add_removable_node`, or ``local_cluster(nodes=2, worker_resources={HUNT_NODE: 100})``),
    where node removals land;
    without it they are missed. ``gcs_restart``: this process started the cluster with its GCS on
    Redis (``local_cluster(redis_address=...)``), so GCS restarts land; without it they are missed
    (a GCS killed without Redis would take the cluster with it). ``rpc_failures``: ``cluster``
    also has the node :func:`scenarios.hunt._rpc.add_rpc_node` adds, where RPC_FAILURES victims
    run; without it they are missed. ``rpc_delay``: ``cluster`` also has the node
    :func:`scenarios.hunt._rpc.add_slow_node` adds, where RPC_DELAY victims run; without it they are missed."""
    return Interpreter(program=program, address=address, bound=bound, cluster=cluster, gcs_restart=gcs_restart,
                       rpc_failures=rpc_failures, rpc_delay=rpc_delay).run()
