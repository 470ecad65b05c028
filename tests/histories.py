"""Concurrent histories on real Ray: writers keep calls in flight with ``max_task_retries=-1``
while a nemesis SIGKILLs the actor at random times (not between calls), and Ray's own retry
delivers what the kills cut off. Shared by ``test_histories.py`` and ``benchmarks/soak.py``.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray

from actors import CheckpointConfig, ParameterServer, ReplayBufferActor
from chaos import ActorTarget, Chaos, History, Kill, check_set
from chaos.history import Op, SetVerdict, drive_writers

WRITERS = ("w0", "w1", "w2")
CALL_TIMEOUT = 60.0


def buffer_config(storage: str, *, every_n: int = 16) -> CheckpointConfig:
    return CheckpointConfig(storage=storage, durability="wal", every_n=every_n, incremental=True,
                            full_every=4, keep=2)


def start_buffer(storage: str, capacity: int, *, cls: type = ReplayBufferActor, every_n: int = 16) -> Any:
    remote = ray.remote(max_restarts=-1, max_task_retries=-1)(cls)
    return remote.remote(capacity, checkpoint=buffer_config(storage, every_n=every_n), seed=0)


def add_row(actor: Any) -> Callable[[str, int], Any]:
    def submit(writer: str, seq: int) -> Any:
        batch = {"w": np.array([WRITERS.index(writer)], np.int64), "s": np.array([seq], np.int64)}
        return actor.add.remote(batch, writer_id=writer, seq=seq)
    return submit


def buffer_keys(actor: Any) -> list[tuple[str, int]]:
    w, s = ray.get([actor.column.remote("w"), actor.column.remote("s")], timeout=CALL_TIMEOUT)
    return [(WRITERS[int(a)], int(b)) for a, b in zip(w, s)]


class Nemesis(threading.Thread):
    """Kills one actor through the chaos engine (each kill confirmed, each restart awaited),
    after a random gap drawn from ``gap`` seconds, until ``stop`` is set or ``kills`` are done."""

    def __init__(self, actor: Any, *, seed: int, gap: tuple[float, float], stop: threading.Event,
                 kills: int | None = None) -> None:
        super().__init__(name="nemesis", daemon=True)
        self.actor, self.rng, self.gap, self.stop, self.limit = actor, random.Random(seed), gap, stop, kills
        self.kills, self.error = 0, None
        self.chaos = Chaos(address=ray.get_runtime_context().gcs_address, seed=seed)

    def run(self) -> None:
        try:
            while (self.limit is None or self.kills < self.limit) and \
                    not self.stop.wait(self.rng.uniform(*self.gap)):  # the schedule, not a sync
                injection = self.chaos.kill(Kill(ActorTarget.of(self.actor)))
                self.kills += 1
                self.chaos.wait_restarted(injection.processes[0], timeout=CALL_TIMEOUT)
        except BaseException as exc:  # noqa: BLE001 - reported by the caller
            self.error = exc


@dataclass(frozen=True, slots=True)
class HistoryRun:
    """One concurrent history: the checker's verdict, the kills it survived, what failed."""

    verdict: SetVerdict
    kills: int
    errors: dict[str, BaseException]
    history: tuple[Op, ...]

    def explain(self) -> str:
        return f"{self.kills} kills; {self.verdict.explain()}; errors: {self.errors or 'none'}"


def run_history(actor: Any, submit: Callable[[str, int], Any], stored: Callable[[], Sequence[Any]], *,
                seed: int, gap: tuple[float, float], kills: int | None = None,
                stop: threading.Event | None = None, max_writes: int = 2000,
                window: int = 4) -> HistoryRun:
    """Writers and the nemesis together, until the nemesis has made its ``kills`` (and the
    actor is back) or ``stop`` is set; a writer also stops at ``max_writes``."""
    ray.get(actor.pid.remote(), timeout=CALL_TIMEOUT)  # up before the first kill can land
    stop = stop or threading.Event()
    history, nemesis = History(), Nemesis(actor, seed=seed, gap=gap, stop=stop, kills=kills)
    ended = threading.Thread(target=lambda: (nemesis.join(), stop.set()), daemon=True)
    nemesis.start()
    ended.start()
    try:
        errors = drive_writers(submit, history, writers=WRITERS, writes=max_writes, window=window,
                               timeout=CALL_TIMEOUT, stop=stop)
    finally:
        stop.set()
        nemesis.join(CALL_TIMEOUT)
    if nemesis.error is not None:
        errors["nemesis"] = nemesis.error
    ops = tuple(history.ops())
    return HistoryRun(check_set(ops, stored()), nemesis.kills, errors, ops)


# -- the parameter server -----------------------------------------------------------------

def tiny_model() -> Any:
    import torch

    return torch.nn.Linear(2, 1)


def grads_of(writer: str, seq: int) -> dict[str, np.ndarray]:
    """A push's gradient, a function of its key: the driver can replay any order of pushes."""
    value = (WRITERS.index(writer) + 1) * 0.01 + seq * 1e-4
    return {"weight": np.full((1, 2), value, np.float32), "bias": np.full((1,), -value, np.float32)}


OPTIMIZER = {"lr": 0.01, "momentum": 0.9}  # momentum: the order of pushes changes the weights


class OrderedServer(ParameterServer):
    """The parameter server, also recording the order it applied pushes in, as part of its
    checkpointed state (so a crash rolls it back exactly as it rolls back the weights)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.order: list[list[Any]] = []
        super().__init__(*args, **kwargs)

    def _remember(self, worker: str, seq: int, result: Any) -> None:
        super()._remember(worker, seq, result)
        if result.applied:
            self.order.append([worker, seq])

    def state_dict(self) -> Any:
        return {**super().state_dict(), "order": [list(k) for k in self.order]}

    def load_state_dict(self, state: Any) -> None:
        super().load_state_dict(state)
        self.order = [list(k) for k in state["order"]]

    def applied_order(self) -> list[tuple[str, int]]:
        return [(str(w), int(s)) for w, s in self.order]


def start_server(storage: str) -> Any:
    remote = ray.remote(max_restarts=-1, max_task_retries=-1)(OrderedServer)
    config = CheckpointConfig(storage=storage, durability="wal", every_n=8)
    return remote.remote(tiny_model, checkpoint=config, seed=0, optimizer_kwargs=OPTIMIZER)


def push(server: Any) -> Callable[[str, int], Any]:
    def submit(writer: str, seq: int) -> Any:
        return server.push.remote(grads_of(writer, seq), worker_id=writer, seq=seq, base_version=0)
    return submit


def replayed_weights(order: Sequence[tuple[str, int]]) -> dict[str, np.ndarray]:
    """The weights a fresh server reaches applying ``order``'s pushes one by one."""
    import torch

    torch.manual_seed(0)
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), **OPTIMIZER)
    for key in order:
        for name, param in model.named_parameters():
            param.grad = torch.from_numpy(grads_of(*key)[name]).to(param.dtype)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return {n: t.detach().numpy() for n, t in model.state_dict().items()}
