"""Blast radius on a shared cluster: a target that could reach another program's processes is
refused before the first fault.

An actor found by class name, a task by name and a random busy worker match across every job
of the cluster: on a staging cluster shared by several teams, ``class_name = "RayTrainWorker"``
would kill whichever team's trainer the draw picks. When more than one job besides raychaos's
own runs, each such target must be scoped (``job``, or ``namespace`` for actors): the check
names the jobs and the targets, and nothing is injected.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from chaos._errors import InvalidConfig
from chaos._schedule import Schedule
from chaos._targets import ActorTarget, TaskTarget, WorkerTarget

__all__ = ["JobRow", "Unscoped", "check_scope", "running_jobs", "unscoped_targets"]


@dataclass(frozen=True, slots=True, kw_only=True)
class JobRow:
    """A running job of the cluster, as the State API shows it."""

    job_id: str
    submission_id: str | None
    entrypoint: str

    def label(self) -> str:
        said = ", ".join(x for x in (self.submission_id or "", self.entrypoint[:60]) if x)
        return f"{self.job_id} ({said})" if said else self.job_id


class Unscoped(InvalidConfig):
    """A fault's target could reach the processes of more than one job; nothing was injected."""


def unscoped_targets(schedule: Schedule) -> list[str]:
    """The labels of the schedule's targets that match across jobs (each once, in order)."""
    found: list[str] = []
    for entry in schedule.entries:
        target = getattr(entry.fault, "target", None)
        if isinstance(target, ActorTarget | TaskTarget | WorkerTarget) and not target.scoped():
            label = target.label()
            found += [] if label in found else [label]
    return found


def running_jobs(address: str, *, own: str | None) -> list[JobRow]:
    """The jobs running on the cluster at ``address``, but ``own`` (this driver's job id)."""
    from ray.job_submission import JobStatus
    from ray.util.state import list_jobs

    rows = list_jobs(address=address, limit=10_000, raise_on_missing_output=False)
    return [JobRow(job_id=str(r.job_id), submission_id=r.submission_id, entrypoint=str(r.entrypoint or ""))
            for r in rows if r.status == JobStatus.RUNNING and r.job_id and r.job_id != own]


def check_scope(schedule: Schedule, *, address: str, own: str | None) -> None:
    """Refuse a schedule whose unscoped targets would meet more than one running job.

    Raises:
        Unscoped: naming the jobs, the targets, and the fix.
    """
    loose = unscoped_targets(schedule)
    if not loose:
        return
    try:
        jobs = running_jobs(address, own=own)
    except Exception as exc:  # without the list, how far a fault reaches is unknown: refused
        raise Unscoped(f"the jobs of the cluster at {address} could not be listed ({type(exc).__name__}: "
                       f"{str(exc)[:200]}), so how far {', '.join(loose)} would reach is unknown; scope each fault "
                       "(scope = { job = \"...\" }), or make the State API answer (the dashboard)") from exc
    if len(jobs) > 1:
        raise Unscoped(_refusal(loose, jobs, address))


def _refusal(loose: Sequence[str], jobs: Sequence[JobRow], address: str) -> str:
    return (f"{len(jobs)} jobs run on the cluster at {address}: {'; '.join(j.label() for j in jobs)}; and "
            f"{', '.join(loose)} would reach any of them. Scope each fault: scope = {{ job = \"<job or "
            'submission id>" } in the attack file (or namespace = "..." for actors), or job = "..." on the '
            "target; nothing was injected")
