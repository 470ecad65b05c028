"""The ``serve`` workload: a Ray Serve app under a constant HTTP load on loopback while its
processes are killed, judged against the same load's fault-free run.

The app is one deployment, ``echo`` of the application ``raychaos``, so its replicas are
actors of class ``ServeReplica:raychaos:echo`` (a fault names them by that class), its
controller ``ServeController`` and its proxy ``ProxyActor``. Every request of the load is
recorded (:mod:`scenarios.workloads._serve_load`) and the verdicts are pure functions of
those records (:mod:`scenarios.workloads._serve_verdicts`).

The fault-free twin runs first on the same cluster; the chaos run's recovery verdict reads
the twin's p99 latency. Each run starts Serve on a free loopback port and shuts it down at
teardown, so the twin's replicas do not serve the chaos run.
"""

from __future__ import annotations

import math
import socket
import statistics
import threading
import time
from collections.abc import Sequence
from typing import Any, Literal

from chaos import FaultKind
from chaos._extras import import_extra
from scenarios.model._records import Verdict
from scenarios.model._workload import Params, Workload
from scenarios.workloads._serve_load import HttpLoad, Request
from scenarios.workloads._serve_verdicts import (
    ServeFault,
    Window,
    availability_verdict,
    errors_documented_verdict,
    no_hang_verdict,
    p99,
    recovered_verdict,
)

__all__ = ["SERVE_WORKLOADS", "ServeApp", "ServeParams"]

APP, DEPLOYMENT, HOST = "raychaos", "echo", "127.0.0.1"
#: The fault-free twin's p99 latency by cluster address, for the chaos run that follows it.
_BASELINE_P99: dict[str, float] = {}
_BASELINE_LOCK = threading.Lock()
#: Seconds ``serve.run`` may take to deploy the app (measured 3-5 s here).
DEPLOY_TIMEOUT = 60.0


class ServeParams(Params):
    #: What the scenario's faults hit: the errors they may cost follow from it.
    fault: Literal["replica", "controller", "proxy"] = "replica"
    #: Replicas of the deployment.
    replicas: int = 2
    #: Requests per second, and each one's timeout in seconds.
    rate: float = 20.0
    timeout: float = 2.0
    #: The share of requests sent while the faults act that must be answered 200 in time.
    objective: float = 0.99
    #: Seconds after each fault by which a second of requests must be back to the twin's p99.
    recover_within: float = 5.0
    #: The recovered p99 may be the twin's times this, plus ``p99_slack`` seconds.
    p99_factor: float = 3.0
    p99_slack: float = 0.05
    #: Seconds past its timeout a request may take before it counts as hung.
    hang_grace: float = 0.5


class Echo:
    """The deployment: answers ``ok``, so the latency measured is Serve's own."""

    async def __call__(self, request: Any) -> str:
        return "ok"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class ServeApp(Workload):
    """A Ray Serve deployment behind its HTTP proxy, under a constant loopback load."""

    BASELINE = True
    EXTRA = "apps"
    Params = ServeParams
    INVARIANTS = ("availability", "recovered_to_baseline", "no_request_hung", "errors_documented")

    def setup(self) -> None:
        import_extra("starlette", extra="apps", needed_by="the serve workload (Ray Serve)")
        from ray import serve

        self.p = self.ctx.params_as(ServeParams)
        self.port = _free_port()
        serve.start(http_options={"host": HOST, "port": self.port})
        app = serve.deployment(name=DEPLOYMENT, num_replicas=self.p.replicas,
                               ray_actor_options={"num_cpus": 0})(Echo)
        serve.run(app.bind(), name=APP, route_prefix="/")
        self.load: HttpLoad | None = None
        self.records: list[Request] | None = None

    def call_bounds(self) -> dict[str, float]:
        return {"setup": DEPLOY_TIMEOUT + 30.0, "teardown": 60.0, "invariants": self.p.timeout + 30.0}

    def step(self) -> bool:
        if self.load is None:  # time zero has passed: the load spans the run
            self.load = HttpLoad(HOST, self.port, rate=self.p.rate, duration=max(0.5, self.ctx.remaining()),
                                 timeout=self.p.timeout).start()
        self.ctx.stop.wait(0.2)  # the load runs on its own threads; the runner's loop only waits
        return not self.load.done()

    def _requests(self) -> list[Request]:
        """Every request, its ``sent`` in seconds into the run (the load's clock starts later)."""
        if self.records is None:
            if self.load is None:
                return []
            offset = self.load.started - self.ctx.started
            self.records = [Request(r.sent + offset, r.latency, r.status, r.failure, r.detail)
                            for r in self.load.join()]
        return self.records

    def _faults_at(self) -> list[float]:
        return sorted(self.ctx.injections(FaultKind.KILL) + self.ctx.injections(FaultKind.KILL_NODE))

    def invariants(self) -> list[Verdict]:
        reqs, faults_at, p = self._requests(), self._faults_at(), self.p
        self._figures(reqs)
        if not self.ctx.faults:
            with _BASELINE_LOCK:
                _BASELINE_P99[self.ctx.address] = p99([r.latency for r in reqs if r.ok(p.timeout)])
        during = Window(faults_at[0], faults_at[-1] + p.recover_within) if faults_at else Window(0, 0)
        return [availability_verdict(reqs, during, objective=p.objective, timeout=p.timeout),
                recovered_verdict(reqs, faults_at, baseline_p99=self._baseline_p99(reqs, faults_at),
                                  factor=p.p99_factor, slack=p.p99_slack, within=p.recover_within,
                                  timeout=p.timeout),
                no_hang_verdict(reqs, timeout=p.timeout, grace=p.hang_grace),
                errors_documented_verdict(reqs, [ServeFault(p.fault)] if faults_at else [])]

    def _baseline_p99(self, reqs: Sequence[Request], faults_at: Sequence[float]) -> float:
        """The twin's p99; without a twin (``--no-baseline``), this run's own before its first
        fault (NaN when there is neither: the recovery verdict then does not hold)."""
        with _BASELINE_LOCK:
            found = _BASELINE_P99.get(self.ctx.address)
        if found is not None or not faults_at:
            return math.nan if found is None else found
        return p99([r.latency for r in reqs if r.sent < faults_at[0] and r.ok(self.p.timeout)])

    def _figures(self, reqs: Sequence[Request]) -> None:
        """Summary figures and per-second series for the report."""
        ok = [r.latency for r in reqs if r.ok(self.p.timeout)]
        self.ctx.metric("requests", len(reqs))
        self.ctx.metric("served_share", len(ok) / len(reqs) if reqs else 0.0)
        if ok:
            self.ctx.metric("p50_ms", statistics.median(ok) * 1000)
            self.ctx.metric("p99_ms", p99(ok) * 1000)
        by_second: dict[int, list[Request]] = {}
        for r in reqs:
            by_second.setdefault(int(r.sent), []).append(r)
        self.ctx.series["served/s"] = [(float(s), float(sum(r.ok(self.p.timeout) for r in rs)))
                                       for s, rs in sorted(by_second.items())]
        self.ctx.series["errors/s"] = [(float(s), float(sum(not r.ok(self.p.timeout) for r in rs)))
                                       for s, rs in sorted(by_second.items())]

    def teardown(self) -> None:
        from ray import serve

        if self.load is not None:
            self.load.stop()
            self._requests()
        started = time.monotonic()
        serve.shutdown()  # the controller is detached: without this it would serve the next run
        self.ctx.metric("serve_shutdown_s", time.monotonic() - started)


SERVE_WORKLOADS: dict[str, type[Workload]] = {"serve": ServeApp}
