"""Batched sum and min trees over flat numpy arrays: the index of the replay buffer.

A binary segment tree walked one item at a time (RLlib's) costs a Python loop of
``log2(n)`` steps per item. Here every operation handles a whole batch with a fixed
handful of numpy calls per level, and there are few levels:

- the leaves, in blocks of ``K`` (16);
- ``K``-ary levels of block sums and block minima, until a level has at most ``TOP``
  (4096) nodes;
- over that top level, a prefix-sum array, so a descent starts with one
  ``searchsorted`` instead of walking the highest levels.

2^20 leaves take two ``K``-ary levels below a top of 4096. Each level is a ``(blocks, K)``
array (node ``i`` is flat element ``i``, and a block is two cache lines); the blocks a batch
touches are gathered and transposed into one contiguous ``(K, batch)`` array, whose
per-block sums, minima and running sums are then row operations over the whole batch.

An update recomputes the touched blocks from their children (never by adding deltas, so
no rounding drift accumulates). numpy may sum a block in another order depending on the
batch's shape, so the inner levels are saved with the leaves (``state``/``load``): a
restored tree is the same bit for bit, and so are the samples it draws. A descent
picks, in each block, the child whose running-sum range holds the remaining mass; the
mass is clamped below the block's total at every step, and running sums are
sequential, so rounding can never select a leaf of value 0.
"""

from __future__ import annotations

import numpy as np

from actors import _kernels, _pages

K = _kernels.K  # the fan-out: the kernels compile it in
TOP = 4096


def _level_sizes(capacity: int) -> list[int]:
    """Node counts per level: leaves and k-ary levels (multiples of K), then the top."""
    sizes = [-(-max(capacity, 1) // K) * K]
    while sizes[-1] // K > TOP:
        sizes.append(-(-(sizes[-1] // K) // K) * K)
    sizes.append(sizes[-1] // K)
    return sizes


def _gather(level: np.ndarray, blocks: np.ndarray) -> np.ndarray:
    """The rows ``blocks`` of a ``(blocks, K)`` level, as a contiguous ``(K, len(blocks))``."""
    return np.take(level, blocks, axis=0).T.copy()


class _Descent:
    """Work arrays of one batch size's descent, with their row views made once.

    A 256-draw descent is a few dozen numpy calls on 256-element rows, where making the
    views and arrays costs as much as the arithmetic; reusing them makes it ~30% faster.
    Row 0 of ``running`` stays zero and row ``i + 1`` is the running sum through child
    ``i``, so the mass below the chosen child is one gather, with no branch for child 0.
    """

    # Above this batch size the per-call costs do not matter; do not keep big arrays alive.
    KEEP = 4096

    def __init__(self, n: int) -> None:
        self.n = n
        self.running = np.zeros((K + 1, n))
        rows = self.running
        self.steps = [(rows[i - 1], rows[i]) for i in range(2, K + 1)]
        self.children, self.through_all_but_last, self.block_total = rows[1:], rows[1:K], rows[K]
        self.flat = rows.ravel()
        self.rows = np.arange(n)
        self.at = np.empty(n, dtype=np.int64)
        self.below = np.empty((K - 1, n), dtype=bool)

    def child(self, level: np.ndarray, node: np.ndarray, m: np.ndarray) -> np.ndarray:
        """In each block ``node`` of ``level``, the child holding mass ``m`` (m is reduced)."""
        self.children[...] = np.take(level, node, axis=0).T
        for before, row in self.steps:  # strictly in row order: see the module docstring
            np.add(before, row, out=row)
        np.minimum(m, np.nextafter(self.block_total, 0.0), out=m)
        # Running sums never decrease, so the child is how many of them are <= m.
        np.less_equal(self.through_all_but_last, m, out=self.below)
        child: np.ndarray = self.below.sum(axis=0)
        np.multiply(child, self.n, out=self.at)
        self.at += self.rows
        m -= self.flat[self.at]
        return child


class SumMinTree:
    """Sum and min over ``capacity`` non-negative leaves; empty leaves are 0 (sum) and inf (min).

    The leaves are stored once (``sums[0]``); block minima start at level 1, computed from
    the leaves over their positive values.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        sizes = _level_sizes(capacity)
        # Off huge pages, populated now: a fill then costs the same in every process (_pages).
        self.sums = [_pages.zeros((n // K, K)) for n in sizes[:-1]]
        self.mins = [np.empty((0, K))] + [_pages.full((n // K, K), np.inf) for n in sizes[1:-1]]
        self.top_sums: np.ndarray = np.zeros(sizes[-1])
        self.top_mins: np.ndarray = np.full(sizes[-1], np.inf)
        # A leading 0, so that "mass below top node i" is prefix0[i] with no branch.
        self.prefix0 = np.zeros(sizes[-1] + 1)
        self.prefix = self.prefix0[1:]
        self._last_descent: _Descent | None = None
        if _kernels.enabled():  # loaded now, from numba's cache: a first sample pays nothing
            _kernels.prepare(len(self.sums))

    @property
    def total(self) -> float:
        return float(self.prefix[-1])

    @property
    def min(self) -> float:
        """The smallest positive leaf (inf when there is none)."""
        return float(self.top_mins.min())

    @property
    def leaves(self) -> np.ndarray:
        """All leaf values (a read-only view)."""
        view = self.sums[0].ravel()[: self.capacity]
        view.flags.writeable = False
        return view

    def values(self, indices: np.ndarray) -> np.ndarray:
        """The leaf values at ``indices``."""
        values: np.ndarray = self.sums[0].ravel()[indices]
        return values

    def set(self, indices: np.ndarray, values: np.ndarray) -> None:
        """Set the leaves at ``indices`` (duplicates: the last value wins) and fix the levels."""
        if _kernels.enabled():
            _kernels.set_leaves(tuple(self.sums), tuple(self.mins), self.top_sums, self.top_mins, self.prefix,
                                np.asarray(indices, dtype=np.int64), np.asarray(values, dtype=np.float64))
            return
        self.sums[0].ravel()[indices] = values
        cols = indices // K
        for level in range(len(self.sums)):
            blocks = _gather(self.sums[level], cols)
            mins = _positive_min(blocks, axis=0) if level == 0 else \
                _gather(self.mins[level], cols).min(axis=0)
            cols = self._store(level + 1, cols, blocks.sum(axis=0), mins)
        np.cumsum(self.top_sums, out=self.prefix)

    def set_range(self, start: int, values: np.ndarray) -> None:
        """Set the contiguous leaves ``start .. start + len(values)``: slices, no gathers."""
        lo, hi = start, start + len(values)
        if lo == hi:
            return
        self.sums[0].ravel()[lo:hi] = values
        for level in range(len(self.sums)):
            lo, hi = lo // K, (hi - 1) // K + 1
            blocks = self.sums[level][lo:hi].T.copy()
            mins = _positive_min(blocks, axis=0) if level == 0 else self.mins[level][lo:hi].min(axis=1)
            self._store(level + 1, slice(lo, hi), blocks.sum(axis=0), mins)
        # Only the prefix from the first changed top node on can change.
        np.cumsum(self.top_sums[lo:], out=self.prefix[lo:])
        self.prefix[lo:] += self.prefix0[lo]

    def rebuild(self, leaves: np.ndarray) -> None:
        """Reset every leaf from ``leaves`` (the rest empty) and recompute every level."""
        self.sums[0][:] = 0.0
        self.sums[0].ravel()[: len(leaves)] = leaves
        self.set_range(0, self.sums[0].ravel().copy())

    def state(self) -> dict[str, np.ndarray]:
        """The inner levels (everything but the leaves), for an exact restore."""
        out = {f"sums{i}": a for i, a in enumerate(self.sums) if i}
        out.update({f"mins{i}": a for i, a in enumerate(self.mins) if i})
        out.update(top_sums=self.top_sums, top_mins=self.top_mins, prefix=self.prefix)
        return out

    def load(self, leaves: np.ndarray, state: dict[str, np.ndarray]) -> None:
        """Restore the leaves and the inner levels saved by :meth:`state`."""
        self.sums[0][:] = 0.0
        self.sums[0].ravel()[: len(leaves)] = leaves
        for i in range(1, len(self.sums)):
            self.sums[i][:], self.mins[i][:] = state[f"sums{i}"], state[f"mins{i}"]
        self.top_sums[:], self.top_mins[:] = state["top_sums"], state["top_mins"]
        self.prefix[:] = state["prefix"]

    def _store(self, level: int, nodes: np.ndarray | slice, sums: np.ndarray,
               mins: np.ndarray) -> np.ndarray:
        """Write the aggregates of ``nodes`` at ``level``; return the blocks above them."""
        if level == len(self.sums):
            self.top_sums[nodes], self.top_mins[nodes] = sums, mins
            return np.empty(0, dtype=np.int64)
        self.sums[level].ravel()[nodes] = sums
        self.mins[level].ravel()[nodes] = mins
        return nodes // K if isinstance(nodes, np.ndarray) else np.empty(0, dtype=np.int64)

    def find(self, mass: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Leaf index and value of each prefix ``mass`` in ``[0, total)``, the batch at once.

        Returns, for each ``m``, the leaf ``i`` with ``sum(leaves[:i]) <= m < sum(leaves[:i+1])``
        (up to rounding) and its value; a leaf of value 0 is never returned.
        """
        if _kernels.enabled():
            found: tuple[np.ndarray, np.ndarray] = _kernels.find(self.prefix0, tuple(self.sums),
                                                                 np.asarray(mass, dtype=np.float64))
            return found
        m = np.minimum(mass, np.nextafter(self.prefix[-1], 0.0))
        node = np.searchsorted(self.prefix, m, side="right")
        m -= self.prefix0[node]
        descent = self._descent(len(m))
        for level in range(len(self.sums) - 1, -1, -1):
            child = descent.child(self.sums[level], node, m)
            node *= K
            node += child
        return node, self.sums[0].ravel()[node]

    def _descent(self, n: int) -> _Descent:
        if self._last_descent is not None and self._last_descent.n == n:
            return self._last_descent
        descent = _Descent(n)
        if n <= _Descent.KEEP:
            self._last_descent = descent
        return descent


def _positive_min(blocks: np.ndarray, *, axis: int) -> np.ndarray:
    """The smallest positive value along ``axis`` (inf where there is none)."""
    mins: np.ndarray = blocks.min(axis=axis)
    if mins.min(initial=np.inf) > 0.0:  # no empty or zero leaf: the common case, one pass
        return mins
    positive: np.ndarray = np.where(blocks > 0, blocks, np.inf).min(axis=axis)
    return positive


#: The deepest tree :func:`warm_kernels` prepares: 4 levels below the top hold 2^28 leaves.
WARM_DEPTHS = range(1, 5)


def warm_kernels() -> bool:
    """Compile the kernels (or load them from numba's cache) for every tree depth up to
    :data:`WARM_DEPTHS`, into the cache; ``make install`` runs it, so that no process compiles
    when it builds a buffer. Returns whether the compiled path is on (the default when numba
    is importable; ``RAYCHAOS_TREES`` may force either)."""
    if not _kernels.enabled():
        return False
    for depth in WARM_DEPTHS:
        _kernels.prepare(depth)
    return True
