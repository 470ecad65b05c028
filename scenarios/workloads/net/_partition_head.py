"""The ``partition-head`` workload: every worker node cut from the head (the GCS's node, which is
also the driver's) twice, once for shorter than Ray's health check and once for longer, on a
cluster whose worker nodes are network namespaces (``network = true``).

An incarnation-tagged writer (:class:`~scenarios.workloads.net._partition_worker.IncarnationLog`) lives on each
worker node (``max_restarts=-1``, ``max_task_retries=-1``, no CPU, a soft affinity to its node:
it may restart anywhere, the head included); the driver calls each one every ``call_every``
seconds without waiting for the answer, and runs a small task on the head at every step. A
thread reads the worker namespaces' nftables rules back, so the cuts are observations of the
run (when each began and ended, on which nodes), not what the schedule meant.

Every verdict is a pure function of what was recorded (cut windows, node deaths, calls, head
tasks, the nodes' states at the end), tested Ray-free with fabricated observations:

- ``short_cut_tolerated``: the short cut cut every worker; no node declared dead for it; every
  call made during it answered within ``settle`` seconds of the heal, from the cut node and by
  the process its writer had before the cut.
- ``long_cut_declared``: the long cut cut every worker, each declared dead within ``detect_within``.
- ``head_kept_serving``: tasks on the head ran throughout, during both cuts too, none slower
  than ``head_within``.
- ``actors_answer_after``: after the long cut, each writer answers from a node that is alive.
- ``no_rejoin``: a node declared dead stays dead after the heal.
- ``nothing_acknowledged_lost``: every acknowledged write is in its writer's log.
- ``no_call_hung``: every call and head task ended (an answer or an error) within ``hang_within``.
- ``no_superseded_write``: no write by a writer's old incarnation after its replacement started
  (reported, not declared by the built-in scenario: Ray 2.60 breaks it, see the page on partitions).
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from chaos import History, wait_until
from chaos.cluster import short
from chaos.history import OpStatus, SetVerdict, check_set
from chaos.net import COMMAND_TIMEOUT, NetLab, kill_node_processes, lab_of, run
from scenarios.model._records import Verdict
from scenarios.model._workload import CALL_TIMEOUT, Params, Workload
from scenarios.workloads._kit import DETECTION_BOUND, NodeWatch, states_of, worker_nodes
from scenarios.workloads.net._partition_worker import IncarnationLog, LogLine, read_log, superseded_writes

__all__ = ["Call", "CallOutcome", "CutReader", "CutWindow", "HeadTask",
           "actors_answer_after", "cut_from_head", "cut_windows", "head_kept_serving", "long_cut_declared",
           "no_call_hung", "no_rejoin", "no_superseded_write", "nothing_acknowledged_lost", "short_cut_tolerated"]


class CallOutcome(StrEnum):
    """How one call (to a writer, or a task on the head) ended, as the driver saw it."""

    OK = "ok"  #: the answer came
    FAILED = "failed"  #: an error came back (its type is kept)
    PENDING = "pending"  #: nothing came back by the end of the run's wait


@dataclass(frozen=True, slots=True)
class Call:
    """One call to a writer: which, its seq, when it was made and ended (seconds into the run),
    how, and the node and pid that answered (an answer names its incarnation)."""

    actor: str
    seq: int
    at: float
    ended: float | None
    outcome: CallOutcome
    node: str = ""
    pid: int = 0
    error: str = ""


@dataclass(frozen=True, slots=True)
class HeadTask:
    """One task on the head node: when it was submitted, how long it took, how it ended."""

    at: float
    took: float | None
    outcome: CallOutcome
    error: str = ""


@dataclass(frozen=True, slots=True)
class CutWindow:
    """A span in which worker nodes were cut from the head, as read back from their rules:
    from the first read that found a cut to the first that found none (None: still cut)."""

    start: float
    end: float | None
    nodes: frozenset[str]

    def length(self, now: float) -> float:
        return (now if self.end is None else self.end) - self.start

    def covers(self, t: float) -> bool:
        return self.start <= t and (self.end is None or t < self.end)


# -- the cuts, read back --------------------------------------------------------------------------

_ADDRESS = re.compile(r"\d+\.\d+\.\d+\.\d+")


def cut_from_head(ruleset: str, head: str) -> bool:
    """Whether ``nft list ruleset`` of a namespace drops all its traffic to or from ``head``: a
    rule that names the address and drops, with no random share (a loss is not a cut)."""
    return any("drop" in line.split() and "numgen" not in line and re.search(r"ip [sd]addr", line)
               and head in _ADDRESS.findall(line) for line in ruleset.splitlines())


def cut_windows(samples: Sequence[tuple[float, frozenset[str]]]) -> list[CutWindow]:
    """The cut windows of a series of reads (time, nodes found cut), in time order: each run of
    reads that found a cut is one window, its nodes those found cut in any of them."""
    windows: list[CutWindow] = []
    start, nodes = None, frozenset[str]()
    for t, cut in samples:
        if cut and start is None:
            start, nodes = t, cut
        elif cut and start is not None:
            nodes |= cut
        elif not cut and start is not None:
            windows.append(CutWindow(start, t, nodes))
            start, nodes = None, frozenset()
    if start is not None:
        windows.append(CutWindow(start, None, nodes))
    return windows


def _cut_nodes(lab: NetLab) -> frozenset[str]:
    """The Ray node ids of the worker nodes whose rules cut them from the head now.

    Raises:
        NetCommandFailed: a read failed; a node whose rules cannot be read is not read as uncut.
    """
    return frozenset(lab.id_of(node) for node in lab.workers
                     if cut_from_head(run(["nft", "list", "ruleset"], namespace=node.namespace), lab.head.address))


class CutReader:
    """The worker nodes' cuts read back every ``every`` seconds by a thread of its own, each read
    timed by ``clock`` (seconds into the run), from :meth:`start` to :meth:`stop`."""

    def __init__(self, lab: NetLab, clock: Callable[[], float], *, every: float = 0.2) -> None:
        self.lab, self.clock, self.every = lab, clock, every
        self.samples: list[tuple[float, frozenset[str]]] = []
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="raychaos-cut-reader", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def cut(self) -> bool:
        """Whether the last read found a cut."""
        return bool(self.samples and self.samples[-1][1])

    def _loop(self) -> None:
        while not self._stop.wait(self.every):  # the read-back's pace, not a synchronisation
            try:
                at = self.clock()
                self.samples.append((at, _cut_nodes(self.lab)))
            except Exception as exc:  # noqa: BLE001 - raised by stop(), in the driver's thread
                self.errors.append(exc)
                return

    def stop(self) -> list[tuple[float, frozenset[str]]]:
        """End the reads and return them.

        Raises:
            NetCommandFailed: a read failed (a node whose rules cannot be read is not uncut).
        """
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=4 * COMMAND_TIMEOUT)
        if self.errors:
            raise self.errors[0]
        return list(self.samples)


# -- the verdicts (pure: fed fabricated observations in the tests) --------------------------------


def _short(windows: Sequence[CutWindow], bound: float, now: float) -> CutWindow | None:
    return next((w for w in windows if w.end is not None and w.length(now) < bound), None)


def _long(windows: Sequence[CutWindow], bound: float, now: float) -> CutWindow | None:
    return next((w for w in windows if w.length(now) >= bound), None)


def _names(nodes: Sequence[str] | frozenset[str]) -> str:
    return ", ".join(sorted(short(n) for n in nodes)) or "none"


def _deaths_of(windows: Sequence[CutWindow], i: int, deaths: Mapping[str, float]) -> dict[str, float]:
    """The deaths of the ``i``-th cut's nodes from its start to the next cut's start."""
    until = windows[i + 1].start if i + 1 < len(windows) else float("inf")
    return {n: t for n, t in deaths.items() if n in windows[i].nodes and windows[i].start <= t < until}


def _uncut(window: CutWindow, workers: frozenset[str]) -> str:
    """The detail's words for the worker nodes ``window`` did not cut ("" when it cut them all):
    a cut that spared a worker is not a cut of every worker from the head."""
    spared = workers - window.nodes
    return f"; worker nodes not cut: {_names(spared)}" if spared else ""


def _before(calls: Sequence[Call], start: float) -> dict[str, tuple[str, int]]:
    """Where each writer answered from (node, pid) last before ``start``: its last call answered
    before then."""
    answered = sorted((c for c in calls if c.outcome is CallOutcome.OK and c.ended is not None and c.ended < start),
                      key=lambda c: c.ended or 0.0)
    return {c.actor: (c.node, c.pid) for c in answered}


def _moved(during: Sequence[Call], before: Mapping[str, tuple[str, int]], nodes: frozenset[str]) -> list[Call]:
    """The answered calls of ``during`` not answered by their writer's pre-cut process on a cut
    node (a new incarnation, or a writer that was not where the cut was)."""
    return [c for c in during if c.outcome is CallOutcome.OK
            and (c.node not in nodes or before.get(c.actor) != (c.node, c.pid))]


def short_cut_tolerated(windows: Sequence[CutWindow], deaths: Mapping[str, float], calls: Sequence[Call], *,
                        workers: frozenset[str], bound: float, settle: float, now: float) -> Verdict:
    """``short_cut_tolerated``: a cut shorter than the health check's ``bound`` of every node of
    ``workers`` was seen; no node was declared dead from its start until ``bound`` after its heal
    (or the next cut's start); every call made during it answered within ``settle`` seconds of the
    heal, from the cut node and by the process its writer had before the cut."""
    cut = _short(windows, bound, now)
    if cut is None:
        return Verdict.of("short_cut_tolerated", False, f"no cut shorter than {bound:g} s was seen "
                       f"(cuts: {[round(w.length(now), 1) for w in windows]})")
    assert cut.end is not None
    later = [w.start for w in windows if w.start > cut.start]
    until = min([cut.end + bound, *later])
    declared = [n for n, t in deaths.items() if cut.start <= t < until]
    during = [c for c in calls if cut.covers(c.at)]
    late = [c for c in during if c.outcome is not CallOutcome.OK or c.ended is None or c.ended > cut.end + settle]
    moved = _moved(during, _before(calls, cut.start), cut.nodes)
    last = max((c.ended for c in during if c.ended is not None), default=cut.end)
    spared = _uncut(cut, workers)
    return Verdict.over("short_cut_tolerated", len(during), held=not declared and not late and not moved
                        and not spared,
                        detail=f"cut {cut.length(now):.1f} s (nodes {_names(cut.nodes)}{spared}); declared "
                               f"dead by {until:.1f} s: {_names(declared)}; {len(during)} calls made during it, "
                               f"not answered within {settle:g} s of the heal: {len(late)}; answered elsewhere "
                               f"than by the writer's pre-cut process on a cut node: {len(moved)}"
                               + (f" (first: {moved[0].actor} pid {moved[0].pid} on {short(moved[0].node)})"
                                  if moved else "")
                               + f"; the last answered {last - cut.end:.1f} s after the heal")


def long_cut_declared(windows: Sequence[CutWindow], deaths: Mapping[str, float], *, workers: frozenset[str],
                      bound: float, within: float, now: float) -> Verdict:
    """``long_cut_declared``: a cut of every node of ``workers`` at least the health check's
    ``bound`` long was seen, and every node it cut was declared dead within ``within`` seconds of
    its start (not before)."""
    long = _long(windows, bound, now)
    if long is None:
        return Verdict.of("long_cut_declared", False, f"no cut of {bound:g} s or more was seen "
                       f"(cuts: {[round(w.length(now), 1) for w in windows]}); deaths: {len(deaths)}")
    took = {n: deaths[n] - long.start for n in long.nodes if n in deaths}
    bad = [n for n in long.nodes if not 0 <= took.get(n, -1.0) <= within]
    shown = ", ".join(f"{short(n)} {t:.1f} s" for n, t in sorted(took.items())) or "none"
    spared = _uncut(long, workers)
    return Verdict.over("long_cut_declared", len(long.nodes), held=not bad and not spared,
                        detail=f"cut {long.length(now):.1f} s{spared}; declared dead after the cut's start: "
                               f"{shown} (bound {within:g} s); not in the bound: {_names(bad)}")


def head_kept_serving(tasks: Sequence[HeadTask], windows: Sequence[CutWindow], *, within: float) -> Verdict:
    """``head_kept_serving``: every task on the head answered within ``within`` seconds, and
    each cut had tasks submitted while it was on (a head idle through a cut proves nothing)."""
    bad = [t for t in tasks if t.outcome is not CallOutcome.OK or t.took is None or t.took > within]
    per_cut = [sum(w.covers(t.at) for t in tasks) for w in windows]
    cut = [t.took for t in tasks if t.took is not None and any(w.covers(t.at) for w in windows)]
    slowest = f"{max(cut):.2f} s" if cut else "none"
    return Verdict.over("head_kept_serving", len(tasks), held=not bad and all(per_cut),
                        detail=f"{len(tasks)} tasks on the head; submitted during each cut: {per_cut}; failed or "
                               f"slower than {within:g} s: {len(bad)}"
                               + (f" (first at {bad[0].at:.1f} s: {bad[0].error or bad[0].took})" if bad else "")
                               + f"; slowest during a cut {slowest}")


def actors_answer_after(calls: Sequence[Call], windows: Sequence[CutWindow], states: Mapping[str, str], *,
                        actors: Sequence[str], bound: float, now: float) -> Verdict:
    """``actors_answer_after``: once the long cut healed, each writer answered a call made after
    the heal, from a node the GCS holds alive at the end and that the cut did not cut off."""
    long = _long(windows, bound, now)
    if long is None or long.end is None:
        return Verdict.of("actors_answer_after", False, "no long cut that healed was seen")
    end = long.end
    after = {a: [c for c in calls if c.actor == a and c.at >= end and c.outcome is CallOutcome.OK] for a in actors}
    where = {a: sorted({c.node for c in cs}) for a, cs in after.items()}
    bad = [a for a, nodes in where.items() if not nodes or any(states.get(n) != "ALIVE" or n in long.nodes
                                                               for n in nodes)]
    shown = "; ".join(f"{a}: {len(after[a])} from {_names(n)}" for a, n in where.items())
    return Verdict.over("actors_answer_after", len(actors), held=not bad,
                        detail=f"answers after the heal at {end:.1f} s: {shown}; none, or from a cut or dead "
                               f"node: {', '.join(bad) or 'none'}")


def no_rejoin(deaths: Mapping[str, float], states: Mapping[str, str]) -> Verdict:
    """``no_rejoin``: the nodes declared dead are still dead at the end (Ray does not let a node
    it declared dead back in)."""
    back = [n for n in deaths if states.get(n) != "DEAD"]
    return Verdict.over("no_rejoin", len(deaths), held=not back,
                        detail=f"nodes declared dead: {len(deaths)}; alive again since: {_names(back)}")


def nothing_acknowledged_lost(found: Mapping[str, SetVerdict]) -> Verdict:
    """``nothing_acknowledged_lost``: each writer's log holds every write it acknowledged, and
    nothing it was not asked to write. Not duplicates: a call in flight at a restart runs again
    on the new incarnation (at least once, as Ray documents for ``max_task_retries``)."""
    return Verdict.over("nothing_acknowledged_lost", sum(f.acknowledged for f in found.values()),
                        held=all(not f.lost and not f.unexpected for f in found.values()),
                        detail="; ".join(f"{name}: {f.explain()}" for name, f in found.items()))


def no_call_hung(calls: Sequence[Call], tasks: Sequence[HeadTask], *, within: float) -> Verdict:
    """``no_call_hung``: every call to a writer and every task on the head ended, with an answer
    or an error, within ``within`` seconds of being made."""
    hung = [c for c in calls if c.ended is None or c.ended - c.at > within]
    hung_tasks = [t for t in tasks if t.took is None or t.took > within]
    slowest = max((c.ended - c.at for c in calls if c.ended is not None), default=0.0)
    first = f" (first: {hung[0].actor} #{hung[0].seq} at {hung[0].at:.1f} s)" if hung else ""
    return Verdict.over("no_call_hung", len(calls) + len(tasks), held=not hung and not hung_tasks,
                        detail=f"{len(calls)} calls, {len(tasks)} head tasks; unanswered or slower than "
                               f"{within:g} s: {len(hung)} calls{first}, {len(hung_tasks)} tasks; slowest call "
                               f"that ended {slowest:.1f} s")


def no_superseded_write(logs: Mapping[str, Sequence[LogLine]]) -> Verdict:
    """``no_superseded_write``: no writer's log holds a write by an incarnation after a later one
    started (the old process running calls its replacement had already answered). Needs a
    writer that restarted."""
    late = {name: superseded_writes(list(lines)) for name, lines in logs.items()}
    restarted = [name for name, lines in logs.items() if sum(line.kind == "start" for line in lines) >= 2]
    first = next((lines[0] for lines in late.values() if lines), None)
    return Verdict.over("no_superseded_write", len(restarted), held=not any(late.values()),
                        detail=f"writers restarted: {', '.join(restarted) or 'none'}; writes by a superseded "
                               f"incarnation after its replacement started: {sum(map(len, late.values()))}"
                               + (f" (first: pid {first.pid} at {first.at:.3f})" if first else ""))


# -- the workload ---------------------------------------------------------------------------------


class HeadCutLog(IncarnationLog):
    """An :class:`IncarnationLog` whose writes also say where they ran (node id and pid)."""

    def write_where(self, seq: int) -> tuple[int, str]:
        import ray

        self._append("write", seq)
        return self.pid, str(ray.get_runtime_context().get_node_id())


#: Seconds a writer may take to be placed on its worker node (each try a new actor).
PLACE_WITHIN = 60.0


class PartitionHeadParams(Params):
    #: A cut shorter than this (s) is within Ray's health check, one as long or longer past it:
    #: threshold × (period + timeout) of the runner's network clusters (3 × (1 + 2) s).
    health_check: float = DETECTION_BOUND
    #: Seconds from the long cut's start until Ray must have declared its nodes dead (8.1-9.2 s
    #: measured here for both workers cut at once; 10.1 s for one node at worst), with slack.
    detect_within: float = 15.0
    #: Seconds after the short cut's heal by which every call made during it must have answered.
    settle: float = 5.0
    #: Seconds a task on the head may take, cut or not.
    head_within: float = 2.0
    #: Seconds any call or task may take before it counts as hung.
    hang_within: float = 20.0
    #: Seconds between two calls to a writer.
    call_every: float = 0.2
    #: The planted bug: each task on the head sleeps this long (s) while a cut is on.
    head_stall: float = 0.0


@dataclass
class _Inflight:
    """A call made and not yet answered."""

    actor: str
    seq: int
    at: float
    ref: Any


@dataclass
class _Writer:
    name: str
    actor: Any
    path: str
    history: History = field(default_factory=History)
    seq: int = 0
    next_at: float = 0.0


def _stall(seconds: float, cut: bool) -> float:
    """The planted bug's task body: a head task that sleeps while a cut is on."""
    if cut and seconds:
        time.sleep(seconds)  # the planted slowness itself, not a synchronisation
    return time.time()


class PartitionHead(Workload):
    """A writer on each worker node and tasks on the head, while every worker is cut from the head
    for shorter and then for longer than Ray's health check."""

    BASELINE = True  # the fault-free twin: every trace of the cuts must be missing there
    FAULT_VERDICTS = ("short_cut_tolerated", "long_cut_declared", "actors_answer_after", "no_rejoin")
    Params = PartitionHeadParams
    INVARIANTS = ("short_cut_tolerated", "long_cut_declared", "head_kept_serving", "actors_answer_after",
                  "no_rejoin", "nothing_acknowledged_lost", "no_call_hung", "no_superseded_write")

    def setup(self) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.params = self.ctx.params_as(PartitionHeadParams)
        self.lab = lab_of(self.ctx.address)
        os.makedirs(self.ctx.storage, exist_ok=True)
        self.workers = frozenset(worker_nodes())  # the nodes every cut must cut
        self.writers = [self._writer(f"w{i}", node) for i, node in enumerate(sorted(self.workers))]
        head = NodeAffinitySchedulingStrategy(self.lab.id_of(self.lab.head), soft=False)
        self.task = ray.remote(num_cpus=0, max_retries=0)(_stall).options(scheduling_strategy=head)
        ray.get(self.task.remote(0.0, False), timeout=CALL_TIMEOUT)  # its worker started before time zero
        self.inflight: list[_Inflight] = []
        self.calls: list[Call] = []
        self.tasks: list[HeadTask] = []
        self.watch = NodeWatch(self.ctx)
        self.cuts = CutReader(self.lab, self.ctx.elapsed)
        self.cuts.start()

    def _writer(self, name: str, node: str) -> _Writer:
        """A writer on ``node``. Its affinity is soft (a restart may land anywhere), so a node
        the scheduler does not see yet gets it elsewhere (seen here: on the head, or both
        writers on one worker): a writer that landed elsewhere is killed and made again."""
        import ray

        path = f"{self.ctx.storage}/{name}.log"

        def placed() -> Any:
            if os.path.exists(path):
                os.remove(path)  # a misplaced writer's start line: not an incarnation of this one
            actor = self._new_writer(path, node)
            if ray.get(actor.write_where.remote(-1), timeout=CALL_TIMEOUT)[1] == node:
                return actor
            ray.kill(actor)
            return None

        return _Writer(name, wait_until(placed, timeout=PLACE_WITHIN, interval=0.5,
                                        what=f"writer {name} placed on worker node {short(node)}"), path)

    def _new_writer(self, path: str, node: str) -> Any:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        remote = ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0)(HeadCutLog)
        # Soft, and no resource only workers have: a restart may land anywhere, the head too.
        return remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=True)).remote(path)

    def call_bounds(self) -> Mapping[str, float]:
        return {"step": 3 * self.params.hang_within, "invariants": 3 * self.params.hang_within + 60.0}

    def step(self) -> bool:
        now = self.ctx.elapsed()
        for writer in self.writers:
            if now >= writer.next_at:
                self._call(writer, now)
        self._collect(timeout=0.0)
        self._head_task()
        self.watch.poll()
        self.ctx.stop.wait(0.05)  # the workload's pace, not a synchronisation
        return True

    def _call(self, writer: _Writer, now: float) -> None:
        key, writer.seq = (writer.name, writer.seq), writer.seq + 1
        writer.history.invoke(key, "driver")
        self.inflight.append(_Inflight(actor=writer.name, seq=key[1], at=now,
                                       ref=writer.actor.write_where.remote(key[1])))
        writer.next_at = now + self.params.call_every
        self.ctx.count("calls")

    def _collect(self, *, timeout: float) -> None:
        """Record the answers (or errors) that came, waiting up to ``timeout`` seconds for them."""
        import ray

        if not self.inflight:
            return
        refs = [c.ref for c in self.inflight]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout, fetch_local=True)
        done = {id(r) for r in ready}
        for call in [c for c in self.inflight if id(c.ref) in done]:
            self.calls.append(self._answer(call))
        self.inflight = [c for c in self.inflight if id(c.ref) not in done]

    def _answer(self, call: _Inflight) -> Call:
        import ray

        history = next(w.history for w in self.writers if w.name == call.actor)
        try:
            pid, node = ray.get(call.ref, timeout=CALL_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - an error reply: the write may have landed
            history.complete((call.actor, call.seq), OpStatus.INFO)
            return Call(actor=call.actor, seq=call.seq, at=call.at, ended=self.ctx.elapsed(),
                        outcome=CallOutcome.FAILED, error=type(exc).__name__)
        history.complete((call.actor, call.seq), OpStatus.OK)
        return Call(actor=call.actor, seq=call.seq, at=call.at, ended=self.ctx.elapsed(), outcome=CallOutcome.OK,
                    node=node, pid=pid)

    def _head_task(self) -> None:
        import ray

        at, start = self.ctx.elapsed(), time.monotonic()
        from ray.exceptions import GetTimeoutError

        try:
            ray.get(self.task.remote(self.params.head_stall, self.cuts.cut()), timeout=self.params.hang_within)
        except Exception as exc:  # noqa: BLE001 - kept: a failed or hung task on the head
            outcome = CallOutcome.PENDING if isinstance(exc, GetTimeoutError) else CallOutcome.FAILED
            self.tasks.append(HeadTask(at=at, took=None, outcome=outcome, error=type(exc).__name__))
            return
        self.tasks.append(HeadTask(at, time.monotonic() - start, CallOutcome.OK))
        self.ctx.count("head tasks")

    def probe(self) -> str:
        import ray

        ray.get(self.task.remote(0.0, False), timeout=5)
        nodes = ray.get([w.actor.node_id.remote() for w in self.writers], timeout=5)
        return f"a task on the head answered; the writers answer from {_names(nodes)}"

    def _drain(self) -> None:
        """Wait for the calls still in flight, each up to ``hang_within`` after it was made; what
        is left then is pending."""
        deadline = max((c.at for c in self.inflight), default=0.0) + self.params.hang_within
        self._collect(timeout=max(0.0, deadline - self.ctx.elapsed()))
        self.calls += [Call(actor=c.actor, seq=c.seq, at=c.at, ended=None, outcome=CallOutcome.PENDING)
                       for c in self.inflight]
        self.inflight = []

    def invariants(self) -> list[Verdict]:
        samples = self.cuts.stop()
        self._drain()
        self.watch.poll()
        windows, now, p = cut_windows(samples), self.ctx.elapsed(), self.params
        deaths, states = dict(self.watch.dead_at), states_of(self.ctx.address)
        self._figures(windows, deaths, now)
        return [short_cut_tolerated(windows, deaths, self.calls, workers=self.workers, bound=p.health_check,
                                    settle=p.settle, now=now),
                long_cut_declared(windows, deaths, workers=self.workers, bound=p.health_check,
                                  within=p.detect_within, now=now),
                head_kept_serving(self.tasks, windows, within=p.head_within),
                actors_answer_after(self.calls, windows, states, actors=[w.name for w in self.writers],
                                    bound=p.health_check, now=now),
                no_rejoin(deaths, states), nothing_acknowledged_lost(self._found()),
                no_call_hung(self.calls, self.tasks, within=p.hang_within),
                no_superseded_write({w.name: read_log(w.path) for w in self.writers})]

    def _found(self) -> dict[str, SetVerdict]:
        return {w.name: check_set(w.history.ops(), [(w.name, line.seq) for line in read_log(w.path)
                                                     if line.kind == "write" and line.seq >= 0])
                for w in self.writers}

    def _figures(self, windows: Sequence[CutWindow], deaths: Mapping[str, float], now: float) -> None:
        """The report's figures, per cut: its length; the calls made during it, how many answered,
        the slowest, and the first answer from a node it did not cut (a new incarnation); when
        its nodes were declared dead (a death belongs to the last cut begun before it)."""
        for i, window in enumerate(windows, 1):
            during = [c for c in self.calls if window.covers(c.at)]
            took = [c.ended - c.at for c in during if c.ended is not None]
            moved = [c.ended - window.start for c in during
                     if c.ended is not None and c.node and c.node not in window.nodes]
            dead = [t - window.start for t in _deaths_of(windows, i - 1, deaths).values()]
            for name, value in (("s", window.length(now)), ("calls made", len(during)),
                                ("calls answered", sum(c.outcome is CallOutcome.OK for c in during)),
                                ("slowest call s", max(took, default=-1.0)),
                                ("first answer from an uncut node s", min(moved, default=-1.0)),
                                ("first declared dead s", min(dead, default=-1.0)),
                                ("last declared dead s", max(dead, default=-1.0))):
                self.ctx.metric(f"cut {i} {name}", round(value, 2))
        self.ctx.metric("head task max s", round(max((t.took or 0.0 for t in self.tasks), default=-1.0), 3))

    def teardown(self) -> None:
        import ray

        try:
            self.cuts.stop()
        except Exception:  # noqa: BLE001 - a failed read fails the invariants, not the teardown
            pass
        for writer in self.writers:
            ray.kill(writer.actor)
        # Processes of a node declared dead outlive the heal (Ray 2.60): killed here, before the
        # run's storage goes.
        for node_id in self.watch.dead_at:
            if node_id in self.lab.node_ids:
                kill_node_processes(self.lab, self.lab.node_ids[node_id])
