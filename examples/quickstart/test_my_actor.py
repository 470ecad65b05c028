import time

import hypothesis.strategies as st
import pytest
import ray
from hypothesis import settings
from hypothesis.stateful import rule, run_state_machine_as_test

from actors import Checkpointable, CheckpointConfig, WriterSeqs, mutation
from chaos import ActorTarget, Kill
from chaos.testing import ActorChaosMachine


class Ledger(Checkpointable):  # your actor: a balance that survives crashes, each deposit counted once
    def __init__(self, storage: str, durability: str = "wal"):
        self.balance, self.seqs = 0, WriterSeqs()  # seqs: the (writer_id, seq) pairs applied
        self.enable_checkpointing(CheckpointConfig(storage=storage, durability=durability, policy="on_demand"))

    def state_dict(self):
        return {"balance": self.balance, "seqs": self.seqs.state_dict()}

    def load_state_dict(self, state):
        self.balance = int(state["balance"])
        self.seqs.load_state_dict(state["seqs"])

    @mutation  # written to the log before it is acknowledged
    def deposit(self, amount: int, *, writer_id: str, seq: int) -> int:
        if not self.seqs.is_repeat(writer_id, seq):  # Ray may deliver a call again after a crash
            self.balance += amount
            self.seqs.applied(writer_id, seq)
        return self.balance

    def get(self) -> int:
        return self.balance


@pytest.fixture
def ledger(ray_cluster, tmp_path):
    actor = ray.remote(max_restarts=-1, max_task_retries=-1)(Ledger).options(name="ledger").remote(str(tmp_path))
    ray.get(actor.get.remote(), timeout=60)
    yield actor
    ray.kill(actor)


@pytest.mark.chaos(seed=1, faults=[(1.0, Kill(ActorTarget(name="ledger")))])  # SIGKILL 1 s into the body
def test_no_deposit_is_lost_or_doubled(ledger, chaos):
    for seq in range(60):
        ray.get(ledger.deposit.remote(1, writer_id="me", seq=seq), timeout=60)
        time.sleep(0.05)
    assert ray.get(ledger.get.remote(), timeout=60) == 60


class LedgerMachine(ActorChaosMachine):  # random deposits, checkpoints, kills and pauses
    def __init__(self):
        self.sent = 0
        super().__init__()

    def create(self, storage):
        return self.remote(Ledger, storage, durability=self.durability)

    def observe(self, actor):  # after every step this must equal the model
        return self.call(actor.get.remote())

    @rule(amount=st.integers(1, 5))
    def deposit(self, amount):
        self.call(self.actor.deposit.remote(amount, writer_id="machine", seq=self.sent))
        self.sent, self.model = self.sent + 1, self.model + amount


def test_ledger_matches_its_model(ray_cluster):
    run_state_machine_as_test(LedgerMachine, settings=settings(max_examples=3, stateful_step_count=6, deadline=None))
