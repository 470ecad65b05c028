"""``@mutation(idempotent=True)``: the mixin applies each ``(writer_id, seq)`` once, across
restores, out of order, and leaves no trace of a call that raised. Ray-free: the actor bodies
run in-process (the test with Ray and the chaos marker is in ``test_exactly_once_ray.py``)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from actors import Checkpointable, CheckpointConfig, Writer, mutation
from chaos.errors import InvalidConfig, MutationNotLogged


class Ledger(Checkpointable):
    """The docs' actor: a balance whose deposits count once."""

    def __init__(self, storage: str, *, restore: str = "never", **cfg: Any) -> None:
        self.balance = 0
        cfg = {"durability": "wal", "policy": "on_demand", **cfg}
        self.info = self.enable_checkpointing(CheckpointConfig(storage=storage, **cfg),
                                              restore=restore)  # type: ignore[arg-type]

    def state_dict(self) -> dict[str, Any]:
        return {"balance": self.balance}

    def load_state_dict(self, state: Any) -> None:
        self.balance = int(state["balance"])

    @mutation(idempotent=True)
    def deposit(self, amount: int, *, writer_id: str, seq: int) -> int:
        if amount <= 0:
            raise ValueError(f"a deposit must be positive, got {amount}")
        self.balance += amount
        return self.balance

    @mutation
    def add_plain(self, amount: int) -> int:
        self.balance += amount
        return self.balance


def reopen(storage: str, **cfg: Any) -> Ledger:
    return Ledger(storage, restore="always", **cfg)


def test_a_repeat_is_not_applied_and_answers_none(storage: str) -> None:
    ledger = Ledger(storage)
    assert ledger.deposit(5, writer_id="w", seq=0) == 5
    assert ledger.deposit(5, writer_id="w", seq=0) is None  # Ray's second delivery
    assert ledger.deposit(5, writer_id="other", seq=0) == 10  # another writer's seq 0
    assert (ledger.balance, ledger.checkpoint_stats().repeats) == (10, 1)


def test_the_plain_mutation_still_applies_every_delivery(storage: str) -> None:
    ledger = Ledger(storage)
    ledger.add_plain(5)
    ledger.add_plain(5)
    assert ledger.balance == 10 and reopen(storage).balance == 10


@pytest.mark.parametrize("checkpointed", [False, True], ids=["log-only", "checkpoint-and-log"])
def test_a_repeat_after_a_restore_is_still_dropped(storage: str, checkpointed: bool) -> None:
    ledger = Ledger(storage)
    ledger.deposit(1, writer_id="w", seq=0)
    if checkpointed:
        ledger.checkpoint()
    ledger.deposit(2, writer_id="w", seq=1)  # in the log after the checkpoint
    restored = reopen(storage)
    assert restored.balance == 3
    assert restored.deposit(1, writer_id="w", seq=0) is None
    assert restored.deposit(2, writer_id="w", seq=1) is None
    assert restored.deposit(4, writer_id="w", seq=2) == 7
    assert reopen(storage).balance == 7


def test_the_table_survives_the_policys_checkpoints(storage: str) -> None:
    ledger = Ledger(storage, durability="policy", policy="every_n", every_n=2)
    for seq in range(4):
        ledger.deposit(1, writer_id="w", seq=seq)  # checkpoints after seq 1 and seq 3
    restored = reopen(storage, durability="policy", policy="every_n", every_n=2)
    assert restored.balance == 4
    assert [restored.deposit(1, writer_id="w", seq=s) for s in range(4)] == [None] * 4


def test_out_of_order_seqs_within_the_window_are_applied_once_each(storage: str) -> None:
    ledger = Ledger(storage)
    order = [0, 5, 3, 1, 4, 2, 5, 3, 0]  # Ray's retries reorder a writer's calls
    applied = [ledger.deposit(1, writer_id="w", seq=seq) is not None for seq in order]
    assert applied == [True] * 6 + [False] * 3
    restored = reopen(storage)
    assert restored.balance == 6
    assert restored.deposit(1, writer_id="w", seq=6) == 7  # the next one still counts
    assert restored.deposit(1, writer_id="w", seq=2) is None


def test_a_call_that_raises_leaves_no_trace(storage: str) -> None:
    ledger = Ledger(storage)
    with pytest.raises(ValueError, match="must be positive"):
        ledger.deposit(-1, writer_id="w", seq=0)
    assert ledger.checkpoint_stats().wal_records == 0
    assert ledger.deposit(3, writer_id="w", seq=0) == 3  # the corrected retry is applied
    assert ledger.deposit(3, writer_id="w", seq=0) is None  # and now a repeat
    assert reopen(storage).balance == 3


def test_a_call_without_its_key_is_refused_before_it_runs(storage: str) -> None:
    ledger = Ledger(storage)
    with pytest.raises(InvalidConfig, match="pass writer_id= and seq="):
        ledger.deposit(1, writer_id="w")  # type: ignore[call-arg]
    with pytest.raises(InvalidConfig, match="seq must be a whole number"):
        ledger.deposit(1, writer_id="w", seq=-1)
    assert ledger.balance == 0


def test_an_idempotent_method_must_declare_its_key() -> None:
    with pytest.raises(InvalidConfig, match=r"keyword-only writer_id and seq .*def add\(self, \.\.\., \*, writer_id"):
        class Bad(Checkpointable):
            @mutation(idempotent=True)
            def add(self, k: int, writer_id: str, seq: int) -> None: ...


def test_an_async_idempotent_mutation_applies_once(storage: str) -> None:
    class AsyncLedger(Ledger):
        @mutation(idempotent=True)
        async def deposit_async(self, amount: int, *, writer_id: str, seq: int) -> int:
            await asyncio.sleep(0)
            self.balance += amount
            return self.balance

    async def calls(ledger: AsyncLedger) -> list[Any]:
        return [await ledger.deposit_async(2, writer_id="a", seq=s) for s in (0, 1, 0)]

    ledger = AsyncLedger(storage)
    assert asyncio.run(calls(ledger)) == [2, 4, None]
    restored = AsyncLedger(storage, restore="always")
    assert restored.balance == 4
    assert asyncio.run(restored.deposit_async(2, writer_id="a", seq=1)) is None


def test_a_writer_numbers_its_calls_across_threads() -> None:
    me = Writer("driver")
    assert me.next() == {"writer_id": "driver", "seq": 0}
    seen: list[int] = []
    threads = [threading.Thread(target=lambda: seen.extend(me.next()["seq"] for _ in range(100)))
               for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(seen) == list(range(1, 401))
    assert Writer().id != Writer().id


def test_a_call_whose_log_record_fails_is_undone_with_its_seq(storage: str, monkeypatch: Any) -> None:
    ledger = Ledger(storage)
    ledger.deposit(1, writer_id="w", seq=0)
    writer = ledger._checkpointer().writer
    assert writer is not None

    def disk_full(payload: bytes) -> None:
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(writer, "append", disk_full)
        with pytest.raises(MutationNotLogged):
            ledger.deposit(2, writer_id="w", seq=1)
    assert ledger.balance == 1  # undone, and its seq with it: the retry is applied
    assert ledger.deposit(2, writer_id="w", seq=1) == 3
    assert reopen(storage).balance == 3


class Unmarked(Ledger):
    """The same actor once its mutation is no longer idempotent."""

    @mutation
    def deposit(self, amount: int, *, writer_id: str, seq: int) -> int:
        self.balance += amount
        return self.balance


def test_checkpoints_with_a_writer_table_restore_into_an_actor_without_one(storage: str) -> None:
    ledger = Ledger(storage)
    ledger.deposit(4, writer_id="w", seq=0)
    ledger.checkpoint()
    assert Unmarked(storage, restore="always").balance == 4
