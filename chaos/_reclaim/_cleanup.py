"""``raychaos cleanup``: remove what raychaos drivers that have ended left on this machine.

Each driver's reaper (:mod:`chaos._reclaim._reaper`) undoes what its driver made when the driver is
killed; this is for what is left when the reaper could not (killed too, or a failure). Things
are found by the label raychaos puts on them (:mod:`chaos._reclaim._owner`): the network lab's
namespaces, links and bridges (named ``rc-…``, the owner in their alias) and the host's
nftables tables of its faults; fault filesystems (``fuse.raychaos-faultfs``, the owner in their
server's environment); capped tmpfs mounts (source ``raychaos-capped@owner``); and processes
with ``RAYCHAOS_OWNER`` in their environment (``ray start`` daemons of a network cluster, fault
filesystem servers, Redis servers). Only the things of a driver that has ended are removed: a
live driver's, and whatever carries no owner label, are listed and left alone.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import psutil

from chaos._errors import HangError
from chaos._reclaim._owner import Owner, kill_all

__all__ = ["Found", "Leftover", "Ownership", "cleanup_machine", "find_leftovers", "orphaned_processes",
           "remove_leftovers"]

_REAPER_MODULE = "chaos._reclaim._reaper"


class Ownership(enum.Enum):
    """Whose a thing is, which decides whether cleanup removes it."""

    ENDED = "its driver has ended"  # removed
    ALIVE = "its driver is alive"  # left alone
    UNLABELLED = "it carries no raychaos owner label"  # left alone: not known to be a dead driver's


@dataclass(frozen=True, slots=True)
class Leftover:
    """One thing raychaos made, whose it is, and how to remove it (``order``: lower first)."""

    what: str
    owner: Owner | None
    ownership: Ownership
    order: int
    remove: Callable[[], object] = field(compare=False, repr=False)

    def __str__(self) -> str:
        who = f" (driver {self.owner})" if self.owner is not None else ""
        return f"{self.what}{who}: {self.ownership.value}"


def _ownership(owner: Owner | None) -> Ownership:
    if owner is None:
        return Ownership.UNLABELLED
    return Ownership.ALIVE if owner.alive() else Ownership.ENDED


def _spared() -> set[int]:
    """This process and its ancestors: never killed, whatever their environment says."""
    spared, proc = set(), psutil.Process()
    while proc is not None:
        spared.add(proc.pid)
        proc = proc.parent()
    return spared


def _kill(pid: int) -> None:
    """SIGCONT and SIGKILL ``pid``; wait for it to go.

    Raises:
        HangError: it outlived the signal by 10 s (stuck in the kernel).
    """
    if kill_all([pid]):
        raise HangError(f"pid {pid} outlived SIGKILL by 10 s (stuck in the kernel: see /proc/{pid}/stack)")


def _describe(pid: int) -> str:
    try:
        return f"pid {pid} ({' '.join(psutil.Process(pid).cmdline())[:100]})"
    except psutil.Error:
        return f"pid {pid}"


def _labelled_processes() -> list[tuple[int, Owner]]:
    """Every process with an owner label in its environment, but this one and its ancestors."""
    spared, found = _spared(), []
    for pid in psutil.pids():
        owner = Owner.of_process(pid) if pid not in spared else None
        if owner is not None:
            found.append((pid, owner))
    return found


def _processes() -> list[Leftover]:
    return [Leftover(what=_describe(pid), owner=owner, ownership=_ownership(owner), order=1,
                     remove=functools.partial(_kill, pid))
            for pid, owner in _labelled_processes()]


def _fault_filesystems() -> list[Leftover]:
    from chaos.disks._fusefs import mount_owners

    found = []
    for mount, held in mount_owners().items():
        # A mount whose server is gone is dead: nothing can serve it again.
        ownership = Ownership.ENDED if held.server is None else _ownership(held.owner)
        found.append(Leftover(what=f"fault filesystem {mount}", owner=held.owner, ownership=ownership, order=0,
                              remove=functools.partial(held.remove, mount)))
    return found


def _tmpfs() -> list[Leftover]:
    from chaos.disks._capped import capped_mounts, release_capped

    return [Leftover(what=f"tmpfs {point}", owner=owner, ownership=_ownership(owner), order=2,
                     remove=functools.partial(release_capped, point))
            for point, owner in capped_mounts().items()]


def _network() -> list[Leftover]:
    import shutil

    from chaos.net._lab import LabObjectKind, lab_objects

    if not shutil.which("ip"):
        return []
    # After processes and mounts: namespaces (what runs in them first), tables, links, bridges.
    order = {LabObjectKind.NAMESPACE: 3, LabObjectKind.TABLE: 4, LabObjectKind.LINK: 5, LabObjectKind.BRIDGE: 6}
    return [Leftover(what=str(obj), owner=obj.owner, ownership=_ownership(obj.owner), order=order[obj.kind],
                     remove=obj.delete) for obj in lab_objects()]


@dataclass(frozen=True, slots=True)
class Found:
    """Everything labelled as raychaos's, in the order it is removed in, and each kind of thing
    that could not be listed (not known clean: cleanup fails)."""

    leftovers: tuple[Leftover, ...]
    unlisted: tuple[str, ...]


def find_leftovers() -> Found:
    """Everything labelled as raychaos's on this machine now; a listing that fails is named."""
    found: list[Leftover] = []
    unlisted: list[str] = []
    for what, finder in (("fault filesystems", _fault_filesystems), ("labelled processes", _processes),
                         ("capped tmpfs mounts", _tmpfs), ("the network lab's objects", _network)):
        try:
            found += finder()
        except Exception as exc:  # noqa: BLE001 - the others are still listed; this one is reported
            unlisted.append(f"{what}: {exc}")
    return Found(tuple(sorted(found, key=lambda item: item.order)), tuple(unlisted))


def remove_leftovers(leftovers: Sequence[Leftover]) -> list[tuple[Leftover, BaseException | None]]:
    """Remove each leftover of an ended driver, whatever the others did: each one, and its
    failure (None when it was removed)."""
    done: list[tuple[Leftover, BaseException | None]] = []
    for item in leftovers:
        if item.ownership is not Ownership.ENDED:
            continue
        try:
            item.remove()
        except Exception as exc:  # noqa: BLE001 - every leftover is tried; each failure is reported
            done.append((item, exc))
        else:
            done.append((item, None))
    return done


def orphaned_processes() -> list[psutil.Process]:
    """Processes labelled with a driver that has ended, and reapers of drivers that have ended
    (each should end with its driver's things): the leak check lists them."""
    found = [pid for pid, owner in _labelled_processes() if not owner.alive()]
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if any(_REAPER_MODULE in arg for arg in cmdline[1:3]) and "--owner" in cmdline[:-1]:
            owner = Owner.parse(cmdline[cmdline.index("--owner") + 1])
            if owner is not None and not owner.alive():
                found.append(proc.pid)
    procs = []
    for pid in found:
        try:
            procs.append(psutil.Process(pid))
        except psutil.NoSuchProcess:
            continue
    return procs


def cleanup_machine(*, dry_run: bool, echo: Callable[..., object]) -> int:
    """What ``raychaos cleanup`` does: list everything labelled as raychaos's, remove what ended
    drivers left (not with ``dry_run``), and say what happened to each. Returns how many things
    could not be removed or listed (each one named)."""
    found = find_leftovers()
    for problem in found.unlisted:
        echo(f"could not list: {problem}", err=True)
    for item in found.leftovers:
        if item.ownership is not Ownership.ENDED:
            echo(f"left alone: {item}")
        elif dry_run:
            echo(f"would remove: {item}")
    failed = 0 if dry_run else _remove_and_say(found.leftovers, echo)
    return failed + len(found.unlisted)


def _remove_and_say(leftovers: tuple[Leftover, ...], echo: Callable[..., object]) -> int:
    failed = 0
    for item, error in remove_leftovers(leftovers):
        if error is None:
            echo(f"removed: {item}")
        else:
            failed += 1
            echo(f"could not remove: {item}: {error}", err=True)
    ended = sum(item.ownership is Ownership.ENDED for item in leftovers)
    echo(f"cleanup: {ended - failed} removed, {failed} could not be removed"
         + (" (named above)" if failed else "") + f", {len(leftovers) - ended} left alone")
    return failed
