"""Workloads for network faults, on a cluster whose worker nodes are network namespaces
(``network = true``, :func:`chaos.local_cluster` with ``network=True``).

``partition-worker``: an actor on a worker node writes, call by call, to a log on shared
storage, each line tagged with the incarnation (the process) that wrote it; the node is cut
from the rest for longer than Ray's health check. Judged: Ray declares the node dead within a
bound, the actor answers from another node, the old node never rejoins and none of its
processes outlives the heal, every acknowledged write is in the log (the set checker over the
history), and no write of a superseded incarnation lands after its replacement started.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from typing import Any

from chaos import FaultKind, History, wait_until
from chaos.cluster import short
from chaos.errors import HangError
from chaos.history import OpStatus, check_set
from chaos.net import kill_node_processes, lab_of
from scenarios.model._records import Verdict
from scenarios.model._workload import CALL_TIMEOUT, Params, Workload
from scenarios.workloads._kit import NodeWatch, node_detected, nodes_hit, states_of, worker_nodes

__all__ = ["IncarnationLog", "LogLine", "superseded_writes"]


class IncarnationLog:
    """An actor that appends each write to a log file, tagged with its own pid (its
    incarnation); each incarnation first appends a ``start`` line. With ``background``, a
    thread also writes on its own every 50 ms, calls or not: a split brain waiting to happen."""

    def __init__(self, path: str, background: bool = False) -> None:
        self.path, self.pid = path, os.getpid()
        self._append("start", -1)
        if background:
            threading.Thread(target=self._tick, daemon=True).start()

    def _append(self, kind: str, seq: int) -> None:
        with open(self.path, "a", encoding="utf-8") as log:
            log.write(f"{kind} {self.pid} {seq} {time.time():.6f}\n")
            log.flush()
            os.fsync(log.fileno())

    def _tick(self) -> None:
        while True:
            self._append("tick", -1)
            time.sleep(0.05)  # the background writer's own pace

    def write(self, seq: int) -> int:
        self._append("write", seq)
        return self.pid

    def node_id(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())


@dataclass(frozen=True, slots=True)
class LogLine:
    """One line of the log: what (``start``, ``write``, ``tick``), by which pid, seq, when."""

    kind: str
    pid: int
    seq: int
    at: float


def read_log(path: str) -> list[LogLine]:
    lines = []
    with open(path, encoding="utf-8") as log:
        for raw in log:
            kind, pid, seq, at = raw.split()
            lines.append(LogLine(kind=kind, pid=int(pid), seq=int(seq), at=float(at)))
    return lines


def superseded_writes(lines: list[LogLine]) -> list[LogLine]:
    """Writes (calls' or background ones) by an incarnation after a later incarnation started:
    the old process still writing once its replacement is the actor."""
    starts = [line for line in lines if line.kind == "start"]
    late = []
    for i, start in enumerate(starts[1:], 1):
        older = {s.pid for s in starts[:i]}
        late += [line for line in lines if line.kind != "start" and line.pid in older and line.at > start.at]
    return sorted(set(late), key=lambda line: line.at)


class PartitionWorkerParams(Params):
    #: Seconds from the cut until Ray must have declared the node dead: a cut node never answers
    #: the health check, so each miss costs the period and the timeout (3 × (1 + 2) s with the
    #: test settings; 8.3-10.1 s measured), plus the State API's lag.
    detect_within: float = 15.0
    #: Seconds after the heal within which no process of the old node may be left.
    gone_within: float = 20.0
    #: The planted split brain: the actor also writes from a thread of its own.
    background_writes: bool = False


@dataclass
class _Writer:
    """One incarnation-tagged writer: its actor, log, first home node and history."""

    actor: Any
    name: str
    path: str
    home: str
    history: History
    seq: int = 0

    def write(self) -> None:
        import ray

        key, self.seq = (self.name, self.seq), self.seq + 1
        self.history.invoke(key, "driver")
        try:
            ray.get(self.actor.write.remote(key[1]), timeout=5.0)
            self.history.complete(key, OpStatus.OK)
        except Exception:  # noqa: BLE001 - an error reply: the write may have landed
            self.history.complete(key, OpStatus.INFO)


class PartitionWorker(Workload):
    """An incarnation-tagged writer on each worker node; a partition cuts one node from the rest."""

    BASELINE = True  # the fault-free twin: every trace of the fault must be missing there
    FAULT_VERDICTS = ("dead_node_detected", "actors_moved", "no_rejoin", "old_incarnations_gone")
    Params = PartitionWorkerParams
    INVARIANTS = ("dead_node_detected", "actors_moved", "no_rejoin", "old_incarnations_gone",
                  "nothing_acknowledged_lost", "no_superseded_write")

    def setup(self) -> None:
        self.params = self.ctx.params_as(PartitionWorkerParams)
        self.lab = lab_of(self.ctx.address)
        os.makedirs(self.ctx.storage, exist_ok=True)
        self.writers = [self._writer(f"w{i}", node) for i, node in enumerate(worker_nodes())]
        self.watch = NodeWatch(self.ctx)

    def _writer(self, name: str, node: str) -> _Writer:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        path = f"{self.ctx.storage}/{name}.log"
        remote = ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0)(IncarnationLog)
        # A sliver of a resource with the affinity: Ray places a request for nothing anywhere.
        actor = remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=True),
                               resources={"worker": 0.01}).remote(path, self.params.background_writes)
        home = ray.get(actor.node_id.remote(), timeout=CALL_TIMEOUT)
        return _Writer(actor=actor, name=name, path=path, home=home, history=History())

    def step(self) -> bool:
        for writer in self.writers:
            writer.write()
        self.watch.poll()
        self.ctx.count("writes", len(self.writers))
        self.ctx.stop.wait(0.05)  # the workload's pace, not a synchronisation
        return True

    def probe(self) -> str:
        import ray

        pids = ray.get([w.actor.write.remote(-1) for w in self.writers], timeout=5)
        return f"the writers answer from pids {pids}"

    def _cut(self) -> list[_Writer]:
        """The writers whose first node a partition cut and Ray then declared dead."""
        cut = nodes_hit(self.ctx.windows(FaultKind.PARTITION))
        return [w for w in self.writers if w.home in self.watch.dead_at and w.home in cut]

    def invariants(self) -> list[Verdict]:
        cuts = nodes_hit(self.ctx.windows(FaultKind.PARTITION))
        return [node_detected(cuts, self.watch.dead_at, within=self.params.detect_within, fault="cut"), self._moved(),
                self._no_rejoin(), self._old_gone(), self._kept(), self._superseded()]

    def _moved(self) -> Verdict:
        import ray

        cut = self._cut()
        now = ray.get([w.actor.node_id.remote() for w in cut], timeout=CALL_TIMEOUT) if cut else []
        states = states_of(self.ctx.address)
        stranded = [short(n) for n in now if states.get(n) != "ALIVE"]
        return Verdict.of("actors_moved", bool(cut) and not stranded,
                       f"writers on a dead node: {[w.name for w in cut]}; now on {[short(n) for n in now]}; "
                       f"on a dead node still: {stranded or 'none'}")

    def _no_rejoin(self) -> Verdict:
        states = states_of(self.ctx.address)
        dead = list(self.watch.dead_at)
        back = [short(n) for n in dead if states.get(n) != "DEAD"]
        return Verdict.of("no_rejoin", bool(dead) and not back,
                       f"nodes declared dead: {len(dead)}; alive again since: {back or 'none'}")

    def _old_gone(self) -> Verdict:
        nodes = [self.lab.node_ids[w.home] for w in self._cut() if w.home in self.lab.node_ids]
        if not nodes:
            return Verdict.of("old_incarnations_gone", False, "no writer's node was declared dead")
        try:
            wait_until(lambda: not any(self.lab.namespace_pids(n) for n in nodes), timeout=self.params.gone_within,
                       interval=0.2, what="the old node's processes to exit")
        except HangError:
            left = [p for n in nodes for p in self.lab.namespace_pids(n)]
            return Verdict.of("old_incarnations_gone", False, f"{len(left)} processes of the old node still run "
                           f"{self.params.gone_within:g} s after the heal: {_names(left)}")
        return Verdict.of("old_incarnations_gone", True, "no process of the old node is left after the heal")

    def _kept(self) -> Verdict:
        found = [check_set(w.history.ops(), [(w.name, line.seq) for line in read_log(w.path)
                                             if line.kind == "write" and line.seq >= 0]) for w in self.writers]
        # Lost or unexpected, not duplicated: with max_task_retries=-1 a call in flight at the
        # cut runs again on the replacement (at least once, as Ray documents), and this log,
        # unlike a keyed counter, does not deduplicate.
        return Verdict.over("nothing_acknowledged_lost", sum(f.acknowledged for f in found),
                            held=all(not f.lost and not f.unexpected for f in found),
                            detail="; ".join(f"{w.name}: {f.explain()}" for w, f in zip(self.writers, found)))

    def _superseded(self) -> Verdict:
        logs = {w.name: read_log(w.path) for w in self.writers}
        late = {name: superseded_writes(lines) for name, lines in logs.items()}
        restarted = [name for name, lines in logs.items() if sum(line.kind == "start" for line in lines) >= 2]
        first = next((lines[0] for lines in late.values() if lines), None)
        return Verdict.of("no_superseded_write", bool(restarted) and not any(late.values()),
                       f"writers restarted: {restarted or 'none'}; writes by a superseded incarnation after "
                       f"its replacement started: {sum(map(len, late.values()))}"
                       + (f" (first: pid {first.pid}, {first.kind})" if first else ""))

    def teardown(self) -> None:
        import ray

        for writer in self.writers:
            ray.kill(writer.actor)
        # The old node's processes outlive the heal (Ray 2.60), the old writer among them: Ray
        # declared them dead, so they are killed here before the run's storage is removed.
        for node_id in self.watch.dead_at:
            if node_id in self.lab.node_ids:
                kill_node_processes(self.lab, self.lab.node_ids[node_id])


def _names(pids: list[int]) -> str:
    import psutil

    names = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            args = proc.cmdline()
            # A Python process is named by its script (log_monitor.py, default_worker.py, ...).
            script = next((a for a in args[1:] if a.endswith(".py")), "") if proc.name().startswith("python") else ""
            names.append(os.path.basename(script) or proc.name())
        except psutil.Error:
            continue
    return ", ".join(sorted(set(names))) or "none"
