"""Hunt clusters side by side: each a process of its own with its own hunt cluster (a head, a
removable node with a smaller store, a node failing RPCs, one delaying them, the GCS on a Redis
of its own), running
programs it is given or draws, and sending each verdict to the process that started it.

Most of a program's run is waiting, not computing: for a GCS to come back, for a killed process
to be seen gone, for a retry's backoff. One driver process can attach to one cluster only, so
the hunt runs several drivers at once, each with its cluster, and their waits overlap on the
machine's cores. A hunter is SIGTERMed when the process that started it dies
(``PR_SET_PDEATHSIG``) and stops its cluster on the way out; SIGKILLed, its cluster's reaper
stops what it started, as for any driver killed, and a second driver job it runs dies with it.

Messages cross a pipe between live processes (``multiprocessing``): nothing is read from disk."""

from __future__ import annotations

import contextlib
import enum
import multiprocessing
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection, wait
from typing import Any

from scenarios.hunt._job import die_with_parent
from scenarios.hunt._run import NODE_BOUND, NODE_STORE, ProgramVerdict, add_removable_node

#: The object store (MiB) of the head and the nodes faulting RPCs: small, so object-store
#: pressure fills the head's past capacity (and frees it) in 1.1 s. It spills to Ray's default
#: directory, under the cluster's temp dir. The removable node's is smaller still (``_run.REMOVABLE_STORE``).
STORE_MB = NODE_STORE >> 20
#: Hunt clusters side by side by default: MEASURED below.
SIDE_BY_SIDE = 2
#: Seconds each hunter has to start its cluster (Redis, four nodes, the slow node's check call).
START_BOUND = 240.0
#: Seconds one program's run may take before its hunter is taken for stuck: more than its own
#: bounds add up to (the gets' shared 30 s, a late replacement's 60 s, a second job's 60 s and
#: its end's 60 s, the probe's 30 s, each landing's own).
PROGRAM_BOUND = 360.0
#: Seconds a hunter has to stop its cluster once told, before SIGTERM, then as long before SIGKILL.
EXIT_BOUND = 90.0


@dataclass(frozen=True, slots=True, kw_only=True)
class HuntSetup:
    """What each hunter's cluster has, so which faults can land there."""

    store_mb: int = STORE_MB
    gcs_restart: bool = True  # the GCS keeps its tables on a Redis of its own
    rpc_failures: bool = True  # a node whose processes fail RPCs
    rpc_delay: bool = True  # a node whose processes delay RPC handlers


class MessageKind(enum.Enum):
    READY = "ready"  # the hunter's cluster is up; it waits for the start
    RAN = "ran"  # one program ran: its verdict
    DONE = "done"  # the hunter's work is done (its cluster not yet stopped)
    CRASHED = "crashed"  # the hunter raised: its traceback


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    kind: MessageKind
    verdict: ProgramVerdict | None = None
    detail: str = ""


#: What the parent tells a hunter: draw programs now; no more programs (given ones).
GO = "go"
STOP = "stop"


class HunterFailed(RuntimeError):
    """A hunter did not start, crashed, or overran its time: the run is not a hunt's measure."""


@contextmanager
def hunt_cluster(setup: HuntSetup) -> Iterator[Any]:
    """This process's hunt cluster, connected: yields its ``chaos.cluster.ClusterHandle``."""
    from chaos.cluster import local_cluster, redis_server
    from scenarios.hunt._rpc import add_rpc_node, add_slow_node

    with ExitStack() as stack:
        redis = stack.enter_context(redis_server()) if setup.gcs_restart else None
        cluster = stack.enter_context(local_cluster(nodes=1, object_store_mb=setup.store_mb, redis_address=redis,
                                                    log_to_driver=False, own_ports=True))
        add_removable_node(cluster.cluster)
        if setup.rpc_failures:
            add_rpc_node(cluster.cluster, object_store_bytes=setup.store_mb << 20, bound=NODE_BOUND)
        if setup.rpc_delay:
            add_slow_node(cluster.cluster, object_store_bytes=setup.store_mb << 20, bound=NODE_BOUND)
        yield cluster


def program_from(text: str) -> Any:
    """A program from its repr (the hunt's own, as a verdict's report prints it)."""
    import scenarios.hunt as hunt

    names = {name: getattr(hunt, name) for name in hunt.__all__}
    return eval(text, {"__builtins__": {}}, names)  # our own reprs, given by our own caller


class SideBySide:
    """``clusters`` hunters started together, each with a cluster of ``setup``:
    ``with SideBySide(2, minutes=30) as run: for verdict in run.verdicts(): ...``.

    With ``minutes``, each hunter draws programs until they have passed; with ``programs``
    (their reprs), the hunters share them, each taking the next as it finishes one, so a
    hunter stuck with slow programs does not hold the others back. Entering starts the hunters
    one after another (clusters starting at once race for free ports) and waits until every
    cluster is up; then all start at once, and :attr:`seconds` counts from there to the end of
    the last hunter's last program."""

    def __init__(self, clusters: int, *, setup: HuntSetup = HuntSetup(), minutes: float = 0.0,
                 programs: Sequence[str] = ()) -> None:
        if isinstance(clusters, bool) or not isinstance(clusters, int) or clusters < 1:
            raise ValueError(f"clusters must be a whole number >= 1, got {clusters!r}")
        if bool(programs) == (minutes > 0):
            raise ValueError(f"give minutes > 0 or programs, one of them: got minutes={minutes!r} and "
                             f"{len(programs)} programs")
        self.clusters, self.setup, self.minutes = clusters, setup, minutes
        self.queue = list(programs)
        self.hunters: list[tuple[Any, Connection]] = []
        #: How many programs each hunter ran (by its place in :attr:`hunters`).
        self.ran_by: list[int] = [0] * clusters
        self.given = 0
        self.started = self.ended = 0.0

    def __enter__(self) -> SideBySide:
        context = multiprocessing.get_context("spawn")  # a fresh interpreter: no forked Ray state
        try:
            for _ in range(self.clusters):
                ours, theirs = context.Pipe()
                process = context.Process(target=_hunter, args=(theirs, self.setup, self.minutes, self.clusters),
                                          daemon=False)
                process.start()
                theirs.close()
                self.hunters.append((process, ours))
                _ready(ours, process)
            self.started = time.monotonic()
            for _, pipe in self.hunters:
                if self.minutes > 0:
                    pipe.send(GO)
                else:
                    self._give(pipe)
        except BaseException:
            self._stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop()

    @property
    def seconds(self) -> float:
        """From the start to the end of the last program (the clusters' start and stop not counted)."""
        return self.ended - self.started

    def verdicts(self) -> Iterator[ProgramVerdict]:
        """Each verdict as it comes, from every hunter, until all are done.

        Raises:
            HunterFailed: a hunter crashed, exited without saying it was done, or ran past its
                time (a program past :data:`PROGRAM_BOUND`), or a program given came back from none."""
        busy: dict[Any, int] = {pipe: place for place, (_, pipe) in enumerate(self.hunters)}
        while busy:
            ready = wait(list(busy), timeout=self._patience())
            if not ready:
                raise HunterFailed(f"{len(busy)} hunter(s) still running a program after {PROGRAM_BOUND:g} s")
            for pipe in ready:
                message = _received(pipe, self.hunters[busy[pipe]][0])
                if message.kind is MessageKind.RAN and message.verdict is not None:
                    self.ran_by[busy[pipe]] += 1
                    if not self.minutes > 0:
                        self._give(pipe)
                    yield message.verdict
                elif message.kind is MessageKind.DONE:
                    del busy[pipe]
        self.ended = time.monotonic()
        if self.given != sum(self.ran_by) or self.queue:  # fail closed: every program given, and back
            raise HunterFailed(f"{self.given} programs given, {sum(self.ran_by)} verdicts back, "
                               f"{len(self.queue)} never given")

    def _give(self, pipe: Any) -> None:
        """The next program given to the hunter at ``pipe``; none left: stop."""
        if self.queue:
            self.given += 1
            pipe.send(self.queue.pop(0))
        else:
            pipe.send(STOP)

    def _patience(self) -> float:
        """Seconds the next message may take: past the drawing hunters' end, or one program."""
        if self.minutes > 0:
            return max(0.0, self.started + self.minutes * 60 - time.monotonic()) + PROGRAM_BOUND
        return PROGRAM_BOUND

    def _stop(self) -> None:
        """Tell every hunter to stop (the end of its pipe), let each stop its cluster; SIGTERM
        one that overruns (it stops its cluster on the way out), then SIGKILL (its reaper cleans up)."""
        for _, pipe in self.hunters:
            pipe.close()  # a hunter between programs sees the end of its pipe, and stops
        deadline = time.monotonic() + EXIT_BOUND
        for process, _ in self.hunters:
            process.join(max(0.0, deadline - time.monotonic()))
        for process, _ in self.hunters:
            for end in (process.terminate, process.kill):
                if process.is_alive():
                    end()
                    process.join(EXIT_BOUND)


def _ready(pipe: Connection, process: Any) -> None:
    if not pipe.poll(START_BOUND):
        raise HunterFailed(f"a hunter's cluster did not start within {START_BOUND:g} s")
    message = _received(pipe, process)
    if message.kind is not MessageKind.READY:
        raise HunterFailed(f"a hunter said {message.kind.value} before it was ready")


def _received(pipe: Any, process: Any) -> Message:
    try:
        message: Message = pipe.recv()
    except EOFError:
        process.join(EXIT_BOUND)
        raise HunterFailed(f"a hunter exited (code {process.exitcode}) without saying it was done") from None
    if message.kind is MessageKind.CRASHED:
        raise HunterFailed(f"a hunter crashed:\n{message.detail}")
    return message


# -- in the hunter's process ------------------------------------------------------------------


def _hunter(pipe: Connection, setup: HuntSetup, minutes: float, hunters: int) -> None:
    """Start the cluster and say so; then draw programs for ``minutes`` once told to go, or run
    each program given until told to stop; say each verdict, and the end (the ``hunters``
    clusters start one after another: the first waits for the last). Told to stop (the end of
    its pipe, between programs) or SIGTERMed, it stops its cluster and ends."""
    # SIGTERM, not SIGKILL: it stops its cluster on the way out (SIGKILLed, the cluster's reaper does).
    die_with_parent(signal.SIGTERM)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # the cluster's teardown runs on the way out
    try:
        with hunt_cluster(setup) as cluster:
            _tell(pipe, Message(kind=MessageKind.READY))
            if not pipe.poll(START_BOUND * hunters):
                raise HunterFailed(f"no start within {START_BOUND * hunters:g} s of this cluster's")
            send = lambda verdict: _tell(pipe, Message(kind=MessageKind.RAN, verdict=verdict))  # noqa: E731
            if minutes > 0 and _heard(pipe) == GO:
                _draw(setup, minutes, cluster, send, stop=lambda: pipe.poll(0))
            elif not minutes > 0:
                _given(pipe, setup, cluster, send)
            _tell(pipe, Message(kind=MessageKind.DONE))
    except _ParentGone:
        return  # the hunt that started it has ended or let it go: nothing to tell
    except BaseException:  # noqa: BLE001 - said to the parent, which fails the run
        with contextlib.suppress(OSError):
            pipe.send(Message(kind=MessageKind.CRASHED, detail=traceback.format_exc()))


class _ParentGone(Exception):
    """The hunt's end of the pipe is closed: it stopped listening."""


def _tell(pipe: Connection, message: Message) -> None:
    try:
        pipe.send(message)
    except (BrokenPipeError, EOFError, OSError):
        raise _ParentGone from None


def _heard(pipe: Connection) -> str:
    try:
        return str(pipe.recv())
    except (EOFError, OSError):
        raise _ParentGone from None


def _given(pipe: Connection, setup: HuntSetup, cluster: Any, send: Callable[[ProgramVerdict], None]) -> None:
    """Run each program the parent gives (the first already sent), until it says stop."""
    while (text := _heard(pipe)) != STOP:
        send(_run(program_from(text), setup, cluster))
        if not pipe.poll(PROGRAM_BOUND):
            raise HunterFailed(f"no program nor stop within {PROGRAM_BOUND:g} s of the last verdict")


def _run(program: Any, setup: HuntSetup, cluster: Any) -> ProgramVerdict:
    from scenarios.hunt._run import run_program

    return run_program(program, address=cluster.address, cluster=cluster.cluster, gcs_restart=setup.gcs_restart,
                       rpc_failures=setup.rpc_failures, rpc_delay=setup.rpc_delay)


def _draw(setup: HuntSetup, minutes: float, cluster: Any, send: Callable[[ProgramVerdict], None], *,
          stop: Callable[[], bool]) -> None:
    """Programs drawn by Hypothesis until ``minutes`` have passed, or ``stop()`` says so."""
    from hypothesis import HealthCheck, event, given, settings, target

    from scenarios.hunt._stats import fault_labels, features
    from scenarios.hunt._strategies import programs

    end = time.monotonic() + minutes * 60

    @settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(program=programs(gcs_restart=setup.gcs_restart, rpc_failures=setup.rpc_failures,
                            rpc_delay=setup.rpc_delay))
    def one(program: Any) -> None:
        if time.monotonic() > end or stop():
            return
        verdict = _run(program, setup, cluster)
        for label in sorted(features(program) | fault_labels(verdict)):
            event(label)
        target(verdict.slowest, label="slowest get (s)")
        send(verdict)

    while time.monotonic() < end and not stop():
        one()
