"""GCS restart on a Redis: the cluster serves again, nothing acknowledged lost."""

from __future__ import annotations

import socket
from typing import Any

from actors import CheckpointedCounter
from scenarios.model._records import Verdict
from scenarios.model._workload import CALL_TIMEOUT, Params, Workload
from scenarios.workloads._kit import Ack, Ledger

__all__ = ["GcsRestart", "GcsRestartParams", "square"]


def square(x: int) -> int:
    return x * x


def _port_open(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=0.2):
            return True
    except OSError:
        return False


def _task_state(address: str, ref: Any) -> str:
    """What Ray's State API says of the task behind ``ref``: where a lost task stopped."""
    from ray.util.state import list_tasks

    try:
        rows = list_tasks(address=address, filters=[("task_id", "=", ref.task_id().hex())], detail=True,
                          timeout=10, raise_on_missing_output=False)
    except Exception as exc:  # noqa: BLE001 - a diagnosis only: say why there is none
        return f"State API: {type(exc).__name__}"
    return "State API: " + ("; ".join(f"{r.state}, attempt {r.attempt_number}, worker {str(r.worker_id)[:8]}"
                                      for r in rows) or "no such task")


class GcsRestartParams(Params):
    #: How long the cluster may take to serve again once the GCS is back.
    settle: float = CALL_TIMEOUT


class GcsRestart(Workload):
    """A detached named WAL counter and a stream of tasks while the GCS is killed and restarted
    on its Redis: running actors serve through the outage, work submitted during it completes,
    the named actor is found again with every acknowledged add."""

    BASELINE = True  # the fault-free twin: every trace of the fault must be missing there
    FAULT_VERDICTS = ("actor_served_during_outage", "pending_work_resumed")
    Params = GcsRestartParams
    INVARIANTS = ("actor_served_during_outage", "pending_work_resumed", "named_actor_found",
                  "nothing_acknowledged_lost")
    counter_class: type = CheckpointedCounter

    def setup(self) -> None:
        import ray

        self.ledger = Ledger(self._detached(), "driver")
        ray.get(self.ledger.actor.get.remote(), timeout=CALL_TIMEOUT)  # the run's time is for calls
        # Exported now: a remote function first called while the GCS is down blocks its caller
        # until the GCS is back (its definition goes to the GCS), measured on Ray 2.60.
        self.square = ray.remote(square).options(num_cpus=0.25, max_retries=3)
        ray.get(self.square.remote(0), timeout=CALL_TIMEOUT)
        self.served_down, self.i = 0, 0
        self.outage: list[tuple[int, Any]] = []
        self.settle = self.ctx.params_as(GcsRestartParams).settle

    def _detached(self) -> Any:
        import ray

        remote = ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0)(self.counter_class)
        return remote.options(name="ledger", namespace=self.ctx.namespace, lifetime="detached").remote(
            f"{self.ctx.storage}/ledger", durability="wal", every_n=50)

    def step(self) -> bool:
        down = not _port_open(self.ctx.address)
        if self.ledger.add() is Ack.ACKED and down:
            self.served_down += 1
        if down:
            self.outage.append((self.i, self.square.remote(self.i)))
        self.i += 1
        self.ctx.count("calls")
        self.ctx.stop.wait(0.02)  # the workload's pace, not a synchronisation
        return True

    def probe(self) -> str:
        import ray

        found = ray.get_actor("ledger", namespace=self.ctx.namespace)  # a GCS lookup
        return f"ledger found by name, {ray.get(found.get.remote(), timeout=5)} adds"

    def invariants(self) -> list[Verdict]:
        import ray

        values = [self._value(ref) for _, ref in self.outage]
        right = sum(v == i * i for (i, _), v in zip(self.outage, values))
        wrong = [f"task {i}: {v}" for (i, _), v in zip(self.outage, values) if v != i * i]
        found, written = self._found(), ray.get(self.ledger.actor.get.remote(), timeout=CALL_TIMEOUT)
        return [Verdict.of("actor_served_during_outage", self.served_down > 0,
                        f"{self.served_down} actor calls answered while the GCS port was closed"
                        if self.served_down else "no call was answered while the GCS was down: "
                        "either no outage happened or the actor stopped serving"),
                Verdict.of("pending_work_resumed", bool(values) and right == len(values),
                        f"{right} of {len(values)} tasks submitted during the outage returned "
                        f"their value within {self.settle:g} s; others: {wrong[:3] or 'none'}"),
                # By its count: after no acknowledged add, a fresh counter would look the same.
                Verdict.over("named_actor_found", self.ledger.counts[Ack.ACKED], held=found == written,
                             detail=f"get_actor('ledger') after the restart: {found}; the counter written: {written}"),
                self.ledger.verdict("nothing_acknowledged_lost")]

    def _value(self, ref: Any) -> object:
        import ray

        try:
            return ray.get(ref, timeout=self.settle)
        except Exception as exc:  # noqa: BLE001 - the verdict shows it
            return f"{type(exc).__name__}: {str(exc)[:200]} ({_task_state(self.ctx.address, ref)})"

    def _found(self) -> object:
        import ray

        try:
            return ray.get(ray.get_actor("ledger", namespace=self.ctx.namespace).get.remote(),
                           timeout=CALL_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - the verdict shows it
            return f"{type(exc).__name__}: {exc}"[:200]

    def teardown(self) -> None:
        import ray

        ray.kill(self.ledger.actor)  # detached: it would outlive the run
