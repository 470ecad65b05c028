"""A dry run: what each fault of a schedule would hit on a live cluster now, and what the
cluster lacks for it, found by reading the State API alone. Nothing is injected, no agent is
started, no task is run: the cluster's processes are the same after as before.

Targets are looked up as the engine looks them up when a fault comes (:func:`candidates`), so
the plan names the processes that match now; which of them a ``pick = "one"`` fault hits is
drawn at its time, among those alive then. A node fault names the node and the jobs whose
actors live there: it hits every one of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from chaos._errors import ChaosError, TargetNotFound
from chaos._kinds import FaultKind, Need
from chaos._preflight import Missing, find_missing
from chaos._ray_state import short
from chaos._schedule import Schedule, ScheduledFault
from chaos._scope import Unscoped, check_scope
from chaos._targets import (
    PATIENCE,
    ActorTarget,
    NodeTarget,
    RayProcess,
    Target,
    TaskTarget,
    WorkerTarget,
    candidates,
)

__all__ = ["FaultPlan", "dry_run_problems", "plan_faults"]

#: Needs a dry run does not check: checking them starts an agent actor or a task on each node.
NEEDS_A_RUN = frozenset({Need.AGENT, Need.RAYCHAOS})


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultPlan:
    """One scheduled fault as it would meet the cluster now."""

    at: float
    kind: FaultKind
    target: str  #: the target as the schedule names it
    matches: tuple[RayProcess, ...]  #: every live process it matches now
    hits: int  #: how many of them one firing hits
    residents: tuple[str, ...] = ()  #: a node fault: the jobs with actors on the node(s) it may hit
    problem: str = ""  #: why it would fail now ("" when it would not)
    note: str = ""  #: a task or busy worker none of which runs now: one may by the fault's time

    def lines(self) -> list[str]:
        head = f"at {self.at:6.2f} s  {self.kind.value:<16} {self.target}"
        if self.problem:
            return [f"{head}: WOULD FAIL: {self.problem}"]
        if self.note:
            return [f"{head}: {self.note}"]
        if not self.matches:
            return [f"{head}: not a process fault (nothing to look up)"]
        out = [f"{head}: hits {self.hits} of {len(self.matches)} matching now"]
        out += [f"    {p.label} on node {short(p.node_id)}" + (f", job {p.job_id}" if p.job_id else "")
                for p in self.matches]
        if self.residents:
            out.append(f"    actors on it of jobs {', '.join(self.residents)}: a node fault hits them all")
        return out


def plan_faults(schedule: Schedule, *, address: str) -> list[FaultPlan]:
    """Each fault of ``schedule`` as it would meet the cluster at ``address`` now."""
    return [_planned(entry, address) for entry in schedule.entries]


def _planned(entry: ScheduledFault, address: str) -> FaultPlan:
    target: Target | None = getattr(entry.fault, "target", None)

    def planned(matches: tuple[RayProcess, ...] = (), hits: int = 0, *, residents: tuple[str, ...] = (),
                problem: str = "", note: str = "") -> FaultPlan:
        return FaultPlan(at=entry.at, kind=entry.kind, target=entry.target_label, matches=matches, hits=hits,
                            residents=residents, problem=problem, note=note)

    if target is None:
        return planned()
    try:
        found = tuple(candidates(target, address=address))
    except TargetNotFound as exc:
        if isinstance(target, TaskTarget | WorkerTarget):  # comes and goes: looked for at the fault's time
            return planned(note=f"none runs now ({exc}); the fault looks for one at its time, for {PATIENCE:g} s")
        return planned(problem=str(exc))
    except ChaosError as exc:  # a head node it may not take
        return planned(problem=str(exc))
    hits = target.cap(len(found)) if isinstance(target, ActorTarget) else 1
    if hits == 0:
        return planned(found, problem=f"max_share = {getattr(target, 'max_share', 0):g} of the {len(found)} "
                                      "matching allows none")
    residents = _residents({p.node_id for p in found}, address) if isinstance(target, NodeTarget) else ()
    return planned(found, hits, residents=residents)


def _residents(nodes: set[str], address: str) -> tuple[str, ...]:
    """The jobs with live actors on ``nodes``."""
    from ray.util.state import list_actors

    rows = list_actors(address=address, filters=[("state", "=", "ALIVE")], limit=10_000,
                       raise_on_missing_output=False)
    return tuple(sorted({str(a.job_id) for a in rows if a.node_id in nodes and a.job_id}))


def dry_run_problems(schedule: Schedule, planned: Sequence[FaultPlan], *, address: str,
                     own: str | None) -> list[str]:
    """What would stop the attack: an unscoped target among several jobs, a need the cluster
    lacks (those a dry run can check), a fault that would find nothing. One line each."""
    found: list[str] = []
    try:
        check_scope(schedule, address=address, own=own)
    except Unscoped as exc:
        found.append(str(exc))
    missing: list[Missing] = find_missing(schedule, address=address, skip=NEEDS_A_RUN)
    found += [m.line() for m in missing]
    found += [f"the fault at {p.at:g} s ({p.kind.value} {p.target}) would fail: {p.problem}"
              for p in planned if p.problem]
    return found
