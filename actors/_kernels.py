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
    # The helpers run once per draw or per block, where a call from one kernel to another
    # costs: a 256-draw level's choices took 9.7 µs as calls, 4.8 µs inlined (~19 ns a call).
    for name in _INLINED:
        _compiled[name] = globals()[name] = numba.njit(cache=True, nogil=True, inline="always")(globals()[name])
    for name in _KERNELS:
        _compiled[name] = globals()[name] = numba.njit(cache=True, nogil=True)(globals()[name])
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


#: The trees' fan-out (``actors._trees.K``). A constant, so that the compiler unrolls a block's
#: children and divides by a shift: read from the arrays' shape, it made a 256-draw find 7%
#: and a 256-leaf set 12% slower here.
K = 16
_KERNELS = ("_prefix", "_top", "_child_level", "_find", "_set_leaves")
_INLINED = ("_touch", "_running_sums", "_block_sum", "_block_min")  # run once per draw or per block


def _touch(level: np.ndarray, blocks: np.ndarray) -> float:
    """Load both cache lines of each block (16 float64) before any is used. The descent of one
    draw is a chain of dependent adds, so the CPU cannot run far ahead to the next draw's
    block: a 256-draw descent of the 8 MiB leaf level waited on one cache miss at a time.
    Loads with nothing depending on them go out together."""
    seen = 0.0
    for j in range(blocks.shape[0]):
        seen += level[blocks[j], 0] + level[blocks[j], K - 1]
    return seen


def _running_sums(level: np.ndarray, block: int, run0: np.ndarray) -> float:
    """Block ``block``'s children summed in order (child 0, then + child 1, ...): ``run0[i + 1]``
    is the sum through child ``i`` (``run0[0]`` stays 0); returns the block's total."""
    total: float = level[block, 0]
    run0[1] = total
    for i in range(1, K):
        total = total + level[block, i]
        run0[i + 1] = total
    return total


def _child_level(level: np.ndarray, node: np.ndarray, m: np.ndarray) -> None:
    """In each block ``node[j]`` of ``level``, descend to the child holding mass ``m[j]``:
    ``node[j]`` becomes that child's index one level down, ``m[j]`` the mass left in it.

    No branch depends on the data but the rare clamp: the child is a count of compares and
    the mass below it a load. Written as selects, these compiled to branches that the CPU
    mispredicted at every draw: two levels of a 256-draw descent took 21 µs with fresh masses
    at each call, 9 µs so."""
    if _touch(level, node) < 0.0:  # never (sums are >= 0); the test keeps the loads from being optimised away
        m[0] = np.nan
    run0 = np.zeros(K + 1)
    for j in range(node.shape[0]):
        block, mass = node[j], m[j]
        total = _running_sums(level, block, run0)
        # The numpy path's clamp, min(mass, nextafter(total, 0)), changes the mass only when
        # it is >= the total: no float lies between the two.
        if mass >= total:
            mass = np.nextafter(total, 0.0)
        child = 0
        for i in range(1, K):  # the running sums but the last that are <= the mass
            child += run0[i] <= mass
        m[j] = mass - run0[child]
        node[j] = block * K + child


def _top(prefix0: np.ndarray, mass: np.ndarray, node: np.ndarray, m: np.ndarray) -> None:
    """For each mass (clamped below the total), ``node[j]``: the first top node ``i`` with
    ``prefix0[i + 1] > mass``, and ``m[j]``: the mass left within it.

    A bisection of every draw at once, one halving step for all of them before the next, and
    a step is arithmetic, not a branch: each draw's steps wait on their loads, but the draws do
    not wait on each other, and the CPU never guesses a direction. A 256-draw search took 7.8 µs
    as a walk on from the previous draw and a branching bisection, 3.7 µs so."""
    top, n = prefix0.shape[0] - 1, mass.shape[0]
    limit = np.nextafter(prefix0[top], 0.0)
    for j in range(n):
        node[j], m[j] = 0, min(mass[j], limit)
    size = top  # node[j]'s answer lies in node[j] .. node[j] + size - 1 (a mass < the total)
    while size > 1:
        half = size // 2
        for j in range(n):
            node[j] += half * (prefix0[node[j] + half] <= m[j])
        size -= half
    for j in range(n):
        m[j] -= prefix0[node[j]]


def _find(prefix0: np.ndarray, sums: tuple[np.ndarray, ...], mass: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``SumMinTree.find``: the top's prefix sums searched (``searchsorted(..., "right")``),
    then each level descended; returns the leaves and their values."""
    n = mass.shape[0]
    node, m = np.empty(n, dtype=np.int64), np.empty(n)
    _top(prefix0, mass, node, m)
    for level in range(len(sums) - 1, -1, -1):
        _child_level(sums[level], node, m)
    value = np.empty(n)
    for j in range(n):
        value[j] = sums[0][node[j] // K, node[j] % K]
    return node, value


def _block_sum(level: np.ndarray, block: int) -> float:
    """Block ``block``'s children summed in order."""
    total: float = level[block, 0]
    for i in range(1, K):
        total = total + level[block, i]
    return total


def _block_min(values: np.ndarray, block: int, positive: bool) -> float:
    """The smallest of block ``block``'s children (of those > 0 when ``positive``: the leaves)."""
    low = np.inf
    for i in range(K):
        value = values[block, i]
        if positive:  # a select, not a branch: which child is lowest is unpredictable
            value = value if value > 0.0 else np.inf
        low = min(low, value)
    return low


def _set_leaves(sums: tuple[np.ndarray, ...], mins: tuple[np.ndarray, ...], top_sums: np.ndarray,
                top_mins: np.ndarray, prefix: np.ndarray, indices: np.ndarray, values: np.ndarray) -> None:
    """``SumMinTree.set``: the leaves (the last of duplicates wins), each level above them
    recomputed from its children once the level below is complete, then the top's prefix."""
    depth, n = len(sums), indices.shape[0]
    for j in range(n):
        sums[0][indices[j] // K, indices[j] % K] = values[j]
    cols = indices // K
    for level in range(depth):
        if _touch(sums[level], cols) < 0.0:  # never: see _child_level
            return
        for j in range(n):
            block = cols[j]
            total = _block_sum(sums[level], block)
            low = _block_min(sums[0], block, True) if level == 0 else _block_min(mins[level], block, False)
            if level == depth - 1:
                top_sums[block], top_mins[block] = total, low
            else:
                sums[level + 1][block // K, block % K] = total
                mins[level + 1][block // K, block % K] = low
        cols = cols // K
    _prefix(top_sums, prefix)


def _prefix(values: np.ndarray, out: np.ndarray) -> None:
    """``np.cumsum(values, out=out)``: sequential."""
    total = values[0]
    out[0] = total
    for i in range(1, values.shape[0]):
        total = total + values[i]
        out[i] = total
