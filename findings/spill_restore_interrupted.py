"""Standalone reproduction: a restore of a spilled object that fails part-way leaves the object
unreadable after the disk heals (Ray 2.60).

A one-node Ray with an 80 MiB object store spills objects of 8 MiB to a directory mounted
through raychaos's fault filesystem (Ray alone cannot make a directory fail on demand: the one
exception to "Ray only" in findings/). Each read of that disk is made slow, so a restore is
under way, and then reading the spilled files answers ``EIO`` for 3 s. Once healed, every
object should read back: Ray retries a failed restore, and the file is whole.

What happens: the restore worker's ``put_file_like_object`` creates the object in the object
store, then reads the file into it; the read raises ``OSError(EIO)`` and the created object is
neither sealed nor aborted. Every later restore of that object finds it "already exists" and
returns, so ``ray.get`` of it waits forever (here: its 30 s bound, long after the heal), while
every other object reads back at once. With ``--open-only`` the ``EIO`` answers only opens (a
restore already reading finishes) and every object reads back: the control.

Ray's issues know the family (#24248 "Restore worker silently fails and the program is stuck",
#14921 "Failing objects that are failed to be restored many times"), not this path.

    flock /tmp/raychaos-ray.lock .venv/bin/python findings/spill_restore_interrupted.py [ROUNDS] [--open-only]
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
from chaos.disks import FaultFS, fault_filesystem

MIB = 1 << 20
N, SIZE = 16, 8 * MIB
#: Seconds after the heal an object may take to read back before it counts as lost.
BOUND = 30.0


def read(ref: ray.ObjectRef, crc: int, timeout: float) -> str:
    try:
        return "ok" if zlib.crc32(memoryview(ray.get(ref, timeout=timeout))) == crc else "WRONG"
    except Exception as exc:  # noqa: BLE001 - the exception's type is the finding
        return type(exc).__name__


def fault_during_reads(fs: FaultFS, refs: list[ray.ObjectRef], crcs: list[int], ops: list[str] | None) -> None:
    """Read the objects in turn (1 s each): slow reads from 1 s, EIO from 3 s to 6 s, healed."""
    steps = [(1.0, lambda: fs.set_latency({"read": 0.05})),
             (3.0, lambda: fs.fail(errno.EIO, glob="/ray_spilled_objects_*", ops=ops)),
             (6.0, fs.heal)]
    start, i = time.monotonic(), 0
    while (now := time.monotonic() - start) < 9:
        while steps and now > steps[0][0]:
            steps.pop(0)[1]()
        read(refs[i % N], crcs[i % N], 1.0)
        i += 1


def one_round(ops: list[str] | None) -> list[int]:
    """The objects that did not read back within BOUND of the heal."""
    with fault_filesystem() as fs:
        spilling = json.dumps({"type": "filesystem", "params": {"directory_path": fs.mount}})
        ray.init(address="local", num_cpus=1, object_store_memory=80 * MIB, include_dashboard=False,
                 _system_config={**TEST_SYSTEM_CONFIG, "object_spilling_config": spilling})
        try:
            values = [np.random.default_rng(i).integers(0, 255, SIZE, dtype=np.uint8) for i in range(N)]
            crcs = [zlib.crc32(memoryview(v)) for v in values]
            refs = [ray.put(v) for v in values]
            del values
            assert all(read(r, c, BOUND) == "ok" for r, c in zip(refs, crcs)), "a read before any fault failed"
            fault_during_reads(fs, refs, crcs, ops)
            fs.heal()
            outcomes = [read(r, c, BOUND) for r, c in zip(refs, crcs)]
            print("  after the heal:", outcomes, flush=True)
            return [k for k, outcome in enumerate(outcomes) if outcome != "ok"]
        finally:
            ray.shutdown()


def main(rounds: int, ops: list[str] | None) -> None:
    print(f"Ray {ray.__version__}; EIO on {ops or 'every operation'} of the spilled files", flush=True)
    hit = 0
    for k in range(rounds):
        lost = one_round(ops)
        hit += bool(lost)
        told = f"objects {lost} not back {BOUND:.0f} s after the heal" if lost else "every object back"
        print(f"round {k + 1}: {told}", flush=True)
    print(f"REPRODUCED {hit} of {rounds}")


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    main(int(args[0]) if args else 3, ["open"] if "--open-only" in sys.argv else None)
