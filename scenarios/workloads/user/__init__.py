"""The user's own code under faults: an attack on a running cluster (``raychaos attack``) and a
user's job (``raychaos run --job``), with the verdicts on what answered each kill."""

from __future__ import annotations

from scenarios.model._workload import Workload
from scenarios.workloads.user._attack import ATTACK_WORKLOAD, Attack

__all__ = ["WORKLOADS"]

WORKLOADS: dict[str, type[Workload]] = {ATTACK_WORKLOAD: Attack}
