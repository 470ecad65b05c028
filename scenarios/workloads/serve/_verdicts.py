"""The verdicts of a Ray Serve app under faults, as pure functions of the load's requests.

Times are seconds into the run: a request's ``sent``, a fault's injection. Each verdict is
built with :meth:`Verdict.over`, so one over no request does not hold.

An error is excused only by a fault it can be laid to (:class:`Attribution`): one whose kind
documents it, that was acting while the request was out, and, where the answer names the
replica that gave it, that killed that replica.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from chaos.cluster import short
from chaos.errors import InvalidConfig
from scenarios.model._records import Verdict
from scenarios.workloads.serve._load import Failure, Request

__all__ = ["DOCUMENTED_ERRORS", "Attribution", "ServeFault", "ServeSample", "Unexcused", "Window",
           "availability_verdict", "error_of", "errors_documented_verdict", "no_hang_verdict", "p99",
           "recovered_verdict", "recovery_time", "replicas_restored_verdict", "serve_fault_of", "unexcused"]

#: What a failed request ended with: an HTTP status other than 200, or why no answer came.
ErrorKind = int | Failure


class ServeFault(StrEnum):
    """Which of a Serve app's processes a fault hit."""

    REPLICA = "replica"  #: a deployment's replica (``ServeReplica:<app>:<deployment>``)
    CONTROLLER = "controller"  #: the ``ServeController``
    PROXY = "proxy"  #: the HTTP proxy (``ProxyActor``), one per node
    NODE = "node"  #: a worker node lost (``kill_node``) with the replicas on it


def serve_fault_of(class_name: str) -> ServeFault:
    """The :class:`ServeFault` a kill of an actor of ``class_name`` is.

    Raises:
        InvalidConfig: a class that is none of Serve's own (its errors are not measured).
    """
    if class_name.startswith("ServeReplica:"):
        return ServeFault.REPLICA
    found = {"ServeController": ServeFault.CONTROLLER, "ProxyActor": ServeFault.PROXY}.get(class_name)
    if found is None:
        raise InvalidConfig(f"the serve workload measured the errors of killing a replica, the controller or "
                            f"the proxy, not an actor of class {class_name!r}; aim the kill at class "
                            "'ServeReplica:<app>:<deployment>', 'ServeController' or 'ProxyActor'")
    return found


#: The errors each fault may cost, as Ray Serve 2.60 was measured to answer on 2 cores
#: (20 requests/s, 2 s timeout, fresh connection per request): a killed replica of two cost
#: none (the proxy sent its requests to the other), of one the requests waited at the proxy
#: until the controller's new replica served (6.5 s: timeouts); a killed controller cost none
#: (proxies and replicas serve without it); a killed proxy refused connections until the
#: controller started a new one (26 s), and reset the one request it was answering. A worker
#: node lost with one of two replicas (3 nodes, the proxy on the head) cost none: the proxy's
#: router found the lost replica unavailable and answered its requests late from the other; a
#: node's replicas count as killed replicas besides, so their timeouts are documented too.
#: On a machine half as fast, one request of a replica's kill was answered 500 (CI, once):
#: Serve documents ``ReplicaUnavailableError`` ("the selected replica is no longer available"),
#: which its proxy answers as an internal error; 500 is documented for a replica's loss.
#: No fault documents :attr:`Failure.WRONG_BODY`: a fault may cost an answer, never a wrong one.
DOCUMENTED_ERRORS: Mapping[ServeFault, frozenset[ErrorKind]] = {
    ServeFault.REPLICA: frozenset({Failure.TIMEOUT, 500}),
    ServeFault.CONTROLLER: frozenset(),
    ServeFault.PROXY: frozenset({Failure.REFUSED, Failure.RESET}),
    ServeFault.NODE: frozenset(),
}


@dataclass(frozen=True, slots=True)
class Window:
    """Seconds into the run, ``start`` included, ``end`` excluded."""

    start: float
    end: float

    def holds(self, t: float) -> bool:
        return self.start <= t < self.end

    def meets(self, request: Request) -> bool:
        """``request`` was out at some time in the window: sent before its end, ended in it or later."""
        return request.sent < self.end and request.ended() >= self.start


@dataclass(frozen=True, slots=True)
class Attribution:
    """The errors one fault may excuse: an error its kind documents (:data:`DOCUMENTED_ERRORS`)
    of a request out during ``window`` (from the fault's confirmation, or a stated lead before
    it, to its bound after it); where the answer names the replica that gave it
    (:attr:`Request.replica`), only if that is an actor the fault ``killed``."""

    fault: ServeFault
    window: Window
    killed: frozenset[str] = frozenset()  #: the actor ids of the Serve processes it killed

    def describe(self) -> str:
        kinds = ", ".join(sorted(map(str, DOCUMENTED_ERRORS[self.fault]))) or "none"
        return f"{self.fault} {self.window.start:.1f}-{self.window.end:.1f} s: {kinds}"


class Unexcused(StrEnum):
    """Why no fault excuses a failed request."""

    OUTSIDE_WINDOW = "outside every fault's window"  #: no fault was acting while it was out
    UNDOCUMENTED = "not documented for the faults acting then"  #: none of them documents its error
    SPARED_REPLICA = "answered by a replica the fault did not kill"  #: its answer names another replica


def unexcused(request: Request, attributions: Sequence[Attribution]) -> Unexcused | None:
    """Why no fault of ``attributions`` excuses ``request``'s error (None: one does, or it did not fail)."""
    error = error_of(request)
    if error is None:
        return None
    acting = [a for a in attributions if a.window.meets(request)]
    if not acting:
        return Unexcused.OUTSIDE_WINDOW
    documenting = [a for a in acting if error in DOCUMENTED_ERRORS[a.fault]]
    if not documenting:
        return Unexcused.UNDOCUMENTED
    if request.replica is not None and not any(request.replica in a.killed for a in documenting):
        return Unexcused.SPARED_REPLICA
    return None


def error_of(request: Request) -> ErrorKind | None:
    """What a request failed with (None: answered 200, its body right or not checked)."""
    if request.failure is not None:
        return request.failure
    return request.status if request.status != 200 else None


def p99(latencies: Sequence[float]) -> float:
    """The 99th percentile (nearest rank) of ``latencies``; NaN for none."""
    if not latencies:
        return math.nan
    ranked = sorted(latencies)
    return ranked[max(0, math.ceil(0.99 * len(ranked)) - 1)]


def availability_verdict(requests: Iterable[Request], during: Window, *, objective: float,
                         timeout: float) -> Verdict:
    """``availability``: of the requests sent while the faults acted (``during``), the share
    answered 200 within ``timeout`` is at least ``objective``; a 200 whose body was checked and
    wrong is no answer."""
    seen = [r for r in requests if during.holds(r.sent)]
    ok = sum(r.ok(timeout) for r in seen)
    share = ok / len(seen) if seen else 0.0
    return Verdict.over("availability", len(seen), held=share >= objective,
                        detail=f"{ok} of {len(seen)} requests sent in {during.start:.1f}-{during.end:.1f} s "
                        f"answered 200 within {timeout:g} s ({share:.1%}; objective {objective:.1%})"
                        f"{_bodies_text(seen)}")


def _bodies_text(requests: Sequence[Request]) -> str:
    """What the 200s' bodies showed: how many were wrong, or that none was checked."""
    answered = [r for r in requests if r.status == 200]
    wrong = sum(r.failure is Failure.WRONG_BODY for r in answered)
    if answered and not any(r.body_checked for r in answered):
        return "; bodies not checked: nothing says what the app answers (params.expect_body)"
    return f"; {wrong} answered 200 with a wrong body" if wrong else ""


def recovery_time(requests: Sequence[Request], fault_at: float, *, bound: float, timeout: float,
                  window: float = 1.0) -> float | None:
    """Seconds from ``fault_at`` to the start of the first ``window`` of requests (sliding by a
    quarter of it) that are all answered 200 within ``timeout`` with a p99 latency at most
    ``bound``; None when no such window starts before the last request."""
    later = [r for r in requests if r.sent >= fault_at]
    start = fault_at
    while later and start <= later[-1].sent:
        inside = [r for r in later if start <= r.sent < start + window]
        if inside and all(r.ok(timeout) for r in inside) and p99([r.latency for r in inside]) <= bound:
            return start - fault_at
        start += window / 4
    return None


def recovered_verdict(requests: Sequence[Request], faults_at: Sequence[float], *, baseline_p99: float,
                      factor: float, slack: float, within: float, timeout: float) -> Verdict:
    """``recovered_to_baseline``: after each fault, within ``within`` s, a second of requests
    all served with a p99 at most ``baseline_p99 * factor + slack`` (the fault-free run's p99)."""
    bound = baseline_p99 * factor + slack
    if math.isnan(bound):
        return Verdict.unknown("recovered_to_baseline", "no baseline p99 to recover to")
    times = [recovery_time(requests, t, bound=bound, timeout=timeout) for t in faults_at]
    late = [t for t in times if t is None or t > within]
    text = ", ".join("never" if t is None else f"{t:.2f} s" for t in times)
    return Verdict.over("recovered_to_baseline", len(times), held=not late,
                        detail=f"after each fault: {text or 'no fault'} (bound {within:g} s; p99 at most "
                        f"{bound * 1000:.0f} ms: baseline {baseline_p99 * 1000:.0f} ms x{factor:g} + "
                        f"{slack * 1000:.0f} ms)")


def no_hang_verdict(requests: Sequence[Request], *, timeout: float, grace: float) -> Verdict:
    """``no_request_hung``: every request ended (answered or failed) within ``timeout`` and
    ``grace`` seconds; one the load wrote off as hung, or that took longer, breaks it."""
    hung = [r for r in requests if r.failure is Failure.HUNG or r.latency > timeout + grace]
    longest = max((r.latency for r in requests), default=0.0)
    return Verdict.over("no_request_hung", len(requests), held=not hung,
                        detail=f"{len(hung)} of {len(requests)} requests ran past {timeout + grace:g} s "
                        f"(longest {longest:.2f} s)")


def errors_documented_verdict(requests: Iterable[Request], attributions: Sequence[Attribution], *,
                              unmeasured: Sequence[str] = ()) -> Verdict:
    """``errors_documented``: every failed request's error is excused by a fault it can be laid
    to (:func:`unexcused`); a run without faults excuses none. Where the answer named no
    replica (a timeout, Serve's own error page), the fault's window alone excused it, and the
    detail counts those. A fault of ``unmeasured`` (one no table documents, or a kill not seen
    to hit a Serve process) breaks it: its errors cannot be judged (fail closed)."""
    seen = list(requests)
    failed = [r for r in seen if error_of(r) is not None]
    odd = [(r, why) for r in failed if (why := unexcused(r, attributions)) is not None]
    by_window = sum(r.replica is None for r in failed) - sum(r.replica is None for r, _ in odd)
    found = (f"{len(failed)} failed requests, {len(failed) - len(odd)} excused ({by_window} by their window "
             f"alone: the answer named no replica); not excused: {_unexcused_text(odd)}") if failed \
        else "no failed request"
    extra = f"; faults without a measured table: {', '.join(unmeasured)}" if unmeasured else ""
    faults = "; ".join(a.describe() for a in attributions) or "none"
    return Verdict.over("errors_documented", len(seen), held=not odd and not unmeasured,
                        detail=f"{found} (faults, their windows and what each documents: {faults}){extra}")


def _unexcused_text(odd: Sequence[tuple[Request, Unexcused]]) -> str:
    """Each kind of unexcused error and why: how many, and the first one's time and replica."""
    groups: dict[tuple[ErrorKind | None, Unexcused], list[Request]] = {}
    for r, why in odd:
        groups.setdefault((error_of(r), why), []).append(r)
    return ", ".join(f"{len(rs)} {error} {why.value} (first sent at {rs[0].sent:.1f} s"
                     + (f", from replica {short(rs[0].replica)}" if rs[0].replica else "") + ")"
                     for (error, why), rs in groups.items()) or "none"


@dataclass(frozen=True, slots=True)
class ServeSample:
    """Serve's processes as one look saw them, ``at`` seconds into the run."""

    at: float
    running: int | None  #: replicas RUNNING per ``serve.status()``; None: it did not answer in time
    new_replicas: int  #: ALIVE replica actors that did not exist before the run (replacements)
    controller_restarted: bool  #: a ServeController ALIVE that was restarted or is a new actor
    proxies: int = 0  #: ProxyActors ALIVE

    def restored(self, *, replicas: int, replica_kills: int, controller_killed: bool, proxies: int = 0) -> bool:
        """Every replica declared RUNNING, each killed one replaced, a killed controller back,
        and at least ``proxies`` proxies ALIVE (those of before the run, once one was killed)."""
        return (self.running == replicas and self.new_replicas >= replica_kills
                and (self.controller_restarted or not controller_killed) and self.proxies >= proxies)


def replicas_restored_verdict(samples: Sequence[ServeSample], faults: Sequence[tuple[float, ServeFault]], *,
                              replicas: int, within: float, proxies: int = 0) -> Verdict:
    """``replicas_restored``: within ``within`` s of the last fault, one look at Serve shows the
    declared ``replicas`` RUNNING, a new replica for each one killed, a killed controller ALIVE
    again, and, once a proxy was killed, ``proxies`` proxies ALIVE (as many as before the run);
    a run without faults has nothing restored (it does not hold)."""
    if not faults:
        return Verdict.unknown("replicas_restored", "no fault: nothing to restore")
    last = max(t for t, _ in faults)
    kills = sum(f is ServeFault.REPLICA for _, f in faults)
    controller = any(f is ServeFault.CONTROLLER for _, f in faults)
    proxies = proxies if any(f is ServeFault.PROXY for _, f in faults) else 0
    seen = [s for s in samples if last <= s.at <= last + within]
    good = [s for s in seen if s.restored(replicas=replicas, replica_kills=kills, controller_killed=controller,
                                          proxies=proxies)]
    found = f"restored {good[0].at - last:.1f} s after it" if good else "never restored"
    latest = seen[-1] if seen else None
    state = "no look" if latest is None else (f"last look: {latest.running} running, {latest.new_replicas} new, "
                                              f"controller restarted: {latest.controller_restarted}, "
                                              f"{latest.proxies} proxies alive")
    return Verdict.over("replicas_restored", len(faults), held=bool(good),
                        detail=f"{replicas} replicas declared, {kills} killed, controller killed: {controller}"
                        + (f", {proxies} proxies to be back" if proxies else "") + "; "
                        f"last fault at {last:.1f} s, {found} (bound {within:g} s; {state})")
