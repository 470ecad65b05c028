"""A run's checkpoint storage on a fault filesystem (``storage_faultfs = true``), and the disk
faults of ``mount = "$STORAGE"`` aimed at it: what the runner's ``_storage`` and
``_at_storage`` do for disk faults, as ``capped_filesystem`` and ``FillDisk`` do for a full disk."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from chaos import Schedule, ScheduledFault
from chaos.disks import STORAGE, FailingDisk, PowerLoss, SlowDisk, StallDisk, fault_filesystem
from scenarios.model._scenario import Scenario

__all__ = ["aim_disk_faults", "storage_on_faultfs"]

DISK_FAULTS = (SlowDisk, StallDisk, FailingDisk, PowerLoss)


@contextmanager
def storage_on_faultfs(scenario: Scenario, root: str) -> Iterator[str]:
    """``root`` as it is, or mounted through a fault filesystem when the scenario asks: the
    path the run's storage is at. Unmounted on the way out, whatever happened."""
    if not scenario.storage_faultfs:
        yield root
        return
    os.makedirs(root, exist_ok=True)
    with fault_filesystem(root) as fs:
        yield fs.mount


def aim_disk_faults(scenario: Scenario, storage: str) -> Scenario:
    """The scenario with every disk fault of ``mount = "$STORAGE"`` aimed at ``storage``."""
    entries = tuple(ScheduledFault(e.at, replace(e.fault, mount=storage))
                    if isinstance(e.fault, DISK_FAULTS) and e.fault.mount == STORAGE else e
                    for e in scenario.schedule.entries)
    return replace(scenario, schedule=Schedule(entries, scenario.schedule.seed))
