"""Standalone reproduction: the raylet aborts when its object spilling directory answers
``ENOSPC`` while the disk still reports room (Ray 2.60).

A one-node Ray with an 80 MiB object store spills objects of 8 MiB into a small tmpfs mounted for
the run. Once objects are spilled, every inode of the tmpfs is taken (empty files), so creating a
file there answers ``ENOSPC`` while ``statfs`` still reports most bytes free, as a disk out of
inodes or over a quota does. Reads of spilled objects still restore. A ``ray.put`` past the full
store makes Ray spill (the IO worker logs the ``OSError``) and then allocate the object in a file
of the same directory (Ray's fallback allocation, in the first spilling directory); that create
fails, the raylet aborts (``dlmalloc.cc``: "create_buffer failed to open file ... No space left
on device", in the raylet's log), and this driver is ended with it ("The connection to the plasma
store is failed. Terminate the process."): exit status 1. The node is gone, where Ray has an error
for the ``put`` (``OutOfDiskError``).

With ``--control`` the bytes are taken too, so the disk reports itself full: Ray's file system
monitor sees it, the ``put`` raises ``OutOfDiskError`` (the documented path), the node lives,
and every object reads back once the disk has room again: exit 0.

Needs Linux, root (``mount -t tmpfs``) and Ray; nothing else. The Ray driver runs in a child
process, so the mount is removed even when Ray ends that driver, and every process of its Ray
(found by an environment variable it inherited) is ended after it.

    python findings/spill_disk_errors.py [--control]
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zlib

MIB = 1 << 20
N, SIZE = 16, 8 * MIB
#: The tmpfs: room for every object spilled, and few inodes, so filling it is quick.
TMPFS = "size=512m,nr_inodes=256"
#: Seconds the child has before it counts as hung (it ends in about 20).
CHILD_DEADLINE = 150
#: The environment variable that marks this run's processes: the driver's, and its Ray's.
RUN_MARK = "SPILL_FINDING_RUN"


def fill(directory: str, *, bytes_too: bool) -> None:
    """Take every inode (and, ``bytes_too``, every byte) of the filesystem holding ``directory``."""
    os.makedirs(directory)
    if bytes_too:
        with open(os.path.join(directory, "bytes"), "wb") as big, contextlib.suppress(OSError):  # ENOSPC: full
            while True:
                big.write(b"\0" * MIB)
                big.flush()
    k = 0
    with contextlib.suppress(OSError):  # ENOSPC: no inode left
        while True:
            open(os.path.join(directory, f"inode-{k}"), "wb").close()
            k += 1
    left = os.statvfs(directory)
    print(f"filled: {left.f_ffree} inodes and {left.f_bavail * left.f_frsize // MIB} MiB free", flush=True)


def read(ref: object, crc: int, timeout: float) -> str:
    import ray

    start = time.monotonic()
    try:
        outcome = "correct" if zlib.crc32(memoryview(ray.get(ref, timeout=timeout))) == crc else "WRONG"
    except Exception as exc:  # noqa: BLE001 - the exception's type is the finding
        outcome = type(exc).__name__
    return f"{outcome} in {time.monotonic() - start:.2f} s"


def child(mount: str, control: bool) -> None:
    """The driver: spill into ``mount``, fill it (unless ``control``), put past the full store."""
    import ray

    spilling = json.dumps({"type": "filesystem", "params": {"directory_path": os.path.join(mount, "spill")}})
    ray.init(address="local", num_cpus=1, object_store_memory=80 * MIB, include_dashboard=False,
             _system_config={"object_spilling_config": spilling})
    try:
        print(f"Ray {ray.__version__}; spilling to a tmpfs ({TMPFS})", flush=True)
        values = [random.Random(i).randbytes(SIZE) for i in range(N)]
        crcs = [zlib.crc32(memoryview(v)) for v in values]
        refs = [ray.put(v) for v in values]
        del values
        print("before:", [read(r, c, 10) for r, c in zip(refs, crcs)][:3], flush=True)
        fill(os.path.join(mount, "filler"), bytes_too=control)
        print("full:", [read(r, c, 2) for r, c in zip(refs[:4], crcs)], flush=True)
        print("put past the full store ...", flush=True)
        try:
            refs += [ray.put(bytes(SIZE)) for _ in range(2 * N)]  # 256 MiB
        except ray.exceptions.OutOfDiskError as exc:
            print(f"put refused: OutOfDiskError ({str(exc).splitlines()[0]})", flush=True)
        shutil.rmtree(os.path.join(mount, "filler"))
        print("healed:", [read(r, c, 10) for r, c in zip(refs, crcs)], flush=True)
    finally:
        ray.shutdown()


def main(control: bool) -> int:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a deadline's SIGTERM still unmounts
    mount = tempfile.mkdtemp(prefix="spill-tmpfs-")
    subprocess.run(["mount", "-t", "tmpfs", "-o", TMPFS, "spill-finding", mount], check=True, timeout=60)
    argv = [sys.executable, __file__, "--child", mount, *(["--control"] if control else [])]
    driver = subprocess.Popen(argv, start_new_session=True, env={**os.environ, RUN_MARK: mount})
    try:
        code = driver.wait(timeout=CHILD_DEADLINE)
        print(f"the driver's exit status: {code}", flush=True)
        return code
    finally:
        for step in (lambda: end_run(driver, mount), lambda: unmount(mount), lambda: os.rmdir(mount)):
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - each clean-up step is tried, whatever the last did
                print(f"clean-up: {exc!r}", file=sys.stderr, flush=True)


def end_run(driver: subprocess.Popen[bytes], mount: str) -> None:
    """SIGKILL the driver and every process of its Ray: its session, and any process whose
    environment carries this run's mark (Ray's processes inherit the driver's environment)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(driver.pid, signal.SIGKILL)
    mark = f"{RUN_MARK}={mount}".encode()
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != os.getpid()):
        with contextlib.suppress(OSError), open(f"/proc/{pid}/environ", "rb") as env:
            if mark in env.read().split(b"\0"):
                os.kill(pid, signal.SIGKILL)
    driver.wait(timeout=60)


def unmount(mount: str) -> None:
    """Unmount now; lazily if a process still holds a file there."""
    if subprocess.run(["umount", mount], timeout=60, check=False).returncode != 0:
        subprocess.run(["umount", "--lazy", mount], timeout=60, check=True)


if __name__ == "__main__":
    if "--child" in sys.argv:
        child(sys.argv[sys.argv.index("--child") + 1], "--control" in sys.argv)
    else:
        sys.exit(main("--control" in sys.argv))
