"""``ActorChaosMachine`` on real actors: ``kill_in_flight`` kills with a window of calls on their
way and the model takes every acknowledged one; a restart the machine did not cause fails the
example; a plain (at-least-once) deposit killed in flight is found and shrunk."""

from __future__ import annotations

import os
import re
import signal
import sys
import traceback
from typing import Any

import pytest
import ray
from hypothesis import settings
from hypothesis.errors import Flaky
from hypothesis.stateful import run_state_machine_as_test
from ray import cloudpickle

from actors import Checkpointable, CheckpointConfig, Writer, mutation
from chaos import wait_until
from chaos.cluster import ClusterHandle
from chaos.testing import ActorChaosMachine

pytestmark = pytest.mark.ray
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/


class Ledger(Checkpointable):
    def __init__(self, storage: str) -> None:
        self.balance = 0
        self.enable_checkpointing(CheckpointConfig(storage=storage, durability="wal", policy="on_demand"))

    def state_dict(self) -> dict[str, int]:
        return {"balance": self.balance}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.balance = int(state["balance"])

    @mutation(idempotent=True)
    def deposit(self, amount: int, *, writer_id: str, seq: int) -> None:
        self.balance += amount

    def get(self) -> int:
        return self.balance

    def pid(self) -> int:
        return os.getpid()


class PlainLedger(Ledger):
    @mutation  # at least once: a deposit Ray delivers again after a kill counts again
    def deposit(self, amount: int, *, writer_id: str, seq: int) -> None:
        self.balance += amount


class LedgerMachine(ActorChaosMachine):
    max_restarts = -1
    ledger: type[Ledger] = Ledger

    def __init__(self) -> None:
        self.me = Writer()
        super().__init__()

    def create(self, storage: str) -> Any:
        return self.remote(self.ledger, storage)

    def observe(self, actor: Any) -> Any:
        return self.call(actor.get.remote())

    def in_flight(self, actor: Any) -> tuple[Any, Any]:
        return actor.deposit.remote(1, **self.me.next()), lambda model: model + 1


class PlainLedgerMachine(LedgerMachine):
    ledger = PlainLedger


def test_a_kill_in_flight_acknowledges_every_call_sent_and_the_model_takes_each(ray_cluster: ClusterHandle) -> None:
    machine = LedgerMachine()
    try:
        machine.kill_in_flight(window=16)
        assert machine.kills == 1 and machine.model >= 16, (machine.kills, machine.model)
        machine.matches_the_model()  # the idempotent ledger: exactly what was acknowledged
    finally:
        machine.teardown()


def test_a_restart_the_machine_did_not_cause_fails_the_example(ray_cluster: ClusterHandle) -> None:
    machine = LedgerMachine()
    pid = ray.get(machine.actor.pid.remote(), timeout=30)
    os.kill(pid, signal.SIGKILL)  # behind the machine's back: another test's fault, the OOM killer
    wait_until(lambda: ray.get(machine.actor.pid.remote(), timeout=30) != pid, timeout=60,
               what="the actor's restart after an outside SIGKILL")
    with pytest.raises(AssertionError, match=r"restarted 1 time\(s\) but this machine killed it 0 time"):
        machine.teardown()


@pytest.mark.slow  # a real search and its shrink: about a minute
def test_a_deposit_counted_twice_after_a_kill_in_flight_is_found(ray_cluster: ClusterHandle) -> None:
    """Killed only between completed calls, the plain ledger passed in 19 of 20 runs of the
    tutorial; with the window in flight the search finds the doubled deposit. Whether a replay
    doubles a deposit again is timing, so Hypothesis may report the failure as flaky while it
    shrinks: either way the mismatch is what it found."""
    with pytest.raises((AssertionError, Flaky)) as excinfo:
        run_state_machine_as_test(PlainLedgerMachine, settings=settings(
            PlainLedgerMachine.TestCase.settings, derandomize=True, database=None))
    assert re.search(r"actor state \d+ != model \d+ after \d+ kill", "".join(traceback.format_exception(
        excinfo.value))), excinfo.value
