"""What every teardown of raychaos shares: the owner label put on what it makes on the machine,
undoing several things with every failure reported, and removing a folder only when nothing is
mounted in it.

The owner label (``<pid>:<start>``, the driver's pid and its start time in clock ticks after
boot, from ``/proc/<pid>/stat``) tells a live driver's things from a dead one's even once the
pid is reused: ``raychaos cleanup`` (:mod:`chaos._reclaim._cleanup`) removes only the things of owners
that have ended. Processes carry it in their environment (:data:`OWNER_ENV`), links in their
alias, a tmpfs in its source name.
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from chaos._errors import ChaosError

__all__ = ["OWNER_ENV", "Owner", "StillMounted", "TeardownFailed", "kill_all", "me", "mounts_in", "remove_folder",
           "undo_all"]

#: The environment variable that labels a process with the driver it belongs to.
OWNER_ENV = "RAYCHAOS_OWNER"


class TeardownFailed(ChaosError, RuntimeError):
    """A teardown of several steps could not do some of them. It did every step it could, and
    ``failures`` holds each failure in order (the message lists them, one per line)."""

    def __init__(self, what: str, failures: Sequence[BaseException]) -> None:
        self.what, self.failures = what, tuple(failures)
        lines = "\n".join(f"  - {failure}" for failure in self.failures)
        super().__init__(f"{what}: {len(self.failures)} step(s) failed, every other step was done:\n{lines}")

    def __reduce__(self) -> tuple[Any, ...]:  # pickled whole: Ray or multiprocessing may carry it
        return (TeardownFailed, (self.what, self.failures))


class StillMounted(ChaosError, OSError):
    """A folder was not deleted because a filesystem is still mounted in it; the message names
    the mount and how to unmount it."""


def undo_all(what: str, steps: Iterable[Callable[[], object]]) -> None:
    """Run every step, whatever the ones before did, then raise each failure at once (a step
    that raised :class:`TeardownFailed` adds each of its own).

    Raises:
        TeardownFailed: one or more steps raised (each one is in it).
    """
    failures: list[BaseException] = []
    for step in steps:
        try:
            step()
        except TeardownFailed as exc:  # a step of several steps: its failures, one by one
            failures.extend(exc.failures)
        except Exception as exc:  # noqa: BLE001 - every step runs; each failure is reported
            failures.append(exc)
    if failures:
        raise TeardownFailed(what, failures)


def _start_ticks(pid: int) -> int | None:
    """When ``pid`` started (clock ticks after boot); None if it is gone or a zombie (ended)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):  # gone (or going) while read
        return None
    # After the name: state is field 3 of stat, starttime field 22.
    return None if fields[0] in ("Z", "X") else int(fields[19])


def processes_naming(folder: str) -> list[int]:
    """The processes (this one aside) whose command line names ``folder`` or that hold a file
    open under it: an embedded cluster's processes name its temporary root (``--temp-dir``,
    ``--session-dir``), and those that retitle themselves (``ray::DashboardAgent``) write
    their logs there."""
    import psutil

    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        pid = int(proc.info["pid"])
        if pid != os.getpid() and (folder in " ".join(proc.info["cmdline"] or ()) or _holds_under(pid, folder)):
            found.append(pid)
    return found


def _holds_under(pid: int, folder: str) -> bool:
    """Whether ``pid`` has a descriptor open on a path under ``folder``."""
    prefix = folder.rstrip("/") + "/"
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:  # gone, or not ours to read
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(prefix):
                return True
        except OSError:
            continue
    return False


def kill_all(pids: Iterable[int], *, timeout: float = 10.0) -> list[int]:
    """SIGCONT and SIGKILL each process (a paused one must not linger), and wait until each is
    gone or a zombie (ended: an orphan's zombie lasts until init reaps it, which here took a
    second and more). Returns the pids still running after ``timeout``."""
    sent = []
    for pid in pids:
        try:
            os.kill(pid, signal.SIGCONT)
            os.kill(pid, signal.SIGKILL)
            sent.append(pid)
        except ProcessLookupError:
            continue
    deadline = time.monotonic() + timeout
    while (left := [pid for pid in sent if _start_ticks(pid) is not None]) and time.monotonic() < deadline:
        time.sleep(0.02)  # polling a condition under a deadline
    return left


@dataclass(frozen=True, slots=True)
class Owner:
    """The driver process that made something: its pid and when it started."""

    pid: int
    start: int

    def __str__(self) -> str:
        return f"{self.pid}:{self.start}"

    @classmethod
    def parse(cls, text: str) -> Owner | None:
        """The owner written as ``<pid>:<start>``; None for anything else."""
        pid, _, start = text.strip().partition(":")
        return cls(int(pid), int(start)) if pid.isdigit() and start.isdigit() else None

    def alive(self) -> bool:
        """The same process still runs (a reused pid started later, so it does not count)."""
        return _start_ticks(self.pid) == self.start

    @classmethod
    def of_process(cls, pid: int) -> Owner | None:
        """The owner label in process ``pid``'s environment; None without one (or if unreadable)."""
        try:
            with open(f"/proc/{pid}/environ", "rb") as environ:
                variables = environ.read().split(b"\0")
        except OSError:
            return None
        prefix = f"{OWNER_ENV}=".encode()
        return next((cls.parse(v[len(prefix):].decode(errors="replace")) for v in variables
                     if v.startswith(prefix)), None)


_ME: dict[int, Owner] = {}


def me() -> Owner:
    """This process, as the owner of what it makes (a forked child is an owner of its own)."""
    pid = os.getpid()
    if pid not in _ME:
        ticks = _start_ticks(pid)
        assert ticks is not None  # this process runs
        _ME[pid] = Owner(pid, ticks)
    return _ME[pid]


def _unescape(field: str) -> str:
    """A /proc/mounts field: spaces, tabs, newlines and backslashes come octal-escaped."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def mounts_in(folder: str) -> list[str]:
    """The mount points at ``folder`` or anywhere under it (each one a filesystem of its own)."""
    real = os.path.realpath(folder).rstrip("/") or "/"
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        points = [_unescape(line.split()[1]) for line in mounts if len(line.split()) > 2]
    return [p for p in points if p == real or p.startswith(real.rstrip("/") + "/")]


def remove_folder(folder: str) -> None:
    """Delete ``folder`` and what is in it, unless a filesystem is mounted there or under it:
    walking into a mount would delete what that filesystem holds (through a fault filesystem,
    the files behind it). Nothing when it is gone already.

    Raises:
        StillMounted: something is mounted in it (named, with the fix); nothing was deleted.
        OSError: a file could not be deleted.
    """
    if not os.path.lexists(folder):
        return
    mounted = mounts_in(folder)
    if mounted:
        raise StillMounted(f"did not delete {folder}: {', '.join(mounted)} is still mounted in it; unmount it "
                         f"(`umount -l {mounted[0]}`) and delete the folder by hand")
    shutil.rmtree(folder, onerror=_gone_is_fine)


def _gone_is_fine(func: Callable[..., object], path: str,
                  exc_info: tuple[type[BaseException], BaseException, object]) -> None:
    """What another teardown deleted first (a fault filesystem's server deletes its own folder
    when its driver dies) is no failure; anything else is."""
    if not isinstance(exc_info[1], FileNotFoundError):
        raise exc_info[1]
