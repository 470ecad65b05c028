"""An unresponsive node and a preempted (drained) one: checkpointed counters on the worker nodes."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import ClassVar

import psutil

from actors import CheckpointedCounter
from chaos import FaultKind
from chaos.cluster import short
from scenarios.model._records import Verdict
from scenarios.model._workload import CALL_TIMEOUT, Params, Workload
from scenarios.workloads._kit import (
    DETECTION_BOUND,
    Ledger,
    NodeWatch,
    new_counter,
    node_detected,
    nodes_hit,
    states_of,
    worker_nodes,
)

__all__ = ["NodesParams", "Preemption", "PreemptionParams", "Unresponsive", "UnresponsiveParams", "gone_verdict"]


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
        self.nodes = worker_nodes()
        self.ledgers = [Ledger(new_counter(self.ctx, f"counter{i}", cls=self.counter_class, node=node,
                                        durability=self.DURABILITY,
                                        every_n=1000, checkpoint_on_sigterm=graceful), f"w{i}")
                        for i, node in enumerate(self.nodes)]
        self.pids = [ray.get(ledger.actor.pid.remote(), timeout=CALL_TIMEOUT) for ledger in self.ledgers]
        self.homes = [ray.get(ledger.actor.node_id.remote(), timeout=CALL_TIMEOUT) for ledger in self.ledgers]
        self.watch = NodeWatch(self.ctx)

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

        states = states_of(self.ctx.address)
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
        states = states_of(self.ctx.address)
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
