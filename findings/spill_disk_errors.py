"""Standalone reproduction: what Ray 2.60 does when its object spilling directory fails.

A one-node Ray with an 80 MiB object store spills to a directory mounted through raychaos's
fault filesystem. Objects of 8 MiB are put until most are spilled, then the directory fails:

- ``eio``: every operation on the spilled files answers ``EIO``. A ``ray.get`` of a spilled
  object raises nothing: it waits (here, to its timeout: ``GetTimeoutError``) while Ray retries
  the restore; once healed, every object reads back with its value.
- ``enospc``: creates and writes answer ``ENOSPC``. Reads of spilled objects still restore;
  a ``ray.put`` past the full store makes Ray spill (the IO worker logs the ``OSError``) and then
  allocate the object in a file of the same directory (Ray's fallback allocation, in the first
  spilling directory); that create fails, the raylet aborts (``dlmalloc.cc``: "create_buffer
  failed to open file ... No space left on device"), and this driver is ended with it ("The
  connection to the plasma store is failed. Terminate the process."): exit status 1 here.

    flock /tmp/raychaos-ray.lock .venv/bin/python findings/spill_disk_errors.py eio|enospc
"""

from __future__ import annotations

import errno
import json
import sys
import time
import zlib

import numpy as np
import ray

from chaos.cluster import TEST_SYSTEM_CONFIG
from chaos.disks import fault_filesystem

MIB = 1 << 20
N, SIZE = 16, 8 * MIB


def read(ref: ray.ObjectRef, crc: int, timeout: float) -> str:
    start = time.monotonic()
    try:
        outcome = "correct" if zlib.crc32(memoryview(ray.get(ref, timeout=timeout))) == crc else "WRONG"
    except Exception as exc:  # noqa: BLE001 - the exception's type is the finding
        outcome = type(exc).__name__
    return f"{outcome} in {time.monotonic() - start:.2f} s"


def main(mode: str) -> None:
    with fault_filesystem() as fs:  # a fresh directory, removed after
        spilling = json.dumps({"type": "filesystem", "params": {"directory_path": fs.mount}})
        ray.init(address="local", num_cpus=1, object_store_memory=80 * MIB, include_dashboard=False, log_to_driver=True,
                 _system_config={**TEST_SYSTEM_CONFIG, "object_spilling_config": spilling})
        try:
            values = [np.random.default_rng(i).integers(0, 255, SIZE, dtype=np.uint8) for i in range(N)]
            crcs = [zlib.crc32(memoryview(v)) for v in values]
            refs = [ray.put(v) for v in values]
            del values
            print("before:", [read(r, c, 10) for r, c in zip(refs, crcs)][:3], flush=True)
            if mode == "eio":
                fs.fail(errno.EIO, glob="/ray_spilled_objects_*")  # the spilled files only
            else:
                fs.fail(errno.ENOSPC)  # the whole directory, Ray's fallback allocations too
            print(f"{mode}:", [read(r, c, 2) for r, c in zip(refs[:4], crcs)], flush=True)
            if mode == "enospc":
                print("put past the full store ...", flush=True)
                refs += [ray.put(np.zeros(SIZE, dtype=np.uint8)) for _ in range(2 * N)]  # 256 MiB
            fs.heal()
            print("healed:", [read(r, c, 10) for r, c in zip(refs, crcs)], flush=True)
        finally:
            ray.shutdown()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "eio")
