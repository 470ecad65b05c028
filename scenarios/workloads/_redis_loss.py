"""The ``redis-loss`` workload: the Redis behind the GCS (GCS fault tolerance) killed and
started again, the GCS's connections to it dropped, a server-side idle timeout, each under
load. The GCS's behaviour is judged as verdicts: it keeps serving, or it exits (a visible
failure a supervisor restarts, as KubeRay restarts the head) — never alive and silent past a
bound — and the cluster recovers with every acknowledged write to the GCS kept.

The workload drives these faults itself (the engine has no Redis fault kind): in the chaos run
each case is injected, held, healed and judged in turn; the fault-free twin runs the same
load for as long, so every verdict that needs a fault finds none there.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

import psutil
from pydantic import Field

from actors import CheckpointedCounter
from chaos import check_set, wait_until
from chaos.gcs import (
    KillRedis,
    RedisClientKill,
    RedisEvent,
    RedisFault,
    RedisFaultKind,
    RedisIdleTimeout,
    RedisServer,
    head_of,
    inject_redis_fault,
    redis_of,
)
from chaos.history import History, Op, OpStatus
from scenarios.model._records import Verdict
from scenarios.model._workload import CALL_TIMEOUT, Params, Workload
from scenarios.workloads._surface import Ack, Ledger

__all__ = ["DOCUMENTED_FATE", "CaseResult", "GcsFate", "GcsSample", "RedisLoss", "acknowledged_kept_verdict",
           "actors_served_verdict", "fate_verdict", "gcs_fate", "never_hung_verdict", "recovered_verdict"]

Case = Literal["kill_redis", "redis_client_kill", "redis_idle_timeout"]
ALL_CASES: tuple[Case, ...] = ("kill_redis", "redis_client_kill", "redis_idle_timeout")


class GcsFate(StrEnum):
    """What the GCS did through one Redis fault, from its probes."""

    SERVED = "served"  #: alive throughout, answering again after the fault
    EXITED = "exited"  #: its process ended: a visible failure, for its supervisor to restart
    HUNG = "hung"  #: alive, answering nothing for longer than the bound: the failure nobody sees
    UNSEEN = "unseen"  #: no probe told: neither served, exited nor hung within the window


#: The fate Ray documents (or states) for each fault, and where it says so.
DOCUMENTED_FATE: dict[RedisFaultKind, tuple[GcsFate, str]] = {
    RedisFaultKind.KILL_REDIS: (GcsFate.EXITED, "Ray's test_redis_failureover: 'When Redis master failed, Ray "
                                "should crash'; the GCS fault tolerance page: the restarted GCS loads its "
                                "data from Redis"),
    RedisFaultKind.REDIS_CLIENT_KILL: (GcsFate.EXITED, "Ray's maintainers (ray-project/ray#65298): the GCS "
                                       "does not connect again; every command fails until its retries run "
                                       "out and it exits ('Failed to run redis cmds')"),
    RedisFaultKind.REDIS_IDLE_TIMEOUT: (GcsFate.EXITED, "Ray's maintainers (ray-project/ray#47419, "
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

    kind: RedisFaultKind
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
    #: The Redis faults, in order.
    cases: list[Case] = Field(default_factory=lambda: list(ALL_CASES))
    #: How long the killed Redis stays down.
    down: float = 5.0
    #: The idle timeout set on the server (it stays set until the GCS exits, or past the hang bound).
    idle_timeout: int = 1
    #: How long the GCS may be alive without answering one write before it counts as hung.
    hang_bound: float = 8.0
    #: How long the supervisor waits before it restarts an exited GCS (KubeRay's restart).
    restart_delay: float = 0.5
    #: How long after a fault's heal the cluster may take to serve again.
    recover_within: float = 20.0
    #: How long one probe write to the GCS may take.
    probe_timeout: float = 2.0
    #: Seconds between the driver's writes to the GCS under the idle timeout: a quiet cluster,
    #: whose connections to Redis idle past the timeout (the GCS's own 100 ms health check
    #: keeps only the connection it pings on busy).
    quiet_every: float = 3.0


class RedisLoss(Workload):
    """A detached named counter written by the driver, writes to the GCS's key-value store,
    and a supervisor that restarts an exited GCS, while the GCS's Redis is killed, its
    connections dropped, and idle connections closed by a server timeout."""

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
        self.cases: list[CaseResult] = []
        self.events: list[RedisEvent] = []
        self.restarts: list[float] = []
        self.exits: list[float] = []  #: when the supervisor saw the GCS gone
        self.down_acks, self.seq, self.done, self.quiet = 0, 0, threading.Event(), threading.Event()
        self.threads = [threading.Thread(target=loop, daemon=True, name=f"redis-loss-{loop.__name__}")
                        for loop in (self._probe_loop, self._add_loop, self._supervise_loop)]
        for thread in self.threads:
            thread.start()

    def call_bounds(self) -> dict[str, float]:
        one = self.p.down + self.p.quiet_every + 2 * self.p.hang_bound + self.p.recover_within + 10.0
        return {"step": 60.0 + one * len(self.p.cases), "invariants": 120.0}

    # -- the load, the probes and the supervisor, each on its own thread ---------------------

    def _client(self) -> Any:
        import ray

        return ray._raylet.GcsClient(address=self.ctx.address)

    def _alive(self, pid: int) -> bool:
        try:
            return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
        except psutil.NoSuchProcess:
            return False

    def _probe_loop(self) -> None:
        while not self.done.wait(self.p.quiet_every if self.quiet.is_set() else 0.1):  # the probes' pace
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
            self.samples.append(GcsSample(start, time.monotonic() - start, self._alive(pid), answered))
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

    # -- the faults ---------------------------------------------------------------------------

    def step(self) -> bool:
        for case in self.p.cases:
            if self.ctx.stop.is_set():
                break
            self.ctx.stop.wait(1.0)  # load before each fault
            if self.ctx.faults:
                self.cases.append(self._run_case(case))
            else:
                self.ctx.stop.wait(self._hold(case) + 1.0)  # the twin's load, about as long
        return False

    def _fault(self, case: Case) -> RedisFault:
        faults: dict[str, RedisFault] = {"kill_redis": KillRedis(), "redis_client_kill": RedisClientKill(),
                                         "redis_idle_timeout": RedisIdleTimeout(timeout=self.p.idle_timeout)}
        return faults[case]

    def _hold(self, case: Case) -> float:
        return {"kill_redis": self.p.down, "redis_client_kill": self.p.hang_bound,
                "redis_idle_timeout": self.p.hang_bound + self.p.quiet_every}[case]

    def _run_case(self, case: Case) -> CaseResult:
        fault, start, restarts = self._fault(case), time.monotonic(), len(self.restarts)
        if case == "redis_idle_timeout":
            self.quiet.set()
        with inject_redis_fault(fault, self.server, gcs_pid=self.gcs_pid, journal=self.events.append):
            self._during(case)
        healed = time.monotonic()
        end = self._decided(start, healed)
        self.quiet.clear()
        fate = gcs_fate(list(self.samples), list(self.exits), start=start, end=end, hang_bound=self.p.hang_bound)
        recovered = self._recovery(healed)
        events = [e.detail for e in self.events if e.at >= start]
        return CaseResult(fault.KIND, fate, recovered, len(self.restarts) > restarts, "; ".join(events))

    def _during(self, case: Case) -> None:
        """Hold the fault: its length, or, for dropped and idle connections, until the GCS exits."""
        pid, deadline = self.gcs_pid, time.monotonic() + self._hold(case)
        while time.monotonic() < deadline and not self.ctx.stop.is_set():
            if case != "kill_redis" and not self._alive(pid):
                return
            self.ctx.stop.wait(0.1)  # the hold's poll

    def _decided(self, start: float, healed: float) -> float:
        """Wait until the probes tell the GCS's fate (bounded): an exit, a probe answered after
        the heal, or a silence past the bound. Returns when the window ends."""
        bound = self.p.hang_bound + self.p.quiet_every + self.p.probe_timeout + 1.0

        def told() -> bool:
            window = [s for s in self.samples if s.at >= start]
            return (any(t >= start for t in self.exits) or any(not s.alive for s in window)
                    or any(s.answered for s in window if s.at >= healed) or longest_silence(window) > self.p.hang_bound)

        try:
            wait_until(told, timeout=bound, interval=0.1, what="the GCS's fate")
        except Exception:  # noqa: BLE001 - an untold fate is judged unseen, not raised
            pass
        return time.monotonic()

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
        self._stop_threads()
        counts = self.ledger.counts
        return [never_hung_verdict(self.cases), fate_verdict(self.cases),
                recovered_verdict(self.cases, self.p.recover_within),
                actors_served_verdict(counts[Ack.ACKED], counts[Ack.UNKNOWN], self.down_acks),
                acknowledged_kept_verdict(self.history.ops(), self._stored())]

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
