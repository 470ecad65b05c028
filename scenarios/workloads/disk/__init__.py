"""Workloads on failing disks: a slow and a failing checkpoint disk, a power loss, a corrupted
checkpoint, failing spill disks. Each one's Ray-free verdicts live beside it."""

from __future__ import annotations

from scenarios.model._workload import Workload
from scenarios.workloads.disk._checkpoint_disk import FailingCheckpointDisk, SlowCheckpointDisk
from scenarios.workloads.disk._corrupt_checkpoint import CorruptCheckpoint
from scenarios.workloads.disk._power_loss import PowerLoss
from scenarios.workloads.disk._spill import SpillDiskFaults

__all__ = ["WORKLOADS"]

WORKLOADS: dict[str, type[Workload]] = {
    "slow-checkpoint-disk": SlowCheckpointDisk,
    "failing-checkpoint-disk": FailingCheckpointDisk,
    "power-loss": PowerLoss,
    "corrupt-checkpoint": CorruptCheckpoint,
    "spill-disk-faults": SpillDiskFaults,
}
