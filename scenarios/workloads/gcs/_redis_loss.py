"""The ``redis-loss`` workload: the Redis behind the GCS (GCS fault tolerance) killed and
started again, the GCS's connections to it dropped, a server-side idle timeout, each under
load. The GCS's behaviour is judged as verdicts: it keeps serving, or it exits (a visible
failure a supervisor restarts, as KubeRay restarts the head) — never alive and silent past a
bound — and the cluster recovers with every acknowledged write to the GCS kept.

The faults are the scenario's schedule (``kill_redis``, ``redis_client_kill``,
``redis_idle_timeout``: fault kinds like any other, confirmed or the run fails); the workload
keeps the load on, quiets its writes to the GCS through each idle timeout's span, restarts an
exited GCS as a supervisor would, and judges each fault over its window, the GCS's fate told
by the probes from its start until an exit, an answer after its heal, or a silence past the
bound. The fault-free twin runs the same load over the same planned spans, so every verdict
that needs a fault finds none there.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import psutil

from actors import CheckpointedCounter
from chaos import FaultKind, check_set, wait_until
from chaos.gcs import RedisEvent, RedisServer, head_of, redis_of
from chaos.history import History, Op, OpStatus
from scenarios.model._records import Verdict
from scenarios.model._workload import CALL_TIMEOUT, FaultWindow, Params, Workload
from scenarios.workloads._kit import Ack, Ledger

__all__ = ["DOCUMENTED_FATE", "CaseResult", "GcsFate", "GcsSample", "RedisLoss", "acknowledged_kept_verdict",
           "actors_served_verdict", "fate_verdict", "gcs_fate", "never_hung_verdict", "recovered_verdict"]

#: The Redis faults the workload judges, each over its window.
REDIS_KINDS = (FaultKind.KILL_REDIS, FaultKind.REDIS_CLIENT_KILL, FaultKind.REDIS_IDLE_TIMEOUT)


class GcsFate(StrEnum):
    """What the GCS did through one Redis fault, from its probes."""

    SERVED = "served"  #: alive throughout, answering again after the fault
    EXITED = "exited"  #: its process ended: a visible failure, for its supervisor to restart
    HUNG = "hung"  #: alive, answering nothing for longer than the bound: the failure nobody sees
    UNSEEN = "unseen"  #: no probe told: neither served, exited nor hung within the window


#: The fate Ray documents (or states) for each fault, and where it says so.
DOCUMENTED_FATE: dict[FaultKind, tuple[GcsFate, str]] = {
    FaultKind.KILL_REDIS: (GcsFate.EXITED, "Ray's test_redis_failureover: 'When Redis master failed, Ray "
                                "should crash'; the GCS fault tolerance page: the restarted GCS loads its "
                                "data from Redis"),
    FaultKind.REDIS_CLIENT_KILL: (GcsFate.EXITED, "Ray's maintainers (ray-project/ray#65298): the GCS "
                                       "does not connect again; every command fails until its retries run "
                                       "out and it exits ('Failed to run redis cmds')"),
    FaultKind.REDIS_IDLE_TIMEOUT: (GcsFate.EXITED, "Ray's maintainers (ray-project/ray#47419, "
                                        "ray-project/ray#65298): a connection the server closes as idle is "
                                        "not opened again, and the GCS exits at its next command"),
}


@dataclass(frozen=True, slots=True)
class GcsSample:
    """One probe of the GCS: a write to its key-value store (kept in Redis)."""

    at: float  #: when it began (``time.monotonic()``)
    took: float  #: seconds until it answered or gave up
    alive: bool  #: the GCS process the probe began with was still running when it ended
    answered: bool  #: the write was acknowledged


def longest_silence(samples: Sequence[GcsSample]) -> float:
    """The longest stretch, in seconds, over which consecutive probes found the GCS alive and
    answered none (from the first such probe's start to the last one's end)."""
    longest, first = 0.0, None
    for s in samples:
        if s.alive and not s.answered:
            first = s.at if first is None else first
            longest = max(longest, s.at + s.took - first)
        else:
            first = None
    return longest


def gcs_fate(samples: Iterable[GcsSample], exits: Iterable[float], *, start: float, end: float,
             hang_bound: float) -> GcsFate:
    """The GCS's fate through one fault, from the probes that began in ``[start, end]`` and the
    GCS exits its supervisor saw then (``exits``: when): hung when alive and silent for longer
    than ``hang_bound`` (even if it exited later: the hang came first), else exited when it
    exited or a probe found its process gone, else served when the last probe was answered;
    unseen otherwise (no probe, or still silent at the end)."""
    window = [s for s in samples if start <= s.at <= end]
    if longest_silence(window) > hang_bound:
        return GcsFate.HUNG
    if any(start <= t <= end for t in exits) or any(not s.alive for s in window):
        return GcsFate.EXITED
    if window and window[-1].answered:
        return GcsFate.SERVED
    return GcsFate.UNSEEN


@dataclass(frozen=True, slots=True)
class CaseResult:
    """One Redis fault of the run and what the GCS and the cluster did."""

    kind: FaultKind
    fate: GcsFate
    #: Seconds from the fault's heal until the cluster served again (None: not within the bound).
    recovered_in: float | None
    #: The GCS was restarted by the workload's supervisor after it exited.
    restarted: bool
    detail: str


def never_hung_verdict(cases: Sequence[CaseResult]) -> Verdict:
    """``gcs_never_hung``: through every fault the GCS either served or exited (a failure its
    supervisor sees); one hung, or whose fate no probe told, breaks it."""
    bad = [c for c in cases if c.fate not in (GcsFate.SERVED, GcsFate.EXITED)]
    return Verdict.over("gcs_never_hung", len(cases), held=not bad, detail=_cases_text(cases))


def fate_verdict(cases: Sequence[CaseResult]) -> Verdict:
    """``gcs_fate_as_documented``: every fault's fate is the one :data:`DOCUMENTED_FATE` gives."""
    wrong = [f"{c.kind}: {c.fate}, documented {DOCUMENTED_FATE[c.kind][0]} ({DOCUMENTED_FATE[c.kind][1]})"
             for c in cases if c.fate is not DOCUMENTED_FATE[c.kind][0]]
    return Verdict.over("gcs_fate_as_documented", len(cases), held=not wrong,
                        detail="; ".join(wrong) or _cases_text(cases))


def recovered_verdict(cases: Sequence[CaseResult], within: float) -> Verdict:
    """``recovered_after_heal``: after every fault's heal (and the GCS's restart where it
    exited) the cluster served again within ``within`` s: a write to the GCS, the named actor
    found, a new actor created."""
    late = [c for c in cases if c.recovered_in is None or c.recovered_in > within]
    return Verdict.over("recovered_after_heal", len(cases), held=not late,
                        detail=f"bound {within:g} s; " + _cases_text(cases))


def actors_served_verdict(acked: int, unknown: int, while_down: int) -> Verdict:
    """``actors_served_throughout``: the running detached actor answered every call, and some
    while the GCS was down (Ray's GCS fault tolerance page: running actors stay alive during
    the GCS's recovery). No call answered while it was down checks nothing: it does not hold."""
    return Verdict.over("actors_served_throughout", acked + unknown, held=not unknown and while_down > 0,
                        detail=f"{acked} calls answered ({while_down} while the GCS was down), {unknown} failed"
                        + ("" if while_down else "; none while the GCS was down: no outage was tested"))


def acknowledged_kept_verdict(history: Iterable[Op], stored: Iterable[tuple[str, int]]) -> Verdict:
    """``acknowledged_state_kept``: every write the GCS acknowledged to its key-value store
    (which lives in Redis) is there after the last recovery; none refused is."""
    return check_set(history, stored).verdict("acknowledged_state_kept",
                                              detail="writes to the GCS's key-value store: ")


def _cases_text(cases: Sequence[CaseResult]) -> str:
    return "; ".join(f"{c.kind}: {c.fate}, " + (f"served again {c.recovered_in:.1f} s after the heal"
                                                 if c.recovered_in is not None else "not served again")
                     + (" (GCS restarted)" if c.restarted else "") + f" [{c.detail}]" for c in cases) or "no fault"


class RedisLossParams(Params):
    #: How long the GCS may be alive without answering one write before it counts as hung.
    hang_bound: float = 8.0
    #: How long the supervisor waits before it restarts an exited GCS (KubeRay's restart).
    restart_delay: float = 0.5
    #: How long after a fault's heal the cluster may take to serve again.
    recover_within: float = 20.0
    #: How long one probe write to the GCS may take.
    probe_timeout: float = 2.0
    #: Seconds between the driver's writes to the GCS through an idle timeout's span: a quiet
    #: cluster, whose connections to Redis idle past the timeout (the GCS's own 100 ms health
    #: check keeps only the connection it pings on busy).
    quiet_every: float = 3.0


class RedisLoss(Workload):
    """A detached named counter written by the driver, writes to the GCS's key-value store,
    and a supervisor that restarts an exited GCS, while the schedule kills the GCS's Redis,
    drops its connections, and has the server close idle connections."""

    BASELINE = True  # the fault-free twin: every trace of the fault must be missing there
    FAULT_VERDICTS = ("gcs_never_hung", "gcs_fate_as_documented", "recovered_after_heal", "actors_served_throughout")
    Params = RedisLossParams
    INVARIANTS = ("gcs_never_hung", "gcs_fate_as_documented", "recovered_after_heal",
                  "actors_served_throughout", "acknowledged_state_kept")
    counter_class: type = CheckpointedCounter

    def setup(self) -> None:
        import ray

        self.p = self.ctx.params_as(RedisLossParams)
        self.head = head_of(self.ctx.address)
        self.server: RedisServer = redis_of(self.head.node.redis_address)
        self.gcs_pid = self.head.gcs_pid()
        remote = ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0)(self.counter_class)
        self.ledger = Ledger(remote.options(name="counter", namespace=self.ctx.namespace, lifetime="detached").remote(
            f"{self.ctx.storage}/counter", durability="wal", every_n=50), "driver")
        ray.get(self.ledger.actor.get.remote(), timeout=CALL_TIMEOUT)
        self.kv, self.history, self.samples = self._client(), History(), list[GcsSample]()
        self.recoveries: dict[tuple[FaultKind, float], float | None] = {}  # by window: seconds to serve again
        self.restarts: list[float] = []
        self.exits: list[float] = []  #: when the supervisor saw the GCS gone
        self.down_acks, self.seq, self.done = 0, 0, threading.Event()
        #: The idle timeouts' spans, seconds into the run: the probes go quiet then.
        self.quiet_spans = [(e.at, e.at + float(getattr(e.fault, "seconds", 0.0)) + self.p.quiet_every)
                            for e in self.ctx.plan.entries if e.kind is FaultKind.REDIS_IDLE_TIMEOUT]
        loops = (self._probe_loop, self._add_loop, self._supervise_loop, self._recovery_loop)
        self.threads = [threading.Thread(target=loop, daemon=True, name=f"redis-loss-{loop.__name__}")
                        for loop in loops]
        for thread in self.threads:
            thread.start()

    def call_bounds(self) -> dict[str, float]:
        return {"step": 1.0 + CALL_TIMEOUT, "invariants": 120.0 + self._decision_bound() + self.p.recover_within}

    def _decision_bound(self) -> float:
        """Seconds after a heal by which the probes tell the GCS's fate."""
        return self.p.hang_bound + self.p.quiet_every + self.p.probe_timeout + 1.0

    # -- the load, the probes, the supervisor and the recoveries, each on its own thread -------

    def _client(self) -> Any:
        import ray

        return ray._raylet.GcsClient(address=self.ctx.address)

    def _alive(self, pid: int) -> bool:
        try:
            return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
        except psutil.NoSuchProcess:
            return False

    def _quiet(self) -> bool:
        now = self.ctx.elapsed()
        return any(start <= now <= end for start, end in self.quiet_spans)

    def _probe_loop(self) -> None:
        while not self.done.wait(self.p.quiet_every if self._quiet() else 0.1):  # the probes' pace
            pid, start, key = self.gcs_pid, time.monotonic(), ("kv", self.seq)
            self.seq += 1
            self.history.invoke(key, "driver")
            try:
                self.kv.internal_kv_put(f"w{key[1]}".encode(), b"1", True, self._namespace(),
                                        timeout=self.p.probe_timeout)
                answered = True
            except Exception:  # noqa: BLE001 - unanswered: the write may or may not have landed
                answered = False
            self.history.complete(key, OpStatus.OK if answered else OpStatus.INFO)
            self.samples.append(GcsSample(at=start, took=time.monotonic() - start, alive=self._alive(pid),
                                          answered=answered))
            self.ctx.count("gcs writes")

    def _namespace(self) -> bytes:
        return f"raychaos-redis-loss-{self.ctx.namespace}".encode()

    def _add_loop(self) -> None:
        while not self.done.wait(0.05):  # the writer's pace
            pid = self.gcs_pid
            down = not self._alive(pid)
            acked = self.ledger.add(timeout=self.p.probe_timeout * 2) is Ack.ACKED
            # Answered while the GCS was down only if it is down still: a call that waited out the
            # outage and was answered after the restart proves nothing about serving without it.
            if acked and down and self.gcs_pid == pid and not self._alive(pid):
                self.down_acks += 1
            self.ctx.count("adds")

    def _supervise_loop(self) -> None:
        """Restart an exited GCS once its Redis answers, as the head's supervisor would."""
        noted = 0
        while not self.done.wait(0.1):  # the supervisor's pace
            if self._alive(self.gcs_pid):
                continue
            if noted != self.gcs_pid:
                noted = self.gcs_pid
                self.exits.append(time.monotonic())
            if self.server.running():
                self.done.wait(self.p.restart_delay)
                self._restart_gcs()

    def _restart_gcs(self) -> None:
        """Start the exited GCS again on the same port and the same Redis."""
        self.head.node.kill_gcs_server(check_alive=False)  # clears Ray's record of the dead one
        self.gcs_pid, _ = self.head.restart_gcs(self.ctx.address)
        self.restarts.append(time.monotonic())

    def _recovery_loop(self) -> None:
        """Once each Redis fault is healed, how long the cluster took to serve again (bounded)."""
        while not self.done.wait(0.2) and self.ctx.faults:  # the watch's pace
            for window in self._windows():
                if (window.kind, window.start) not in self.recoveries:
                    self.recoveries[(window.kind, window.start)] = self._recovery(self._mono(window.end))

    def _windows(self) -> list[FaultWindow]:
        return sorted((w for kind in REDIS_KINDS for w in self.ctx.windows(kind)), key=lambda w: w.start)

    def _mono(self, t: float) -> float:
        """``t`` seconds into the run, on ``time.monotonic()``'s clock."""
        return self.ctx.started + t

    # -- each fault's fate, over its window -------------------------------------------------------

    def step(self) -> bool:
        """The load runs on its threads; the schedule injects the faults."""
        self.ctx.stop.wait(0.5)  # the step's pace
        return True

    def _case(self, window: FaultWindow, until: float) -> CaseResult:
        """The fault of ``window`` judged from its start until its fate was told, at the latest
        ``until`` (the next fault's start, or its heal plus the decision bound; monotonic clock)."""
        start, healed = self._mono(window.start), self._mono(window.end)
        end = self._told(start, healed, until)
        fate = gcs_fate(list(self.samples), list(self.exits), start=start, end=end, hang_bound=self.p.hang_bound)
        event = window.injection.found if window.injection is not None else None
        restarted = any(start <= t <= until for t in self.restarts)
        return CaseResult(kind=window.kind, fate=fate, recovered_in=self.recoveries.get((window.kind, window.start)),
                          restarted=restarted,
                          detail=event.detail if isinstance(event, RedisEvent) else "no injection recorded")

    def _told(self, start: float, healed: float, until: float) -> float:
        """When the probes told the GCS's fate (an exit, a probe answered after the heal, a
        silence past the bound), waited for while it may still come; ``until`` at the latest."""
        def told() -> bool:
            window = [s for s in self.samples if s.at >= start]
            return (time.monotonic() >= until or any(x >= start for x in self.exits)
                    or any(not s.alive for s in window) or any(s.answered for s in window if s.at >= healed)
                    or longest_silence(window) > self.p.hang_bound)

        try:
            wait_until(told, timeout=max(0.1, until - time.monotonic()) + 1.0, interval=0.1, what="the GCS's fate")
        except Exception:  # noqa: BLE001 - an untold fate is judged unseen, not raised
            pass
        return min(time.monotonic(), until)

    def _recovery(self, healed: float) -> float | None:
        try:
            wait_until(self._serves, timeout=max(0.1, healed + self.p.recover_within - time.monotonic()),
                       interval=0.2, what="the cluster to serve again")
        except Exception:  # noqa: BLE001 - not recovered within the bound: the verdict says so
            return None
        return time.monotonic() - healed

    def _serves(self) -> bool:
        """A write to the GCS answered, the named counter found, a new actor created."""
        import ray

        self._client().internal_kv_put(b"recovery", b"1", True, self._namespace(), timeout=self.p.probe_timeout)
        found = ray.get_actor("counter", namespace=self.ctx.namespace)
        ray.get(found.get.remote(), timeout=5)
        fresh = ray.remote(num_cpus=0)(_Fresh).remote()
        try:
            return bool(ray.get(fresh.pid.remote(), timeout=10))
        finally:
            ray.kill(fresh)

    # -- the steady state and the verdicts ------------------------------------------------------

    def probe(self) -> str:
        """The GCS finds the named counter, which answers. No write to Redis: the runner probes
        every few seconds, and its writes would keep the GCS's connections from ever idling."""
        import ray

        found = ray.get_actor("counter", namespace=self.ctx.namespace)
        return f"the GCS finds the counter, which holds {ray.get(found.get.remote(), timeout=5)}"

    def invariants(self) -> list[Verdict]:
        cases = self._cases()
        self._stop_threads()
        counts = self.ledger.counts
        return [never_hung_verdict(cases), fate_verdict(cases), recovered_verdict(cases, self.p.recover_within),
                actors_served_verdict(counts[Ack.ACKED], counts[Ack.UNKNOWN], self.down_acks),
                acknowledged_kept_verdict(self.history.ops(), self._stored())]

    def _cases(self) -> list[CaseResult]:
        """Each Redis fault that happened, judged over its window (none in the fault-free twin:
        its verdicts over no fault are unknown, never held)."""
        windows = self._windows()
        if not self.ctx.faults or not windows:
            return []
        self.ctx.faults_settled.wait(timeout=self.p.recover_within + CALL_TIMEOUT)
        try:  # the last fault's recovery may still be under way
            wait_until(lambda: all((w.kind, w.start) in self.recoveries for w in windows),
                       timeout=self.p.recover_within + 5.0, interval=0.2, what="the last fault's recovery")
        except Exception:  # noqa: BLE001 - one not measured is judged not recovered
            pass
        nexts = [self._mono(w.start) for w in windows[1:]] + [float("inf")]
        return [self._case(w, min(nxt, self._mono(w.end) + self._decision_bound())) for w, nxt in
                zip(windows, nexts, strict=True)]

    def _stored(self) -> list[tuple[str, int]]:
        keys = self._client().internal_kv_keys(b"w", self._namespace(), timeout=CALL_TIMEOUT)
        return [("kv", int(k[1:])) for k in keys]

    def _stop_threads(self) -> None:
        self.done.set()
        for thread in self.threads:
            thread.join(timeout=CALL_TIMEOUT)

    def teardown(self) -> None:
        import ray

        self._stop_threads()
        ray.kill(self.ledger.actor)  # detached: it would outlive the run


class _Fresh:
    """A new actor: its creation needs the GCS (and its tables in Redis)."""

    def pid(self) -> int:
        return os.getpid()
