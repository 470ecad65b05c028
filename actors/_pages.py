"""Zeroed arrays on ordinary (4 KiB) pages, for the replay buffer's columns and trees.

numpy asks the kernel for transparent huge pages on every array of 4 MiB or more
(``madvise(MADV_HUGEPAGE)``), and with THP in ``madvise`` mode the kernel then backs each
first touch with a whole 2 MiB page. On the Firecracker VM these figures come from, first
touching 96 MiB so ran anywhere from 80 MiB/s to 7.7 GB/s across fresh processes (a 2 MiB page
took 0.2 to 70 ms; ``benchmarks/replay_buffer.py`` prints this). The likely cause, not
measured apart: the guest reports large free blocks back to the host (free page reporting is
on in its kernel command line), and a huge page built from one is faulted in again by the
host, 4 KiB at a time. On 4 KiB pages the same first
touch ran 0.8-1.1 GB/s every time, and 1.7-1.8 GB/s when populated in one ``mmap`` call
(``MAP_POPULATE``), which is what :func:`zeros` does: a buffer's fill then costs the same in
every process. (cpprb keeps its columns in numpy arrays, on huge pages: there its construction
took 58 to 369 ms across fresh processes.)

The arrays are views of an anonymous ``mmap`` (their ``base``), released when the last view
goes; they pickle, slice and copy like any array.
"""

from __future__ import annotations

import mmap

import numpy as np

__all__ = ["HUGE_FROM", "full", "zeros"]

#: numpy's own threshold: below it numpy does not ask for huge pages, and np.zeros is kept.
HUGE_FROM = 4 << 20


def zeros(shape: int | tuple[int, ...], dtype: np.dtype | type = np.float64) -> np.ndarray:
    """``np.zeros(shape, dtype)``, but never on transparent huge pages and with every page
    already mapped (writing into it takes no page fault); small arrays are plain np.zeros.

    How it differs from ``np.zeros``: the memory is committed at once, not at first touch; a
    replay buffer allocates what it will fill.
    """
    dtype = np.dtype(dtype)
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    count = int(np.prod(shape, dtype=np.int64))
    if count * dtype.itemsize < HUGE_FROM:
        return np.zeros(shape, dtype)
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE
    memory = mmap.mmap(-1, count * dtype.itemsize, flags=flags)  # anonymous memory is zeroed
    return np.frombuffer(memory, dtype=dtype, count=count).reshape(shape)


def full(shape: int | tuple[int, ...], value: float) -> np.ndarray:
    """``np.full(shape, value)`` in float64 on the pages :func:`zeros` gives."""
    out = zeros(shape)
    out.fill(value)
    return out
