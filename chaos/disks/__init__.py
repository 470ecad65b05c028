"""Disks that fail slowly: a fault filesystem and the disk faults it serves.

:func:`fault_filesystem` mounts a directory through a passthrough FUSE filesystem (its own
server process) whose faults switch at run time through the :class:`FaultFS` it yields:
latency per operation, a stall, ``EIO``/``ENOSPC``/``EROFS`` on paths matching a glob, and a
power loss that drops every write no fsync covered. The records :class:`SlowDisk`,
:class:`StallDisk`, :class:`FailingDisk` and :class:`PowerLoss` are those faults with a
confirmation and a confirmed heal (:func:`inject_disk`). Needs FUSE 3 (``fusermount3``,
``/dev/fuse``) and mfusepy.
"""

from chaos._faults import STORAGE
from chaos.disks._faults import (
    DISK_GRACE,
    DiskEvent,
    DiskFault,
    DiskInjection,
    FailingDisk,
    PowerLoss,
    SlowDisk,
    StallDisk,
    inject_disk,
)
from chaos.disks._fuse_faults import MAX_STALL_SECONDS
from chaos.disks._fusefs import (
    FaultFS,
    FaultFSError,
    FaultFSState,
    PowerLossResult,
    connect,
    fault_filesystem,
    fuse_mounts_left,
)

__all__ = [
    "DISK_GRACE",
    "MAX_STALL_SECONDS",
    "STORAGE",
    "DiskEvent",
    "DiskFault",
    "DiskInjection",
    "FailingDisk",
    "FaultFS",
    "FaultFSError",
    "FaultFSState",
    "PowerLoss",
    "PowerLossResult",
    "SlowDisk",
    "StallDisk",
    "connect",
    "fault_filesystem",
    "fuse_mounts_left",
    "inject_disk",
]
