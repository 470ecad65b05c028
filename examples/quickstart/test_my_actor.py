import time

import hypothesis.strategies as st
import pytest
import ray
from hypothesis.stateful import rule, run_state_machine_as_test

from actors import Checkpointable, CheckpointConfig, Writer, mutation
from chaos import ActorTarget, Kill
from chaos.testing import ActorChaosMachine


class Ledger(Checkpointable):  # your actor: a balance that survives crashes, each deposit counted once
    def __init__(self, storage: str, durability: str = "wal"):
        self.balance = 0
        self.enable_checkpointing(CheckpointConfig(storage=storage, durability=durability, policy="on_demand"))

    def state_dict(self):
        return {"balance": self.balance}

    def load_state_dict(self, state):
        self.balance = int(state["balance"])

    @mutation(idempotent=True)  # logged before it is acknowledged; a call Ray delivers again counts once
    def deposit(self, amount: int, *, writer_id: str, seq: int) -> None:
        self.balance += amount

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
    me = Writer("me")  # numbers this caller's deposits: writer_id="me", seq=0, 1, 2, ...
    for _ in range(60):
        ray.get(ledger.deposit.remote(1, **me.next()), timeout=60)
        time.sleep(0.05)
    assert ray.get(ledger.get.remote(), timeout=60) == 60


class LedgerMachine(ActorChaosMachine):  # random deposits, checkpoints, pauses, kills (some mid-deposit)
    max_restarts = -1  # every kill restarts the ledger

    def __init__(self):
        self.me = Writer()
        super().__init__()

    def create(self, storage):
        return self.remote(Ledger, storage, durability=self.durability)

    def observe(self, actor):  # after every step this must equal the model
        return self.call(actor.get.remote())

    @rule(amount=st.integers(1, 5))
    def deposit(self, amount):
        self.call(self.actor.deposit.remote(amount, **self.me.next()))
        self.model += amount

    def in_flight(self, actor):  # a deposit sent without waiting: the machine kills with a window of them on the way
        return actor.deposit.remote(1, **self.me.next()), lambda model: model + 1


def test_ledger_matches_its_model(ray_cluster):
    run_state_machine_as_test(LedgerMachine)  # raychaos's `ci` profile: 5 examples of up to 10 steps
