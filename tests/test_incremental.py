"""Incremental checkpoints: deltas on a full base, restored as a chain, pruned as a chain."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from actors import CheckpointConfig, ReplayBufferActor
from actors.checkpoint import CheckpointStore, CheckpointWarning
from test_replay_buffer import transitions


def open_actor(storage: str, *, restore: bool = False, **cfg: Any) -> ReplayBufferActor:
    # The actor's class body, in-process: the code Ray runs, with the restore chosen explicitly.
    config = CheckpointConfig(storage=storage, policy="on_demand", incremental=True, **cfg)
    return ReplayBufferActor(256, checkpoint=config, seed=0,
                             restore="always" if restore else "never")


def checkpoint_folders(storage: str) -> list[str]:
    """The checkpoint folders in ``storage`` (beside them: the incarnation fence's files)."""
    return sorted(name for name in os.listdir(storage) if name.startswith("ckpt-"))


def mutate(actor: ReplayBufferActor, step: int) -> None:
    actor.add(transitions(10, start=10 * step), writer_id="w", seq=step)
    batch = actor.sample(8)
    actor.update_priorities(batch["indices"], np.linspace(0.5, 3.0, 8))


def test_deltas_restore_to_the_exact_state(storage: str) -> None:
    actor = open_actor(storage)
    for step in range(5):
        mutate(actor, step)
        info = actor.checkpoint()
        assert info.parent == info.seq - 1  # #1 is the full checkpoint of the fresh start
    restored = open_actor(storage, restore=True)
    assert restored.digest() == actor.digest()
    assert restored.last_seq("w") == 4


def test_a_delta_holds_only_the_changed_slots(storage: str) -> None:
    actor = open_actor(storage)
    actor.add(transitions(200))
    full = actor.checkpoint(full=True)
    actor.update_priorities(np.arange(2), np.ones(2))
    delta = actor.checkpoint()
    assert delta.parent == full.seq
    _, tree = CheckpointStore(storage).load(delta.seq)  # type: ignore[misc]
    assert tree["buffer"]["slots"].tolist() == [0, 1]
    assert delta.nbytes < full.nbytes / 2


def test_full_every_bounds_the_chain(storage: str) -> None:
    actor = open_actor(storage, full_every=3, keep=1)
    parents = []
    for step in range(6):
        mutate(actor, step)
        parents.append(actor.checkpoint().parent)
    # fresh start (full #1), then deltas #2 #3, full #4, deltas #5 #6, full #7
    assert parents == [1, 2, None, 4, 5, None]
    assert checkpoint_folders(storage) == ["ckpt-0000000007"]  # keep=1 and #7 needs no chain


def test_a_restored_chain_keeps_counting_towards_the_next_full(storage: str) -> None:
    """Restored on a full and one delta, the actor takes one more delta, then a full, and
    its first delta holds only what changed after the restore."""
    actor = open_actor(storage, full_every=3)
    mutate(actor, 0)
    assert actor.checkpoint().parent == 1  # full #1, delta #2
    restored = open_actor(storage, restore=True, full_every=3)
    restored.update_priorities(np.arange(2), np.ones(2))
    delta = restored.checkpoint()
    assert (delta.parent, restored.checkpoint().parent) == (2, None)
    _, tree = CheckpointStore(storage).load(delta.seq)  # type: ignore[misc]
    assert tree["buffer"]["slots"].tolist() == [0, 1]


def test_pruning_keeps_the_chain_a_kept_delta_needs(storage: str) -> None:
    actor = open_actor(storage, keep=1, full_every=10)
    for step in range(3):
        mutate(actor, step)
        actor.checkpoint()
    assert checkpoint_folders(storage) == [f"ckpt-000000000{i}" for i in range(1, 5)]
    assert open_actor(storage, restore=True, keep=1, full_every=10).digest() == actor.digest()


def test_a_corrupt_delta_falls_back_to_the_previous_link(storage: str) -> None:
    actor = open_actor(storage)
    mutate(actor, 0)
    actor.checkpoint()
    at_2 = actor.digest()
    mutate(actor, 1)
    newest = actor.checkpoint()
    (Path(newest.path) / "manifest.json").unlink()
    with pytest.warns(CheckpointWarning, match="skipping checkpoint"):
        restored = open_actor(storage, restore=True)
    assert restored.digest() == at_2


def test_full_every_must_be_positive(storage: str) -> None:
    with pytest.raises(ValueError, match="`full_every` must be a whole number >= 1, got 0"):
        CheckpointConfig(storage=storage, incremental=True, full_every=0)


def test_a_repeated_add_stores_nothing_and_returns_no_slots(storage: str) -> None:
    actor = open_actor(storage)
    first = actor.add(transitions(3), writer_id="w", seq=0)
    again = actor.add(transitions(3), writer_id="w", seq=0)
    assert first.tolist() == [0, 1, 2] and again.tolist() == [] and actor.size() == 3
    assert actor.stats().duplicate_adds == 1
