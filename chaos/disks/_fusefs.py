"""A fault filesystem: a passthrough FUSE mount whose disk faults are switched at run time.

:func:`fault_filesystem` mounts a directory through a FUSE server of its own
(:mod:`chaos.disks._fuse_server`, libfuse 3 through mfusepy) and yields a :class:`FaultFS` to switch
its faults: latency per operation, a stall (operations block until healed, or until the
stall's own deadline), ``EIO``/``ENOSPC``/``EROFS`` on paths matching a glob, and a power
loss that drops every write no ``fsync`` covered (of the file for its bytes, of its directory
for creates, renames and unlinks), as LazyFS does. On the way out, whatever happened, it
heals, unmounts (lazily as a last resort) and stops the server; the server also unmounts
itself when its driver dies. :func:`fuse_mounts_left` finds mounts of ours left behind.

Paths in globs are the paths inside the mount, with a leading ``/``; ``*`` crosses ``/``
(``"/ckpt/*"`` is everything under ``/ckpt``).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Client
from typing import Any

import psutil

from chaos._errors import ChaosError, HangError, InvalidConfig, MissingExtra, TargetNotFound
from chaos._reclaim._owner import OWNER_ENV, Owner, me, remove_folder, undo_all
from chaos._reclaim._reaper import Claim, ClaimKind, claim, release
from chaos._wait import wait_until
from chaos.disks._fuse_faults import MAX_FAULT_SECONDS, MAX_STALL_SECONDS, OPS, SWITCHES

__all__ = ["FSNAME", "FaultFS", "FaultFSError", "FaultFSState", "MountOwner", "PowerLossResult", "connect",
           "fault_filesystem", "fuse_mounts_left", "fuse_servers_left", "mount_owners", "reclaim_mount", "unmount"]

#: The FUSE filesystem name and subtype of our mounts (``fuse.raychaos-faultfs`` in /proc/mounts).
FSNAME = "raychaos-faultfs"
_SERVER_MODULE = "chaos.disks._fuse_server"
_WORK_PREFIX = "rc-faultfs-"
_START_TIMEOUT = 15.0
_STOP_TIMEOUT = 15.0
_LAZY_STOP_TIMEOUT = 2.0
_ERRNOS = (errno.EIO, errno.ENOSPC, errno.EROFS)


class FaultFSError(ChaosError, OSError):
    """The fault filesystem's server refused a command or cannot be reached."""


@dataclass(frozen=True, slots=True)
class PowerLossResult:
    """What a power loss dropped: files put back to their synced bytes (the bytes cut beyond
    their synced size, the pages written back within it), name changes undone, open handles
    made dead (their I/O fails with ``EIO``), and the files those handles were open on (paths
    in the mount, each once: whose open files the power loss cut)."""

    files_reverted: int
    bytes_cut: int
    pages_restored: int
    names_undone: int
    handles_killed: int
    killed_paths: tuple[str, ...] = ()

    def cut_under(self, folder: str) -> int:
        """How many of the files whose open handles died lie under ``folder`` (a path in the
        mount, e.g. ``/replay``): the power loss reached that folder's writer."""
        prefix = "/" + folder.strip("/") + "/"
        return sum(p.startswith(prefix) for p in self.killed_paths)


@dataclass(frozen=True, slots=True)
class FaultFSState:
    """The faults on now and what they did: ``counts`` has ``op.<name>`` per operation served,
    ``delayed``, ``stalled`` and ``errno.<n>`` per operation they hit; ``unsynced_*`` is what a
    power loss would drop now."""

    latency: Mapping[str, float]
    stall: str | None
    errors: tuple[tuple[int, str, tuple[str, ...]], ...]
    counts: Mapping[str, int]
    unsynced_files: int
    unsynced_names: int
    pid: int
    backing: str

    def count(self, key: str) -> int:
        return int(self.counts.get(key, 0))


def _validate_seconds(name: str, value: object, *, most: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= most:
        raise InvalidConfig(f"`{name}` must be a number of seconds in [0, {most:g}], got {value!r}")
    return float(value)


def _validate_ops(ops: Iterable[str], where: str) -> list[str]:
    chosen = list(ops)
    bad = [op for op in chosen if op not in OPS]
    if bad or not chosen:
        raise InvalidConfig(f"{where}: operations {bad or chosen!r} are not ones a fault filesystem "
                            f"serves; use some of {', '.join(OPS)}")
    return chosen


@dataclass(frozen=True, slots=True)
class FaultFS:
    """A mounted fault filesystem: where it is and its switches (each call is one command)."""

    mount: str
    backing: str
    control: str
    pid: int

    def _send(self, request: dict[str, Any]) -> dict[str, Any]:
        try:
            with Client(self.control, family="AF_UNIX") as conn:
                conn.send_bytes(json.dumps(request).encode())
                reply: dict[str, Any] = json.loads(conn.recv_bytes())
        except (OSError, EOFError) as exc:
            raise FaultFSError(f"the fault filesystem at {self.mount} does not answer on {self.control} "
                               f"({exc!r}); its server (pid {self.pid}) has ended") from exc
        if "error" in reply:
            raise FaultFSError(f"the fault filesystem at {self.mount} refused {request!r}: {reply['error']}")
        return reply

    def set_latency(self, seconds: Mapping[str, float], *, until: float | None = None) -> None:
        """Delay each operation named in ``seconds`` (``{"fsync": 0.2}``) by that long; ``until``:
        seconds after which the server ends every latency by itself (None: until healed)."""
        chosen = _validate_ops(seconds, "set_latency")
        self._send({"op": "latency", "ops": {op: _validate_seconds(f"seconds[{op!r}]", seconds[op], most=60.0)
                                             for op in chosen}, **_bound(until)})

    def stall(self, *, glob: str = "*", seconds: float) -> None:
        """Block every operation on paths matching ``glob`` until :meth:`heal`, or ``seconds``."""
        bound = _validate_seconds("seconds", seconds, most=MAX_STALL_SECONDS)
        self._send({"op": "stall", "glob": glob, "seconds": bound})

    def fail(self, code: int, *, glob: str = "*", ops: Iterable[str] | None = None,
             until: float | None = None) -> None:
        """Fail operations on paths matching ``glob`` with errno ``code`` (``EIO``, ``ENOSPC``,
        ``EROFS``); ``ops`` defaults to what that error hits on a real disk; ``until``: seconds
        after which the server ends every errno rule by itself (None: until healed)."""
        if code not in _ERRNOS:
            raise InvalidConfig(f"errno {code!r} is not one a fault filesystem injects; use one of "
                                f"{', '.join(errno.errorcode[c] for c in _ERRNOS)}")
        chosen = None if ops is None else _validate_ops(ops, f"fail({errno.errorcode[code]})")
        self._send({"op": "fail", "errno": code, "glob": glob, "ops": chosen, **_bound(until)})

    def heal(self, *kinds: str) -> None:
        """Switch faults off (``"latency"``, ``"stall"``, ``"errors"``; all when none is named).

        Raises:
            InvalidConfig: a kind is none of those (nothing is switched off).
        """
        unknown = [kind for kind in kinds if kind not in SWITCHES]
        if unknown:
            raise InvalidConfig(f"cannot heal {unknown!r}: the fault filesystem's faults are {SWITCHES}; "
                                "name some of them, or none to heal all")
        self._send({"op": "heal", "kinds": list(kinds)})

    def power_loss(self) -> PowerLossResult:
        """Drop every write no fsync covered; handles open now fail with ``EIO`` from here on
        (their processes did not survive the power loss). Stop the writers first."""
        reply = self._send({"op": "power_loss"})
        return PowerLossResult(files_reverted=reply["files_reverted"], bytes_cut=reply["bytes_cut"],
                               pages_restored=reply["pages_restored"], names_undone=reply["names_undone"],
                               handles_killed=reply["handles_killed"], killed_paths=tuple(reply["killed_paths"]))

    def state(self) -> FaultFSState:
        reply = self._send({"op": "state"})
        errors = tuple((int(c), str(g), tuple(o)) for c, g, o in reply["errors"])
        return FaultFSState(latency=reply["latency"], stall=reply["stall"], errors=errors, counts=reply["counts"],
                            unsynced_files=reply["unsynced_files"], unsynced_names=reply["unsynced_names"],
                            pid=reply["pid"], backing=reply["backing"])


def _bound(until: float | None) -> dict[str, float]:
    """A command's own deadline, validated: the server ends the fault by itself after it."""
    if until is None:
        return {}
    return {"seconds": _validate_seconds("until", until, most=MAX_FAULT_SECONDS)}


def _check_prerequisites() -> None:
    import importlib.util

    if importlib.util.find_spec("mfusepy") is None:
        raise MissingExtra("the fault filesystem needs mfusepy, which is not installed; install it with "
                           "pip install 'raychaos[disk]'")
    if shutil.which("fusermount3") is None or not os.path.exists("/dev/fuse"):
        raise InvalidConfig("the fault filesystem needs FUSE 3: /dev/fuse and fusermount3 "
                            "(Debian: apt-get install fuse3)")


@contextlib.contextmanager
def fault_filesystem(backing: str | None = None, *, mount: str | None = None) -> Iterator[FaultFS]:
    """Mount ``backing`` (a fresh empty directory if None) at ``mount`` (a fresh one if None)
    through a fault filesystem; yield its switches; heal, unmount and stop it on the way out.

    Raises:
        MissingExtra: mfusepy is not installed.
        InvalidConfig: no FUSE 3 here, a missing ``backing``, or the mount did not come up.
    """
    _check_prerequisites()
    if backing is not None and not os.path.isdir(backing):
        raise InvalidConfig(f"`backing` {backing!r} is not a directory; give an existing one (or None)")
    work = tempfile.mkdtemp(prefix=_WORK_PREFIX, dir="/tmp")
    # Claimed before they are made: a driver killed from here on leaves them to its reaper.
    claims = [Claim(ClaimKind.FOLDER, (work,))]
    claim(claims[0])
    steps: list[Callable[[], object]] = []
    try:
        where = mount or _made(work, "mnt")
        claims.append(Claim(ClaimKind.FAULTFS, (os.path.realpath(where),)))
        claim(claims[-1])
        fs, proc = _start(backing or _made(work, "backing"), where, work)
        steps.append(lambda: _stop(fs, proc))
        yield fs
    finally:
        # Never walks a folder still mounted: if the unmount failed, the folder stays (and is named).
        undo_all(f"the teardown of the fault filesystem in {work}", [*steps, lambda: remove_folder(work)])
        for item in reversed(claims):  # not after a failed teardown: the reaper tries again at the end
            release(item)


def _made(work: str, name: str) -> str:
    path = os.path.join(work, name)
    os.mkdir(path)
    return path


def _start(backing: str, mount: str, work: str) -> tuple[FaultFS, subprocess.Popen[bytes]]:
    control = os.path.join(work, "control.sock")
    with open(os.path.join(work, "server.log"), "wb") as log:
        # Its own session: a Ctrl-C of the test reaches the test, whose finally unmounts; the
        # server's stdin stays open only while the driver lives.
        proc = subprocess.Popen(
            [sys.executable, "-m", _SERVER_MODULE, "--backing", backing, "--mount", mount, "--control", control,
             "--fsname", f"{FSNAME}@{control}", "--workdir", work],
            stdin=subprocess.PIPE, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, OWNER_ENV: str(me())})  # its driver, for `raychaos cleanup`
    fs = FaultFS(mount=os.path.realpath(mount), backing=os.path.realpath(backing), control=control, pid=proc.pid)
    try:
        wait_until(lambda: _up(fs, proc, work), timeout=_START_TIMEOUT, what=f"the fault filesystem at {mount}")
    except (HangError, InvalidConfig):
        _stop(fs, proc)
        raise
    return fs, proc


def _up(fs: FaultFS, proc: subprocess.Popen[bytes], work: str) -> bool:
    if proc.poll() is not None:
        with open(os.path.join(work, "server.log"), encoding="utf-8", errors="replace") as log:
            tail = log.read()[-2000:]
        raise InvalidConfig(f"the fault filesystem's server exited with {proc.returncode} before "
                            f"{fs.mount} was mounted:\n{tail}")
    if fs.mount not in fuse_mounts_left():
        return False
    fs.state()
    return True


def _stop(fs: FaultFS, proc: subprocess.Popen[bytes]) -> None:
    """Heal (so nothing stays blocked), unmount (lazily if busy), end the server: bounded. A
    failed unmount is tried again once the server has ended, and then reported.

    Raises:
        TeardownFailed: the server did not end, or the mount is still there (named, with the fix).
    """
    with contextlib.suppress(FaultFSError):
        fs.heal()
    lazy = False
    with contextlib.suppress(FaultFSError):  # tried again below, once the server has ended
        lazy = fs.mount in fuse_mounts_left() and unmount(fs.mount)
    undo_all(f"the teardown of the fault filesystem at {fs.mount}",
             [lambda: _end_server(proc, lazy=lazy), lambda: _unmount_left(fs.mount)])


def _end_server(proc: subprocess.Popen[bytes], *, lazy: bool) -> None:
    """Close the server's standard input (it unmounts and ends), wait for it, kill it if it does not end."""
    if proc.stdin is not None:
        with contextlib.suppress(OSError):
            proc.stdin.close()
    try:
        # Lazily detached, the server serves on while a file there is open (a test's dead
        # handle kept it 15 s): nothing can reach the mount any more, so it is not waited for.
        proc.wait(_LAZY_STOP_TIMEOUT if lazy else _STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(_STOP_TIMEOUT)


def _unmount_left(mount: str) -> None:
    """Unmount ``mount`` if it is still mounted (a server that died without unmounting, or an
    unmount that failed before).

    Raises:
        FaultFSError: it is still mounted (see :func:`unmount`).
    """
    if mount in fuse_mounts_left():
        unmount(mount)


def reclaim_mount(mount: str, *, timeout: float = _STOP_TIMEOUT) -> None:
    """For a driver that ended without its teardown (its reaper calls this): the server heals
    and unmounts by itself when its standard input closes; wait for that (not when the server
    is gone too), then unmount what is left.

    Raises:
        FaultFSError: it is still mounted (see :func:`unmount`).
    """
    def settled() -> bool:
        held = mount_owners().get(mount)
        return held is None or held.server is None

    with contextlib.suppress(HangError):
        wait_until(settled, timeout=timeout, interval=0.1, what=f"the fault filesystem at {mount} unmounted")
    _unmount_left(mount)


def unmount(mount: str) -> bool:
    """``fusermount3 -u``, then the lazy ``-u -z`` (a process still holds a file there); True
    when only the lazy one did it.

    Raises:
        FaultFSError: neither did (fusermount3's reasons in the message, and the fix).
    """
    reasons = []
    for flags in (["-u"], ["-u", "-z"]):
        done = subprocess.run(["fusermount3", *flags, mount], capture_output=True, text=True,
                              timeout=_STOP_TIMEOUT, check=False)
        if done.returncode == 0:
            return len(flags) == 2
        reasons.append(done.stderr.strip() or f"exit {done.returncode}")
    raise FaultFSError(f"the fault filesystem at {mount} is still mounted: `fusermount3 -u` failed ({reasons[0]}) "
                       f"and so did `-u -z` ({reasons[1]}); unmount it with `fusermount3 -u -z {mount}` "
                       f"(or, as root, `umount -l {mount}`), then delete its folder")


def _unescape(field: str) -> str:
    """A /proc/mounts field: spaces, tabs, newlines and backslashes come octal-escaped."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def _our_mounts() -> dict[str, str]:
    """Every fault filesystem mounted on this machine now: mount point → its fsname."""
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        rows = [line.split() for line in mounts]
    return {_unescape(row[1]): _unescape(row[0]) for row in rows if len(row) > 2 and row[2] == f"fuse.{FSNAME}"}


def fuse_mounts_left() -> list[str]:
    """The mount points of every fault filesystem mounted on this machine now (leak check)."""
    return sorted(_our_mounts())


def connect(mount: str) -> FaultFS:
    """The switches of the fault filesystem mounted at ``mount`` (by any process here).

    Raises:
        TargetNotFound: no fault filesystem is mounted there.
    """
    real = os.path.realpath(mount)
    fsname = _our_mounts().get(real, "")
    _, _, control = fsname.partition("@")
    if not control:
        raise TargetNotFound(f"no fault filesystem is mounted at {mount!r} (mounted: {fuse_mounts_left()}); "
                             "mount one with chaos.cluster.fault_filesystem, or give its mount point")
    state = FaultFS(mount=real, backing="", control=control, pid=0).state()
    return FaultFS(mount=real, backing=state.backing, control=control, pid=state.pid)


@dataclass(frozen=True, slots=True)
class MountOwner:
    """Who holds a fault filesystem mounted: its server (None when it is gone and the mount is
    dead), the driver that started the server (None when the server carries no label), and
    the folder :func:`fault_filesystem` made for it (its control socket's)."""

    server: int | None
    owner: Owner | None
    folder: str

    def remove(self, mount: str) -> None:
        """Unmount it, then delete its folder (never while something is mounted in it).

        Raises:
            FaultFSError: it is still mounted.
            StillMounted: something else is mounted in its folder.
        """
        _unmount_left(mount)
        if os.path.basename(self.folder).startswith(_WORK_PREFIX):  # ours, not a folder the user gave
            remove_folder(self.folder)


def mount_owners() -> dict[str, MountOwner]:
    """Every fault filesystem mounted on this machine now, by mount point, and who holds it."""
    servers: dict[str, int] = {}
    for proc in fuse_servers_left():
        cmdline = proc.info["cmdline"] or []
        if "--control" in cmdline[:-1]:
            servers[cmdline[cmdline.index("--control") + 1]] = proc.pid
    found = {}
    for mount, fsname in _our_mounts().items():
        control = fsname.partition("@")[2]
        server = servers.get(control)
        found[mount] = MountOwner(server, None if server is None else Owner.of_process(server),
                                  os.path.dirname(control))
    return found


def fuse_servers_left() -> list[psutil.Process]:
    """Fault filesystem servers running on this machine now (leak check)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info["cmdline"] or []
        if _SERVER_MODULE in cmdline:
            found.append(proc)
    return found
