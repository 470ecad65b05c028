"""What an unarmed failpoint costs, against the operations it sits in (one process, same run).

    .venv/bin/python benchmarks/failpoint_cost.py
"""

from __future__ import annotations

import os
import sys
import tempfile
import timeit

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from actors._wal import WalWriter
from benchmarks._common import machine, table
from chaos import failpoint
from chaos.failpoints import is_armed

CALLS = 2_000_000


def per_call(stmt: object, number: int) -> float:
    """Seconds per call, best of 5."""
    return min(timeit.repeat(stmt, number=number, repeat=5)) / number  # type: ignore[arg-type]


def noop() -> None:
    pass


def main() -> None:
    assert not is_armed("wal.append.written"), "unset RAYCHAOS_FAILPOINTS to measure the unarmed cost"
    off = per_call(lambda: failpoint("wal.append.written"), CALLS)
    call = per_call(noop, CALLS)
    with tempfile.TemporaryDirectory() as root:
        writer = WalWriter(f"{root}/wal-0000000000.log", fsync_every=1 << 30, fsync_interval=1e9)
        record = b"x" * 100
        append = per_call(lambda: writer.append(record), 100_000)  # three failpoints inside
        writer.close()
    table(f"An unarmed failpoint — {machine()}", ["what", "ns per call", "share of a WAL append"], [
        ["failpoint(name), nothing armed", f"{off * 1e9:.0f}", f"{off / append:.1%}"],
        ["an empty Python function call, for scale", f"{call * 1e9:.0f}", f"{call / append:.1%}"],
        ["WAL append of 100 bytes (page cache, no fsync; 3 failpoints)", f"{append * 1e9:.0f}", "100%"],
    ])


if __name__ == "__main__":
    main()
