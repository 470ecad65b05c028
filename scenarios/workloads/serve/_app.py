"""The ``serve`` workload: a Ray Serve app under a constant HTTP load on loopback while its
processes are killed, judged against the same load's fault-free run.

The app is the user's own (``app = "module:attribute"`` in the params: a Serve application,
as ``serve run`` takes it) or the built-in one, a deployment ``echo`` that echoes each request's
nonce and names its replica (so every 200's body is checked, and every answer's replica known;
a user's app's 200s are checked only against the scenario's ``expect_body``); it runs as the
application ``raychaos``, so the replicas of its deployment ``D`` are actors of class
``ServeReplica:raychaos:D`` (a fault names them by that class), its controller
``ServeController`` and its proxy ``ProxyActor``. Every request of the load is
recorded (:mod:`scenarios.workloads.serve._load`) and the verdicts are pure functions of
those records (:mod:`scenarios.workloads.serve._verdicts`).

The fault-free twin runs first on the same cluster; the chaos run's recovery verdict reads
the twin's p99 latency. Each run starts Serve on a free loopback port and shuts it down at
teardown, so the twin's replicas do not serve the chaos run; a cluster already running Serve
(one given by address) is refused, since the run would take over and shut down that Serve.

Which of Serve's processes each kill hit is read from the State API (the replicas, controller
and proxy that existed before the run, dead or restarted after it), not from the scenario's
words: the errors a run may show follow from what it killed. Each error is laid to a fault only
near it in time, and only to the replica it killed where the answer names its replica.
"""

from __future__ import annotations

import importlib
import math
import os
import socket
import statistics
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Literal, TypeVar

from pydantic import Field, ValidationInfo, field_validator

from chaos import ActorTarget, FaultKind, NodeTarget, ScheduledFault
from chaos.cluster import node_states
from chaos.engine import import_extra
from chaos.errors import HangError, InvalidConfig
from scenarios.model._records import Problem, Verdict
from scenarios.model._workload import FaultWindow, Params, Workload
from scenarios.workloads.serve._load import REPLICA_HEADER, Expect, HttpLoad, Request
from scenarios.workloads.serve._verdicts import (
    Attribution,
    ServeFault,
    ServeSample,
    Window,
    availability_verdict,
    errors_documented_verdict,
    no_hang_verdict,
    p99,
    recovered_verdict,
    replicas_restored_verdict,
    serve_fault_of,
)

__all__ = ["SERIES", "ServeApp", "ServeParams", "per_second"]

APP, DEPLOYMENT, HOST = "raychaos", "echo", "127.0.0.1"
CONTROLLER_CLASS, PROXY_CLASS = "ServeController", "ProxyActor"
#: What an ``app`` param must look like (tests match it).
APP_FORM = "'module:attribute' naming a Serve application (Deployment.bind()) or a deployment"
#: The fault-free twin's p99 latency by (cluster address, seed, params), for the chaos run of
#: the same experiment that follows it; that run takes it out, so none outlives its pair.
_BASELINE_P99: dict[tuple[str, int, str], float] = {}
_BASELINE_LOCK = threading.Lock()
T = TypeVar("T")
#: Seconds ``serve.run`` may take to deploy the app (measured 3-5 s here).
DEPLOY_TIMEOUT = 60.0
#: Seconds one State API listing or one ``serve.status()`` may take.
LOOK_TIMEOUT = 10.0
#: Seconds between two looks at Serve while its restoration is awaited.
LOOK_EVERY = 0.5
#: Seconds before a kill's confirmation its errors may show: the process died first, and the
#: driver learns it only when the agent's reply comes back (it polls every 2 ms, then replies
#: over Ray); a request the death cut short may have been answered 500 in between.
KILL_LEAD = 1.0


class ServeParams(Params):
    #: The Serve application to run, ``module:attribute`` as ``serve run`` takes it (imported
    #: with the current directory on ``sys.path``); empty: the built-in ``echo`` deployment.
    app: str = ""
    #: The path every request GETs (a query string too: ``/?text=a+b``).
    path: str = "/"
    #: Text every 200 of your app must carry in its body (in its first 64 KiB), e.g.
    #: ``'{"words":4'``; a 200 without it is an error (``wrong_body``). Empty: your app's 200s
    #: are taken as they come (the run's metric ``bodies_checked`` is 0). The built-in app's
    #: bodies are always checked: it echoes each request's nonce.
    expect_body: str = ""
    #: Replicas of the built-in deployment (a user's app declares its own).
    replicas: int = 2
    #: Custom resources each replica of the built-in deployment asks for, e.g. ``{ worker = 1 }``
    #: to keep them off the head (the embedded worker nodes have ``worker`` and ``rc_node<i>``).
    replica_resources: dict[str, float] = Field(default_factory=dict)
    #: At most this many replicas of the built-in deployment on one node (0: no bound). With
    #: ``EveryNode`` proxies, Serve starts a proxy only on the head and on nodes holding a
    #: replica: ``1`` spreads the replicas, so the app has a proxy on more than one node.
    max_replicas_per_node: int = Field(default=0, ge=0)
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
    #: Seconds Ray may take to declare a lost node dead (the embedded cluster's GCS health
    #: check: 3 missed checks 1 s apart, each with a 2 s timeout). A node loss is confirmed only
    #: then, so the availability window opens this long before its confirmation: the node may
    #: have died that early, and the requests of that time are the ones it hit.
    node_detected_within: float = 5.0
    #: Seconds past its timeout a request may take before it counts as hung.
    hang_grace: float = 0.5
    #: Seconds after the last fault by which every replica is RUNNING again (a killed one
    #: replaced, a killed controller back, a killed proxy's node with a proxy again).
    restore_within: float = 20.0
    #: Where Serve runs its HTTP proxies: the head only, or every node. Serve binds each proxy's
    #: port with ``SO_REUSEPORT``, so on an embedded cluster (nodes of one machine) every node's
    #: proxy listens on the same port and the kernel spreads the load's connections over them.
    proxy_location: Literal["HeadOnly", "EveryNode"] = "HeadOnly"

    @field_validator("path")
    @classmethod
    def _path_form(cls, value: str) -> str:
        if not value.startswith("/") or any(c.isspace() or not c.isprintable() for c in value):
            raise ValueError(f"{value!r} is not a route; give one starting with '/' and without spaces "
                             "(a query string too, URL-encoded: \"/?text=a+b\")")
        return value

    @field_validator("expect_body")
    @classmethod
    def _expect_own_app(cls, value: str, info: ValidationInfo) -> str:
        if value and info.data.get("app") == "":
            raise ValueError(f"{value!r} is for your own app (params.app); the built-in app's bodies are "
                             "always checked (it echoes each request's nonce): drop expect_body, or set app")
        return value

    @field_validator("app")
    @classmethod
    def _app_form(cls, value: str) -> str:
        """At load time, its form only: the module is looked up at setup, from the directory
        the run starts in (a scenario file is loaded from anywhere, e.g. to check it)."""
        module, _, attr = value.partition(":")
        if value and not (all(p.isidentifier() for p in module.split(".")) and attr.isidentifier()):
            raise ValueError(f"{value!r} is not {APP_FORM}; e.g. app = \"app:app\" for `app = MyDeployment.bind()` "
                             "in app.py")
        return value


class Echo:
    """The deployment: answers each request at once (the latency measured is Serve's own) with
    JSON naming the request's ``nonce`` and the replica that answered (its actor id, in the
    body and in :data:`REPLICA_HEADER`): the load checks every 200's body, and lays an error to
    a kill only if the replica it names was killed."""

    def __init__(self) -> None:
        import ray

        self.replica = ray.get_runtime_context().get_actor_id() or ""

    async def __call__(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        return JSONResponse({"nonce": request.query_params.get("nonce", ""), "replica": self.replica},
                            headers={REPLICA_HEADER: self.replica})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


class ServeApp(Workload):
    """A Ray Serve deployment behind its HTTP proxy, under a constant loopback load."""

    BASELINE = True
    FAULT_VERDICTS = ("availability", "recovered_to_baseline", "replicas_restored")
    EXTRA = "apps"
    Params = ServeParams
    INVARIANTS = ("availability", "recovered_to_baseline", "no_request_hung", "errors_documented",
                  "replicas_restored")

    @classmethod
    def schedule_problems(cls, entries: Sequence[ScheduledFault]) -> list[Problem]:
        """Every fault of ``entries`` whose errors no table documents: a kind but a kill or a
        worker node's loss, or a kill of an actor none of Serve's own classes."""
        problems: list[Problem] = []
        for i, entry in enumerate(entries):
            target = getattr(entry.fault, "target", None)
            if entry.kind is FaultKind.KILL_NODE and isinstance(target, NodeTarget) and not target.allow_head:
                continue  # a worker node's loss: measured (the head's would end the cluster)
            if entry.kind is not FaultKind.KILL:
                problems.append(Problem(f"faults[{i}].kind", entry.kind.value, "the serve workload measured the "
                                        "errors of kills and of a worker node's loss only; use kind = \"kill\" of "
                                        "a Serve actor, or kind = \"kill_node\" of a worker node"))
            elif not isinstance(target, ActorTarget) or target.class_name is None:
                problems.append(Problem(f"faults[{i}].target", str(target), "name Serve's actor by its class: "
                                        "class_name = 'ServeReplica:<app>:<deployment>', 'ServeController' or "
                                        "'ProxyActor'"))
            else:
                try:
                    serve_fault_of(target.class_name)
                except InvalidConfig as exc:
                    problems.append(Problem(f"faults[{i}].target.class_name", target.class_name, str(exc)))
        return problems

    def setup(self) -> None:
        # First: a teardown after a failed setup reads these (and shuts down only a Serve it started).
        self.load: HttpLoad | None = None
        self.records: list[Request] | None = None
        self.started_serve = False
        self._pause = threading.Event()
        import_extra("starlette", extra="apps", needed_by="the serve workload (Ray Serve)")
        from ray import serve

        self.p = self.ctx.params_as(ServeParams)
        self._refuse_running_serve()
        self._refuse_unplaceable_spread()
        self.port = _free_port()
        self.started_serve = True  # before start: a start that fails half-way is shut down too
        # The head's proxy only by default: Serve binds every proxy's port with SO_REUSEPORT
        # (serve/_private/http_util.py), so on nodes of one machine (an embedded cluster) its
        # EveryNode default puts a proxy of each node on the same port and the kernel spreads
        # the load's connections over them: a worker node's loss would be a proxy's loss too.
        # serve-proxy-kill asks for EveryNode: its proxies are what it kills.
        serve.start(proxy_location=self.p.proxy_location, http_options={"host": HOST, "port": self.port})
        app = _application(self.p.app, replicas=self.p.replicas, resources=self.p.replica_resources,
                           per_node=self.p.max_replicas_per_node)
        serve.run(app, name=APP, route_prefix="/")
        self.replica_classes, self.declared = self._deployed()
        self.before = self._await_proxies()
        self.nodes_before = self._alive_nodes()
        homes = {r.node_id for c in self.replica_classes for r in self.before[c].values()}
        self.ctx.metric("replica_nodes", len(homes))

    def _alive_serve_actors(self) -> dict[str, dict[str, Any]]:
        """Serve's actors ALIVE now, by class (an earlier run's, the twin's, dead ones are
        listed too)."""
        return {c: {r.actor_id: r for r in self._actors(c) if r.state == "ALIVE"}
                for c in (*self.replica_classes, CONTROLLER_CLASS, PROXY_CLASS)}

    def _await_proxies(self) -> dict[str, dict[str, Any]]:
        """Serve's actors once every node Serve puts a proxy on has one ALIVE (``serve.run``
        returns when the replicas run; the controller starts their nodes' proxies after).

        Raises:
            HangError: a node with a replica or the controller has no proxy within
                :data:`DEPLOY_TIMEOUT` s: the run would kill or judge proxies not yet there.
        """
        deadline = time.monotonic() + DEPLOY_TIMEOUT
        while True:
            alive = self._alive_serve_actors()
            missing = _proxyless(alive, self.replica_classes) if self.p.proxy_location == "EveryNode" else set()
            if not missing:
                self.ctx.metric("proxies", len(alive[PROXY_CLASS]))
                return alive
            if time.monotonic() >= deadline:
                raise HangError(f"Serve started no proxy within {DEPLOY_TIMEOUT:g} s on the nodes "
                                f"{sorted(missing)}, which hold a replica or the controller (proxy_location "
                                "= 'EveryNode'); give the cluster more CPU, or use proxy_location = 'HeadOnly'")
            self._pause.wait(LOOK_EVERY)  # a poll's pace, never set

    def _deployed(self) -> tuple[list[str], int]:
        """The replicas' actor class of each deployment of the app, and the replicas declared:
        those RUNNING once ``serve.run`` returned (it returns when the app is RUNNING)."""
        deployments = _serve_status(lambda status: status.applications[APP].deployments)
        if deployments is None:
            raise InvalidConfig(f"serve.status() gave no answer within {LOOK_TIMEOUT:g} s of deploying the app; "
                                "the Serve controller is overloaded or dead: run with fewer processes on the node")
        running = sum(_running(d) for d in deployments.values())
        return [f"ServeReplica:{APP}:{name}" for name in sorted(deployments)], running

    def _refuse_running_serve(self) -> None:
        """Serve already running here is someone else's: the run would reuse it, kill its
        processes and shut it down at the end."""
        alive = [r for r in self._actors(CONTROLLER_CLASS) if r.state == "ALIVE"]
        if alive:
            raise InvalidConfig(f"the cluster at {self.ctx.address} already runs Ray Serve (ServeController "
                                f"actor {alive[0].actor_id}, ALIVE): the serve workload would take it over, kill "
                                "its processes and shut it down; run the scenario on an embedded cluster "
                                "(without --address), or serve.shutdown() that Serve first")

    def _refuse_unplaceable_spread(self) -> None:
        """``max_replicas_per_node`` leaves room for every replica on the nodes that fit one,
        or ``serve.run`` would wait for a node that never comes."""
        from ray.util.state import list_nodes

        per_node, need = self.p.max_replicas_per_node, self.p.replica_resources
        if not per_node or self.p.app:
            return
        rows = list_nodes(address=self.ctx.address, filters=[("state", "=", "ALIVE")], detail=True,
                          limit=10_000, timeout=LOOK_TIMEOUT, raise_on_missing_output=False)
        fit = sum(all(n.resources_total.get(k, 0.0) >= v for k, v in need.items()) for n in rows)
        if fit * per_node < self.p.replicas:
            raise InvalidConfig(f"replicas = {self.p.replicas} with max_replicas_per_node = {per_node} need "
                                f"{math.ceil(self.p.replicas / per_node)} nodes that fit a replica; the cluster at "
                                f"{self.ctx.address} has {fit}: run on more nodes (nodes = ... for an embedded "
                                "cluster), or raise max_replicas_per_node (0: no bound)")

    def _actors(self, class_name: str) -> list[Any]:
        """The State API's rows of every actor of ``class_name``, dead ones too."""
        from ray.util.state import list_actors

        return list(list_actors(address=self.ctx.address, filters=[("class_name", "=", class_name)], detail=True,
                                limit=10_000, timeout=LOOK_TIMEOUT, raise_on_missing_output=False))

    def _alive_nodes(self) -> set[str]:
        """The ids of the cluster's nodes the GCS lists ALIVE."""
        return {node for node, s in node_states(self.ctx.address).items() if s.state == "ALIVE"}

    def call_bounds(self) -> dict[str, float]:
        return {"teardown": 60.0,
                "invariants": self.p.timeout + self.p.restore_within + 3 * LOOK_TIMEOUT + 30.0}

    def step(self) -> bool:
        if self.load is None:  # time zero has passed: the load spans the run
            self.load = HttpLoad(HOST, self.port, rate=self.p.rate, duration=max(0.5, self.ctx.remaining()),
                                 timeout=self.p.timeout, path=self.p.path, expect=self._expect()).start()
        self.ctx.stop.wait(0.2)  # the load runs on its own threads; the runner's loop only waits
        return not self.load.done()

    def _requests(self) -> list[Request]:
        """Every request, its ``sent`` in seconds into the run (the load's clock starts later)."""
        if self.records is None:
            if self.load is None:
                return []
            offset = self.load.started - self.ctx.started
            self.records = [replace(r, sent=r.sent + offset) for r in self.load.join()]
        return self.records

    def _expect(self) -> Expect:
        """What every 200 must carry: the built-in app's echo; a user's app's ``expect_body``, if given."""
        if not self.p.app:
            return Expect.echo()
        return Expect.contains(self.p.expect_body) if self.p.expect_body else Expect()

    def _faults_at(self) -> list[float]:
        """When each fault was injected, of any kind (a kind but KILL is refused in judging)."""
        return sorted(self.ctx.injected_at)

    def invariants(self) -> list[Verdict]:
        reqs, faults_at, p = self._requests(), self._faults_at(), self.p
        self._figures(reqs)
        if not self.ctx.faults:
            with _BASELINE_LOCK:
                _BASELINE_P99[self._key()] = p99([r.latency for r in reqs if r.ok(p.timeout)])
        killed = self._killed() if faults_at else []
        samples = self._await_restored(faults_at, killed)
        unmeasured = self._unmeasured(killed) if faults_at else []
        killed += [ServeFault.NODE] * len(self.ctx.injections(FaultKind.KILL_NODE))
        during = Window(self._first_acting(faults_at), faults_at[-1] + p.recover_within) if faults_at \
            else Window(0, 0)
        return [availability_verdict(reqs, during, objective=p.objective, timeout=p.timeout),
                recovered_verdict(reqs, faults_at, baseline_p99=self._baseline_p99(reqs, faults_at),
                                  factor=p.p99_factor, slack=p.p99_slack, within=p.recover_within,
                                  timeout=p.timeout),
                no_hang_verdict(reqs, timeout=p.timeout, grace=p.hang_grace),
                errors_documented_verdict(reqs, self._attributions(), unmeasured=unmeasured),
                replicas_restored_verdict(samples, [(faults_at[-1], f) for f in killed],
                                          replicas=self.declared, within=p.restore_within,
                                          proxies=len(self.before[PROXY_CLASS]))]

    def _attributions(self) -> list[Attribution]:
        """The faults the run's errors may be laid to, from the windows the run confirmed
        (none in the fault-free twin: it excuses no error). Each counts from its confirmation
        (a kill's :data:`KILL_LEAD` before it, a node's loss ``node_detected_within`` before
        Ray declared it) to ``restore_within`` after it: Serve may take that long to replace
        what it lost (a lone replica, a lone proxy: 26 s), and an error after it is not the
        fault's. A kill heals nothing, so a hold (``heal = "at_end"``) does not stretch it."""
        if not self.ctx.faults:
            return []
        found = [a for w in self.ctx.windows(FaultKind.KILL) for a in self._kill_attributions(w)]
        return found + [a for w in self.ctx.windows(FaultKind.KILL_NODE) for a in self._node_attributions(w)]

    def _window(self, confirmed: float, lead: float) -> Window:
        return Window(max(0.0, confirmed - lead), confirmed + self.p.restore_within)

    def _kill_attributions(self, window: FaultWindow) -> list[Attribution]:
        """A kill's: the Serve class its target names (a kill of another is refused at load),
        and the actors it killed."""
        target = getattr(window.injection.fault, "target", None) if window.injection else None
        class_name = getattr(target, "class_name", None)
        if window.injection is None or class_name is None:
            return []  # judged unmeasured: what it hit is not known
        killed = frozenset(p.actor_id for p in window.injection.processes if p.actor_id)
        return [Attribution(serve_fault_of(class_name), self._window(window.start, KILL_LEAD), killed)]

    def _node_attributions(self, window: FaultWindow) -> list[Attribution]:
        """A node's loss: itself (it documents nothing), and each class of Serve's actors that
        were on the node with the ones that were, as killed."""
        lost = {p.node_id for p in window.injection.processes} if window.injection else set()
        span = self._window(window.start, self.p.node_detected_within)
        found = [Attribution(ServeFault.NODE, span)]
        for cls, rows in self.before.items():
            on = frozenset(actor_id for actor_id, row in rows.items() if row.node_id in lost)
            if on:
                found.append(Attribution(serve_fault_of(cls), span, on))
        return found

    def _first_acting(self, faults_at: Sequence[float]) -> float:
        """When the first fault may have begun to act: its confirmation, or for a node's loss
        (confirmed once Ray declares the node dead) ``node_detected_within`` s before it."""
        first = faults_at[0]
        if first in self.ctx.injections(FaultKind.KILL_NODE):
            first -= self.p.node_detected_within
        return max(0.0, first)

    def _unmeasured(self, killed: Sequence[ServeFault]) -> list[str]:
        """The run's faults whose errors cannot be judged: a kind no table documents, or kills
        and node losses that do not add up to the Serve processes seen dead or restarted (a
        kill that missed, or a lost node none of Serve's processes ran on: fail closed)."""
        found = [k.value for k in self.ctx.injected if k not in (FaultKind.KILL, FaultKind.KILL_NODE)]
        lost = self.nodes_before - self._alive_nodes()
        on_lost = sum(r.node_id in lost for rows in self.before.values() for r in rows.values())
        kills, node_kills = len(self.ctx.injections(FaultKind.KILL)), len(self.ctx.injections(FaultKind.KILL_NODE))
        if len(killed) != kills + on_lost:
            found.append(f"{kills} kills and {len(lost)} lost nodes with {on_lost} of Serve's processes, "
                         f"{len(killed)} of them seen dead or restarted ({', '.join(killed) or 'none'})")
        if node_kills and (len(lost) != node_kills or not on_lost):
            found.append(f"{node_kills} node kills, {len(lost)} nodes lost since setup, with {on_lost} of "
                         "Serve's processes on them (a node's loss is judged only when it takes a replica)")
        return found

    def _key(self) -> tuple[str, int, str]:
        """The experiment a twin and its chaos run share: cluster, seed and params."""
        return self.ctx.address, self.ctx.seed, self.p.model_dump_json()

    def _killed(self) -> list[ServeFault]:
        """One :class:`ServeFault` per death or restart of a Serve process that existed before
        the run (a replica is replaced, not restarted: a new actor)."""
        found: list[ServeFault] = []
        for cls in self.before:
            fault = serve_fault_of(cls)
            now = {r.actor_id: r for r in self._actors(cls)}
            for actor_id in self.before[cls]:
                row = now.get(actor_id)
                gone = row is None or row.state != "ALIVE"
                restarts = int(row.num_restarts or 0) if row is not None else 0
                found += [fault] * max(restarts, int(gone))  # one restarting is gone and restarted once
        return found

    def _look(self) -> ServeSample:
        """Serve's state now: replicas RUNNING, replacements, the controller."""
        replaced = sum(r.state == "ALIVE" and r.actor_id not in self.before[c]
                       for c in self.replica_classes for r in self._actors(c))
        controllers = [r for r in self._actors(CONTROLLER_CLASS) if r.state == "ALIVE"]
        restarted = any(int(r.num_restarts or 0) >= 1 or r.actor_id not in self.before[CONTROLLER_CLASS]
                        for r in controllers)
        running = _serve_status(lambda status: sum(_running(d) for d in status.applications[APP].deployments.values()))
        proxies = sum(r.state == "ALIVE" for r in self._actors(PROXY_CLASS))
        return ServeSample(at=self.ctx.elapsed(), running=running, new_replicas=replaced,
                           controller_restarted=restarted, proxies=proxies)

    def _await_restored(self, faults_at: Sequence[float], killed: Sequence[ServeFault]) -> list[ServeSample]:
        """Looks at Serve every :data:`LOOK_EVERY` s until one shows it whole again, or until
        ``restore_within`` s past the last fault (none without a fault: nothing to restore)."""
        if not faults_at:
            return []
        samples: list[ServeSample] = []
        end = self.ctx.started + faults_at[-1] + self.p.restore_within
        kills, controller = killed.count(ServeFault.REPLICA), ServeFault.CONTROLLER in killed
        proxies = len(self.before[PROXY_CLASS]) if ServeFault.PROXY in killed else 0
        while True:
            samples.append(self._look())
            if samples[-1].restored(replicas=self.declared, replica_kills=kills, controller_killed=controller,
                                    proxies=proxies) or time.monotonic() >= end:
                return samples
            self._pause.wait(LOOK_EVERY)  # a poll's pace, never set: the run's stop has fired by now

    def _baseline_p99(self, reqs: Sequence[Request], faults_at: Sequence[float]) -> float:
        """The twin's p99, taken out for this run; without a twin (``--no-baseline``), this
        run's own before its first fault (NaN when there is neither: the recovery verdict then
        does not hold)."""
        with _BASELINE_LOCK:
            found = _BASELINE_P99.pop(self._key(), None)
        if found is not None or not faults_at:
            return math.nan if found is None else found
        return p99([r.latency for r in reqs if r.sent < faults_at[0] and r.ok(self.p.timeout)])

    def _figures(self, reqs: Sequence[Request]) -> None:
        """Summary figures, and per-second series for the report (beside the twin's)."""
        ok = [r.latency for r in reqs if r.ok(self.p.timeout)]
        self.ctx.metric("requests", len(reqs))
        self.ctx.metric("served_share", len(ok) / len(reqs) if reqs else 0.0)
        # A typed fact for the report: 0 when the app's 200s were taken as they came (no expect_body).
        self.ctx.metric("bodies_checked", sum(r.body_checked for r in reqs))
        if ok:
            self.ctx.metric("p50_ms", statistics.median(ok) * 1000)
            self.ctx.metric("p99_ms", p99(ok) * 1000)
        self.ctx.series.update(per_second(reqs, timeout=self.p.timeout))

    def teardown(self) -> None:
        from ray import serve

        try:
            load: HttpLoad | None = getattr(self, "load", None)
            if load is not None:
                load.stop()
                self._requests()
        finally:
            if getattr(self, "started_serve", False):  # never a Serve this run did not start
                started = time.monotonic()
                serve.shutdown()  # the controller is detached: without this it would serve the next run
                self.ctx.metric("serve_shutdown_s", time.monotonic() - started)


#: The report's per-second series of a Serve run, by name.
SERIES = ("requests/s", "served/s", "errors/s", "p50_ms", "p99_ms")


def per_second(reqs: Sequence[Request], *, timeout: float) -> dict[str, list[tuple[float, float]]]:
    """Each second of the run (by when its requests were sent): the requests sent, those
    answered 200 within ``timeout``, the others, and the p50 and p99 latency in ms of those
    answered (no latency point for a second that had none answered: a gap, not a zero)."""
    by_second: dict[int, list[Request]] = {}
    for r in reqs:
        by_second.setdefault(int(r.sent), []).append(r)
    series: dict[str, list[tuple[float, float]]] = {name: [] for name in SERIES}
    for second, rs in sorted(by_second.items()):
        t, ok = float(second), [r.latency for r in rs if r.ok(timeout)]
        series["requests/s"].append((t, float(len(rs))))
        series["served/s"].append((t, float(len(ok))))
        series["errors/s"].append((t, float(len(rs) - len(ok))))
        if ok:
            series["p50_ms"].append((t, statistics.median(ok) * 1000))
            series["p99_ms"].append((t, p99(ok) * 1000))
    return series


def _proxyless(alive: Mapping[str, Mapping[str, Any]], replica_classes: Sequence[str]) -> set[str]:
    """The nodes of ``alive``'s replicas and controller without an ALIVE proxy: those an
    ``EveryNode`` Serve puts one on."""
    homes = {r.node_id for c in (*replica_classes, CONTROLLER_CLASS) for r in alive[c].values()}
    return homes - {r.node_id for r in alive[PROXY_CLASS].values()}


def _application(spec: str, *, replicas: int, resources: Mapping[str, float] | None = None,
                 per_node: int = 0) -> Any:
    """The Serve application to deploy: the one ``spec`` names, else the built-in ``echo``
    (``replicas`` of it, each asking for the custom ``resources``, at most ``per_node`` on a
    node when it is not 0).

    Raises:
        InvalidConfig: ``spec``'s module fails to import, or its attribute is no Serve app.
    """
    from ray import cloudpickle, serve

    if not spec:
        options = {"num_cpus": 0, "resources": dict(resources or {})}
        spread = {"max_replicas_per_node": per_node} if per_node else {}
        return serve.deployment(name=DEPLOYMENT, num_replicas=replicas, ray_actor_options=options,
                                **spread)(Echo).bind()
    name, _, attr = spec.partition(":")
    module = _import_fresh(name, spec)
    # By value: Serve's controller starts the replicas, and they need not find the user's module.
    cloudpickle.register_pickle_by_value(module)
    found = getattr(module, attr, None)
    if isinstance(found, serve.Deployment):
        found = found.bind()
    if not isinstance(found, serve.Application):
        raise InvalidConfig(f"app {spec!r}: {name}.{attr} is {found!r}, not a Serve application; give "
                            f"{APP_FORM} (in {name}.py: `{attr} = MyDeployment.bind()`)")
    return found


def _import_fresh(name: str, spec: str) -> Any:
    """Module ``name`` imported as `serve run` does, from the current directory, which leaves
    ``sys.path`` again after; imported afresh when an earlier run in this process imported it
    (else a changed app, or another folder's module of the same name, would be the one judged).

    Raises:
        InvalidConfig: the module (or one it imports) is missing, or its import raised.
    """
    here = os.getcwd()
    added = here not in sys.path
    if added:
        sys.path.insert(0, here)
    try:
        sys.modules.pop(name, None)
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        ours = exc.name is None or name == exc.name or name.startswith(f"{exc.name}.")
        raise InvalidConfig(f"app {spec!r}: {exc} (sys.path has the current directory, {here!r}); run from "
                            "the app's folder, or install its package" if ours else
                            f"app {spec!r}: importing {name!r} needs {exc.name!r}, which is not installed; "
                            f"install it (pip install it where the driver and the replicas run)") from exc
    except Exception as exc:  # the user's module may raise anything at import
        raise InvalidConfig(f"app {spec!r}: importing {name!r} raised {type(exc).__name__}: {exc}; fix the module "
                            f"(python -c 'import {name}' shows the same)") from exc
    finally:
        if added and here in sys.path:
            sys.path.remove(here)


def _running(deployment: Any) -> int:
    """A deployment's replicas RUNNING, from its ``serve.status()`` entry."""
    return sum(n for state, n in deployment.replica_states.items() if getattr(state, "value", state) == "RUNNING")


def _serve_status(read: Callable[[Any], T]) -> T | None:
    """``read(serve.status())``, asked on a thread of its own: it waits on the controller
    without a bound (None: no answer within :data:`LOOK_TIMEOUT`, or the app not listed)."""
    from ray import serve

    answer: list[T] = []

    def ask() -> None:
        try:
            answer.append(read(serve.status()))
        except KeyError:  # the app is gone from the status (its controller lost it)
            pass

    thread = threading.Thread(target=ask, daemon=True, name="serve-status")
    thread.start()
    thread.join(LOOK_TIMEOUT)
    return answer[0] if answer else None
