"""A size-capped tmpfs to put storage on (``storage_mb``; a ``fill_disk`` fills it): mounted
under a source name that says whose it is, and given to the driver's reaper, so a driver killed
with SIGKILL leaves none behind (:mod:`chaos._reclaim._reaper`; ``raychaos cleanup`` finds the rest)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator

from chaos._errors import InvalidConfig
from chaos._reclaim._owner import Owner, me
from chaos._reclaim._reaper import Claim, ClaimKind, claim, release
from chaos.agents._disk import MAX_FILL_BYTES

__all__ = ["CAPPED_SOURCE", "capped_filesystem", "capped_mounts", "release_capped"]

_MOUNT_TIMEOUT = 30.0
#: The source name of every tmpfs :func:`capped_filesystem` mounts (then ``@`` and its owner).
CAPPED_SOURCE = "raychaos-capped"


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
