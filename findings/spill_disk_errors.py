"""Standalone reproduction: the raylet aborts when its object spilling directory is full (Ray 2.60).

A one-node Ray with an 80 MiB object store spills objects of 8 MiB into a small tmpfs mounted for
the run. Once objects are spilled, the tmpfs is filled (one file takes its every byte, empty files
its every inode), so creates and writes there answer ``ENOSPC``, as a full disk does. Reads of
spilled objects still restore. A ``ray.put`` past the full store makes Ray spill (the IO worker
logs the ``OSError``) and then allocate the object in a file of the same directory (Ray's fallback
allocation, in the first spilling directory); that create fails, the raylet aborts
(``dlmalloc.cc``: "create_buffer failed to open file ... No space left on device", in the raylet's
log), and this driver is ended with it ("The connection to the plasma store is failed. Terminate
the process."): exit status 1. A full disk is an error Ray could report to the ``put``; instead the
node is gone.

With ``--control`` the tmpfs keeps its room: every put succeeds, every object reads back, exit 0.

Needs Linux, root (``mount -t tmpfs``) and Ray; nothing else. The Ray driver runs in a child
process, so the mount is removed even when Ray ends that driver.

    python findings/spill_disk_errors.py [--control]
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
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


def fill(directory: str) -> None:
    """Take every byte and every inode of the filesystem holding ``directory``."""
    os.makedirs(directory)
    with open(os.path.join(directory, "bytes"), "wb") as big:
        try:
            while True:
                big.write(b"\0" * MIB)
                big.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
    k = 0
    try:
        while True:
            open(os.path.join(directory, f"inode-{k}"), "wb").close()
            k += 1
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc


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
        if not control:
            fill(os.path.join(mount, "filler"))
            print("full:", [read(r, c, 2) for r, c in zip(refs[:4], crcs)], flush=True)
        print("put past the full store ...", flush=True)
        refs += [ray.put(bytes(SIZE)) for _ in range(2 * N)]  # 256 MiB
        subprocess.run(["rm", "-rf", os.path.join(mount, "filler")], check=True, timeout=60)
        print("healed:", [read(r, c, 10) for r, c in zip(refs, crcs)], flush=True)
    finally:
        ray.shutdown()


def main(control: bool) -> int:
    mount = tempfile.mkdtemp(prefix="spill-tmpfs-")
    subprocess.run(["mount", "-t", "tmpfs", "-o", TMPFS, "spill-finding", mount], check=True, timeout=60)
    argv = [sys.executable, __file__, "--child", mount, *(["--control"] if control else [])]
    driver = subprocess.Popen(argv, start_new_session=True)  # its Ray's processes in its group
    try:
        code = driver.wait(timeout=CHILD_DEADLINE)
        print(f"the driver's exit status: {code}", flush=True)
        return code
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)  # what Ray left of the node when it ended the driver
        driver.wait(timeout=60)
        subprocess.run(["umount", "--lazy", mount], check=True, timeout=60)
        os.rmdir(mount)


if __name__ == "__main__":
    if "--child" in sys.argv:
        child(sys.argv[sys.argv.index("--child") + 1], "--control" in sys.argv)
    else:
        sys.exit(main("--control" in sys.argv))
