"""The fault filesystem's server: a passthrough FUSE mount in a process of its own.

``python -m chaos.disks._fuse_server --backing DIR --mount MNT --control SOCK``: mounts ``MNT`` as a
passthrough of ``DIR`` (libfuse 3 through mfusepy), serves the faults of
:class:`chaos.disks._fuse_faults.FaultState` and the power-loss model of
:class:`chaos.disks._fuse_model.Volatile`, and takes commands (JSON) on the Unix socket ``SOCK``.

Its own process, never a thread of the test: a thread touching the mount while it holds the
GIL (a page fault on a mapped file, a small ``read``) would wait for a server that needs the
GIL to answer. When its standard input closes (the driver exited or was killed) the server
heals everything and unmounts itself.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection, Listener
from typing import Any

import mfusepy

from chaos.disks._fuse_faults import DEFAULT_ERROR_OPS, OPS, SWITCHES, ErrorRule, FaultState
from chaos.disks._fuse_model import GRAVEYARD, Volatile

FSNAME = "raychaos-faultfs"
_HIDDEN = "/" + GRAVEYARD
_STAT_FIELDS = ("st_mode", "st_ino", "st_dev", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks",
                "st_blksize")


def _fail(code: int) -> mfusepy.FuseOSError:
    return mfusepy.FuseOSError(code)


#: The file handle of the call being served, for the calls mfusepy passes no handle to.
_CALL = threading.local()


def _call_fh() -> int | None:
    fh: int | None = getattr(_CALL, "fh", None)
    return fh


def _with_fh(name: str) -> Any:
    def call(self: Any, *args: Any) -> Any:
        fip = args[-1]
        _CALL.fh = fip.contents.fh if fip else None
        try:
            return getattr(mfusepy.FUSE, name)(self, *args)
        finally:
            _CALL.fh = None
    return call


class _Fuse(mfusepy.FUSE):  # type: ignore[misc]
    """mfusepy's FUSE, keeping the handle of ftruncate, fchmod, fchown and futimens: with
    ``nullpath_ok`` libfuse gives no path with a handle, and mfusepy passes the handle on only
    to the calls that read or write."""

    truncate_fuse_3 = _with_fh("truncate_fuse_3")
    chmod_fuse_3 = _with_fh("chmod_fuse_3")
    chown_fuse_3 = _with_fh("chown_fuse_3")
    utimens_fuse_3 = _with_fh("utimens_fuse_3")


class FaultOps(mfusepy.Operations):  # type: ignore[misc]
    """Passthrough operations on ``backing``, each through the faults, changes logged for a power loss."""

    use_ns = True

    def __init__(self, backing: str, faults: FaultState) -> None:
        self.root = os.path.realpath(backing)
        self.faults, self.volatile = faults, Volatile(self.root)
        # The model and the change it logs happen as one. Not named `lock`: mfusepy would serve
        # it as FUSE's POSIX-lock operation; without one the kernel keeps locks itself.
        self._mutex = threading.Lock()
        self.paths: dict[int, str] = {}  # open file handles: the path each was opened by
        self.dead: set[int] = set()  # handles opened before a power loss

    # -- helpers ---------------------------------------------------------------------------

    def _real(self, path: str) -> str:
        if path == _HIDDEN or path.startswith(_HIDDEN + "/"):
            raise _fail(errno.ENOENT)
        return self.root + path

    def _split(self, path: str) -> tuple[str, str]:
        parent, name = os.path.split(self._real(path))
        return parent, name

    def _gate(self, op: str, *paths: str, writing: bool = False) -> None:
        code = self.faults.gate(op, *paths, writing=writing)
        if code:
            raise _fail(code)

    def _handle(self, op: str, path: str | None, fh: int) -> None:
        self._gate(op, path or self.paths.get(fh, ""))
        if fh in self.dead:
            raise _fail(errno.EIO)  # opened before a power loss: that process is gone

    # -- set-up and attributes -------------------------------------------------------------

    def init_with_config(self, conn: Any, config: Any) -> None:
        if config is not None:
            # No kernel caching of names or attributes: a power loss changes both under it.
            config.entry_timeout = config.attr_timeout = config.negative_timeout = 0.0
            config.use_ino, config.hard_remove, config.nullpath_ok = 1, 1, 1
            config.kernel_cache = config.auto_cache = 0

    def getattr(self, path: str | None, fh: int | None = None) -> dict[str, Any]:
        if path is not None:
            self._gate("getattr", path)
        st = os.fstat(fh) if fh is not None else os.lstat(self._real(path or "/"))
        attrs: dict[str, Any] = {k: getattr(st, k) for k in _STAT_FIELDS}
        attrs.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
        return attrs

    def access(self, path: str, amode: int) -> int:
        if not os.access(self._real(path), amode):
            raise _fail(errno.EACCES)
        return 0

    def readlink(self, path: str) -> str:
        return os.readlink(self._real(path))

    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self._real(path))
        return {k: getattr(st, k) for k in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail",
                                            "f_files", "f_ffree", "f_favail", "f_flag", "f_namemax")}

    def _target(self, path: str | None) -> int | str:
        """The open handle of this call when libfuse gave no path, else the backing path."""
        fh = _call_fh()
        return fh if path is None and fh is not None else self._real(path or "/")

    def chmod(self, path: str | None, mode: int) -> int:
        os.chmod(self._target(path), mode)
        return 0

    def chown(self, path: str | None, uid: int, gid: int) -> int:
        target = self._target(path)
        if isinstance(target, int):
            os.fchown(target, uid, gid)
        else:
            os.lchown(target, uid, gid)
        return 0

    def utimens(self, path: str | None, times: tuple[int, int] | None = None) -> int:
        target = self._target(path)
        follow = isinstance(target, int)  # a handle has no link to not follow
        if times is None:
            os.utime(target, follow_symlinks=follow)
        else:
            os.utime(target, ns=times, follow_symlinks=follow)
        return 0

    # -- directories -----------------------------------------------------------------------

    def opendir(self, path: str) -> int:
        self._gate("readdir", path)
        return os.open(self._real(path), os.O_RDONLY | os.O_DIRECTORY)

    def readdir(self, path: str | None, fh: int) -> list[Any]:
        os.lseek(fh, 0, os.SEEK_SET)  # libfuse may list one handle twice
        at_root = os.path.samestat(os.fstat(fh), os.stat(self.root))
        # With use_ino the kernel takes each entry's inode from here; glibc hides inode 0.
        with os.scandir(fh) as entries:
            found = [(e.name, {"st_ino": e.inode(), "st_mode": e.stat(follow_symlinks=False).st_mode}, 0)
                     for e in entries if not (at_root and e.name == GRAVEYARD)]
        return [".", "..", *found]

    def releasedir(self, path: str | None, fh: int) -> int:
        os.close(fh)
        return 0

    def fsyncdir(self, path: str | None, datasync: int, fh: int) -> int:
        self._gate("fsync", path or "/")
        os.fsync(fh)
        with self._mutex:
            self.volatile.dir_synced(fh)
        return 0

    def mkdir(self, path: str, mode: int) -> int:
        self._gate("mkdir", path)
        parent, name = self._split(path)
        with self._mutex:
            os.mkdir(self._real(path), mode)
            self.volatile.added(parent, name)
        return 0

    def rmdir(self, path: str) -> int:
        self._gate("rmdir", path)
        if os.listdir(self._real(path)):
            raise _fail(errno.ENOTEMPTY)
        with self._mutex:
            self.volatile.remove(*self._split(path))
        return 0

    def unlink(self, path: str) -> int:
        self._gate("unlink", path)
        with self._mutex:
            self.volatile.remove(*self._split(path))
        return 0

    def rename(self, old: str, new: str) -> int:
        self._gate("rename", old, new)
        with self._mutex:
            self.volatile.rename(self._split(old), self._split(new))
        return 0

    def _add(self, op: str, path: str, make: Callable[[str], None]) -> int:
        self._gate(op, path)
        parent, name = self._split(path)
        with self._mutex:
            make(self._real(path))
            self.volatile.added(parent, name)
        return 0

    def symlink(self, target: str, source: str) -> int:
        return self._add("create", target, lambda real: os.symlink(source, real))

    def link(self, target: str, source: str) -> int:
        return self._add("create", target, lambda real: os.link(self._real(source), real))

    def mknod(self, path: str, mode: int, dev: int) -> int:
        return self._add("create", path, lambda real: os.mknod(real, mode, dev))

    # -- files -----------------------------------------------------------------------------

    def create(self, path: str, mode: int, flags: int) -> int:
        self._gate("create", path)
        parent, name = self._split(path)
        with self._mutex:
            try:
                fd = os.open(self._real(path), (flags & ~os.O_APPEND) | os.O_CREAT | os.O_EXCL, mode)
            except FileExistsError:
                if flags & os.O_EXCL:
                    raise
                fd = -1  # another creator won the race since the kernel's lookup: open theirs
            if fd >= 0:
                self.volatile.created(fd)
                self.volatile.added(parent, name)
        if fd < 0:
            return self.open(path, flags & ~os.O_CREAT)
        self.paths[fd] = path
        return fd

    def open(self, path: str, flags: int) -> int:
        self._gate("open", path, writing=flags & os.O_ACCMODE != os.O_RDONLY)
        fd = os.open(self._real(path), flags & ~(os.O_APPEND | os.O_TRUNC | os.O_CREAT | os.O_EXCL))
        if flags & os.O_TRUNC:
            with self._mutex:
                self.volatile.before_truncate(fd, 0)
                os.ftruncate(fd, 0)
        self.paths[fd] = path
        return fd

    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        self._handle("read", path, fh)
        return os.pread(fh, size, offset)

    def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
        self._handle("write", path, fh)
        with self._mutex:
            self.volatile.before_write(fh, offset, len(data))
            return os.pwrite(fh, data, offset)

    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        fh = fh if fh is not None else _call_fh()
        if fh is not None:
            self._handle("truncate", path, fh)
            fd = fh
        else:
            self._gate("truncate", path or "")
            fd = os.open(self._real(path or ""), os.O_WRONLY)
        try:
            with self._mutex:
                self.volatile.before_truncate(fd, length)
                os.ftruncate(fd, length)
        finally:
            if fd != fh:
                os.close(fd)
        return 0

    def fsync(self, path: str | None, datasync: int, fh: int) -> int:
        self._handle("fsync", path, fh)
        (os.fdatasync if datasync else os.fsync)(fh)
        with self._mutex:
            self.volatile.synced(fh)
        return 0

    def release(self, path: str | None, fh: int) -> int:
        self.paths.pop(fh, None)
        self.dead.discard(fh)
        os.close(fh)
        return 0

    # -- commands --------------------------------------------------------------------------

    def power_loss(self) -> dict[str, Any]:
        with self._mutex:
            report = self.volatile.power_loss()
            self.dead.update(self.paths)
        return {"files_reverted": report.files_reverted, "bytes_cut": report.bytes_cut,
                "pages_restored": report.pages_restored,
                "names_undone": report.names_undone, "handles_killed": len(self.paths),
                "killed_paths": sorted(set(self.paths.values()))}

    def state(self) -> dict[str, Any]:
        with self._mutex:
            files, names = self.volatile.unsynced()
        return {**self.faults.snapshot(), "unsynced_files": files, "unsynced_names": names,
                "pid": os.getpid(), "backing": self.root}


def command(ops: FaultOps, request: dict[str, Any]) -> dict[str, Any]:
    """Run one control command; the reply is JSON too."""
    kind, faults = request.get("op"), ops.faults
    if kind == "latency":
        bad = sorted(set(request["ops"]) - set(OPS))
        if bad:
            return {"error": f"unknown operations {bad}; use some of {list(OPS)}"}
        faults.set_latency({k: float(v) for k, v in request["ops"].items()}, until=_until(request))
    elif kind == "stall":
        faults.set_stall(str(request["glob"]), float(request["seconds"]))
    elif kind == "fail":
        code = int(request["errno"])
        chosen = request.get("ops") or sorted(DEFAULT_ERROR_OPS.get(code, frozenset(OPS)))
        faults.add_error(ErrorRule(code, str(request["glob"]), frozenset(chosen)), until=_until(request))
    elif kind == "heal":
        faults.heal(frozenset(request.get("kinds") or SWITCHES))
    elif kind == "power_loss":
        return {"ok": True, **ops.power_loss()}
    elif kind not in ("state", "ping"):
        return {"error": f"unknown command {kind!r}"}
    return {"ok": True, **ops.state()}


def _until(request: dict[str, Any]) -> float | None:
    """A command's own deadline in seconds (absent: the fault stays on until healed)."""
    seconds = request.get("seconds")
    return None if seconds is None else float(seconds)


def _serve_one(ops: FaultOps, conn: Connection) -> None:
    with conn:
        while True:
            try:
                request = json.loads(conn.recv_bytes())
            except (EOFError, OSError):
                return
            try:
                reply = command(ops, request)
            except (KeyError, TypeError, ValueError, OSError) as exc:
                reply = {"error": f"{type(exc).__name__}: {exc}"}
            conn.send_bytes(json.dumps(reply).encode())


def _serve_control(ops: FaultOps, listener: Listener) -> None:
    while True:
        try:
            conn = listener.accept()
        except OSError:
            return  # the listener was closed: the server is ending
        threading.Thread(target=_serve_one, args=(ops, conn), daemon=True).start()


def _watch_parent(ops: FaultOps, mount: str, orphaned: threading.Event) -> None:
    """Standard input closes when the driver ends, however it ended: heal, then unmount."""
    with contextlib.suppress(OSError):  # raw reads: a buffered stdin would hold a lock at exit
        while os.read(0, 4096):
            pass
    orphaned.set()
    ops.faults.heal(frozenset(SWITCHES))
    for flags in (["-u"], ["-u", "-z"]):
        if subprocess.run(["fusermount3", *flags, mount], capture_output=True, timeout=30,
                          check=False).returncode == 0:
            return


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.disks._fuse_server")
    for name in ("--backing", "--mount", "--control"):
        parser.add_argument(name, required=True)
    parser.add_argument("--fsname", default=FSNAME)
    parser.add_argument("--workdir", help="the driver's folder for this mount: removed if the driver dies")
    args = parser.parse_args(argv)
    ops = FaultOps(args.backing, FaultState())
    listener = Listener(args.control, family="AF_UNIX")
    os.chmod(args.control, 0o600)
    threading.Thread(target=_serve_control, args=(ops, listener), daemon=True).start()
    orphaned = threading.Event()
    threading.Thread(target=_watch_parent, args=(ops, args.mount, orphaned), daemon=True).start()
    try:
        _Fuse(ops, args.mount, foreground=True, fsname=args.fsname, subtype=FSNAME)
    finally:
        listener.close()
        ops.volatile.close()
        if orphaned.is_set() and args.workdir:  # the driver's finally never ran: clean up for it
            shutil.rmtree(args.workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
