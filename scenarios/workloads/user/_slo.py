"""An attack's load judged against its service level objectives, fault by fault.

The steady state is the load itself before the first fault, on the same cluster: its
availability (the share of requests answered 200, with the expected body where one is said,
within the request timeout) and its p50/p99 latency. Each fault is then judged over its own
window, from its confirmation to its heal or ``window`` seconds, whichever is longer (a kill is
over in an instant; what it does to the service lasts): availability at least the objective,
p99 at most the steady state's times ``p99_factor`` plus ``p99_slack``. After each heal the
service must meet the objective again within ``recover_within`` seconds: a second of requests
all answered, with that p99. A window no request was sent in, or a steady state of too few
requests, is unknown: never a pass.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from scenarios.model._records import Verdict
from scenarios.workloads.serve._load import Request
from scenarios.workloads.serve._verdicts import p99, recovery_time

__all__ = ["MIN_STEADY", "Objective", "Steady", "Window", "breached_for", "fault_windows", "slo_figures",
           "slo_verdicts", "steady_state"]

#: Requests the steady state needs before the first fault for the latency bound to stand on.
MIN_STEADY = 20


@dataclass(frozen=True, slots=True, kw_only=True)
class Objective:
    """What the service must keep: ``[slo]`` of an attack file."""

    availability: float = 0.99
    p99_factor: float = 3.0
    p99_slack: float = 0.05
    recover_within: float = 10.0
    window: float = 5.0
    timeout: float = 2.0  #: the load's request timeout: an answer after it is no answer


@dataclass(frozen=True, slots=True)
class Window:
    """One fault's window in the run, seconds into it, and what it was."""

    label: str
    start: float
    end: float

    def holds(self, t: float) -> bool:
        return self.start <= t < self.end


@dataclass(frozen=True, slots=True, kw_only=True)
class Steady:
    """The load before the first fault."""

    requests: int
    availability: float
    p50: float
    p99: float

    def describe(self) -> str:
        return (f"{self.requests} requests, {self.availability:.1%} answered, p50 {self.p50 * 1000:.0f} ms, "
                f"p99 {self.p99 * 1000:.0f} ms")


def _share_ok(requests: Sequence[Request], timeout: float) -> float:
    return sum(r.ok(timeout) for r in requests) / len(requests) if requests else math.nan


def _p50(latencies: Sequence[float]) -> float:
    ranked = sorted(latencies)
    return ranked[(len(ranked) - 1) // 2] if ranked else math.nan


def steady_state(requests: Sequence[Request], *, before: float, timeout: float) -> Steady:
    """The requests sent before ``before`` (the first fault), as a :class:`Steady`."""
    seen = [r for r in requests if r.sent < before]
    answered = [r.latency for r in seen if r.ok(timeout)]
    return Steady(requests=len(seen), availability=_share_ok(seen, timeout), p50=_p50(answered), p99=p99(answered))


def fault_windows(faults: Sequence[tuple[str, float, float]], *, at_least: float) -> list[Window]:
    """Each fault's window: from its confirmation for its length or ``at_least`` seconds."""
    return [Window(label, start, max(end, start + at_least)) for label, start, end in faults]


def slo_verdicts(requests: Sequence[Request], windows: Sequence[Window], steady: Steady,
                 slo: Objective) -> list[Verdict]:
    """The four SLO verdicts (:data:`SLO_VERDICTS`) of a run's load."""
    return [_steady_verdict(steady, slo), _availability(requests, windows, slo),
            _latency(requests, windows, steady, slo), _recovered(requests, windows, steady, slo)]


def slo_figures(requests: Sequence[Request], windows: Sequence[Window], steady: Steady,
                slo: Objective) -> dict[str, float]:
    """The load's figures over the faults, as metrics a comparison judges (``raychaos compare``):
    the lowest availability of a fault's window, the highest p99 (ms) and the longest recovery
    (s; left out when one never recovered). Empty when no fault window had a request."""
    found = [(w, seen) for w, seen in _per_window(requests, windows) if seen]
    if not found:
        return {}
    answered = [[r.latency for r in seen if r.ok(slo.timeout)] for _, seen in found]
    bound = _bound(steady, slo)
    times = [recovery_time(requests, w.end, bound=bound, timeout=slo.timeout) for w in windows]
    figures = {"slo availability min": min(_share_ok(seen, slo.timeout) for _, seen in found),
               "slo p99 max ms": 1000 * max((p99(lat) for lat in answered if lat), default=math.nan),
               "slo recovery max s": math.nan if any(t is None for t in times) else max(
                   (t for t in times if t is not None), default=0.0)}
    return {k: v for k, v in figures.items() if math.isfinite(v)}  # one never measured is left out


def _steady_verdict(steady: Steady, slo: Objective) -> Verdict:
    if steady.requests < MIN_STEADY:
        return Verdict.unknown("slo_steady_state", f"{steady.requests} requests before the first fault, fewer "
                               f"than {MIN_STEADY}: start the first fault later, or raise the load's rate")
    return Verdict.of("slo_steady_state", steady.availability >= slo.availability,
                      f"before the first fault: {steady.describe()} (objective {slo.availability:.1%})",
                      steady.requests)


def _per_window(requests: Sequence[Request], windows: Sequence[Window]) -> list[tuple[Window, list[Request]]]:
    return [(w, [r for r in requests if w.holds(r.sent)]) for w in windows]


def _availability(requests: Sequence[Request], windows: Sequence[Window], slo: Objective) -> Verdict:
    found = _per_window(requests, windows)
    said = "; ".join(f"{w.label} {w.start:.1f}-{w.end:.1f} s: {_share_ok(seen, slo.timeout):.1%} of {len(seen)}"
                     for w, seen in found)
    if not found or any(not seen for _, seen in found):
        return Verdict.unknown("slo_availability", f"a fault's window with no request sent in it "
                               f"({said or 'no fault window'}): raise the load's rate or the window")
    low = [w.label for w, seen in found if _share_ok(seen, slo.timeout) < slo.availability]
    return Verdict.of("slo_availability", not low, f"answered within {slo.timeout:g} s per fault: {said} "
                      f"(objective {slo.availability:.1%})", sum(len(seen) for _, seen in found))


def _bound(steady: Steady, slo: Objective) -> float:
    return steady.p99 * slo.p99_factor + slo.p99_slack


def _latency(requests: Sequence[Request], windows: Sequence[Window], steady: Steady, slo: Objective) -> Verdict:
    bound = _bound(steady, slo)
    if steady.requests < MIN_STEADY or math.isnan(bound):
        return Verdict.unknown("slo_latency", f"no steady-state p99 to hold the faults to ({steady.requests} "
                               "requests answered before the first fault)")
    found = [(w, [r.latency for r in seen if r.ok(slo.timeout)]) for w, seen in _per_window(requests, windows)]
    if not found or any(not answered for _, answered in found):
        return Verdict.unknown("slo_latency", "a fault's window with no answered request: its p99 is unknown")
    said = "; ".join(f"{w.label}: p99 {p99(lat) * 1000:.0f} ms" for w, lat in found)
    slow = [w.label for w, lat in found if p99(lat) > bound]
    return Verdict.of("slo_latency", not slow, f"{said} (bound {bound * 1000:.0f} ms: steady p99 "
                      f"{steady.p99 * 1000:.0f} ms x{slo.p99_factor:g} + {slo.p99_slack * 1000:.0f} ms)",
                      sum(len(lat) for _, lat in found))


def _recovered(requests: Sequence[Request], windows: Sequence[Window], steady: Steady, slo: Objective) -> Verdict:
    bound = _bound(steady, slo)
    if math.isnan(bound):
        return Verdict.unknown("slo_recovered", "no steady-state p99 to recover to")
    times = [recovery_time(requests, w.end, bound=bound, timeout=slo.timeout) for w in windows]
    late = [t for t in times if t is None or t > slo.recover_within]
    said = ", ".join(f"{w.label} {'never' if t is None else f'{t:.2f} s'}" for w, t in zip(windows, times, strict=True))
    return Verdict.over("slo_recovered", len(times), held=not late,
                        detail=f"back to the objective after each fault's window: {said} (bound "
                        f"{slo.recover_within:g} s)")


def breached_for(requests: Sequence[Request], *, now: float, slo: Objective, bucket: float = 1.0) -> float:
    """Seconds, up to ``now``, the load has been below its availability objective without a
    break: whole ``bucket``-long windows counted back from the last complete one (a stop
    condition's measure). Requests still out are not counted: a bucket waits for them."""
    seconds, end = 0.0, now - slo.timeout  # a bucket is complete once its requests could have answered
    while end - bucket >= 0:
        seen = [r for r in requests if end - bucket <= r.sent < end]
        if not seen or _share_ok(seen, slo.timeout) >= slo.availability:
            return seconds
        seconds += bucket
        end -= bucket
    return seconds
