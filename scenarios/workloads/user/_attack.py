"""``raychaos attack``: a fault schedule against a program raychaos did not start, judged by the
user's own probes (shell commands, Python callables or HTTP requests), with the journal, watchdog and reports
of ``raychaos run``.

The program is a black box: what it must keep doing is what its probes check. A probe is run
every ``every`` seconds through the run, and by the runner as the steady-state check before the
first fault and after the last heal.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from chaos.errors import ChaosError, InvalidConfig
from scenarios.model._probes import UserProbe, probe_from
from scenarios.model._records import Verdict
from scenarios.model._workload import Params, Workload

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


class Attack(Workload):
    """The user's probes, run all along while the schedule hits their program: they pass once
    every fault is healed, and every failure of one is followed by a pass within
    ``recover_within`` seconds."""

    INVARIANTS = ("probes_pass_after_heal", "probes_recover")
    Params = AttackParams

    def setup(self) -> None:
        p = self.ctx.params_as(AttackParams)
        self.probes = probes_from(p.probes)
        self.every, self.recover_within, self.timeout = p.every, p.recover_within, p.probe_timeout
        self.results: list[ProbeRun] = []
        if not self.probes:  # without one, nothing would judge the program: a green by default
            raise InvalidConfig("params.probes = []: an attack needs at least one probe ([[probes]] in its file, "
                                "or --probe 'COMMAND', --probe-python MODULE:FUNCTION, --probe-http URL)")

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
        self._abort_when(self._round())
        self.ctx.stop.wait(self.every)  # the probes' pace
        return True

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
                             f"not recovered: {unrecovered[:3] or 'none'}")]
