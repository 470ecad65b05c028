"""``raychaos attack``: a fault schedule against a program raychaos did not start, judged by the
user's own probes (shell commands, Python callables or HTTP requests), with the journal, watchdog and reports
of ``raychaos run``.

The program is a black box: what it must keep doing is what its probes check. A probe is run
every ``every`` seconds through the run, and by the runner as the steady-state check before the
first fault and after the last heal.
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pydantic import Field

from chaos.errors import ChaosError, InvalidConfig
from scenarios.model._load_spec import PROBE_VERDICTS, SLO_VERDICTS, LoadSpec, SloSpec
from scenarios.model._probes import HttpProbe, UserProbe, probe_from
from scenarios.model._records import Verdict
from scenarios.model._workload import Params, Workload
from scenarios.workloads.serve._load import HttpLoad, Request, Route
from scenarios.workloads.user._slo import (
    Objective,
    breached_for,
    fault_windows,
    slo_figures,
    slo_verdicts,
    steady_state,
)

#: Seconds the load may run past the run's duration: it is stopped when the invariants start.
LOAD_TAIL = 120.0

__all__ = ["Attack", "ProbeRun", "StopConditionMet", "failing_streak", "probes_from", "recovered"]

ATTACK_WORKLOAD = "attack"


@dataclass(frozen=True, slots=True)
class ProbeRun:
    at: float  #: seconds into the run
    probe: str
    ok: bool
    detail: str


def recovered(results: Sequence[ProbeRun], *, within: float) -> list[str]:
    """Each failed probe result with no pass of the same probe within ``within`` seconds after."""
    return [f"{r.probe} failed at {r.at:.1f} s ({r.detail}) and did not pass again within {within:g} s"
            for r in results if not r.ok and not any(
                later.probe == r.probe and later.ok and r.at < later.at <= r.at + within for later in results)]


def probes_from(params: Sequence[Mapping[str, object]]) -> list[UserProbe]:
    """The probes of a workload's ``params.probes`` (each a ``[[probes]]`` table, checked at load)."""
    return [probe_from(p) for p in params]


class AttackParams(Params):
    #: Each a ``[[probes]]`` table of the attack file (``kind`` command, python or http).
    probes: list[dict[str, Any]] = Field(default_factory=list)
    every: float = 1.0
    recover_within: float = 30.0
    probe_timeout: float = 10.0
    #: ``[abort_when] probe_failures``: stop once one probe failed this many rounds in a row.
    abort_probe_failures: int | None = Field(default=None, ge=1)
    #: ``[abort_when] slo_breach_seconds``: stop once the load missed its objective this long.
    abort_slo_breach: int | None = Field(default=None, ge=1)
    #: ``[load]`` and ``[slo]`` of the attack file (None: no load).
    load: LoadSpec | None = None
    slo: SloSpec = Field(default_factory=SloSpec)


class StopConditionMet(ChaosError, RuntimeError):
    """A stop condition of the attack (``[abort_when]``) was met: the run stops, every fault is
    healed, and it ends aborted (exit 1) with this as its one cause."""


def failing_streak(results: Sequence[ProbeRun], probe: str) -> int:
    """How many of ``probe``'s latest runs in a row failed."""
    streak = 0
    for r in reversed([r for r in results if r.probe == probe]):
        if r.ok:
            break
        streak += 1
    return streak


def load_of(spec: LoadSpec, *, duration: float, seed: int, clock: Callable[[], float]) -> HttpLoad:
    """The open-loop load ``spec`` describes (not started)."""
    url = urllib.parse.urlsplit(spec.url)
    default = Route(path=(url.path or "/") + (f"?{url.query}" if url.query else ""), expect=spec.body)
    routes = [Route(path=r.path, method=r.method, headers=tuple(r.headers.items()), data=r.data.encode(),
                    weight=r.weight, expect=r.body) for r in spec.routes] or [default]
    return HttpLoad(url.hostname or "127.0.0.1", url.port or (443 if url.scheme == "https" else 80), rate=spec.rate,
                    duration=duration, timeout=spec.timeout, routes=routes, seed=seed, clock=clock,
                    tls=url.scheme == "https")


class Attack(Workload):
    """The user's probes, run all along while the schedule hits their program: they pass once
    every fault is healed, and every failure of one is followed by a pass within
    ``recover_within`` seconds. With ``[load]``, an open-loop HTTP load runs from time zero and
    is judged by ``[slo]`` fault by fault against its steady state before the first fault."""

    INVARIANTS = (*PROBE_VERDICTS, *SLO_VERDICTS)
    Params = AttackParams

    def setup(self) -> None:
        p = self.p = self.ctx.params_as(AttackParams)
        # Without probes of its own, a load's URL is its probe: a steady state is checked either way.
        own = [HttpProbe(url=p.load.url, body=p.load.body)] if p.load is not None and not p.probes else []
        self.probes = probes_from(p.probes) or own
        self.every, self.recover_within, self.timeout = p.every, p.recover_within, p.probe_timeout
        self.results: list[ProbeRun] = []
        self.load: HttpLoad | None = None
        if not self.probes:  # without one, nothing would judge the program: a green by default
            raise InvalidConfig("params.probes = []: an attack needs at least one probe ([[probes]] in its file, "
                                "or --probe 'COMMAND', --probe-python MODULE:FUNCTION, --probe-http URL) or a [load]")

    def call_bounds(self) -> Mapping[str, float]:
        """A round runs every probe in turn, each up to its own timeout."""
        round_bound = len(self.probes) * self.timeout + 30.0
        return {"step": round_bound + self.every, "probe": round_bound, "invariants": round_bound + 60.0}

    def _round(self) -> list[ProbeRun]:
        found = []
        for probe in self.probes:
            ok, detail = probe.run(timeout=self.timeout)
            found.append(ProbeRun(at=round(self.ctx.elapsed(), 3), probe=probe.label, ok=ok, detail=detail))
            self.ctx.count("probes passed" if ok else "probes failed")
        self.results += found
        return found

    def step(self) -> bool:
        if self.load is None and self.p.load is not None:  # from time zero: its start is the steady state's
            self.load = load_of(self.p.load, duration=self.ctx.duration + LOAD_TAIL, seed=self.ctx.seed,
                                clock=self.ctx.elapsed).start()
        self._abort_when(self._round())
        self._abort_on_breach()
        self.ctx.stop.wait(self.every)  # the probes' pace
        return True

    def _requests(self, *, ended: bool = False) -> list[Request]:
        """The load's requests so far (``ended``: once every one ended), each ``sent`` in seconds
        of the run (the load's own clock starts at its start)."""
        if self.load is None:
            return []
        found = self.load.join() if ended else self.load.requests()
        return [replace(r, sent=r.sent + self.load.started) for r in found]

    def _abort_on_breach(self) -> None:
        limit, slo = self.p.abort_slo_breach, self._objective()
        if limit is None or self.load is None:
            return
        seconds = breached_for(self._requests(), now=self.ctx.elapsed(), slo=slo)
        if seconds >= limit:
            raise StopConditionMet(f"abort_when slo_breach_seconds = {limit}: the load answered less than "
                                   f"{slo.availability:.1%} of its requests for {seconds:g} s without a break, up to "
                                   f"{self.ctx.elapsed() - slo.timeout:.1f} s; the attack stopped and every fault "
                                   "was healed")

    def _objective(self) -> Objective:
        s = self.p.slo
        return Objective(availability=s.availability, p99_factor=s.p99_factor, p99_slack=s.p99_slack_ms / 1000,
                         recover_within=s.recover_within, window=s.window,
                         timeout=self.p.load.timeout if self.p.load is not None else 2.0)

    def _abort_when(self, found: Sequence[ProbeRun]) -> None:
        """Raise :class:`StopConditionMet` when a probe of this round failed its limit of rounds in a row."""
        limit = self.ctx.params_as(AttackParams).abort_probe_failures
        for run in found:
            if limit is not None and not run.ok and failing_streak(self.results, run.probe) >= limit:
                raise StopConditionMet(f"abort_when probe_failures = {limit}: {run.probe} failed {limit} rounds "
                                       f"in a row, the last at {run.at:.1f} s ({run.detail}); the attack stopped "
                                       "and every fault was healed")

    def probe(self) -> str:
        failed = [r for r in self._round() if not r.ok]
        if failed:
            raise AssertionError("; ".join(f"{r.probe}: {r.detail}" for r in failed))
        return f"{len(self.probes)} probe{'' if len(self.probes) == 1 else 's'} passed"

    def invariants(self) -> list[Verdict]:
        start = time.monotonic()
        final = self._round()
        failed = [f"{r.probe}: {r.detail}" for r in final if not r.ok]
        unrecovered = recovered(self.results, within=self.recover_within)
        total = sum(not r.ok for r in self.results)
        return [Verdict.over("probes_pass_after_heal", len(final), held=not failed,
                             detail=f"after the last heal: {failed or f'all {len(final)} passed'} "
                             f"({time.monotonic() - start:.1f} s)"),
                Verdict.over("probes_recover", len(self.results), held=not unrecovered,
                             detail=f"{len(self.results)} probe runs, {total} failed; "
                             f"not recovered: {unrecovered[:3] or 'none'}"), *self._slo_verdicts()]

    def _slo_verdicts(self) -> list[Verdict]:
        """The load's verdicts against ``[slo]``: its requests once every one ended, the faults'
        windows as the run confirmed and healed them."""
        if self.load is None:
            return []
        self.load.stop()
        requests = self._requests(ended=True)
        slo = self._objective()
        faults = sorted((f"{w.kind.value}@{w.start:.1f}s", w.start, w.end)
                        for kind in {e.kind for e in self.ctx.plan.entries} for w in self.ctx.windows(kind))
        windows = fault_windows(faults, at_least=slo.window)
        before = min((w.start for w in windows), default=self.ctx.elapsed())
        steady = steady_state(requests, before=before, timeout=slo.timeout)
        self.ctx.metric("load requests", len(requests))
        for name, value in slo_figures(requests, windows, steady, slo).items():
            self.ctx.metric(name, value)
        return slo_verdicts(requests, windows, steady, slo)

    def teardown(self) -> None:
        if self.load is not None:  # an aborted run: its load stops with it
            self.load.stop()
            self.load.join()
