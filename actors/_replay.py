"""Prioritized experience replay (Schaul et al., 2015) on batched sum/min trees.

P(i) = p_i^α / Σ_k p_k^α with p_i = |δ_i| + ε; importance weights
w_i = (N·P(i))^-β / max_k w_k, where the maximum is over the whole buffer (the
min tree's smallest probability), as in Schaul et al.'s reference implementations and
cpprb. With α = 0 sampling is uniform. Storage is columnar, allocated on the first add
from that batch's columns and checked against that schema ever after; eviction is FIFO
(a ring). Every hot path is a fixed number of numpy calls per batch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from actors import _pages
from actors._codec import StateTree
from actors._trees import SumMinTree
from chaos._errors import InvalidConfig
from chaos._json import JsonValue

__all__ = ["EmptyBufferError", "PrioritizedReplayBuffer", "ReplayStats", "SchemaError"]


#: The names sample() gives its own arrays: no batch column may take them.
RESERVED_COLUMNS = frozenset({"weights", "indices"})


class SchemaError(InvalidConfig):
    """A batch's columns do not match the buffer's schema; nothing was stored."""


class EmptyBufferError(InvalidConfig, LookupError):
    """Sampling was asked of a buffer that holds no items."""


@dataclass(frozen=True, slots=True)
class ReplayStats:
    """Counters of a replay buffer."""

    size: int
    capacity: int
    cursor: int
    total_writes: int
    samples: int
    updates: int
    max_priority: float


@dataclass(frozen=True, slots=True)
class _Column:
    dtype: np.dtype
    shape: tuple[int, ...]


def _check_fraction(name: str, value: float, *, upper: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value) \
            or value < 0 or (upper is not None and value > upper):
        bound = f"in [0, {upper:g}]" if upper is not None else "finite and >= 0"
        raise InvalidConfig(f"`{name}` must be {bound}, got {value!r}")
    return float(value)


class PrioritizedReplayBuffer:
    """A prioritized replay buffer of fixed capacity; see the module docstring.

    Args:
        capacity: how many transitions it holds; the oldest is overwritten first.
        alpha: how much prioritization is used (0: uniform).
        beta: default importance-sampling exponent for :meth:`sample`.
        eps: added to every priority so that no item becomes unsampleable.
        seed: seed of the sampling RNG (PCG64); its state is part of ``state_dict``.
    """

    def __init__(self, capacity: int, *, alpha: float = 0.6, beta: float = 0.4,
                 eps: float = 1e-6, seed: int | None = None) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 1:
            raise InvalidConfig(f"`capacity` must be a whole number >= 1, got {capacity!r}")
        self.capacity = int(capacity)
        self.alpha = _check_fraction("alpha", alpha)
        self.beta = _check_fraction("beta", beta, upper=1.0)
        self.eps = _check_fraction("eps", eps)
        if self.eps == 0:
            raise InvalidConfig("`eps` must be > 0, got 0: an item of priority 0 can never be sampled")
        self._rng = np.random.Generator(np.random.PCG64(seed))
        self._schema: dict[str, _Column] | None = None
        self._columns: dict[str, np.ndarray] = {}
        self._tree = SumMinTree(self.capacity)
        self._cursor = self._size = self._writes = self._samples = self._updates = 0
        self._max_priority = 1.0
        self._dirty = _pages.zeros(self.capacity, dtype=bool)  # slots changed since mark_clean()

    def __len__(self) -> int:
        return self._size

    # -- adding --------------------------------------------------------------------------------

    def add(self, batch: Mapping[str, np.ndarray], priorities: np.ndarray | None = None) -> np.ndarray:
        """Store a batch of transitions; return their slot indices.

        Items without a priority get the largest priority seen so far.

        Raises:
            SchemaError: the columns' names, dtypes or trailing shapes differ from the first
                batch's, the columns differ in length, or a column takes a name sample()
                returns (``"weights"``, ``"indices"``); nothing is stored.
            InvalidConfig: a priority is NaN, infinite or negative; nothing is stored.
        """
        arrays, n = self._validate_batch(batch)
        prios = None if priorities is None else self._validate_add_priorities(priorities, n)
        if n == 0:
            return np.empty(0, dtype=np.int64)
        if self._schema is None:
            self._allocate(arrays)
        if n > self.capacity:  # only the newest `capacity` items would survive anyway
            arrays = {k: v[-self.capacity:] for k, v in arrays.items()}
            prios = None if prios is None else prios[-self.capacity:]
            skipped, n = n - self.capacity, self.capacity
            self._advance(skipped)
        return self._write(arrays, prios, n)

    def _validate_batch(self, batch: Mapping[str, np.ndarray]) -> tuple[dict[str, np.ndarray], int]:
        if not isinstance(batch, Mapping) or not batch:
            raise SchemaError(f"a batch must be a non-empty mapping of column name to array, got {batch!r:.80}")
        reserved = sorted(RESERVED_COLUMNS & set(batch))
        if reserved:  # sample() returns its own arrays under these names: a column would be lost
            raise SchemaError(f"column {reserved[0]!r} is reserved: sample() returns the importance "
                              f"weights and slot indices as {sorted(RESERVED_COLUMNS)}; rename yours "
                              f"(e.g. {reserved[0] + '_' !r}); nothing was stored")
        arrays = {k: np.asarray(v) for k, v in batch.items()}
        lengths = {k: (v.shape[0] if v.ndim else -1) for k, v in arrays.items()}
        if len(set(lengths.values())) != 1 or -1 in lengths.values():
            raise SchemaError(f"every column needs the same leading (batch) length, got {lengths}")
        if self._schema is not None:
            self._check_schema(arrays)
        n = next(iter(lengths.values()))
        return arrays, n

    def _check_schema(self, arrays: dict[str, np.ndarray]) -> None:
        assert self._schema is not None
        if set(arrays) != set(self._schema):
            raise SchemaError(
                f"batch columns {sorted(arrays)} differ from the buffer's {sorted(self._schema)}; "
                "add the same columns as the first batch")
        for name, col in self._schema.items():
            got = arrays[name]
            if got.dtype != col.dtype or got.shape[1:] != col.shape:
                raise SchemaError(
                    f"column {name!r} is {got.dtype}{list(got.shape[1:])}, the buffer stores "
                    f"{col.dtype}{list(col.shape)}; convert it (e.g. .astype({str(col.dtype)!r}))")

    def _validate_add_priorities(self, priorities: np.ndarray, n: int) -> np.ndarray:
        prios = np.asarray(priorities, dtype=np.float64).reshape(-1)
        if len(prios) != n:
            raise InvalidConfig(f"got {len(prios)} priorities for a batch of {n}; give one per item")
        _check_priorities(prios)
        return prios + self.eps

    def _allocate(self, arrays: dict[str, np.ndarray]) -> None:
        self._schema = {k: _Column(v.dtype, v.shape[1:]) for k, v in arrays.items()}
        # Off huge pages and populated at once: a fill costs the same in every process (_pages).
        self._columns = {k: _pages.zeros((self.capacity, *c.shape), dtype=c.dtype)
                         for k, c in self._schema.items()}

    def _advance(self, n: int) -> None:
        self._cursor = (self._cursor + n) % self.capacity
        self._writes += n

    def _adopt(self, column: np.ndarray, n: int) -> np.ndarray:
        """A full-capacity column as loaded (no second copy of the state); else a copy."""
        if n == self.capacity and column.flags.writeable and column.flags.c_contiguous:
            return column
        out = _pages.zeros((self.capacity, *column.shape[1:]), dtype=column.dtype)
        out[:n] = column[:n]
        return out

    def _write(self, arrays: dict[str, np.ndarray], prios: np.ndarray | None, n: int) -> np.ndarray:
        start = self._cursor
        first = min(n, self.capacity - start)  # a ring: at most two contiguous pieces
        for name, column in self._columns.items():
            column[start:start + first] = arrays[name][:first]
            if n > first:
                column[: n - first] = arrays[name][first:]
        weights = self._add_weights(prios, n)
        self._dirty[start:start + first] = True
        self._tree.set_range(start, weights[:first])
        if n > first:
            self._dirty[: n - first] = True
            self._tree.set_range(0, weights[first:])
        self._size = min(self._size + n, self.capacity)
        self._advance(n)
        slots = np.arange(start, start + n, dtype=np.int64)
        return slots % self.capacity if n > first else slots

    def _add_weights(self, prios: np.ndarray | None, n: int) -> np.ndarray:
        """p^α of new items; items without a priority (``None``: the whole batch) get the
        largest seen so far, all one power (the hot path: no per-item work)."""
        if prios is None:
            return np.full(n, self._max_priority ** self.alpha)
        uniform = prios[0] if prios[0] == prios[-1] and (prios == prios[0]).all() else None
        weights = np.full(n, uniform ** self.alpha) if uniform is not None else prios ** self.alpha
        self._max_priority = max(self._max_priority, float(prios.max()))
        return weights

    # -- sampling --------------------------------------------------------------------------

    def sample(self, batch_size: int, *, beta: float | None = None) -> dict[str, np.ndarray]:
        """Draw ``batch_size`` items with replacement, with probability P(i), in slot order.

        Returns every column plus ``"indices"`` (slots, for :meth:`update_priorities`) and
        ``"weights"`` (importance-sampling weights, float64, max 1 over the buffer).

        Raises:
            EmptyBufferError: the buffer holds nothing yet.
        """
        b = self.check_sample(batch_size, beta)
        tree = self._tree
        # Sorted masses visit the trees and columns in address order: fewer cache misses.
        indices, leaf = tree.find(np.sort(self._rng.random(batch_size)) * tree.total)
        out = {name: column.take(indices, axis=0) for name, column in self._columns.items()}
        # w_i / max_k w_k = (P_i / P_min)^-β = (leaf_i / leaf_min)^-β
        out["weights"] = (leaf / tree.min) ** -b
        out["indices"] = indices
        self._samples += 1
        return out

    def check_sample(self, batch_size: int, beta: float | None = None) -> float:
        """What :meth:`sample` checks before it draws; returns the beta it would use.

        Raises:
            EmptyBufferError: the buffer holds nothing yet.
            InvalidConfig: a batch size below 1 or a beta outside [0, 1].
        """
        if self._size == 0:
            raise EmptyBufferError("cannot sample from an empty replay buffer; add transitions first")
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
            raise InvalidConfig(f"`batch_size` must be a whole number >= 1, got {batch_size!r}")
        return self.beta if beta is None else _check_fraction("beta", beta, upper=1.0)

    # -- priorities ------------------------------------------------------------------------

    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        """Set new priorities (|TD error|, before ε) for items at ``indices``.

        Raises:
            InvalidConfig: a priority is NaN, infinite or negative, an index is out of range
                or not a stored item, or the lengths differ; nothing is changed.
        """
        idx = np.asarray(indices).reshape(-1)
        prios = np.array(priorities, dtype=np.float64).reshape(-1)  # a copy: changed in place below
        self._check_indices(idx, len(prios))
        highest = _check_priorities(prios)
        if len(idx):
            prios += self.eps
            top = highest + self.eps  # the same float as max(prios + eps): rounding is monotone
            np.power(prios, self.alpha, out=prios)
            self._tree.set(idx, prios)
            self._dirty[idx] = True
            self._max_priority = max(self._max_priority, top)
        self._updates += 1

    def _check_indices(self, idx: np.ndarray, count: int) -> None:
        if len(idx) != count:
            raise InvalidConfig(f"got {len(idx)} indices and {count} priorities; give one each")
        if not len(idx):
            return
        if idx.dtype.kind not in "iu" or idx.min() < 0 or idx.max() >= self._size:
            bad = idx[(idx < 0) | (idx >= self._size)] if idx.dtype.kind in "iu" else idx
            raise InvalidConfig(
                f"indices must be integer slots of stored items in [0, {self._size}), "
                f"got {bad[:5].tolist()}; pass the \"indices\" that sample() returned")

    # -- state -----------------------------------------------------------------------------

    def stats(self) -> ReplayStats:
        return ReplayStats(size=self._size, capacity=self.capacity, cursor=self._cursor, total_writes=self._writes,
                           samples=self._samples, updates=self._updates, max_priority=self._max_priority)

    def column(self, name: str) -> np.ndarray:
        """A copy of the stored rows of column ``name``, by slot (for checks and tests)."""
        if name not in self._columns:
            raise InvalidConfig(f"no column {name!r}; the buffer stores {sorted(self._columns)}")
        return self._columns[name][: self._size].copy()

    def state_dict(self) -> StateTree:
        """Everything a restored buffer needs to behave identically (same samples, bit for bit).

        The leaves hold p^α; the trees' inner levels are stored too (see ``SumMinTree.state``).
        """
        n = self._size
        return {
            "config": {"capacity": self.capacity, "alpha": self.alpha, "beta": self.beta,
                       "eps": self.eps},
            "schema": self.state_dict_schema(),
            "columns": {k: v[:n] for k, v in self._columns.items()},
            "leaves": self._tree.leaves[:n].copy(),
            "tree": {k: v.copy() for k, v in self._tree.state().items()},
            **self._scalars(),
        }

    def _scalars(self) -> dict[str, Any]:
        return {"counters": {"cursor": self._cursor, "size": self._size, "writes": self._writes,
                             "samples": self._samples, "updates": self._updates,
                             "max_priority": self._max_priority},
                "rng": self._rng.bit_generator.state}

    def delta_state_dict(self) -> StateTree:
        """The slots changed since :meth:`mark_clean` (rows and leaves), the inner tree levels
        and the scalars: applied on the previous state by :meth:`load_delta_state_dict`."""
        slots = np.flatnonzero(self._dirty)
        return {"slots": slots,
                "columns": {k: np.take(v, slots, axis=0) for k, v in self._columns.items()},
                "leaves": self._tree.values(slots),
                "tree": {k: v.copy() for k, v in self._tree.state().items()},
                "schema": self.state_dict_schema(), **self._scalars()}

    def state_dict_schema(self) -> dict[str, dict[str, JsonValue]]:
        """Each column's dtype and per-row shape, as the checkpoint records them."""
        return {k: {"dtype": c.dtype.str, "shape": list(c.shape)}
                for k, c in (self._schema or {}).items()}

    def load_delta_state_dict(self, delta: StateTree) -> None:
        """Apply a :meth:`delta_state_dict` on top of the state it was taken after."""
        slots = np.asarray(delta["slots"], dtype=np.int64)
        if self._schema is None and delta["schema"]:
            self._schema = {k: _Column(np.dtype(c["dtype"]), tuple(c["shape"]))
                            for k, c in delta["schema"].items()}
            self._allocate({k: np.empty((0, *c.shape), c.dtype) for k, c in self._schema.items()})
        for k, v in delta["columns"].items():
            self._columns[k][slots] = v
        self._tree.sums[0].ravel()[slots] = delta["leaves"]
        self._tree.load(self._tree.sums[0].ravel()[: self.capacity].copy(), delta["tree"])
        self._load_scalars(delta)

    def _load_scalars(self, state: Mapping[str, Any]) -> None:
        counters = state["counters"]
        self._cursor, self._size = int(counters["cursor"]), int(counters["size"])
        self._writes, self._samples = int(counters["writes"]), int(counters["samples"])
        self._updates, self._max_priority = int(counters["updates"]), float(counters["max_priority"])
        self._rng.bit_generator.state = state["rng"]

    def mark_clean(self) -> None:
        """Forget which slots changed: the caller has saved the state."""
        self._dirty[:] = False

    def load_state_dict(self, state: StateTree) -> None:
        """Restore from :meth:`state_dict`. The capacity must match; α, β, ε are taken from it."""
        config = state["config"]
        if int(config["capacity"]) != self.capacity:
            raise InvalidConfig(
                f"state has capacity {config['capacity']}, this buffer {self.capacity}; "
                "construct the buffer with the same capacity before loading")
        self.alpha, self.beta, self.eps = config["alpha"], config["beta"], config["eps"]
        counters = state["counters"]
        n = int(counters["size"])
        self._schema = {k: _Column(np.dtype(c["dtype"]), tuple(c["shape"]))
                        for k, c in state["schema"].items()} or None
        self._columns = {k: self._adopt(np.asarray(state["columns"][k]), n)
                         for k in (self._schema or {})}
        self._tree.load(np.asarray(state["leaves"], dtype=np.float64), state["tree"])
        self._load_scalars(state)
        self.mark_clean()


def _check_priorities(prios: np.ndarray) -> float:
    """Refuse NaN, infinite or negative priorities; return the largest (-inf when none)."""
    if not len(prios):
        return -np.inf
    low, high = prios.min(), prios.max()
    if low >= 0 and high < np.inf:  # a NaN makes both NaN, and NaN fails both comparisons
        return float(high)
    bad = ~np.isfinite(prios) | (prios < 0)
    raise InvalidConfig(
        f"priorities must be finite and >= 0, got {prios[bad][:5].tolist()} at positions "
        f"{np.flatnonzero(bad)[:5].tolist()}; clip or fix the TD errors first")
