"""An async checkpointed actor with concurrency groups."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Mapping
from typing import Any

from actors import Checkpointable, CheckpointConfig, WriterSeqs, mutation
from chaos import History, check_set
from chaos.history import drive_writers
from scenarios.model._records import Verdict
from scenarios.model._workload import CALL_TIMEOUT, Workload

__all__ = ["AsyncActor", "AsyncLedger"]


class AsyncLedger(Checkpointable):
    """An async actor storing ``(writer, seq)`` keys once each; its mutation awaits between its
    check and its write, and two concurrency groups each have a mutation."""

    def __init__(self, storage: str) -> None:
        self.keys: list[list[Any]] = []
        self.seqs = WriterSeqs()
        self.enable_checkpointing(CheckpointConfig(storage=storage, durability="wal", every_n=16))

    def state_dict(self) -> Mapping[str, Any]:
        return {"keys": self.keys, "writers": self.seqs.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.keys = [list(k) for k in state["keys"]]
        self.seqs.load_state_dict(state["writers"])

    @mutation
    async def add(self, writer_id: str, seq: int) -> int:
        if not self.seqs.is_repeat(writer_id, seq):
            await asyncio.sleep(0.0005)  # another call runs here unless mutations are gated
            self.keys.append([writer_id, seq])
            self.seqs.applied(writer_id, seq)
        return len(self.keys)

    @mutation
    async def add_other(self, writer_id: str, seq: int) -> int:
        return await self.add(writer_id, seq)  # nested: logged once, by the outer call

    async def stored(self) -> list[tuple[str, int]]:
        return [(str(w), int(s)) for w, s in self.keys]

    async def pid(self) -> int:
        return os.getpid()


class AsyncActor(Workload):
    """Three writers against an async checkpointed actor whose two mutations run in two
    concurrency groups, under kills and pauses: every acknowledged add stored exactly once."""

    INVARIANTS = ("no_lost_adds", "no_duplicate_adds")
    ledger_class: type = AsyncLedger

    def setup(self) -> None:
        import ray

        remote = ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0,
                            concurrency_groups={"a": 2, "b": 2})(self.ledger_class)
        self.actor = remote.options(name="ledger", namespace=self.ctx.namespace).remote(f"{self.ctx.storage}/ledger")
        ray.get(self.actor.pid.remote(), timeout=CALL_TIMEOUT)
        self.history = History()
        self.errors: dict[str, BaseException] = {}

    def _submit(self, writer: str, seq: int) -> Any:
        method = self.actor.add if writer == "w0" else self.actor.add_other
        group = "a" if writer == "w0" else "b"
        return method.options(concurrency_group=group).remote(writer, seq)

    def step(self) -> bool:
        stop = threading.Event()
        timer = threading.Timer(self.ctx.remaining(), stop.set)
        timer.start()
        try:
            self.errors = drive_writers(self._submit, self.history, writers=["w0", "w1", "w2"],
                                        writes=10**6, window=4, timeout=CALL_TIMEOUT, stop=stop)
        finally:
            timer.cancel()
        self.ctx.count("writes", len(self.history.ops()))
        return False

    def probe(self) -> str:
        import ray

        return f"{len(ray.get(self.actor.stored.remote(), timeout=10))} keys stored"

    def invariants(self) -> list[Verdict]:
        import ray

        verdict = check_set(self.history.ops(), ray.get(self.actor.stored.remote(), timeout=CALL_TIMEOUT))
        detail = f"{verdict.explain()}; writer errors: {self.errors or 'none'}"
        return [Verdict.over("no_lost_adds", verdict.acknowledged, held=not verdict.lost and not self.errors,
                             detail=detail),
                Verdict.over("no_duplicate_adds", verdict.stored, held=not verdict.duplicated, detail=detail)]

    def teardown(self) -> None:
        import ray

        ray.kill(self.actor)
