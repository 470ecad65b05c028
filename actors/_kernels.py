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

Which path runs (``RAYCHAOS_TREES``, read at every call): unset, the compiled kernels when
numba is importable and has somewhere to keep its cache, else numpy; ``compiled`` or ``numpy``
forces one (``compiled`` without numba raises :class:`~chaos.errors.MissingExtra`). Loading
numba costs a process ~120 MiB and ~0.5 s even from its cache: the trees pay it when they are
built (:func:`prepare`), never at a first sample.

Where the compiled code is kept: numba's cache (``cache=True``) goes to ``__pycache__`` beside
this module when that is writable (``make`` fills it at install), else to ``NUMBA_CACHE_DIR``
or the user's cache directory (``~/.cache/numba``), where the first process to build a tree
compiles for ~5 s and every later one loads. numba does not read a ``__pycache__`` it cannot
write, even one filled at install. With no writable place at all, numba refuses ``cache=True``
(a RuntimeError); then the default is numpy, which pays nothing, and a forced ``compiled``
compiles in memory, in every process.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, Literal

import numpy as np

from chaos._errors import InvalidConfig, MissingExtra

__all__ = ["CHOICES", "SWITCH", "enabled", "find", "prepare", "requested", "set_leaves", "why_numpy"]


#: The environment variable that picks the trees' path; its values are :data:`CHOICES`.
SWITCH = "RAYCHAOS_TREES"
CHOICES = ("compiled", "numpy")
TreePath = Literal["compiled", "numpy"]
BAD_SWITCH = ("{switch}={value!r} (from the environment) is not a path of the replay buffer's trees: "
              "give one of {choices}, or unset it for the default (compiled when numba is importable)")
NO_NUMBA = ("{switch}=compiled needs numba, which {why}; pip install 'raychaos[fast]', "
            "or unset {switch} for the default (numpy without numba)")
_compiled: dict[str, Any] = {}
_refused: list[str] = []  # why the compiled kernels are not on, once tried
_prepared: set[int] = set()  # tree depths whose kernels are loaded in this process


def requested() -> TreePath | None:
    """The path ``RAYCHAOS_TREES`` forces, or None when it is unset (or empty): the default.

    Raises:
        InvalidConfig: it holds anything but ``compiled`` or ``numpy``.
    """
    value = os.environ.get(SWITCH, "")
    if value == "compiled":
        return "compiled"
    if value == "numpy":
        return "numpy"
    if value:
        raise InvalidConfig(BAD_SWITCH.format(switch=SWITCH, value=value, choices=list(CHOICES)))
    return None


def enabled() -> bool:
    """Whether the compiled kernels run: not forced off, and numba loaded (at the first call
    that asks, from numba's on-disk cache; ``make`` fills it at install).

    Raises:
        InvalidConfig: ``RAYCHAOS_TREES`` holds a value that is not a choice.
        MissingExtra: ``RAYCHAOS_TREES=compiled`` and numba is not importable.
    """
    asked = requested()  # read each time: a test or a user may switch
    if asked == "numpy":
        return False
    if not _compiled and (not _refused or asked == "compiled"):  # forced: try again, say why
        _load(forced=asked == "compiled")
    if _compiled:
        return True
    if asked == "compiled":
        raise MissingExtra(NO_NUMBA.format(switch=SWITCH, why=_refused[-1]))
    return False


def why_numpy() -> str | None:
    """Why the default path is numpy in this process (None: it is not, or not yet decided)."""
    return _refused[-1] if _refused and not _compiled else None


def _load(*, forced: bool) -> None:
    """Import numba and wrap the kernels; record why not in ``_refused``."""
    try:
        import numba
    except ImportError as exc:  # numba is the optional `fast` extra
        _refused.append(f"is not importable ({exc})")
        return
    try:
        _wrap(numba.njit, cache=True)
    except RuntimeError as exc:  # "cannot cache function ...: no locator available"
        if not forced:  # compiling in every process (~5 s) is no default: numpy pays nothing
            _refused.append(f"has nowhere writable to keep its cache ({exc})")
            return
        _wrap(numba.njit, cache=False)


def _wrap(njit: Callable[..., Any], *, cache: bool) -> None:
    """Replace the module's kernels by numba dispatchers (the kernels call each other through
    the module's globals, which numba resolves when it compiles)."""
    # The helpers run once per draw or per block, where a call from one kernel to another
    # costs: a 256-draw level's choices took 9.7 µs as calls, 4.8 µs inlined (~19 ns a call).
    wrapped = {name: njit(cache=cache, nogil=True, inline="always")(_PYTHON[name]) for name in _INLINED}
    wrapped.update({name: njit(cache=cache, nogil=True)(_PYTHON[name]) for name in _KERNELS})
    globals().update(wrapped)
    _compiled.update(wrapped)


def prepare(depth: int) -> None:
    """Load (or compile) both kernels for trees of ``depth`` levels, so that no later call does:
    numba loads a signature at its first call, which would be a buffer's first sample.
    Call only when :func:`enabled`."""
    if depth in _prepared:
        return
    levels = tuple(np.zeros((1, K)) for _ in range(depth))  # the types matter, not the sizes
    find(np.zeros(2), levels, np.empty(0))
    top_sums, top_mins, prefix = np.zeros(1), np.zeros(1), np.zeros(1)
    set_leaves(levels, levels, top_sums, top_mins, prefix, np.empty(0, dtype=np.int64), np.empty(0))
    _prepared.add(depth)


def _writable(array: np.ndarray, dtype: type) -> np.ndarray:
    """``array`` as a writable, contiguous array of ``dtype``: the one signature :func:`prepare`
    loads (a read-only array, as a packed request's indices arrive, is another signature)."""
    out: np.ndarray = np.require(array, dtype, ["C", "W"])
    return out


def find(prefix0: np.ndarray, sums: tuple[np.ndarray, ...], mass: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The compiled ``SumMinTree.find`` (call only when :func:`enabled`)."""
    result: tuple[np.ndarray, np.ndarray] = _compiled["_find"](prefix0, sums, _writable(mass, np.float64))
    return result


def set_leaves(sums: tuple[np.ndarray, ...], mins: tuple[np.ndarray, ...], top_sums: np.ndarray,
               top_mins: np.ndarray, prefix: np.ndarray, indices: np.ndarray, values: np.ndarray) -> None:
    """The compiled ``SumMinTree.set`` (call only when :func:`enabled`)."""
    _compiled["_set_leaves"](sums, mins, top_sums, top_mins, prefix, _writable(indices, np.int64),
                             _writable(values, np.float64))


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


_PYTHON: dict[str, Callable[..., Any]] = {name: globals()[name] for name in _KERNELS + _INLINED}
