"""What a Ray actor call costs beyond a no-op: its payload, and the work the actor does.

    python benchmarks/repro_round_trip_work.py

Standalone (Ray, and the benchmarks' _common). Four calls on one actor, timed interleaved: a no-op; one that
busy-waits WORK_S; the same returning a 25 KB batch as one ``bytes``; and one returning the
same batch as seven numpy arrays. On 2026-12-01 here (2 cores): 1.22, 2.68, 2.64 and 3.45 ms.
The busy-wait costs about twice its length; the bytes nothing more; the arrays 0.8 ms more.
Not a test: it prints figures, it asserts nothing.
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np
import ray

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import interleaved

WORK_S = 0.00075  #: what ReplayBufferActor.sample_and_update works inside the actor here
ROWS = 256


def batch() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {"obs": rng.random((ROWS, 8), dtype=np.float32), "act": rng.integers(0, 2, ROWS),
            "rew": rng.random(ROWS, dtype=np.float32), "next_obs": rng.random((ROWS, 8), dtype=np.float32),
            "done": rng.random(ROWS, dtype=np.float32), "weights": rng.random(ROWS),
            "indices": rng.integers(0, 1 << 20, ROWS)}


class Target:
    def __init__(self) -> None:
        self.arrays = batch()
        self.blob = b"".join(a.tobytes() for a in self.arrays.values())

    def noop(self) -> None:
        return None

    def work(self, seconds: float) -> None:
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            pass

    def work_bytes(self, seconds: float) -> bytes:
        self.work(seconds)
        return self.blob

    def work_arrays(self, seconds: float) -> dict[str, np.ndarray]:
        self.work(seconds)
        return self.arrays


def main() -> None:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        actor = ray.remote(Target).remote()
        ray.get(actor.noop.remote(), timeout=60)
        calls = {
            "no-op": lambda: ray.get(actor.noop.remote(), timeout=60),
            f"busy-wait {WORK_S * 1e3:g} ms": lambda: ray.get(actor.work.remote(WORK_S), timeout=60),
            "the same + 25 KB as bytes": lambda: ray.get(actor.work_bytes.remote(WORK_S), timeout=60),
            "the same + 25 KB as 7 arrays": lambda: ray.get(actor.work_arrays.remote(WORK_S), timeout=60),
        }
        ms = {name: 1e3 / per_s for name, per_s in zip(calls, interleaved(list(calls.values()), seconds=1.5))}
        base = ms["no-op"]
        for name, value in ms.items():
            print(f"{name:32s} {value:6.2f} ms  (+{value - base:.2f} ms over a no-op)")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
