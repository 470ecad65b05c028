"""Full disks, safely: filling a size-capped tmpfs to the last byte (the agent's half of a
full disk; :mod:`chaos.disks._capped` mounts such a tmpfs).

A disk fault must never fill the host's real disk, so :func:`fill` refuses any filesystem
but a tmpfs of at most :data:`MAX_FILL_BYTES` (the ones ``capped_filesystem`` mounts).
Filling writes one ballast file until the kernel says ``ENOSPC``; healing deletes it. Both
confirm their effect through ``statvfs``: no free byte left, then the free space back.
"""

from __future__ import annotations

import contextlib
import errno
import os
from dataclasses import dataclass

from chaos._errors import FaultIneffective, UnsafeTarget

__all__ = ["MAX_FILL_BYTES", "Filled", "fill", "free_bytes", "unfill"]

#: The largest filesystem a disk fault fills: tmpfs lives in memory.
MAX_FILL_BYTES = 1 << 30
_BALLAST = ".raychaos-ballast"
_CHUNK = 1 << 20


@dataclass(frozen=True, slots=True)
class Filled:
    """A filled filesystem: the ballast file, what it holds, and the free bytes before and after."""

    ballast: str
    bytes: int
    free_before: int
    free_after: int


def free_bytes(path: str) -> int:
    """Bytes an unprivileged writer may still write on ``path``'s filesystem."""
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


def check_fillable(path: str) -> None:
    """Refuse to fill anything but a small tmpfs.

    Raises:
        UnsafeTarget: ``path`` is missing, on another kind of filesystem, or too big.
    """
    if not os.path.isdir(path):
        raise UnsafeTarget(f"cannot fill {path!r}: not a directory on this node")
    kind = _fs_type(path)
    size = os.statvfs(path).f_blocks * os.statvfs(path).f_frsize
    if kind != "tmpfs" or size > MAX_FILL_BYTES:
        raise UnsafeTarget(f"refusing to fill {path!r}: it is on a {kind} of {size / 2**20:.0f} MiB; "
                           f"a disk fault fills only a tmpfs of at most {MAX_FILL_BYTES >> 20} MiB "
                           "(mount one with chaos.cluster.capped_filesystem), never the host's disk")


def _fs_type(path: str) -> str:
    """The type of the filesystem ``path`` is on: the longest mount point that prefixes it."""
    real, best, kind = os.path.realpath(path), "", "unknown"
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        for line in mounts:
            _, point, fstype, *_ = line.split()
            point = point.replace("\\040", " ")
            if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
                best, kind = point, fstype
    return kind


def fill(path: str) -> Filled:
    """Write a ballast file on ``path``'s filesystem until it is full; confirm no byte is free.

    Raises:
        UnsafeTarget: see :func:`check_fillable`.
        FaultIneffective: space was still free afterwards (the ballast is removed again).
    """
    check_fillable(path)
    ballast, before, written = os.path.join(path, _BALLAST), free_bytes(path), 0
    chunk = b"\0" * _CHUNK
    with open(ballast, "ab", buffering=0) as f:
        while True:
            try:
                written += f.write(chunk[: max(1, min(_CHUNK, free_bytes(path)))])
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
    after = free_bytes(path)
    if after > 0:
        unfill(ballast, confirm=False)
        raise FaultIneffective(f"{path} still had {after} bytes free after writing {written}")
    return Filled(ballast=ballast, bytes=written, free_before=before, free_after=after)


def unfill(ballast: str, *, confirm: bool = True) -> int:
    """Delete the ballast; return the free bytes now.

    Raises:
        FaultIneffective: with ``confirm``, the filesystem was still full afterwards.
    """
    with contextlib.suppress(FileNotFoundError):
        os.remove(ballast)
    free = free_bytes(os.path.dirname(ballast))
    if confirm and free == 0:
        raise FaultIneffective(f"{os.path.dirname(ballast)} was still full after its ballast was deleted")
    return free
