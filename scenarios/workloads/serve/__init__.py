"""Ray Serve under faults: the app and its load (open-loop requests, SLOs), and the Ray-free
verdicts on what a fault may excuse."""

from __future__ import annotations

from scenarios.model._workload import Workload
from scenarios.workloads.serve._app import ServeApp

__all__ = ["WORKLOADS"]

WORKLOADS: dict[str, type[Workload]] = {"serve": ServeApp}
