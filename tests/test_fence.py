"""The incarnation fence, Ray-free: two incarnations of one actor over the same storage, as a
partition leaves them (the old one cut off and running on, its replacement restored from the
storage). The old one's mutations are refused and commit nothing; without the fence (the
planted variant) an add it acknowledged after its replacement started is lost."""

from __future__ import annotations

import dataclasses
import os
import threading
from typing import Any

import pytest

from actors import Checkpointable, CheckpointConfig, CheckpointedCounter, mutation
from actors._fence import FENCE_FILE, Fence
from actors.checkpoint import StorageNotFresh, Superseded
from chaos.errors import CheckpointError, InvalidConfig, MutationNotLogged


class UnfencedCounter(CheckpointedCounter):
    """The planted split brain: a counter whose incarnations are not fenced."""

    def enable_checkpointing(self, config: CheckpointConfig, **options: Any) -> Any:
        return super().enable_checkpointing(dataclasses.replace(config, fence=False), **options)


def counter(storage: str, *, restore: str, durability: str = "wal",
            cls: type[CheckpointedCounter] = CheckpointedCounter) -> CheckpointedCounter:
    return cls(storage, durability=durability, every_n=5, restore=restore)  # type: ignore[arg-type]


def adds(actor: CheckpointedCounter, seqs: range) -> None:
    for seq in seqs:
        actor.add(writer_id="w", seq=seq)


@pytest.mark.parametrize("durability", ["wal", "policy"])
def test_an_old_incarnation_acknowledges_nothing_once_its_replacement_started(
        tmp_path: Any, durability: str) -> None:
    old = counter(str(tmp_path), restore="never", durability=durability)
    adds(old, range(5))
    new = counter(str(tmp_path), restore="always", durability=durability)
    with pytest.raises(Superseded, match="superseded by incarnation 2"):
        old.add(writer_id="w", seq=5)  # a call delivered late to the old incarnation
    with pytest.raises(Superseded):  # and every later commit, a checkpoint too
        old.checkpoint()
    adds(new, range(6, 12))
    new.checkpoint()
    restored = counter(str(tmp_path), restore="always", durability=durability)
    assert restored.applied_seqs("w") == [*range(5), *range(6, 12)]


def test_without_the_fence_an_add_the_old_incarnation_acknowledged_is_lost(tmp_path: Any) -> None:
    """The planted variant: what the fence prevents, shown on the same interleaving."""
    old = counter(str(tmp_path), restore="never", cls=UnfencedCounter)
    adds(old, range(3))
    new = counter(str(tmp_path), restore="always", cls=UnfencedCounter)
    assert old.add(writer_id="w", seq=3) == 4  # acknowledged, by the superseded incarnation
    adds(new, range(4, 12))
    restored = counter(str(tmp_path), restore="always", cls=UnfencedCounter)
    assert 3 not in restored.applied_seqs("w")


def replacement(root: str) -> threading.Event:
    """Start a replacement incarnation over ``root`` in a thread; set once it took its number."""
    started = threading.Event()

    def replace() -> None:
        Fence(root).take()
        started.set()

    threading.Thread(target=replace, daemon=True).start()
    return started


def test_a_replacement_waits_for_a_commit_in_flight(tmp_path: Any) -> None:
    old = Fence(str(tmp_path))
    old.take()
    with old.held():
        started = replacement(str(tmp_path))
        # Bounded: a replacement that got through while the commit holds the fence fails here.
        assert not started.wait(0.3)
    assert started.wait(10.0)
    with pytest.raises(Superseded), old.held():
        pass


def test_an_inner_hold_released_keeps_the_outer_holds_lock(tmp_path: Any) -> None:
    fence = Fence(str(tmp_path))
    fence.take()
    with fence.held():
        with fence.held():
            pass
        started = replacement(str(tmp_path))
        assert not started.wait(0.3)  # bounded: a replacement that got in here fails the test
    assert started.wait(10.0)


def test_a_commit_from_a_signal_handler_while_the_lock_is_awaited_is_refused(tmp_path: Any) -> None:
    """As SIGTERM's checkpoint would run inside a commit that waits for the lock: refused,
    since it would commit without holding it."""
    fence = Fence(str(tmp_path))
    fence.take()
    fence._depth = 1  # the state of a thread whose flock is still waiting
    with pytest.raises(CheckpointError, match="waiting for the incarnation lock"), fence.held():
        pass


class Keyed(Checkpointable):
    """An actor whose adds are idempotent through @mutation(idempotent=True)."""

    def __init__(self, storage: str, restore: str) -> None:
        self.n = 0
        self.enable_checkpointing(CheckpointConfig(storage=storage, durability="wal"),
                                  restore=restore)  # type: ignore[arg-type]

    def state_dict(self) -> Any:
        return {"n": self.n}

    def load_state_dict(self, state: Any) -> None:
        self.n = int(state["n"])

    @mutation(idempotent=True)
    def add(self, *, writer_id: str, seq: int) -> int:
        self.n += 1
        return self.n


def test_a_refused_call_retried_is_refused_again_not_answered_as_a_repeat(tmp_path: Any) -> None:
    old = Keyed(str(tmp_path), "never")
    Keyed(str(tmp_path), "always")
    with pytest.raises(Superseded):
        old.add(writer_id="w", seq=0)
    with pytest.raises(Superseded):  # its seq was recorded before the refusal: still no answer
        old.add(writer_id="w", seq=0)


def test_a_fence_that_cannot_be_read_undoes_the_call(tmp_path: Any) -> None:
    actor = counter(str(tmp_path), restore="never")
    adds(actor, range(2))
    os.close(actor.__dict__["_raychaos_checkpointer"].fence._fd)  # its reads now fail (EBADF)
    with pytest.raises(MutationNotLogged, match="undone"):
        actor.add(writer_id="w", seq=2)
    assert actor.get() == 2


def test_a_refused_first_start_supersedes_nothing(tmp_path: Any) -> None:
    running = counter(str(tmp_path), restore="never")
    adds(running, range(2))
    with pytest.raises(StorageNotFresh):
        counter(str(tmp_path), restore="auto")  # a second first start over its storage
    adds(running, range(2, 4))  # the running incarnation still commits


def test_an_incarnation_file_that_is_not_a_number_is_refused_with_the_fix(tmp_path: Any) -> None:
    (tmp_path / FENCE_FILE).write_text("garbage\n")
    with pytest.raises(CheckpointError, match=f"holds 'garbage'.*delete {FENCE_FILE}"):
        counter(str(tmp_path), restore="never")


def test_fence_must_be_true_or_false(tmp_path: Any) -> None:
    with pytest.raises(InvalidConfig, match="`fence` must be True or False, got 'yes'"):
        CheckpointConfig(storage=str(tmp_path), fence="yes")  # type: ignore[arg-type]


def test_an_incarnation_whose_file_was_deleted_commits_nothing(tmp_path: Any) -> None:
    old = counter(str(tmp_path), restore="never")
    (tmp_path / FENCE_FILE).unlink()  # a new incarnation would start again from number 1
    with pytest.raises(Superseded, match="deleted"):
        old.add(writer_id="w", seq=0)
