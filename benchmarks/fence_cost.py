"""What the incarnation fence costs per mutation: a CheckpointedCounter's add with the fence
and without it, each durability, in one process and the same run (best of 5 rounds each,
the two interleaved so that the machine's drift falls on both).

    .venv/bin/python benchmarks/fence_cost.py
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from actors import CheckpointConfig, CheckpointedCounter
from benchmarks._common import machine, table

ADDS = 5_000
ROUNDS = 5


class Unfenced(CheckpointedCounter):
    def enable_checkpointing(self, config: CheckpointConfig, **options: Any) -> Any:
        return super().enable_checkpointing(dataclasses.replace(config, fence=False), **options)


def per_add(cls: type[CheckpointedCounter], durability: str, root: str) -> float:
    """Seconds per add on a fresh counter in a fresh folder under ``root``."""
    counter = cls(tempfile.mkdtemp(dir=root), durability=durability, every_n=1000,  # type: ignore[arg-type]
                  restore="never")
    start = time.perf_counter()
    for seq in range(ADDS):
        counter.add(writer_id="w", seq=seq)
    return (time.perf_counter() - start) / ADDS


def main() -> None:
    rows = []
    with tempfile.TemporaryDirectory() as root:
        for durability in ("policy", "wal"):
            fenced, bare = [], []
            for _ in range(ROUNDS):
                fenced.append(per_add(CheckpointedCounter, durability, root))
                bare.append(per_add(Unfenced, durability, root))
            rows.append([durability, f"{min(fenced) * 1e6:.1f}", f"{min(bare) * 1e6:.1f}",
                         f"{(min(fenced) - min(bare)) * 1e6:.1f}", f"{min(fenced) / min(bare):.2f}x"])
    table(f"The incarnation fence, per CheckpointedCounter.add — {machine()}",
          ["durability", "fenced, µs", "unfenced, µs", "fence, µs", "ratio"], rows)


if __name__ == "__main__":
    main()
