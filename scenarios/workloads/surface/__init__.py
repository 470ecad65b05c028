"""Ray's failure surface beyond the reference chapter, a module per fault: GCS restarts, silent
nodes, RPC failures, OS limits, full disks, preemption, lost objects, placement groups, async
actors. Each checks a guarantee Ray documents (or one our actors add) with invariants that can
be false, and fails closed when its fault left no trace (a verdict on a fault that never bit
would be a false green)."""

from __future__ import annotations

from scenarios.model._workload import Workload
from scenarios.workloads.surface._async_actor import AsyncActor
from scenarios.workloads.surface._full_disk import FullDisk
from scenarios.workloads.surface._gcs_restart import GcsRestart
from scenarios.workloads.surface._groups import GroupLoss
from scenarios.workloads.surface._limits import OpenFiles
from scenarios.workloads.surface._nodes import Preemption, Unresponsive
from scenarios.workloads.surface._objects import LostObjects
from scenarios.workloads.surface._rpc import RpcFailures

__all__ = ["WORKLOADS"]

WORKLOADS: dict[str, type[Workload]] = {
    "gcs-restart": GcsRestart,
    "node-unresponsive": Unresponsive,
    "rpc-failures": RpcFailures,
    "open-files": OpenFiles,
    "full-disk": FullDisk,
    "drain-preemption": Preemption,
    "lost-objects": LostObjects,
    "placement-group": GroupLoss,
    "async-actor": AsyncActor,
}
