"""Full disks, safely: a size-capped tmpfs to put storage on, and filling it to the last byte.

A disk fault must never fill the host's real disk, so :func:`fill` refuses any filesystem
but a tmpfs of at most :data:`MAX_FILL_BYTES` (the ones :func:`capped_filesystem` mounts).
Filling writes one ballast file until the kernel says ``ENOSPC``; healing deletes it. Both
confirm their effect through ``statvfs``: no free byte left, then the free space back.
"""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass

from chaos._errors import FaultIneffective, InvalidConfig, UnsafeTarget
from chaos._reaper import Claim, ClaimKind, claim, release
from chaos._reclaim import Owner, me

__all__ = ["MAX_FILL_BYTES", "Filled", "capped_filesystem", "fill", "free_bytes", "unfill"]

#: The largest filesystem a disk fault fills: tmpfs lives in memory.
MAX_FILL_BYTES = 1 << 30
_BALLAST = ".raychaos-ballast"
_CHUNK = 1 << 20
_MOUNT_TIMEOUT = 30.0
#: The source name of every tmpfs :func:`capped_filesystem` mounts (then ``@`` and its owner).
CAPPED_SOURCE = "raychaos-capped"


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


@contextlib.contextmanager
def capped_filesystem(size_mb: int, *, prefix: str = "rc-disk-") -> Iterator[str]:
    """Mount a fresh tmpfs of ``size_mb`` MiB on a new directory, yield it, unmount it. Its
    source name is :data:`CAPPED_SOURCE` and this driver's owner label: if the driver is
    killed, its reaper unmounts it, or ``raychaos cleanup`` does.

    Raises:
        InvalidConfig: a bad size, this process may not mount (it needs root), or the unmount failed.
    """
    if isinstance(size_mb, bool) or not isinstance(size_mb, int) or not 1 <= size_mb <= MAX_FILL_BYTES >> 20:
        raise InvalidConfig(f"`size_mb` must be a whole number in [1, {MAX_FILL_BYTES >> 20}], got {size_mb!r}")
    root = tempfile.mkdtemp(prefix=prefix, dir="/tmp")
    claimed = Claim(ClaimKind.TMPFS, (root,))
    claim(claimed)
    try:
        _run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m,mode=0777", f"{CAPPED_SOURCE}@{me()}", root],
             fix="run as root (mounting a tmpfs needs CAP_SYS_ADMIN), or put the storage on a "
                 "small filesystem you mount yourself")
        yield root
    finally:
        release_capped(root)
        release(claimed)  # not after a failed unmount: the reaper tries again when the driver ends


def capped_mounts() -> dict[str, Owner | None]:
    """Every tmpfs :func:`capped_filesystem` mounted on this machine now: its mount point and
    the driver that mounted it (None for one an older raychaos mounted without its owner)."""
    found: dict[str, Owner | None] = {}
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        for line in mounts:
            source, point, kind, *_ = line.split()
            name, _, owner = source.partition("@")
            if kind == "tmpfs" and name == CAPPED_SOURCE:
                found[point.replace("\\040", " ")] = Owner.parse(owner)
    return found


def release_capped(root: str) -> None:
    """Unmount the capped tmpfs at ``root`` (lazily if a process still holds a file there) and
    delete its folder, empty once unmounted: never a walk through a filesystem still mounted.
    Nothing for what is gone already.

    Raises:
        InvalidConfig: neither unmount worked.
        OSError: the folder could not be deleted (something else is mounted there).
    """
    if root in capped_mounts():
        _unmount(root)
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(root)


def _unmount(root: str) -> None:
    try:
        _run(["umount", root], fix="")
    except InvalidConfig:  # a process still holds a file there: detach now, freed when it lets go
        _run(["umount", "-l", root], fix="close what holds files under it")


def _run(argv: list[str], *, fix: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=_MOUNT_TIMEOUT, check=False)
    if done.returncode != 0:
        raise InvalidConfig(f"`{' '.join(argv)}` failed ({done.stderr.strip() or done.returncode}); {fix}")


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
    return Filled(ballast, written, before, after)


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
