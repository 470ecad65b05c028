"""The workloads' shared kit: how a keyed add ended (:class:`Ack`) and a writer's ledger of
them, a checkpointed counter placed on a node, the live worker nodes, when each node died (the
node watch), and the dead-node verdict over the nodes the faults hit."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from actors import CheckpointedCounter
from chaos import History, check_set
from chaos.cluster import TEST_SYSTEM_CONFIG, live_nodes, node_states, short
from chaos.errors import MutationNotLogged
from chaos.history import Op, OpStatus
from scenarios.model._records import Verdict
from scenarios.model._workload import CALL_TIMEOUT, FaultWindow

__all__ = ["DETECTION_BOUND", "OP_STATUS", "Ack", "Ledger", "NodeWatch", "dead_nodes",
           "deaths_of", "kept", "new_counter", "node_detected", "nodes_hit", "states_of", "worker_nodes"]

#: Ray's health check declares a silent node dead after about threshold × (period + timeout).
DETECTION_BOUND = TEST_SYSTEM_CONFIG["health_check_failure_threshold"] * (
    TEST_SYSTEM_CONFIG["health_check_period_ms"] + TEST_SYSTEM_CONFIG["health_check_timeout_ms"]) / 1000


class Ack(StrEnum):
    """How one keyed add ended, as the writer saw it."""

    ACKED = "acked"  #: the reply came: applied and (per durability) kept
    UNDONE = "undone"  #: MutationNotLogged(undone=True): refused and rolled back, not applied
    UNKNOWN = "unknown"  #: another error: it may or may not have been applied


OP_STATUS = {Ack.ACKED: OpStatus.OK, Ack.UNDONE: OpStatus.FAIL, Ack.UNKNOWN: OpStatus.INFO}


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
        self.history.complete((self.writer, seq), OP_STATUS[outcome])
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


def new_counter(ctx: Any, name: str, *, cls: type = CheckpointedCounter, node: str | None = None,
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


def worker_nodes() -> list[str]:
    """The live worker nodes' ids (those holding the ``worker`` resource), sorted."""
    return [row.node_id for row in live_nodes(having="worker")]


def states_of(address: str) -> dict[str, str]:
    return {node: s.state for node, s in node_states(address).items()}


def dead_nodes(address: str) -> set[str]:
    return {node for node, s in node_states(address).items() if s.dead}


class NodeWatch:
    """When each node died during the run (seconds into it), polled from ``step``. Nodes dead
    before it started are not counted: a cluster's old losses must not pass for this run's.

    The time is the GCS's own (a dead node's ``end_time_ms``), not when a poll saw it: a step
    blocked on a call to the dying node would else add its wait to the detection time (seen:
    a freeze "declared dead" 11.2 s late by the watch)."""

    def __init__(self, ctx: Any, every: float = 0.25) -> None:
        self.ctx, self.every, self.next = ctx, every, 0.0
        self.dead_before = dead_nodes(ctx.address)
        self.dead_at: dict[str, float] = {}

    def poll(self) -> None:
        if time.monotonic() < self.next:
            return
        self.next = time.monotonic() + self.every
        for node, ended_ms in deaths_of(self.ctx.address).items():
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


def deaths_of(address: str) -> dict[str, int]:
    """Each dead node and when the GCS declared it dead (ms since the epoch; 0 if unknown)."""
    return {node: s.ended_ms for node, s in node_states(address).items() if s.dead}
