"""Workloads for Ray's failure surface beyond the reference chapter: GCS restarts, silent nodes,
RPC failures, OS limits, full disks, preemption, lost objects, placement groups, async actors.

Each one checks a guarantee Ray documents (or one our actors add) with invariants that can be
false, and fails closed when its fault left no trace (a verdict on a fault that never bit
would be a false green).
"""

from __future__ import annotations

import asyncio
import errno
import os
import socket
import threading
import time
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, ClassVar

import numpy as np
import psutil

from actors import Checkpointable, CheckpointConfig, CheckpointedCounter, WriterSeqs, mutation
from chaos import FaultKind, History, check_set, wait_until, watch
from chaos.cluster import TEST_SYSTEM_CONFIG, live_nodes, node_states, short
from chaos.engine import StuckCause
from chaos.errors import MutationNotLogged
from chaos.history import Op, OpStatus, drive_writers
from scenarios.model._records import Verdict
from scenarios.model._workload import CALL_TIMEOUT, FaultWindow, Params, Workload

__all__ = ["SURFACE_WORKLOADS"]

#: Ray's health check declares a silent node dead after about threshold × (period + timeout).
DETECTION_BOUND = TEST_SYSTEM_CONFIG["health_check_failure_threshold"] * (
    TEST_SYSTEM_CONFIG["health_check_period_ms"] + TEST_SYSTEM_CONFIG["health_check_timeout_ms"]) / 1000
#: Objects this large live in the shared-memory store of the node that made them.
PLASMA_ELEMENTS = 50_000


class Ack(StrEnum):
    """How one keyed add ended, as the writer saw it."""

    ACKED = "acked"  #: the reply came: applied and (per durability) kept
    UNDONE = "undone"  #: MutationNotLogged(undone=True): refused and rolled back, not applied
    UNKNOWN = "unknown"  #: another error: it may or may not have been applied


_OP_STATUS = {Ack.ACKED: OpStatus.OK, Ack.UNDONE: OpStatus.FAIL, Ack.UNKNOWN: OpStatus.INFO}


@dataclass
class Ledger:
    """One writer's keyed adds of 1 to a :class:`CheckpointedCounter`, each recorded in a
    history: the counter must hold every acknowledged seq, no refused one, and count each once."""

    actor: Any
    writer: str
    seq: int = 0
    counts: dict[Ack, int] = field(default_factory=lambda: dict.fromkeys(Ack, 0))
    last: dict[Ack, float] = field(default_factory=dict)
    history: History = field(default_factory=History)

    def add(self, *, timeout: float = CALL_TIMEOUT) -> Ack:
        import ray

        seq, self.seq = self.seq, self.seq + 1
        self.history.invoke((self.writer, seq), self.writer)
        try:
            ray.get(self.actor.add.remote(1, writer_id=self.writer, seq=seq), timeout=timeout)
            outcome = Ack.ACKED
        except MutationNotLogged as exc:  # RayTaskError(MutationNotLogged): the cause says
            outcome = Ack.UNDONE if getattr(exc, "cause", exc).undone else Ack.UNKNOWN
        except Exception:  # noqa: BLE001 - an error reply: the add may have happened
            outcome = Ack.UNKNOWN
        self.history.complete((self.writer, seq), _OP_STATUS[outcome])
        self.counts[outcome] += 1
        self.last[outcome] = time.monotonic()
        return outcome

    def verdict(self, name: str) -> Verdict:
        import ray

        value, applied = ray.get([self.actor.get.remote(), self.actor.applied_seqs.remote(self.writer)],
                                 timeout=CALL_TIMEOUT)
        return kept(name, self.writer, value, self.history.ops(), applied)


def kept(name: str, writer: str, value: int, history: Iterable[Op], applied: Iterable[int]) -> Verdict:
    """A counter of keyed adds of 1 holds every acknowledged seq of ``writer``, none that was
    refused and undone, and counts each applied seq once (``value`` is how many were applied).
    Judged seq by seq with the set checker: a lost acknowledged add is not excused by an add
    of unknown fate that did land. With no add acknowledged there is nothing to keep: it does
    not hold."""
    seqs = sorted(applied)
    found = check_set(history, [(writer, seq) for seq in seqs])
    return Verdict.over(name, found.acknowledged, held=found.ok and value == len(seqs),
                        detail=f"{writer}: {found.explain()}; counter {value} for {len(seqs)} applied seqs")


def _counter(ctx: Any, name: str, *, cls: type = CheckpointedCounter, node: str | None = None,
             **options: Any) -> Any:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    remote = ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0)(cls)
    # A sliver of a resource with the affinity: Ray 2.60 places a request for no resources on
    # any node, soft affinity or not (seen here: both counters on one node, the fault missing both).
    where = {"scheduling_strategy": NodeAffinitySchedulingStrategy(node, soft=True),
             "resources": {"worker": 0.01}} if node else {}
    return remote.options(name=name, namespace=ctx.namespace, **where).remote(
        f"{ctx.storage}/{name}", **options)


def _worker_nodes() -> list[str]:
    """The live worker nodes' ids (those holding the ``worker`` resource), sorted."""
    return [row.node_id for row in live_nodes(having="worker")]


def _states(address: str) -> dict[str, str]:
    return {node: s.state for node, s in node_states(address).items()}


def _dead(address: str) -> set[str]:
    return {node for node, s in node_states(address).items() if s.dead}


class _NodeWatch:
    """When each node died during the run (seconds into it), polled from ``step``. Nodes dead
    before it started are not counted: a cluster's old losses must not pass for this run's.

    The time is the GCS's own (a dead node's ``end_time_ms``), not when a poll saw it: a step
    blocked on a call to the dying node would else add its wait to the detection time (seen:
    a freeze "declared dead" 11.2 s late by the watch)."""

    def __init__(self, ctx: Any, every: float = 0.25) -> None:
        self.ctx, self.every, self.next = ctx, every, 0.0
        self.dead_before = _dead(ctx.address)
        self.dead_at: dict[str, float] = {}

    def poll(self) -> None:
        if time.monotonic() < self.next:
            return
        self.next = time.monotonic() + self.every
        for node, ended_ms in _deaths(self.ctx.address).items():
            if node not in self.dead_before:
                self.dead_at.setdefault(node, self._run_time(ended_ms))

    def _run_time(self, ended_ms: int) -> float:
        """Seconds into the run of a wall-clock death time (now, if the GCS gave none)."""
        now = float(self.ctx.elapsed())
        return now - max(0.0, time.time() - ended_ms / 1000) if ended_ms > 0 else now


def nodes_hit(windows: Sequence[FaultWindow]) -> dict[str, float]:
    """Each node the faults of ``windows`` hit (its Ray node id, from what each fault hit), and
    when the first that hit it was confirmed, seconds into the run; none in the fault-free twin
    (nothing was hit there)."""
    found: dict[str, float] = {}
    for window in windows:
        for process in window.injection.processes if window.injection is not None else ():
            found.setdefault(process.node_id, window.start)
    return found


def node_detected(hit: Mapping[str, float], dead_at: Mapping[str, float], *, within: float,
                  fault: str) -> Verdict:
    """``dead_node_detected``: each node the ``fault`` hit was declared dead within ``within``
    seconds of it (not before it), and no node it did not hit was: the dead node is the one the
    fault hit. None hit (none confirmed): nothing to judge, unknown."""
    name = "dead_node_detected"
    if not hit:
        return Verdict.unknown(name, f"no {fault} of a node was confirmed; nodes declared dead: {len(dead_at)}")
    problems = [p for p in (_detection(node, at, dead_at.get(node), within, fault) for node, at in hit.items()) if p]
    problems += [f"node {short(node)} declared dead at {t:.1f} s, which no {fault} hit" for node, t in dead_at.items()
                 if node not in hit]
    took = ", ".join(f"{dead_at[n] - at:.1f}" for n, at in hit.items() if n in dead_at)
    return Verdict.of(name, not problems, "; ".join(problems) or f"each node the {fault} hit declared dead {took} s "
                      f"after it (bound {within:g} s), and no other", len(hit))


def _detection(node: str, at: float, dead: float | None, within: float, fault: str) -> str:
    """What is wrong with the detection of ``node``, hit at ``at`` ("" when nothing)."""
    if dead is None:
        return f"node {short(node)}, its {fault} at {at:.1f} s, never declared dead"
    if not 0 <= dead - at <= within:
        return (f"node {short(node)}, its {fault} at {at:.1f} s, declared dead at {dead:.1f} s "
                f"(bound {within:g} s after it)")
    return ""


def _deaths(address: str) -> dict[str, int]:
    """Each dead node and when the GCS declared it dead (ms since the epoch; 0 if unknown)."""
    return {node: s.ended_ms for node, s in node_states(address).items() if s.dead}


# -- 1. GCS restart on a Redis ------------------------------------------------------------------


def square(x: int) -> int:
    return x * x


def _port_open(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=0.2):
            return True
    except OSError:
        return False


def _task_state(address: str, ref: Any) -> str:
    """What Ray's State API says of the task behind ``ref``: where a lost task stopped."""
    from ray.util.state import list_tasks

    try:
        rows = list_tasks(address=address, filters=[("task_id", "=", ref.task_id().hex())], detail=True,
                          timeout=10, raise_on_missing_output=False)
    except Exception as exc:  # noqa: BLE001 - a diagnosis only: say why there is none
        return f"State API: {type(exc).__name__}"
    return "State API: " + ("; ".join(f"{r.state}, attempt {r.attempt_number}, worker {str(r.worker_id)[:8]}"
                                      for r in rows) or "no such task")


class GcsRestartParams(Params):
    #: How long the cluster may take to serve again once the GCS is back.
    settle: float = CALL_TIMEOUT


class GcsRestart(Workload):
    """A detached named WAL counter and a stream of tasks while the GCS is killed and restarted
    on its Redis: running actors serve through the outage, work submitted during it completes,
    the named actor is found again with every acknowledged add."""

    BASELINE = True  # the fault-free twin: every trace of the fault must be missing there
    FAULT_VERDICTS = ("actor_served_during_outage", "pending_work_resumed")
    Params = GcsRestartParams
    INVARIANTS = ("actor_served_during_outage", "pending_work_resumed", "named_actor_found",
                  "nothing_acknowledged_lost")
    counter_class: type = CheckpointedCounter

    def setup(self) -> None:
        import ray

        self.ledger = Ledger(self._detached(), "driver")
        ray.get(self.ledger.actor.get.remote(), timeout=CALL_TIMEOUT)  # the run's time is for calls
        # Exported now: a remote function first called while the GCS is down blocks its caller
        # until the GCS is back (its definition goes to the GCS), measured on Ray 2.60.
        self.square = ray.remote(square).options(num_cpus=0.25, max_retries=3)
        ray.get(self.square.remote(0), timeout=CALL_TIMEOUT)
        self.served_down, self.i = 0, 0
        self.outage: list[tuple[int, Any]] = []
        self.settle = self.ctx.params_as(GcsRestartParams).settle

    def _detached(self) -> Any:
        import ray

        remote = ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0)(self.counter_class)
        return remote.options(name="ledger", namespace=self.ctx.namespace, lifetime="detached").remote(
            f"{self.ctx.storage}/ledger", durability="wal", every_n=50)

    def step(self) -> bool:
        down = not _port_open(self.ctx.address)
        if self.ledger.add() is Ack.ACKED and down:
            self.served_down += 1
        if down:
            self.outage.append((self.i, self.square.remote(self.i)))
        self.i += 1
        self.ctx.count("calls")
        self.ctx.stop.wait(0.02)  # the workload's pace, not a synchronisation
        return True

    def probe(self) -> str:
        import ray

        found = ray.get_actor("ledger", namespace=self.ctx.namespace)  # a GCS lookup
        return f"ledger found by name, {ray.get(found.get.remote(), timeout=5)} adds"

    def invariants(self) -> list[Verdict]:
        import ray

        values = [self._value(ref) for _, ref in self.outage]
        right = sum(v == i * i for (i, _), v in zip(self.outage, values))
        wrong = [f"task {i}: {v}" for (i, _), v in zip(self.outage, values) if v != i * i]
        found, written = self._found(), ray.get(self.ledger.actor.get.remote(), timeout=CALL_TIMEOUT)
        return [Verdict.of("actor_served_during_outage", self.served_down > 0,
                        f"{self.served_down} actor calls answered while the GCS port was closed"
                        if self.served_down else "no call was answered while the GCS was down: "
                        "either no outage happened or the actor stopped serving"),
                Verdict.of("pending_work_resumed", bool(values) and right == len(values),
                        f"{right} of {len(values)} tasks submitted during the outage returned "
                        f"their value within {self.settle:g} s; others: {wrong[:3] or 'none'}"),
                # By its count: after no acknowledged add, a fresh counter would look the same.
                Verdict.over("named_actor_found", self.ledger.counts[Ack.ACKED], held=found == written,
                             detail=f"get_actor('ledger') after the restart: {found}; the counter written: {written}"),
                self.ledger.verdict("nothing_acknowledged_lost")]

    def _value(self, ref: Any) -> object:
        import ray

        try:
            return ray.get(ref, timeout=self.settle)
        except Exception as exc:  # noqa: BLE001 - the verdict shows it
            return f"{type(exc).__name__}: {str(exc)[:200]} ({_task_state(self.ctx.address, ref)})"

    def _found(self) -> object:
        import ray

        try:
            return ray.get(ray.get_actor("ledger", namespace=self.ctx.namespace).get.remote(),
                           timeout=CALL_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - the verdict shows it
            return f"{type(exc).__name__}: {exc}"[:200]

    def teardown(self) -> None:
        import ray

        ray.kill(self.ledger.actor)  # detached: it would outlive the run


# -- 2. an unresponsive node, 6. preemption: checkpointed counters on the worker nodes ------------


class NodesParams(Params):
    #: The counters checkpoint on SIGTERM (a drain's graceful shutdown).
    graceful: bool = False


class UnresponsiveParams(NodesParams):
    #: How long Ray may take to declare the frozen node dead.
    detect_within: float = DETECTION_BOUND + 2.0


class PreemptionParams(NodesParams):
    graceful: bool = True
    #: How far from the drain's confirmation its node must be seen dead. The drain is
    #: confirmed once Ray declared its node dead after the kill at the deadline, so the two
    #: come together; the watch takes the GCS's own time of death.
    gone_within: float = 5.0


class _OnWorkerNodes(Workload):
    """A checkpointed counter on each worker node, written by the driver, nodes watched."""

    DURABILITY = "wal"
    Params: ClassVar[type[NodesParams]] = NodesParams
    counter_class: type = CheckpointedCounter

    def setup(self) -> None:
        import ray

        graceful = self.ctx.params_as(NodesParams).graceful
        self.nodes = _worker_nodes()
        self.ledgers = [Ledger(_counter(self.ctx, f"counter{i}", cls=self.counter_class, node=node,
                                        durability=self.DURABILITY,
                                        every_n=1000, checkpoint_on_sigterm=graceful), f"w{i}")
                        for i, node in enumerate(self.nodes)]
        self.pids = [ray.get(ledger.actor.pid.remote(), timeout=CALL_TIMEOUT) for ledger in self.ledgers]
        self.homes = [ray.get(ledger.actor.node_id.remote(), timeout=CALL_TIMEOUT) for ledger in self.ledgers]
        self.watch = _NodeWatch(self.ctx)

    def step(self) -> bool:
        for ledger in self.ledgers:
            ledger.add()
        self.watch.poll()
        self.ctx.count("adds", len(self.ledgers))
        return True

    def probe(self) -> str:
        import ray

        values = ray.get([ledger.actor.get.remote() for ledger in self.ledgers], timeout=10)
        return f"counters {values}"

    def _kept(self, name: str) -> Verdict:
        """One verdict over every counter: each must hold its acknowledged adds."""
        each = [ledger.verdict(name) for ledger in self.ledgers]
        return Verdict.of(name, bool(each) and all(v.held for v in each), "; ".join(v.detail for v in each),
                       seen=min((v.seen or 0 for v in each), default=0))

    def _moved(self) -> Verdict:
        import ray

        states = _states(self.ctx.address)
        now = ray.get([ledger.actor.node_id.remote() for ledger in self.ledgers], timeout=CALL_TIMEOUT)
        stranded = [short(n) for n in now if states.get(n) != "ALIVE"]
        hit = [short(n) for n in self.homes if n in self.watch.dead_at]  # the fault must hit one
        return Verdict.of("actors_moved", not stranded and bool(hit),
                       f"counters were on {[short(n) for n in self.homes]}, dead among them {hit or 'none'}; "
                       f"now on {[short(n) for n in now]}; on a dead node: {stranded or 'none'}")

    def teardown(self) -> None:
        import ray

        for ledger in self.ledgers:
            ray.kill(ledger.actor)


class Unresponsive(_OnWorkerNodes):
    """A worker node freezes (its raylet SIGSTOPped): Ray's health check declares it dead, its
    counters restart elsewhere with every acknowledged add, and the thawed node never rejoins."""

    BASELINE = True  # the fault-free twin: every trace of the fault must be missing there
    FAULT_VERDICTS = ("dead_node_detected", "actors_moved", "no_rejoin", "old_incarnations_gone")
    INVARIANTS = ("dead_node_detected", "actors_moved", "no_rejoin", "nothing_acknowledged_lost",
                  "old_incarnations_gone")
    Params = UnresponsiveParams

    def setup(self) -> None:
        super().setup()
        self.detect_within = self.ctx.params_as(UnresponsiveParams).detect_within

    def invariants(self) -> list[Verdict]:
        dead = self.watch.dead_at
        states = _states(self.ctx.address)
        rejoined = [short(n) for n in dead if states.get(n) != "DEAD"]
        alive = [p for p in self.pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        # The node the freeze hit, dead after it (the GCS's death time may be earlier: not the freeze's).
        return [node_detected(nodes_hit(self.ctx.windows(FaultKind.FREEZE_NODE)), dead, within=self.detect_within,
                              fault="freeze"),
                self._moved(),
                Verdict.of("no_rejoin", bool(dead) and not rejoined,
                        f"nodes declared dead: {len(dead)}; alive again since: {rejoined or 'none'}"),
                self._kept("nothing_acknowledged_lost"),
                # One machine: the first incarnations' processes are visible here.
                Verdict.of("old_incarnations_gone", not alive,
                        f"first incarnations' workers still running: {alive or 'none'}")]

    def teardown(self) -> None:
        super().teardown()
        for pid in self.pids:  # a frozen node's workers outlive it on Ray 2.60
            try:
                psutil.Process(pid).kill()
            except psutil.Error:
                pass


class Preemption(_OnWorkerNodes):
    """A worker node is drained with a deadline and killed at it: counters with ``policy``
    durability and ``checkpoint_on_sigterm`` lose no acknowledged add."""

    BASELINE = True  # the fault-free twin: every trace of the fault must be missing there
    FAULT_VERDICTS = ("node_gone_at_deadline", "actors_moved")
    INVARIANTS = ("node_gone_at_deadline", "actors_moved", "drained_actor_lost_nothing")
    DURABILITY = "policy"
    Params = PreemptionParams

    def invariants(self) -> list[Verdict]:
        within = self.ctx.params_as(PreemptionParams).gone_within
        drains = self.ctx.windows(FaultKind.DRAIN_NODE)
        return [gone_verdict([w.start for w in drains], self.watch.dead_at, self.nodes, within,
                             drained_nodes=set(nodes_hit(drains))),
                self._moved(),
                self._kept("drained_actor_lost_nothing")]


def gone_verdict(drained: list[float], dead_at: Mapping[str, float], workers: list[str], within: float, *,
                 drained_nodes: Collection[str] | None = None) -> Verdict:
    """``node_gone_at_deadline``: one drain, and the one node that died in the run (State API)
    was a worker node of the run and the node drained (``drained_nodes``: what the drain hit;
    None: not known, not checked), seen dead within ``within`` s of the drain's confirmation
    (which comes when Ray declared the drained node dead after its kill at the deadline). No
    node dead, a second one, another than the drained one, or one dead far from the drain's
    end breaks it."""
    gone = sorted(dead_at.items(), key=lambda item: item[1])
    detail = (f"drains confirmed at {[round(t, 1) for t in drained]} s; nodes dead since: "
              f"{', '.join(f'{short(n)} at {t:.1f} s' for n, t in gone) or 'none'} (bound: {within:g} s)")
    if len(drained) != 1 or len(gone) != 1:
        return Verdict.of("node_gone_at_deadline", False, f"need one drain and one node dead; {detail}")
    (node, died), = gone
    off, ours = died - drained[0], node in workers and (drained_nodes is None or node in drained_nodes)
    return Verdict.of("node_gone_at_deadline", ours and abs(off) <= within,
                   f"{short(node)} ({'the drained worker node' if ours else 'not the drained worker node of the run'}) "
                   f"seen dead {off:+.1f} s from the drain's confirmation; {detail}")


# -- 4. OS limits -----------------------------------------------------------------------------


class Opener:
    """Opens, writes and closes a file per call."""

    def __init__(self, folder: str) -> None:
        self.folder = folder
        os.makedirs(folder, exist_ok=True)

    def touch(self, i: int) -> int:
        with open(os.path.join(self.folder, f"f{i % 8}"), "w") as f:
            f.write(str(i))
        return i

    def pid(self) -> int:
        return os.getpid()


class OpenFiles(Workload):
    """An actor's open-file limit is cut to what it holds: its next open fails with EMFILE,
    which must reach the caller through ``ray.get`` as that OSError; once healed it opens again."""

    BASELINE = True  # the fault-free twin: every trace of the fault must be missing there
    FAULT_VERDICTS = ("emfile_surfaces",)
    INVARIANTS = ("emfile_surfaces", "recovers_after_heal", "no_other_errors")
    opener_class: type = Opener

    def setup(self) -> None:
        import ray

        self.opener = ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0)(self.opener_class).options(
            name="opener", namespace=self.ctx.namespace).remote(f"{self.ctx.storage}/files")
        ray.get(self.opener.pid.remote(), timeout=CALL_TIMEOUT)  # the run's time is for calls
        self.ok, self.emfile, self.i = 0, 0, 0
        self.other: list[str] = []

    def step(self) -> bool:
        import ray

        try:
            ray.get(self.opener.touch.remote(self.i), timeout=CALL_TIMEOUT)
            self.ok += 1
        except OSError as exc:  # RayTaskError(OSError): the errno is on the cause
            cause = getattr(exc, "cause", exc)
            if getattr(cause, "errno", None) == errno.EMFILE:
                self.emfile += 1
            else:
                self.other.append(f"{type(cause).__name__}: {cause}"[:120])
        except Exception as exc:  # noqa: BLE001 - any other error is a finding
            self.other.append(f"{type(exc).__name__}: {exc}"[:120])
        self.i += 1
        self.ctx.count("opens")
        self.ctx.stop.wait(0.01)  # the workload's pace
        return True

    def probe(self) -> str:
        import ray

        return f"opened f{ray.get(self.opener.touch.remote(0), timeout=5)}"

    def invariants(self) -> list[Verdict]:
        import ray

        try:
            after = f"a file opened after the heal ({ray.get(self.opener.touch.remote(1), timeout=CALL_TIMEOUT)})"
            healed = True
        except Exception as exc:  # noqa: BLE001 - the verdict shows it
            after, healed = f"still failing after the heal: {type(exc).__name__}: {exc}"[:200], False
        return [Verdict.of("emfile_surfaces", self.emfile > 0,
                        f"{self.emfile} calls raised OSError(EMFILE) through ray.get; {self.ok} succeeded"),
                Verdict.of("recovers_after_heal", healed, after),
                Verdict.over("no_other_errors", self.i, held=not self.other,
                             detail=f"{len(self.other)} of {self.i} calls raised another error: "
                             f"{self.other[:3] or 'none'}")]

    def teardown(self) -> None:
        import ray

        ray.kill(self.opener)


# -- 5. a full disk under the checkpoint storage -------------------------------------------------


class FullDisk(Workload):
    """A WAL counter on a small tmpfs that the fault fills: adds that cannot be logged fail
    (undone), none acknowledged is lost across a restart, and adds succeed once space returns."""

    BASELINE = True  # the fault-free twin: every trace of the fault must be missing there
    FAULT_VERDICTS = ("disk_full_surfaces", "recovers_when_space_returns")
    INVARIANTS = ("disk_full_surfaces", "nothing_acknowledged_lost", "recovers_when_space_returns")
    counter_class: type = CheckpointedCounter

    def setup(self) -> None:
        import ray

        self.ledger = Ledger(_counter(self.ctx, "counter", cls=self.counter_class, durability="wal",
                                      every_n=50), "driver")
        ray.get(self.ledger.actor.get.remote(), timeout=CALL_TIMEOUT)  # the run's time is for calls

    def step(self) -> bool:
        self.ledger.add()
        self.ctx.count("adds")
        return True

    def probe(self) -> str:
        import ray

        return f"counter {ray.get(self.ledger.actor.get.remote(), timeout=5)}"

    def invariants(self) -> list[Verdict]:
        import ray

        last = self.ledger.last
        undone, refused = self.ledger.counts[Ack.UNDONE], last.get(Ack.UNDONE)
        recovered = refused is not None and last.get(Ack.ACKED, 0.0) > refused
        ray.kill(self.ledger.actor, no_restart=False)  # a crash: what is on disk is all it has
        return [Verdict.of("disk_full_surfaces", undone > 0,
                        f"{undone} adds refused with MutationNotLogged (undone) while the disk was full"),
                self.ledger.verdict("nothing_acknowledged_lost"),
                Verdict.of("recovers_when_space_returns", recovered,
                        "adds acknowledged again after the last refusal" if recovered
                        else "no add was acknowledged after the last refusal")]

    def teardown(self) -> None:
        import ray

        ray.kill(self.ledger.actor)


# -- 7. lost objects and lineage ----------------------------------------------------------------


def produce(i: int) -> np.ndarray:
    return np.full(PLASMA_ELEMENTS, i, dtype=np.int64)


def combine(*parts: np.ndarray) -> np.ndarray:
    """A task output made from its inputs (arrays from ``produce``): its first element is the
    sum of theirs (a module function: Ray's workers import it from here)."""
    return produce(int(sum(int(np.asarray(p)[0]) for p in parts)))


class Putter:
    """Owns the objects it ``ray.put``s: they die with it."""

    def put(self, i: int) -> list[Any]:
        import ray

        return [ray.put(produce(i))]

    def node(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())


class ObjectKind(StrEnum):
    """How an object was made, which decides what its loss does."""

    RETRIED_TASK = "retried_task"  #: a task's output, max_retries > 0: rebuilt from lineage
    ONCE_TASK = "once_task"  #: a task's output, max_retries=0: reconstruction fails
    WORKER_PUT = "worker_put"  #: ray.put by an actor on the node: its owner dies with it


class GetOutcome(StrEnum):
    """How ``ray.get`` of an object ended; an error classified by its type (``isinstance``
    on Ray's exceptions), its value named after the class for the reader."""

    VALUE = "value"
    WRONG_VALUE = "wrong value"
    RECONSTRUCTION_FAILED = "ObjectReconstructionFailedError"
    OWNER_DIED = "OwnerDiedError"
    OTHER_ERROR = "another error"


def classify_get_error(exc: BaseException) -> GetOutcome:
    """The outcome an error of ``ray.get`` stands for (Ray's two are siblings under
    ObjectLostError, so the order of the checks does not matter)."""
    from ray.exceptions import ObjectReconstructionFailedError, OwnerDiedError

    if isinstance(exc, OwnerDiedError):
        return GetOutcome.OWNER_DIED
    if isinstance(exc, ObjectReconstructionFailedError):
        return GetOutcome.RECONSTRUCTION_FAILED
    return GetOutcome.OTHER_ERROR


def expected_outcome(kind: ObjectKind, *, on_dead_node: bool) -> GetOutcome:
    """The oracle: what ``ray.get`` of an object ends in once the node holding its only copy
    died (Ray's documented object fault tolerance: lineage for task outputs with retries left,
    none for ``ray.put``; an object dies with its owner)."""
    if not on_dead_node or kind is ObjectKind.RETRIED_TASK:
        return GetOutcome.VALUE
    if kind is ObjectKind.ONCE_TASK:  # no retries: no reconstruction (Ray 2.60 raises the base class)
        return GetOutcome.RECONSTRUCTION_FAILED
    return GetOutcome.OWNER_DIED


@dataclass(frozen=True, slots=True)
class Made:
    """One object of the lost-objects run: how it was made, the node it lived on (read from
    Ray: the State API's node of the task that made it, or its owner's node), and how
    ``ray.get`` of it ended."""

    kind: ObjectKind
    node: str
    outcome: GetOutcome
    #: The error's type and message when ``ray.get`` raised: for the reader only.
    error: str = ""


def objects_verdict(made: list[Made], dead: set[str]) -> Verdict:
    """``lost_objects_as_predicted``: each object's ``ray.get`` ends as the oracle predicts.
    Only objects that lived on a node that died test the oracle's losses, so every kind must
    have one there; without that evidence the verdict is unknown (or broken, if one was wrong)."""
    wrong = [f"{m.kind.value} on {'the dead' if m.node in dead else 'a live'} node: {m.outcome}"
             f"{f' ({m.error})' if m.error else ''}, "
             f"want {expected_outcome(m.kind, on_dead_node=m.node in dead)}"
             for m in made if m.outcome != expected_outcome(m.kind, on_dead_node=m.node in dead)]
    seen = {str(o): sum(m.outcome == o for m in made) for o in sorted({m.outcome for m in made})}
    hit = {kind: sum(m.kind is kind and m.node in dead for m in made) for kind in ObjectKind}
    missing = [kind.value for kind, n in hit.items() if not n]
    detail = (f"{len(made)} objects, dead nodes {len(dead)}, on them {sum(hit.values())} "
              f"({', '.join(f'{k.value} {n}' for k, n in hit.items())}): {seen}; wrong: {wrong[:3] or 'none'}")
    verdict = Verdict.of("lost_objects_as_predicted", not wrong, detail, seen=len(made))
    return verdict.unless(f"no {', '.join(missing)} object lived on a node that died, so no loss was tested"
                          if missing else None)


class LostObjectsParams(Params):
    per_kind: int = 3


class LostObjects(Workload):
    """Objects made on the worker nodes, nobody holding a second copy; a worker node dies:
    each ``ray.get`` ends as the oracle predicts (rebuilt, or the documented error)."""

    BASELINE = True  # the fault-free twin: every trace of the fault must be missing there
    FAULT_VERDICTS = ("lost_objects_as_predicted",)
    INVARIANTS = ("lost_objects_as_predicted",)
    Params = LostObjectsParams

    def setup(self) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.made: list[tuple[ObjectKind, str, int, Any]] = []
        self.putters: list[Any] = []  # the owners of the put objects: alive unless their node dies
        self.dead_before = _dead(self.ctx.address)  # the cluster's old losses are not this run's
        per = self.ctx.params_as(LostObjectsParams).per_kind
        # A resource, not only the affinity: Ray 2.60 places a request for no resources on any
        # node, soft affinity or not (seen here). Where each object was made is read back below.
        needs = {"num_cpus": 0, "resources": {"worker": 0.01}}
        for node in _worker_nodes():
            where = NodeAffinitySchedulingStrategy(node, soft=True)
            putter = ray.remote(max_restarts=0, **needs)(Putter).options(scheduling_strategy=where).remote()
            self.putters.append(putter)
            home = ray.get(putter.node.remote(), timeout=CALL_TIMEOUT)
            for i in range(per):
                for kind, retries in ((ObjectKind.RETRIED_TASK, 3), (ObjectKind.ONCE_TASK, 0)):
                    ref = ray.remote(produce).options(max_retries=retries, scheduling_strategy=where,
                                                      **needs).remote(i)
                    self.made.append((kind, "", i, ref))
                self.made.append((ObjectKind.WORKER_PUT, home, i,
                                  ray.get(putter.put.remote(i), timeout=CALL_TIMEOUT)[0]))
        refs = [m[3] for m in self.made]
        ray.wait(refs, num_returns=len(refs), timeout=CALL_TIMEOUT, fetch_local=False)  # made, not copied
        # Task events reach the State API a moment after the task ends: wait until each is there.
        homes = wait_until(lambda: self._homes(), timeout=CALL_TIMEOUT, interval=0.2,
                           what="the State API to show where each task ran")
        self.made = [(k, node or homes[ref.task_id().hex()], i, ref) for k, node, i, ref in self.made]

    def _homes(self) -> dict[str, str] | None:
        """Where each task's first attempt ran, from the State API; None until all are known."""
        from ray.util.state import list_tasks

        wanted = {ref.task_id().hex() for kind, _, _, ref in self.made if kind is not ObjectKind.WORKER_PUT}
        rows = list_tasks(address=self.ctx.address, filters=[("name", "=", "produce")], limit=10_000,
                          raise_on_missing_output=False, timeout=CALL_TIMEOUT)
        homes = {t.task_id: t.node_id for t in sorted(rows, key=lambda t: -t.attempt_number)
                 if t.task_id in wanted and t.node_id}
        return homes if set(homes) == wanted else None

    def step(self) -> bool:
        self.ctx.count("idle")
        return not self.ctx.stop.wait(0.2) and not self.ctx.faults_settled.is_set()

    def invariants(self) -> list[Verdict]:
        dead = _dead(self.ctx.address) - self.dead_before
        made = [self._outcome(kind, node, ref, i) for kind, node, i, ref in self.made]
        return [objects_verdict(made, dead)]

    def teardown(self) -> None:
        import ray

        for putter in self.putters:
            ray.kill(putter)

    def _outcome(self, kind: ObjectKind, node: str, ref: Any, i: int) -> Made:
        import ray

        try:
            value = ray.get(ref, timeout=CALL_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - the error's type is the outcome
            return Made(kind, node, classify_get_error(exc), f"{type(exc).__name__}: {exc}"[:160])
        whole = int(value[0]) == i and len(value) == PLASMA_ELEMENTS
        return Made(kind, node, GetOutcome.VALUE if whole else GetOutcome.WRONG_VALUE)


# -- 8. placement groups ------------------------------------------------------------------------


class Member:
    def ping(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())


class GroupLossParams(Params):
    recover_within: float = CALL_TIMEOUT


class GroupLoss(Workload):
    """A placement group of two bundles spread over the worker nodes, an actor in each; a node
    holding a bundle dies: the group is rescheduled, its actors answer again, and a group that
    can never be placed is named by the watchdog instead of hanging."""

    BASELINE = True  # the fault-free twin: every trace of the fault must be missing there
    FAULT_VERDICTS = ("group_rescheduled",)
    INVARIANTS = ("group_rescheduled", "actors_restarted", "infeasible_group_named")
    Params = GroupLossParams
    member_class: type = Member

    def setup(self) -> None:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.group = placement_group([{"worker": 1, "CPU": 0.1}] * 2, strategy="SPREAD")
        ray.get(self.group.ready(), timeout=CALL_TIMEOUT)
        self.before = self._bundle_nodes()
        self.members = [ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0.1,
                                   resources={"worker": 1})(self.member_class).options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(self.group, i)).remote() for i in range(2)]
        ray.get([m.ping.remote() for m in self.members], timeout=CALL_TIMEOUT)
        self.recover = self.ctx.params_as(GroupLossParams).recover_within

    def _bundle_nodes(self) -> list[str]:
        from ray.util.placement_group import placement_group_table

        return list(placement_group_table(self.group)["bundles_to_node_id"].values())

    def step(self) -> bool:
        import ray

        ray.get([m.ping.remote() for m in self.members], timeout=CALL_TIMEOUT)
        self.ctx.count("pings", 2)
        self.ctx.stop.wait(0.05)  # the workload's pace
        return True

    def probe(self) -> str:
        import ray

        return f"members on {[n[:8] for n in ray.get([m.ping.remote() for m in self.members], timeout=10)]}"

    def invariants(self) -> list[Verdict]:
        return [self._rescheduled(), self._restarted(), self._infeasible_named()]

    def _rescheduled(self) -> Verdict:
        from ray.util.placement_group import placement_group_table

        dead = _dead(self.ctx.address)  # the bundles' nodes were alive at the start
        hit = [short(n) for n in self.before if n in dead]

        def placed() -> bool:
            table = placement_group_table(self.group)
            return table["state"] == "CREATED" and not set(table["bundles_to_node_id"].values()) & dead

        try:
            wait_until(placed, timeout=self.recover, interval=0.2, what="the group to be placed again")
            ok = bool(hit)
        except Exception:  # noqa: BLE001 - the verdict shows the table
            ok = False
        table = placement_group_table(self.group)
        return Verdict.of("group_rescheduled", ok,
                       f"bundles were on {[short(n) for n in self.before]}, dead among them {hit or 'none'}; "
                       f"now {table['state']} on {[short(n) for n in table['bundles_to_node_id'].values()]}")

    def _restarted(self) -> Verdict:
        import ray

        try:
            nodes = ray.get([m.ping.remote() for m in self.members], timeout=self.recover)
        except Exception as exc:  # noqa: BLE001 - the verdict shows it
            return Verdict.of("actors_restarted", False, f"{type(exc).__name__}: {exc}"[:200])
        return Verdict.of("actors_restarted", True, f"both members answer, on {[short(n) for n in nodes]}")

    def _infeasible_named(self) -> Verdict:
        from ray.util.placement_group import placement_group, remove_placement_group

        never = placement_group([{"CPU": 64.0}])
        try:
            stuck = watch([never], deadline=3.0, address=self.ctx.address, raise_on_hang=False).stuck
        finally:
            remove_placement_group(never)
        named = [s for s in stuck if s.kind is StuckCause.INFEASIBLE_GROUP]
        return Verdict.of("infeasible_group_named", bool(named),
                       (named or stuck)[0].cause[:240] if (named or stuck) else "it was placed: nothing to name")

    def teardown(self) -> None:
        import ray
        from ray.util.placement_group import remove_placement_group

        for member in self.members:
            ray.kill(member)
        remove_placement_group(self.group)


# -- 9. an async checkpointed actor with concurrency groups ---------------------------------------


class AsyncLedger(Checkpointable):
    """An async actor storing ``(writer, seq)`` keys once each; its mutation awaits between its
    check and its write, and two concurrency groups each have a mutation."""

    def __init__(self, storage: str) -> None:
        self.keys: list[list[Any]] = []
        self.seqs = WriterSeqs()
        self.enable_checkpointing(CheckpointConfig(storage=storage, durability="wal", every_n=16))

    def state_dict(self) -> Mapping[str, Any]:
        return {"keys": self.keys, "writers": self.seqs.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.keys = [list(k) for k in state["keys"]]
        self.seqs.load_state_dict(state["writers"])

    @mutation
    async def add(self, writer_id: str, seq: int) -> int:
        if not self.seqs.is_repeat(writer_id, seq):
            await asyncio.sleep(0.0005)  # another call runs here unless mutations are gated
            self.keys.append([writer_id, seq])
            self.seqs.applied(writer_id, seq)
        return len(self.keys)

    @mutation
    async def add_other(self, writer_id: str, seq: int) -> int:
        return await self.add(writer_id, seq)  # nested: logged once, by the outer call

    async def stored(self) -> list[tuple[str, int]]:
        return [(str(w), int(s)) for w, s in self.keys]

    async def pid(self) -> int:
        return os.getpid()


class AsyncActor(Workload):
    """Three writers against an async checkpointed actor whose two mutations run in two
    concurrency groups, under kills and pauses: every acknowledged add stored exactly once."""

    INVARIANTS = ("no_lost_adds", "no_duplicate_adds")
    ledger_class: type = AsyncLedger

    def setup(self) -> None:
        import ray

        remote = ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0,
                            concurrency_groups={"a": 2, "b": 2})(self.ledger_class)
        self.actor = remote.options(name="ledger", namespace=self.ctx.namespace).remote(f"{self.ctx.storage}/ledger")
        ray.get(self.actor.pid.remote(), timeout=CALL_TIMEOUT)
        self.history = History()
        self.errors: dict[str, BaseException] = {}

    def _submit(self, writer: str, seq: int) -> Any:
        method = self.actor.add if writer == "w0" else self.actor.add_other
        group = "a" if writer == "w0" else "b"
        return method.options(concurrency_group=group).remote(writer, seq)

    def step(self) -> bool:
        stop = threading.Event()
        timer = threading.Timer(self.ctx.remaining(), stop.set)
        timer.start()
        try:
            self.errors = drive_writers(self._submit, self.history, writers=["w0", "w1", "w2"],
                                        writes=10**6, window=4, timeout=CALL_TIMEOUT, stop=stop)
        finally:
            timer.cancel()
        self.ctx.count("writes", len(self.history.ops()))
        return False

    def probe(self) -> str:
        import ray

        return f"{len(ray.get(self.actor.stored.remote(), timeout=10))} keys stored"

    def invariants(self) -> list[Verdict]:
        import ray

        verdict = check_set(self.history.ops(), ray.get(self.actor.stored.remote(), timeout=CALL_TIMEOUT))
        detail = f"{verdict.explain()}; writer errors: {self.errors or 'none'}"
        return [Verdict.over("no_lost_adds", verdict.acknowledged, held=not verdict.lost and not self.errors,
                             detail=detail),
                Verdict.over("no_duplicate_adds", verdict.stored, held=not verdict.duplicated, detail=detail)]

    def teardown(self) -> None:
        import ray

        ray.kill(self.actor)


# -- 3. RPC failures through Ray's own knob ------------------------------------------------------


class Target:
    """Counts how many times its method ran: more runs than calls means retried deliveries."""

    def __init__(self) -> None:
        self.runs = 0

    def echo(self, x: int) -> int:
        self.runs += 1
        return x

    def count(self) -> int:
        return self.runs


class Caller:
    """Calls the target from a worker node, where the RPC failure knob is set."""

    def run(self, target: Any, start: int, n: int) -> tuple[int, dict[str, int]]:
        import ray

        ok, errors = 0, dict[str, int]()
        for i in range(start, start + n):
            try:
                ok += ray.get(target.echo.remote(i), timeout=CALL_TIMEOUT) == i
            except Exception as exc:  # noqa: BLE001 - counted by kind, the verdict decides
                kind = call_error_kind(exc)
                errors[kind] = errors.get(kind, 0) + 1
        return ok, errors


#: The key of the calls that failed with ActorUnavailableError (or a subclass) in
#: :meth:`Caller.run`'s counts; any other error counts under ``other: <its type>``.
UNAVAILABLE = "ActorUnavailableError"


def call_error_kind(exc: BaseException) -> str:
    """The key a failed call counts under: decided by ``isinstance`` on Ray's exception type,
    the type's name only for the reader of an unexpected one."""
    from ray.exceptions import ActorUnavailableError

    return UNAVAILABLE if isinstance(exc, ActorUnavailableError) else f"other: {type(exc).__name__}"


class RpcParams(Params):
    max_task_retries: int = -1
    #: How long one batch of calls may take before it counts as a hang.
    batch_timeout: float = 20 * CALL_TIMEOUT


class RpcFailures(Workload):
    """Actor calls between processes of the worker nodes, whose replies Ray's RPC failure knob
    drops: with ``max_task_retries=-1`` every call returns its value (and the lost replies show
    as extra runs: at-least-once); with 0 the failures reach the caller as
    ``ActorUnavailableError``, and nothing hangs."""

    INVARIANTS = ("results_correct", "retried_deliveries_seen", "errors_surface", "no_hang")
    Params = RpcParams
    target_class: type = Target
    caller_class: type = Caller

    def setup(self) -> None:
        import ray

        retries = self.ctx.params_as(RpcParams).max_task_retries
        self.target = ray.remote(num_cpus=0, resources={"worker": 1},
                                 max_task_retries=retries)(self.target_class).remote()
        self.caller = ray.remote(num_cpus=0, resources={"worker": 1})(self.caller_class).remote()
        self.calls, self.ok, self.hung = 0, 0, ""
        self.errors: dict[str, int] = {}
        # A batch of 20 calls, each bounded by CALL_TIMEOUT: past this, it hangs.
        self.batch_timeout = self.ctx.params_as(RpcParams).batch_timeout

    def step(self) -> bool:
        import ray

        try:
            ok, errors = ray.get(self.caller.run.remote(self.target, self.calls, 20), timeout=self.batch_timeout)
        except Exception as exc:  # noqa: BLE001 - a batch that did not end is a hang
            self.hung = f"{type(exc).__name__}: {exc}"[:200]
            return False
        self.calls, self.ok = self.calls + 20, self.ok + ok
        for name, n in errors.items():
            self.errors[name] = self.errors.get(name, 0) + n
        self.ctx.count("calls", 20)
        return True

    def probe(self) -> str:
        """The target answers the driver within 5 s (the driver's calls cross no worker node's
        failure knob): it is alive and serving, whatever the knob does to the caller's calls."""
        import ray

        return f"the target answers: {ray.get(self.target.count.remote(), timeout=5.0)} runs so far"

    def invariants(self) -> list[Verdict]:
        import ray

        runs = ray.get(self.target.count.remote(), timeout=CALL_TIMEOUT)
        summary = f"{self.calls} calls, {self.ok} right values, {runs} runs, errors {self.errors or 'none'}"
        return [Verdict.over("results_correct", self.calls, held=self.ok == self.calls, detail=summary),
                Verdict.of("retried_deliveries_seen", runs > self.calls, summary),
                Verdict.of("errors_surface", bool(self.errors.get(UNAVAILABLE)), summary),
                Verdict.over("no_hang", self.calls + bool(self.hung), held=not self.hung, detail=self.hung or summary)]

    def teardown(self) -> None:
        import ray

        ray.kill(self.target)
        ray.kill(self.caller)


SURFACE_WORKLOADS: dict[str, type[Workload]] = {
    "gcs-restart": GcsRestart,
    "node-unresponsive": Unresponsive,
    "rpc-failures": RpcFailures,
    "open-files": OpenFiles,
    "full-disk": FullDisk,
    "drain-preemption": Preemption,
    "lost-objects": LostObjects,
    "placement-group": GroupLoss,
    "async-actor": AsyncActor,
}
