"""``mount = "$SPILL"``: a disk fault aimed at the directory Ray spills objects to, which a
scenario with ``spill_faultfs = true`` mounts through a fault filesystem for the whole cluster
(the runner aims each such fault at that mount before the run).

The disk fault records accept an absolute mount or ``"$STORAGE"``; ``"$SPILL"`` is parsed here,
as a record built for ``"$STORAGE"`` whose mount is then set to ``"$SPILL"``, so that the record
carries what the file said until the runner aims it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from chaos import Fault, Schedule, ScheduledFault
from chaos.disks import STORAGE, DiskFault
from chaos.engine import fault_from_dict
from chaos.errors import InvalidFaultSpec

__all__ = ["SPILL", "aim_spill_faults", "fault_or_spill", "spill_kinds"]

#: ``mount = "$SPILL"`` in a scenario: Ray's object spilling directory (``spill_faultfs``).
SPILL = "$SPILL"
_DISK_KINDS = frozenset({"slow_disk", "stall_disk", "failing_disk", "power_loss"})


def fault_or_spill(fields: Mapping[str, object]) -> Fault:
    """The fault ``fields`` describe (as :func:`chaos.engine.fault_from_dict`), a disk fault's
    ``mount = "$SPILL"`` included.

    Raises:
        InvalidFaultSpec: as ``fault_from_dict``; also ``"$SPILL"`` on a fault that has no mount.
    """
    if fields.get("mount") != SPILL:
        return fault_from_dict(fields)
    if fields.get("kind") not in _DISK_KINDS:
        raise InvalidFaultSpec(f"`mount` {SPILL!r} is Ray's spill directory, which only disk faults "
                               f"({', '.join(sorted(_DISK_KINDS))}) act on; got kind {fields.get('kind')!r}",
                               field="mount")
    fault = fault_from_dict({**fields, "mount": STORAGE})  # validated as any scenario mount
    object.__setattr__(fault, "mount", SPILL)  # frozen record: set once, before anyone holds it
    return fault


def spill_kinds(schedule: Schedule) -> list[str]:
    """The kinds of the schedule's faults of ``mount = "$SPILL"``, sorted."""
    return sorted({e.fault.KIND.value for e in schedule.entries if getattr(e.fault, "mount", None) == SPILL})


def aim_spill_faults(schedule: Schedule, mount: str) -> Schedule:
    """``schedule`` with every fault of ``mount = "$SPILL"`` aimed at ``mount``."""
    return Schedule(tuple(ScheduledFault(e.at, _aimed(e.fault, mount)) for e in schedule.entries), schedule.seed)


def _aimed(fault: Fault, mount: str) -> Fault:
    if isinstance(fault, DiskFault) and fault.mount == SPILL:
        return replace(fault, mount=mount)
    return fault
