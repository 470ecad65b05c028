"""``raychaos attack --dry-run``: connect, look up every fault's targets, check what can be
checked without starting anything, print the plan. The cluster is left as it was."""

from __future__ import annotations

import os
from dataclasses import dataclass

from chaos.engine import FaultPlan, dry_run_problems, plan_faults
from scenarios.model._scenario import Scenario

__all__ = ["DryRun", "dry_run"]


@dataclass(frozen=True, slots=True, kw_only=True)
class DryRun:
    """What an attack would meet now: each fault's plan, and what would stop it (one line each)."""

    address: str
    nodes: int
    jobs: tuple[str, ...]  #: the jobs running now, this driver's aside
    faults: tuple[FaultPlan, ...]
    problems: tuple[str, ...]

    def lines(self) -> list[str]:
        out = [f"dry run on the cluster at {self.address}: {self.nodes} live node(s), jobs running: "
               f"{', '.join(self.jobs) or 'none'}; nothing injected, nothing started"]
        out += [f"  {line}" for f in self.faults for line in f.lines()]
        out += ["  not checked in a dry run: each node's chaos agent and raychaos on the nodes (checking starts "
                "an actor or a task there); the attack checks them before its first fault"]
        return out


def dry_run(scenario: Scenario, *, address: str) -> DryRun:
    """The plan of ``scenario``'s faults on the cluster at ``address`` (connected, then left)."""
    import ray

    from chaos.cluster import client_auth_mode, live_nodes
    from chaos.engine import running_jobs

    if (mode := client_auth_mode()) is not None:  # as the attack connects (see runner._run)
        os.environ.setdefault("RAY_AUTH_MODE", mode)
    ray.init(address=address, namespace="raychaos", log_to_driver=False)
    try:
        gcs = ray.get_runtime_context().gcs_address
        own = ray.get_runtime_context().get_job_id()
        planned = tuple(plan_faults(scenario.schedule, address=gcs))
        problems = tuple(dry_run_problems(scenario.schedule, planned, address=gcs, own=own))
        return DryRun(address=gcs, nodes=len(live_nodes()), faults=planned, problems=problems,
                      jobs=tuple(j.label() for j in running_jobs(gcs, own=own)))
    finally:
        ray.shutdown()
