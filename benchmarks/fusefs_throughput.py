"""What the fault filesystem's passthrough costs: the same file operations on its mount and on
the bare directory behind it, no fault switched on (one process; slices interleaved).

    flock /tmp/raychaos-ray.lock .venv/bin/python benchmarks/fusefs_throughput.py
"""

from __future__ import annotations

import os
import sys
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import fmt, interleaved, machine, table
from chaos.disks._fusefs import fault_filesystem

CHUNK = 1 << 20
BIG = 32 * CHUNK


def write_big(root: str) -> None:
    with open(f"{root}/big", "wb", buffering=0) as f:
        for _ in range(BIG // CHUNK):
            f.write(b"\0" * CHUNK)


def read_big(root: str) -> None:
    with open(f"{root}/big", "rb", buffering=0) as f:
        while f.read(CHUNK):
            pass


def small_file(root: str) -> None:
    """Create, write 4 KiB, fsync, close, unlink: what a checkpoint does per file."""
    path = f"{root}/s-{uuid.uuid4().hex[:8]}"
    fd = os.open(path, os.O_CREAT | os.O_WRONLY, 0o600)
    os.write(fd, b"x" * 4096)
    os.fsync(fd)
    os.close(fd)
    os.unlink(path)


def stat(root: str) -> None:
    os.stat(f"{root}/big")


def main() -> None:
    with fault_filesystem() as fs:
        write_big(fs.backing)
        rows = []
        for label, op, per_call, unit in (("sequential write, 1 MiB writes", write_big, BIG / 2**20, " MB/s"),
                                          ("sequential read, 1 MiB reads", read_big, BIG / 2**20, " MB/s"),
                                          ("small file: create, 4 KiB, fsync, unlink", small_file, 1, " /s"),
                                          ("stat", stat, 1, " /s")):
            bare, mounted = interleaved([lambda: op(fs.backing), lambda: op(fs.mount)], seconds=6.0,
                                        per_call=per_call)  # type: ignore[arg-type]
            rows.append([label, fmt(bare, unit), fmt(mounted, unit), f"{mounted / bare:.2f}"])
    table(f"Fault filesystem passthrough vs the bare directory ({machine()})",
          ["operation", "bare directory", "through the mount", "ratio"], rows)


if __name__ == "__main__":
    main()
