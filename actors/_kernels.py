"""Compiled kernels for the replay buffer's trees (numba, the ``fast`` extra), bit for bit
the numpy path's arithmetic.

A 256-draw descent in numpy is ~27 calls per level on 256-element rows; here it is one loop
per draw. Identical results rest on doing the same float64 operations in the same order:

- a block's running sums are sequential (child 0, then + child 1, ...), as the numpy path's
  row-by-row adds; the mass is clamped to just below the block's total and the child is how
  many running sums (all but the last) are <= it;
- a block's sum over its ``K`` children is sequential too: numpy reduces a ``(K, n)`` array
  along axis 0 row by row;
- minima are exact whatever the order; the top's prefix sums are sequential, as ``np.cumsum``.

``tests/test_replay_buffer.py`` drives whole buffers on both paths through the same calls
and compares every output, bit for bit.

Off unless asked for (``RAYCHAOS_TREES=compiled``, numba installed): numba costs a process
~250 MiB (LLVM) and ~0.7 s at its first sample, even from numba's cache. A replay-buffer
actor would then hold 2.9x its raw state instead of 1.1x, and its restart (whose WAL replay
updates the trees) would take 1.5-1.8x a bare actor's instead of under 1x: measured here.
For a long in-process training loop that samples millions of times, it pays.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

__all__ = ["SWITCH", "enabled", "find", "set_leaves", "use_compiled"]


#: ``RAYCHAOS_TREES=compiled`` turns the kernels on (any other value, or none: numpy).
SWITCH = "RAYCHAOS_TREES"
_compiled: dict[str, Any] = {}
_refused: list[str] = []  # why numba could not be loaded, once tried


def enabled() -> bool:
    """Whether the compiled kernels run: asked for (``RAYCHAOS_TREES=compiled``) and numba
    importable. Decided at the first call, which imports numba and loads the kernels (from
    numba's on-disk cache: ``make`` fills it at install, through
    ``actors._trees.warm_kernels``)."""
    if os.environ.get(SWITCH) != "compiled":  # read each time: a test or a user may switch
        return False
    if _compiled:
        return True
    if _refused:
        return False
    try:
        import numba
    except ImportError as exc:  # numba is the optional `fast` extra
        _refused.append(f"numba is not importable ({exc}); pip install 'raychaos[fast]'")
        return False
    jit = numba.njit(cache=True, nogil=True)
    for name in ("_touch", "_block_sum", "_positive_min", "_block_min", "_prefix", "_child_level", "_find",
                 "_set_leaves"):
        _compiled[name] = globals()[name] = jit(globals()[name])
    return True


def find(prefix0: np.ndarray, sums: tuple[np.ndarray, ...], mass: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The compiled ``SumMinTree.find`` (call only when :func:`enabled`)."""
    result: tuple[np.ndarray, np.ndarray] = _compiled["_find"](prefix0, sums, mass)
    return result


def set_leaves(sums: tuple[np.ndarray, ...], mins: tuple[np.ndarray, ...], top_sums: np.ndarray,
               top_mins: np.ndarray, prefix: np.ndarray, indices: np.ndarray, values: np.ndarray) -> None:
    """The compiled ``SumMinTree.set`` (call only when :func:`enabled`)."""
    _compiled["_set_leaves"](sums, mins, top_sums, top_mins, prefix, indices, values)


def use_compiled() -> bool:
    """Turn the kernels on in this process (and the processes it starts, through the
    environment), as ``RAYCHAOS_TREES=compiled`` does; returns whether they are on."""
    os.environ[SWITCH] = "compiled"
    return enabled()


def _touch(level: np.ndarray, blocks: np.ndarray) -> float:
    """Load each block's first child before any is used. The descent of one draw is a chain
    of dependent adds, so the CPU cannot run far ahead to the next draw's block: a 256-draw
    descent of the 8 MiB leaf level waited on one cache miss at a time. Loads with nothing
    depending on them go out together."""
    seen = 0.0
    for j in range(blocks.shape[0]):
        seen += level[blocks[j], 0]
    return seen


def _child_level(level: np.ndarray, node: np.ndarray, m: np.ndarray) -> None:
    """In each block ``node[j]`` of ``level``, descend to the child holding mass ``m[j]``:
    ``node[j]`` becomes that child's index one level down, ``m[j]`` the mass left in it."""
    k = level.shape[1]
    running = np.empty(k)  # running[i]: children 0..i summed in order
    if _touch(level, node) < 0.0:  # never (sums are >= 0); the test keeps the loads from being optimised away
        m[0] = np.nan
    for j in range(node.shape[0]):
        block = node[j]
        running[0] = level[block, 0]
        for i in range(1, k):
            running[i] = running[i - 1] + level[block, i]
        mass = min(m[j], np.nextafter(running[k - 1], 0.0))
        child = 0
        for i in range(k - 1):
            if running[i] <= mass:
                child += 1
        m[j] = mass - running[child - 1] if child else mass - 0.0
        node[j] = block * k + child


def _find(prefix0: np.ndarray, sums: tuple[np.ndarray, ...], mass: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``SumMinTree.find``: the top's prefix sums searched (``searchsorted(..., "right")``),
    then each level descended; returns the leaves and their values."""
    n, top = mass.shape[0], prefix0.shape[0] - 1
    node, m = np.empty(n, dtype=np.int64), np.empty(n)
    limit = np.nextafter(prefix0[top], 0.0)
    for j in range(n):
        mj = min(mass[j], limit)
        lo, hi = 0, top  # the first i with prefix0[i + 1] > mj
        while lo < hi:
            mid = (lo + hi) // 2
            if prefix0[mid + 1] <= mj:
                lo = mid + 1
            else:
                hi = mid
        node[j], m[j] = lo, mj - prefix0[lo]
    for level in range(len(sums) - 1, -1, -1):
        _child_level(sums[level], node, m)
    k = sums[0].shape[1]
    value = np.empty(n)
    for j in range(n):
        value[j] = sums[0][node[j] // k, node[j] % k]
    return node, value


def _block_sum(level: np.ndarray, block: int) -> float:
    total: float = level[block, 0]
    for i in range(1, level.shape[1]):
        total += level[block, i]
    return total


def _positive_min(level: np.ndarray, block: int) -> float:
    lowest = np.inf
    for i in range(level.shape[1]):
        value = level[block, i]
        if 0.0 < value < lowest:
            lowest = value
    return lowest


def _block_min(level: np.ndarray, block: int) -> float:
    lowest: float = level[block, 0]
    for i in range(1, level.shape[1]):
        lowest = min(lowest, level[block, i])
    return lowest


def _set_leaves(sums: tuple[np.ndarray, ...], mins: tuple[np.ndarray, ...], top_sums: np.ndarray,
                top_mins: np.ndarray, prefix: np.ndarray, indices: np.ndarray, values: np.ndarray) -> None:
    """``SumMinTree.set``: the leaves (the last of duplicates wins), each level above them
    recomputed from its children once the level below is complete, then the top's prefix."""
    k, depth = sums[0].shape[1], len(sums)
    for j in range(indices.shape[0]):
        sums[0][indices[j] // k, indices[j] % k] = values[j]
    cols = indices // k
    for level in range(depth - 1):
        if _touch(sums[level], cols) < 0.0:  # never: see _child_level
            return
        for j in range(cols.shape[0]):
            block = cols[j]
            row, col = block // k, block % k
            sums[level + 1][row, col] = _block_sum(sums[level], block)
            mins[level + 1][row, col] = _positive_min(sums[level], block) if level == 0 \
                else _block_min(mins[level], block)
        cols = cols // k
    last = depth - 1
    for j in range(cols.shape[0]):
        block = cols[j]
        top_sums[block] = _block_sum(sums[last], block)
        top_mins[block] = _positive_min(sums[last], block) if last == 0 else _block_min(mins[last], block)
    _prefix(top_sums, prefix)


def _prefix(values: np.ndarray, out: np.ndarray) -> None:
    """``np.cumsum(values, out=out)``: sequential."""
    total = values[0]
    out[0] = total
    for i in range(1, values.shape[0]):
        total = total + values[i]
        out[i] = total
