"""Standalone reproduction: a restore of a spilled object that fails part-way leaves the object
unreadable after the disk heals (Ray 2.60).

A one-node Ray with an 80 MiB object store spills objects of 8 MiB to a directory served by a
small passthrough FUSE filesystem this script mounts (Ray alone cannot make a directory fail on
demand). Each read of that disk is made slow, so a restore is under way, and then every
operation on the spilled files answers ``EIO`` for 3 s. Once healed, every object should read
back: Ray retries a failed restore, and the file is whole.

What happens: the restore worker's ``put_file_like_object`` creates the object in the object
store, then reads the file into it; the read raises ``OSError(EIO)`` and the created object is
neither sealed nor aborted. Every later restore of that object finds it "already exists" and
returns, so ``ray.get`` of it waits forever (here: its 30 s bound, long after the heal), while
every other object reads back at once. With ``--open-only`` the ``EIO`` answers only opens (a
restore already reading finishes) and every object reads back: the control.

Ray's issues know the family (#24248 "Restore worker silently fails and the program is stuck",
#14921 "Failing objects that are failed to be restored many times"), not this path.

Needs Linux, Ray, FUSE 3 (``fusermount3``) and ``mfusepy`` (``pip install mfusepy``), which the
script checks for first. Each fault is confirmed through the mount before the reads go on.

    python findings/spill_restore_interrupted.py [ROUNDS] [--open-only]
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from collections.abc import Iterator
from typing import Any

MIB = 1 << 20
N, SIZE = 16, 8 * MIB
#: Seconds after the heal an object may take to read back before it counts as lost.
BOUND = 30.0
SPILLED = "/ray_spilled_objects_*"  # the files Ray spills to, under the spilling directory
PROBE = "/ray_spilled_objects_probe"  # a file the faults match too, to confirm each through the mount

# -- the filesystem: a passthrough whose faults a JSON file sets ----------------------------------


def serve(backing: str, mount: str, control: str) -> None:
    """Serve ``backing`` at ``mount`` in the foreground until unmounted. Before each operation,
    the faults in ``control`` (read again when it changes): ``{"latency": {op: seconds},
    "fail": {"code": errno, "glob": pattern, "ops": [op, ...] or null}}``."""
    import mfusepy

    class Faulty(mfusepy.Operations):  # type: ignore[misc]
        use_ns = True

        def __init__(self) -> None:
            self.seen, self.state = -1, dict[str, Any]()

        def _gate(self, op: str, path: str) -> None:
            if (changed := os.stat(control).st_mtime_ns) != self.seen:
                with open(control, encoding="utf-8") as text:
                    self.seen, self.state = changed, json.load(text)
            time.sleep(self.state.get("latency", {}).get(op, 0.0))
            fail = self.state.get("fail")
            if fail and fnmatch.fnmatchcase(path, fail["glob"]) and (fail["ops"] is None or op in fail["ops"]):
                raise mfusepy.FuseOSError(fail["code"])

        def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
            self._gate("getattr", path)
            st = os.lstat(backing + path)
            attrs = {k: getattr(st, k) for k in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size")}
            return {**attrs, "st_atime": st.st_atime_ns, "st_mtime": st.st_mtime_ns, "st_ctime": st.st_ctime_ns}

        def statfs(self, path: str) -> dict[str, int]:  # Ray refuses to spill to a disk reporting no room
            st = os.statvfs(backing)
            return {k: getattr(st, k) for k in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail",
                                                "f_files", "f_ffree", "f_favail", "f_flag", "f_namemax")}

        def readdir(self, path: str, fh: int) -> list[str]:
            return [".", "..", *os.listdir(backing + path)]

        def mkdir(self, path: str, mode: int) -> int:
            os.mkdir(backing + path, mode)
            return 0

        def unlink(self, path: str) -> int:
            self._gate("unlink", path)
            os.unlink(backing + path)
            return 0

        def create(self, path: str, mode: int, fi: Any = None) -> int:
            self._gate("create", path)
            return os.open(backing + path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, mode)

        def open(self, path: str, flags: int) -> int:
            self._gate("open", path)
            return os.open(backing + path, flags)

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            self._gate("read", path)
            return os.pread(fh, size, offset)

        def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
            self._gate("write", path)
            return os.pwrite(fh, data, offset)

        def truncate(self, path: str, length: int, fh: int | None = None) -> int:
            os.truncate(fh if fh is not None else backing + path, length)
            return 0

        def fsync(self, path: str, datasync: int, fh: int) -> int:
            os.fsync(fh)
            return 0

        def release(self, path: str, fh: int) -> int:
            os.close(fh)
            return 0

    def unmount_when_orphaned() -> None:  # the parent holds our stdin open: EOF is its end
        sys.stdin.buffer.read()
        subprocess.run(["fusermount3", "-u", "-z", mount], timeout=60, check=False)

    threading.Thread(target=unmount_when_orphaned, daemon=True).start()
    mfusepy.FUSE(Faulty(), mount, foreground=True, fsname="spill-finding")


class Disk:
    """The mounted filesystem and its faults, each confirmed through the mount."""

    def __init__(self, mount: str, control: str) -> None:
        self.mount, self.control = mount, control

    def _set(self, state: dict[str, Any]) -> None:
        with open(self.control + ".new", "w", encoding="utf-8") as out:
            json.dump(state, out)
        os.replace(self.control + ".new", self.control)

    def _probe(self) -> tuple[float, int]:
        """(seconds, errno or 0) of one read of the probe file through the mount."""
        start = time.monotonic()
        try:
            with open(self.mount + PROBE, "rb", buffering=0) as probe:
                probe.read(1)
            return time.monotonic() - start, 0
        except OSError as exc:
            return time.monotonic() - start, exc.errno or -1

    def slow_reads(self, seconds: float) -> None:
        self._set({"latency": {"read": seconds}})
        took, code = self._probe()
        assert code == 0 and took >= seconds, f"reads not slowed: {took:.3f} s, errno {code}"

    def fail(self, code: int, ops: list[str] | None, *, keep_latency: float) -> None:
        self._set({"latency": {"read": keep_latency}, "fail": {"code": code, "glob": SPILLED, "ops": ops}})
        assert self._probe()[1] == code, "the fault did not answer through the mount"

    def heal(self, latency: float) -> None:
        """Healed once a read answers in under half the latency (of up to 5: a loaded machine's
        first may be slow for its own reasons)."""
        self._set({})
        probes = [self._probe() for _ in range(5)]
        assert any(code == 0 and took < latency / 2 for took, code in probes), f"not healed: {probes}"


@contextlib.contextmanager
def faulty_disk() -> Iterator[Disk]:
    """A fresh backing folder served at a fresh mount by a child process; all removed after."""
    root = tempfile.mkdtemp(prefix="spill-fuse-")
    backing, mount, control = (os.path.join(root, name) for name in ("backing", "mount", "control.json"))
    for folder in (backing, mount):
        os.mkdir(folder)
    with open(backing + PROBE, "wb") as probe, open(control, "w", encoding="utf-8") as faults:
        probe.write(b"p")
        json.dump({}, faults)
    server = subprocess.Popen([sys.executable, __file__, "--serve", backing, mount, control], stdin=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not os.path.ismount(mount):
            assert server.poll() is None and time.monotonic() < deadline, "the FUSE server did not mount"
            time.sleep(0.05)
        yield Disk(mount, control)
    finally:
        subprocess.run(["fusermount3", "-u", "-z", mount], timeout=60, check=False)
        server.kill()
        server.wait(timeout=60)
        shutil.rmtree(root, ignore_errors=True)


# -- the reproduction --------------------------------------------------------------------------


def read(ref: Any, crc: int, timeout: float) -> str:
    import ray

    try:
        return "ok" if zlib.crc32(memoryview(ray.get(ref, timeout=timeout))) == crc else "WRONG"
    except Exception as exc:  # noqa: BLE001 - the exception's type is the finding
        return type(exc).__name__


def fault_during_reads(disk: Disk, refs: list[Any], crcs: list[int], ops: list[str] | None) -> None:
    """Read the objects in turn (1 s each): slow reads from 1 s, EIO from 3 s to 6 s, healed."""
    steps = [(1.0, lambda: disk.slow_reads(0.05)),
             (3.0, lambda: disk.fail(errno.EIO, ops, keep_latency=0.05)),
             (6.0, lambda: disk.heal(0.05))]
    start, i = time.monotonic(), 0
    while (now := time.monotonic() - start) < 9:
        while steps and now > steps[0][0]:
            steps.pop(0)[1]()
        read(refs[i % N], crcs[i % N], 1.0)
        i += 1


def one_round(ops: list[str] | None) -> list[int]:
    """The objects that did not read back within BOUND of the heal."""
    import ray

    with faulty_disk() as disk:
        spilling = json.dumps({"type": "filesystem", "params": {"directory_path": disk.mount}})
        ray.init(address="local", num_cpus=1, object_store_memory=80 * MIB, include_dashboard=False,
                 _system_config={"object_spilling_config": spilling})
        try:
            values = [random.Random(i).randbytes(SIZE) for i in range(N)]
            crcs = [zlib.crc32(memoryview(v)) for v in values]
            refs = [ray.put(v) for v in values]
            del values
            assert all(read(r, c, BOUND) == "ok" for r, c in zip(refs, crcs)), "a read before any fault failed"
            fault_during_reads(disk, refs, crcs, ops)
            outcomes = [read(r, c, BOUND) for r, c in zip(refs, crcs)]
            print("  after the heal:", outcomes, flush=True)
            return [k for k, outcome in enumerate(outcomes) if outcome != "ok"]
        finally:
            ray.shutdown()


def check_tools() -> None:
    missing = [name for name, found in (("mfusepy (pip install mfusepy)", _importable("mfusepy")),
                                        ("fusermount3 (Debian: apt install fuse3)", shutil.which("fusermount3")))
               if not found]
    if missing:
        sys.exit(f"this reproduction needs {' and '.join(missing)}")


def _importable(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def main(rounds: int, ops: list[str] | None) -> None:
    check_tools()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a deadline's SIGTERM still unmounts
    import ray

    print(f"Ray {ray.__version__}; EIO on {ops or 'every operation'} of the spilled files", flush=True)
    hit = 0
    for k in range(rounds):
        lost = one_round(ops)
        hit += bool(lost)
        told = f"objects {lost} not back {BOUND:.0f} s after the heal" if lost else "every object back"
        print(f"round {k + 1}: {told}", flush=True)
    print(f"REPRODUCED {hit} of {rounds}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--serve"]:
        serve(*sys.argv[2:5])
    else:
        args = [a for a in sys.argv[1:] if not a.startswith("--")]
        main(int(args[0]) if args else 3, ["open"] if "--open-only" in sys.argv else None)
