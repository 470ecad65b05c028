"""The replay buffer's big arrays are on ordinary pages, mapped when allocated (actors/_pages.py
says why): read from the kernel's own account of this process's memory, /proc/self/smaps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from actors import PrioritizedReplayBuffer, _pages

SMAPS = Path("/proc/self/smaps")
pytestmark = pytest.mark.skipif(not SMAPS.exists(), reason="needs Linux's /proc/self/smaps")


def mapping_of(array: np.ndarray) -> dict[str, str]:
    """The smaps entry (field name -> value) of the mapping holding ``array``'s middle byte."""
    address = array.ctypes.data + array.nbytes // 2
    entry: dict[str, str] = {}
    inside = False
    for line in SMAPS.read_text().splitlines():
        head = line.split()[0]
        if "-" in head and ":" not in head:  # a mapping's first line: "start-end perms ..."
            start, end = (int(x, 16) for x in head.split("-"))
            inside = start <= address < end
            entry = {"Range": head} if inside else entry
        elif inside:
            key, _, value = line.partition(":")
            entry[key] = value.strip()
    return entry


def on_huge_pages(array: np.ndarray) -> bool:
    """Whether the mapping is marked for transparent huge pages (``hg``: MADV_HUGEPAGE)."""
    return "hg" in mapping_of(array)["VmFlags"].split()


def test_columns_and_leaves_are_off_huge_pages_and_mapped_at_allocation() -> None:
    rb = PrioritizedReplayBuffer(2**20, seed=0)
    rb.add({"obs": np.ones((10, 8), np.float32), "action": np.ones(10, np.int64)})
    arrays = [*rb._columns.values(), rb._tree.sums[0]]
    assert all(a.nbytes >= _pages.HUGE_FROM for a in arrays)
    for array in arrays:
        entry = mapping_of(array)
        assert not on_huge_pages(array), entry
        # Populated when allocated: resident though only 10 rows were written (the kernel may
        # merge neighbouring anonymous mappings into this one, so it may hold more).
        assert int(entry["Rss"].removesuffix(" kB")) * 1024 >= array.nbytes, entry
    # numpy's own allocation of the same size is marked: the check sees the difference.
    assert on_huge_pages(np.zeros_like(rb._columns["obs"]))


def test_zeros_is_np_zeros_in_value_shape_and_dtype() -> None:
    for shape, dtype in [((2**20, 8), np.float32), (2**20, bool), ((3, 4), np.int64), ((2**19, 0), np.float64)]:
        got, want = _pages.zeros(shape, dtype), np.zeros(shape, dtype)
        assert got.shape == want.shape and got.dtype == want.dtype and got.flags.writeable
        assert got.flags.c_contiguous and np.array_equal(got, want)
    assert np.array_equal(_pages.full((2**19, 16), np.inf), np.full((2**19, 16), np.inf))
