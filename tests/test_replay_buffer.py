"""The prioritized replay core, in-process: distribution, weights, eviction, validation, state."""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors import PrioritizedReplayBuffer, _kernels
from actors._codec import decode, digest, encode
from actors._trees import K, SumMinTree
from actors.replay import EmptyBufferError, SchemaError
from chaos.errors import InvalidConfig
from conftest import scaled


def transitions(n: int, start: int = 0) -> dict[str, np.ndarray]:
    ids = np.arange(start, start + n)
    return {
        "obs": np.repeat(ids[:, None], 8, axis=1).astype(np.float32),
        "action": ids.astype(np.int64),
        "reward": ids.astype(np.float32),
        "done": np.zeros(n, dtype=np.float32),
    }


def chi_square_critical(df: int, z: float = 3.09) -> float:
    """Upper 0.1% point of chi-square(df), by the Wilson-Hilferty approximation."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_sampling_distribution_matches_p_i(alpha: float) -> None:
    rb = PrioritizedReplayBuffer(200, alpha=alpha, eps=1e-6, seed=1)
    rb.add(transitions(200))
    prios = np.random.default_rng(0).uniform(0.1, 5.0, 200)
    rb.update_priorities(np.arange(200), prios)
    p = (prios + 1e-6) ** alpha
    expected = p / p.sum()
    draws = np.concatenate([rb.sample(1000)["indices"] for _ in range(200)])
    observed = np.bincount(draws, minlength=200)
    chi2 = (((observed - expected * len(draws)) ** 2) / (expected * len(draws))).sum()
    assert chi2 < chi_square_critical(199)


def test_alpha_zero_is_uniform_whatever_the_priorities() -> None:
    rb = PrioritizedReplayBuffer(50, alpha=0.0, seed=2)
    rb.add(transitions(50), priorities=np.linspace(0.0, 100.0, 50))
    out = rb.sample(500)
    assert np.all(out["weights"] == 1.0)


def test_weights_follow_the_formula() -> None:
    rb = PrioritizedReplayBuffer(100, alpha=0.7, beta=0.5, eps=1e-3, seed=3)
    rb.add(transitions(60))
    prios = np.random.default_rng(1).uniform(0.0, 3.0, 60)
    rb.update_priorities(np.arange(60), prios)
    out = rb.sample(256, beta=0.9)
    p = (prios + 1e-3) ** 0.7
    probs = p / p.sum()
    w = (60 * probs) ** -0.9
    np.testing.assert_allclose(out["weights"], w[out["indices"]] / w.max(), rtol=1e-12)


def test_sampled_rows_are_the_stored_rows() -> None:
    rb = PrioritizedReplayBuffer(64, seed=4)
    rb.add(transitions(40))
    out = rb.sample(128)
    np.testing.assert_array_equal(out["action"], out["indices"])
    np.testing.assert_array_equal(out["obs"][:, 3], out["indices"].astype(np.float32))


def test_new_items_get_the_largest_priority_seen() -> None:
    rb = PrioritizedReplayBuffer(10, alpha=1.0, eps=0.0 + 1e-9, seed=5)
    rb.add(transitions(2), priorities=np.array([1.0, 7.0]))
    rb.add(transitions(1, start=2))
    assert rb._tree.values(np.array([2]))[0] == pytest.approx(7.0)


def test_ring_eviction_is_fifo() -> None:
    rb = PrioritizedReplayBuffer(5, seed=6)
    assert rb.add(transitions(3)).tolist() == [0, 1, 2]
    assert rb.add(transitions(4, start=3)).tolist() == [3, 4, 0, 1]
    assert len(rb) == 5
    stored = rb.state_dict()["columns"]["action"]
    assert stored.tolist() == [5, 6, 2, 3, 4]  # 0 and 1 were the oldest, overwritten first
    assert rb.add(transitions(12, start=7)).tolist() == [4, 0, 1, 2, 3]
    assert sorted(rb.state_dict()["columns"]["action"].tolist()) == [14, 15, 16, 17, 18]


def unchanged(rb: PrioritizedReplayBuffer) -> Any:
    return digest(rb.state_dict())


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        ({**transitions(3), "extra": np.zeros(3)}, r"batch columns \['action', 'done', 'extra'"),
        ({**transitions(3), "action": np.zeros(3, np.int32)},
         r"column 'action' is int32\[\], the buffer stores int64\[\]; convert it"),
        ({**transitions(3), "obs": np.zeros((3, 4), np.float32)},
         r"column 'obs' is float32\[4\], the buffer stores float32\[8\]"),
        ({**transitions(3), "reward": np.zeros(2, np.float32)},
         "every column needs the same leading"),
        ({}, "a batch must be a non-empty mapping"),
    ],
)
def test_schema_mismatch_stores_nothing(batch: dict[str, Any], message: str) -> None:
    rb = PrioritizedReplayBuffer(10, seed=7)
    rb.add(transitions(4))
    before = unchanged(rb)
    with pytest.raises(SchemaError, match=message):
        rb.add(batch)
    assert unchanged(rb) == before


@pytest.mark.parametrize("name", ["weights", "indices"])
def test_a_column_named_as_samples_own_arrays_is_refused_at_the_first_add(name: str) -> None:
    # sample() returns the importance weights and the slots under these names: a user column
    # called so would be overwritten in every sample, silently.
    rb = PrioritizedReplayBuffer(10, seed=7)
    with pytest.raises(SchemaError, match=f"column '{name}' is reserved: sample\\(\\) returns the importance "
                                          f"weights and slot indices as \\['indices', 'weights'\\]; rename yours"):
        rb.add({**transitions(3), name: np.ones(3)})
    assert len(rb) == 0


@pytest.mark.parametrize("bad", [np.nan, np.inf, -1.0])
def test_bad_priorities_change_nothing(bad: float) -> None:
    rb = PrioritizedReplayBuffer(10, seed=8)
    rb.add(transitions(4))
    before = unchanged(rb)
    with pytest.raises(InvalidConfig, match=r"priorities must be finite and >= 0, got \[.*\] at positions \[1\]"):
        rb.update_priorities(np.array([0, 1]), np.array([1.0, bad]))
    with pytest.raises(InvalidConfig, match="priorities must be finite"):
        rb.add(transitions(2), priorities=np.array([bad, 1.0]))
    assert unchanged(rb) == before


@pytest.mark.parametrize("indices", [[0, 4], [-1, 0], [0, 99]])
def test_out_of_range_indices_change_nothing(indices: list[int]) -> None:
    rb = PrioritizedReplayBuffer(10, seed=9)
    rb.add(transitions(4))
    before = unchanged(rb)
    with pytest.raises(InvalidConfig, match=r"indices must be integer slots of stored items in \[0, 4\)"):
        rb.update_priorities(np.array(indices), np.ones(2))
    assert unchanged(rb) == before


def test_empty_buffer_refuses_to_sample() -> None:
    with pytest.raises(EmptyBufferError, match="cannot sample from an empty replay buffer"):
        PrioritizedReplayBuffer(10).sample(4)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"capacity": 0}, "`capacity` must be a whole number >= 1, got 0"),
     ({"capacity": 4, "alpha": -0.1}, "`alpha` must be finite and >= 0, got -0.1"),
     ({"capacity": 4, "beta": 1.5}, r"`beta` must be in \[0, 1\], got 1.5"),
     ({"capacity": 4, "eps": 0.0}, "`eps` must be > 0")],
)
def test_bad_construction_is_refused(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidConfig, match=message):
        PrioritizedReplayBuffer(**kwargs)


def drive(rb: PrioritizedReplayBuffer, rng: np.random.Generator, steps: int) -> list[dict[str, np.ndarray]]:
    out = []
    for step in range(steps):
        rb.add(transitions(7, start=100 * step), priorities=rng.uniform(0, 2, 7) if step % 2 else None)
        batch = rb.sample(16)
        rb.update_priorities(batch["indices"], rng.uniform(0, 3, 16))
        out.append(batch)
    return out


def test_samples_are_bit_identical_after_load_state_dict() -> None:
    rb = PrioritizedReplayBuffer(50, alpha=0.6, seed=10)
    drive(rb, np.random.default_rng(0), 12)
    # Through the on-disk codec, as a checkpoint would carry it.
    restored = PrioritizedReplayBuffer(50, seed=999)
    restored.load_state_dict(decode(encode(rb.state_dict())))
    assert digest(restored.state_dict()) == digest(rb.state_dict())
    for a, b in zip(drive(rb, np.random.default_rng(1), 10), drive(restored, np.random.default_rng(1), 10)):
        assert a.keys() == b.keys()
        for key in a:
            assert np.array_equal(a[key], b[key]), key


def test_load_state_dict_refuses_another_capacity() -> None:
    state = PrioritizedReplayBuffer(8).state_dict()
    with pytest.raises(InvalidConfig, match="state has capacity 8, this buffer 9"):
        PrioritizedReplayBuffer(9).load_state_dict(state)


# -- the trees against a plain numpy reference -------------------------------------------------

PATHS = ["compiled", "numpy"]


@contextmanager
def trees(path: str) -> Iterator[None]:
    """Run the trees on one path, forced: numba's kernels (``make`` installs the ``fast``
    extra: this suite requires them) or numpy. The switch is put back afterwards: the
    session's cluster, started later, must not inherit it."""
    before = os.environ.pop(_kernels.SWITCH, None)
    try:
        os.environ[_kernels.SWITCH] = path
        assert _kernels.enabled() == (path == "compiled"), f"the trees are not on {path}: {_kernels.why_numpy()}"
        yield
    finally:
        os.environ.pop(_kernels.SWITCH, None)
        if before is not None:
            os.environ[_kernels.SWITCH] = before


def every_output(capacity: int, seed: int) -> list[np.ndarray]:
    """Every output of a random mix of adds (with and without priorities, wrapping, larger
    than the ring), samples and updates (duplicate slots included), then the whole state."""
    rng, rb = np.random.default_rng(seed), PrioritizedReplayBuffer(capacity, alpha=0.6, beta=0.4, seed=seed)
    out: list[np.ndarray] = []
    for step in range(60):
        n = capacity + 3 if step == 30 else int(rng.integers(1, 2 * K * K))
        prios = None if step % 3 else rng.random(n) * 4 * (rng.random(n) > 0.1)
        out.append(rb.add(transitions(n, start=step * 1000), prios))
        drawn = rb.sample(int(rng.integers(1, 300)))
        out += [drawn[k] for k in sorted(drawn)]
        slots = np.concatenate([drawn["indices"], drawn["indices"][:5]])
        slots.flags.writeable = step % 2 == 0  # a packed request's indices arrive read-only
        rb.update_priorities(slots, rng.random(len(slots)) * (rng.random(len(slots)) > 0.05))
    state = rb.state_dict()
    out += [state["leaves"], *(state["tree"][k] for k in sorted(state["tree"]))]
    # What the next delta checkpoint carries, and the priority new items get.
    return [*out, rb.delta_state_dict()["slots"], np.array([rb.stats().max_priority])]


@pytest.mark.parametrize("capacity", [64, 5000, 2**17 + 3, 2**20 + 7])  # 1, 1, 2 and 3 levels
def test_the_compiled_trees_are_the_numpy_trees_bit_for_bit(capacity: int) -> None:
    with trees("numpy"):
        want = every_output(capacity, seed=capacity)
    with trees("compiled"):
        got = every_output(capacity, seed=capacity)
    assert len(got) == len(want)
    different = [i for i, (a, b) in enumerate(zip(got, want)) if a.dtype != b.dtype or a.tobytes() != b.tobytes()]
    assert not different, f"outputs {different[:5]} differ between the compiled and the numpy trees"


@pytest.mark.parametrize("capacity", [2**20, 300 * K * K])  # tops of 4096 nodes and of 300
def test_the_compiled_search_finds_what_numpy_finds_for_any_masses(capacity: int) -> None:
    """find() takes any masses: unsorted, repeated, exactly on a top node's boundary (whole
    top nodes of zero make equal boundaries), just below one, and both ends; on a top of
    4096 nodes and on one of 300, which the compiled bisection halves unevenly."""
    rng = np.random.default_rng(7)
    leaves = rng.random(capacity) * (rng.random(capacity) > 0.2)
    tree = SumMinTree(capacity)
    span = capacity // len(tree.prefix)  # leaves under one top node
    for node in rng.choice(len(tree.prefix) - 1, 10, replace=False):
        leaves[node * span:(node + 1) * span] = 0.0
    with trees("numpy"):
        tree.set_range(0, leaves)
        boundaries = np.concatenate([tree.prefix[rng.integers(0, len(tree.prefix) - 1, 200)], tree.prefix[:-1]])
        ends = [0.0, tree.total, np.nextafter(tree.total, 0.0)]
        masses = np.concatenate([rng.random(300) * tree.total, boundaries, np.nextafter(boundaries, 0.0), ends])
        want = tree.find(masses.copy())
    with trees("compiled"):
        got = tree.find(masses.copy())
    different = np.flatnonzero(got[0] != want[0])
    assert not len(different), f"masses {masses[different][:3]} found leaves {got[0][different][:3]}, " \
                               f"numpy {want[0][different][:3]}"
    assert [a.tobytes() for a in got] == [b.tobytes() for b in want]


def test_a_mass_at_or_past_a_blocks_total_is_clamped_below_it_on_both_paths() -> None:
    """Both paths clamp the mass below each block's total before they choose its child, so
    that rounding cannot carry a descent into trailing children of value 0. Sums of small
    whole numbers are exact and never get there, so the top is loaded with twice its children's
    totals: the masses then reach blocks' totals exactly, and past them."""
    rng, capacity = np.random.default_rng(3), 2**17  # a top of 512 nodes over two levels of blocks
    leaves = rng.integers(0, 3, capacity).astype(np.float64)  # a third of the children are 0
    tree = SumMinTree(capacity)
    tree.set_range(0, leaves)
    state = {k: v.copy() for k, v in tree.state().items()}
    totals = state["top_sums"].copy()
    state["top_sums"] *= 2
    state["prefix"] = np.cumsum(state["top_sums"])
    tree.load(leaves, state)
    starts = tree.prefix0[:-1]  # the mass below each top node, as loaded
    masses = np.concatenate([starts + totals, starts + 1.5 * totals])
    with trees("numpy"):
        want = tree.find(masses.copy())
    with trees("compiled"):
        got = tree.find(masses.copy())
    assert np.all(want[1] > 0), "the numpy path descended into a child of value 0"
    assert [a.tobytes() for a in got] == [b.tobytes() for b in want]


def test_a_descent_does_not_depend_on_the_batch_sizes_before_it() -> None:
    """find() reuses its work arrays between calls of one batch size: nothing may leak."""
    tree, rng = SumMinTree(5 * K * K), np.random.default_rng(0)
    tree.set(np.arange(5 * K * K), rng.random(5 * K * K) * (rng.random(5 * K * K) > 0.3))
    first, other = rng.random(7) * tree.total, rng.random(3) * tree.total
    masses = first.copy()
    expected = SumMinTree(5 * K * K)
    expected.load(tree.leaves, tree.state())
    want = expected.find(first)
    for batch in (first, other, first, rng.random(10_000) * tree.total, first):
        got = tree.find(batch)
        assert np.all(got[1] > 0)
    assert all(np.array_equal(a, b) for a, b in zip(got, want))
    assert np.array_equal(first, masses)  # the caller's masses are not changed


@pytest.mark.parametrize("path", PATHS)
@scaled(50)
@given(
    capacity=st.integers(1, 3 * K * K + 5),
    ops=st.lists(st.tuples(st.booleans(), st.integers(0, 10**6), st.integers(1, 40),
                           st.floats(0.0, 10.0)), max_size=12),
    masses=st.lists(st.floats(0.0, 1.0, exclude_max=True), min_size=1, max_size=30),
)
def test_tree_matches_a_reference(path: str, capacity: int, ops: list[Any], masses: list[float]) -> None:
    with trees(path):
        _tree_matches_a_reference(capacity, ops, masses)


def _tree_matches_a_reference(capacity: int, ops: list[Any], masses: list[float]) -> None:
    tree, ref = SumMinTree(capacity), np.zeros(capacity)
    for contiguous, start, n, value in ops:
        start %= capacity
        n = min(n, capacity - start)
        values = np.full(n, value) + np.arange(n) % 3
        if contiguous:
            tree.set_range(start, values)
            ref[start:start + n] = values
        else:
            idx = (start + np.arange(n) * 7) % capacity
            tree.set(idx, values)
            ref[idx] = values
    assert tree.total == pytest.approx(ref.sum(), rel=1e-12, abs=1e-12)
    assert tree.min == (ref[ref > 0].min() if (ref > 0).any() else np.inf)
    if ref.sum() > 0:
        found, values = tree.find(np.array(masses) * tree.total)
        assert np.all(ref[found] > 0) and np.array_equal(values, ref[found])
        cum = np.cumsum(ref)
        m = np.array(masses) * tree.total
        assert np.all(cum[found] >= m * (1 - 1e-9) - 1e-9)
        assert np.all(cum[found] - ref[found] <= m * (1 + 1e-9) + 1e-9)
    rebuilt = SumMinTree(capacity)
    rebuilt.rebuild(ref)
    np.testing.assert_allclose(rebuilt.prefix, tree.prefix, rtol=1e-12)
    restored = SumMinTree(capacity)
    restored.load(ref, tree.state())
    assert np.array_equal(restored.prefix, tree.prefix)
