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
    for name in ("_touch", "_block_sums", "_prefix", "_choose", "_child_level", "_top", "_find",
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
    """Load both cache lines of each block (16 float64) before any is used. The descent of one
    draw is a chain of dependent adds, so the CPU cannot run far ahead to the next draw's
    block: a 256-draw descent of the 8 MiB leaf level waited on one cache miss at a time.
    Loads with nothing depending on them go out together."""
    seen, last = 0.0, level.shape[1] - 1
    for j in range(blocks.shape[0]):
        seen += level[blocks[j], 0] + level[blocks[j], last]
    return seen


#: Draws (or blocks) whose sums run side by side: each one's adds are still one chain in
#: the numpy path's order, but GROUP independent chains keep the CPU's adders busy where one
#: chain waits on each add's latency. 16 was fastest here (4: 0.85x, 32: 0.9x of it).
GROUP = 16


def _child_level(level: np.ndarray, node: np.ndarray, m: np.ndarray) -> None:
    """In each block ``node[j]`` of ``level``, descend to the child holding mass ``m[j]``:
    ``node[j]`` becomes that child's index one level down, ``m[j]`` the mass left in it."""
    k, n = level.shape[1], node.shape[0]
    running = np.empty((k, GROUP))  # running[i, g]: draw g's children 0..i summed in order
    if _touch(level, node) < 0.0:  # never (sums are >= 0); the test keeps the loads from being optimised away
        m[0] = np.nan
    for first in range(0, n, GROUP):
        size = min(GROUP, n - first)
        for g in range(size):
            running[0, g] = level[node[first + g], 0]
        for i in range(1, k):
            for g in range(size):
                running[i, g] = running[i - 1, g] + level[node[first + g], i]
        for g in range(size):
            _choose(running, g, node, m, first + g)


def _choose(running: np.ndarray, g: int, node: np.ndarray, m: np.ndarray, j: int) -> None:
    """Draw ``j`` (column ``g`` of ``running``): the child whose running-sum range holds its
    mass, clamped below the block's total; how many running sums (all but the last) are <= it."""
    k = running.shape[0]
    mass = min(m[j], np.nextafter(running[k - 1, g], 0.0))
    child = 0
    for i in range(k - 1):
        if running[i, g] <= mass:
            child += 1
    m[j] = mass - running[child - 1, g] if child else mass - 0.0
    node[j] = node[j] * k + child


#: How far the top's search walks on from the previous draw before it bisects instead.
WALK = 32


def _top(prefix0: np.ndarray, mass: np.ndarray, node: np.ndarray, m: np.ndarray) -> None:
    """For each mass (clamped below the total), ``node[j]``: the first top node ``i`` with
    ``prefix0[i + 1] > mass``, and ``m[j]``: the mass left within it. sample()'s masses are
    sorted, so the next node is mostly a few steps on from the previous draw's: a short walk
    there, bisection (whose every step is a branch the CPU cannot predict) past ``WALK``
    steps or for a mass below the previous one."""
    top = prefix0.shape[0] - 1
    limit, previous = np.nextafter(prefix0[top], 0.0), 0.0
    for j in range(mass.shape[0]):
        mj = min(mass[j], limit)
        lo, steps = node[j - 1] if j and mj >= previous else 0, 0
        while lo < top and prefix0[lo + 1] <= mj and steps < WALK:
            lo, steps = lo + 1, steps + 1
        hi = top if steps == WALK else lo
        while lo < hi:
            mid = (lo + hi) // 2
            if prefix0[mid + 1] <= mj:
                lo = mid + 1
            else:
                hi = mid
        node[j], m[j], previous = lo, mj - prefix0[lo], mj


def _find(prefix0: np.ndarray, sums: tuple[np.ndarray, ...], mass: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``SumMinTree.find``: the top's prefix sums searched (``searchsorted(..., "right")``),
    then each level descended; returns the leaves and their values."""
    n = mass.shape[0]
    node, m = np.empty(n, dtype=np.int64), np.empty(n)
    _top(prefix0, mass, node, m)
    for level in range(len(sums) - 1, -1, -1):
        _child_level(sums[level], node, m)
    k = sums[0].shape[1]
    value = np.empty(n)
    for j in range(n):
        value[j] = sums[0][node[j] // k, node[j] % k]
    return node, value


def _block_sums(level: np.ndarray, mins: np.ndarray, leaves: bool, blocks: np.ndarray, first: int,
                size: int, total: np.ndarray, lowest: np.ndarray) -> None:
    """For the blocks ``blocks[first:first + size]`` of ``level``: ``total[g]``, block g's
    children summed in order, and ``lowest[g]``, their minimum: over the positive children
    for the leaves, else of the blocks' children in ``mins``."""
    k = level.shape[1]
    for g in range(size):
        total[g] = level[blocks[first + g], 0]
    for i in range(1, k):
        for g in range(size):
            total[g] += level[blocks[first + g], i]
    for g in range(size):
        block, low = blocks[first + g], np.inf
        for i in range(k):
            if leaves:
                value = level[block, i]  # a select, not a branch: which child is lowest is unpredictable
                low = min(low, value if value > 0.0 else np.inf)
            else:
                low = min(low, mins[block, i])
        lowest[g] = low


def _set_leaves(sums: tuple[np.ndarray, ...], mins: tuple[np.ndarray, ...], top_sums: np.ndarray,
                top_mins: np.ndarray, prefix: np.ndarray, indices: np.ndarray, values: np.ndarray) -> None:
    """``SumMinTree.set``: the leaves (the last of duplicates wins), each level above them
    recomputed from its children once the level below is complete, then the top's prefix."""
    k, depth, n = sums[0].shape[1], len(sums), indices.shape[0]
    for j in range(n):
        sums[0][indices[j] // k, indices[j] % k] = values[j]
    cols = indices // k
    total, lowest = np.empty(GROUP), np.empty(GROUP)
    for level in range(depth):
        if _touch(sums[level], cols) < 0.0:  # never: see _child_level
            return
        for first in range(0, n, GROUP):
            size = min(GROUP, n - first)
            _block_sums(sums[level], mins[level], level == 0, cols, first, size, total, lowest)
            for g in range(size):
                block = cols[first + g]
                if level == depth - 1:
                    top_sums[block], top_mins[block] = total[g], lowest[g]
                else:
                    sums[level + 1][block // k, block % k] = total[g]
                    mins[level + 1][block // k, block % k] = lowest[g]
        cols = cols // k
    _prefix(top_sums, prefix)


def _prefix(values: np.ndarray, out: np.ndarray) -> None:
    """``np.cumsum(values, out=out)``: sequential."""
    total = values[0]
    out[0] = total
    for i in range(1, values.shape[0]):
        total = total + values[i]
        out[i] = total
