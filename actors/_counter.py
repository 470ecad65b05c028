"""The smallest checkpointed actor: a counter. The demo's and the tests' victim."""

from __future__ import annotations

import os
from typing import Any

from actors._checkpoint import Checkpointable, CheckpointConfig, Durability, Policy, Restore, mutation
from actors._codec import StateTree
from actors._dedupe import WriterSeqs


class CheckpointedCounter(Checkpointable):
    """A counter whose value and history length survive restarts.

    Wrap it with ``ray.remote(max_restarts=..., max_task_retries=-1)`` to run it as an actor.
    Ray then delivers each call at least once: an ``add`` that carries ``(writer_id, seq)``
    counts once even when the counter died after applying it and Ray delivers it again.
    """

    def __init__(self, storage: str, *, durability: Durability = "policy",
                 policy: Policy = "every_n", every_n: int = 5, restore: Restore = "auto",
                 checkpoint_on_sigterm: bool = False) -> None:
        self.value, self.adds = 0, 0
        self._seqs = WriterSeqs()
        self.restore_info = self.enable_checkpointing(CheckpointConfig(
            storage=storage, durability=durability, policy=policy, every_n=every_n,
            checkpoint_on_sigterm=checkpoint_on_sigterm), restore=restore)

    def state_dict(self) -> StateTree:
        return {"value": self.value, "adds": self.adds, "writers": self._seqs.state_dict()}

    def load_state_dict(self, state: StateTree) -> None:
        self.value, self.adds = int(state["value"]), int(state["adds"])
        if "writers" in state:  # absent from checkpoints written before adds were idempotent
            self._seqs.load_state_dict(state["writers"])

    @mutation
    def add(self, k: int = 1, *, writer_id: str | None = None, seq: int | None = None) -> int:
        """Add ``k`` and return the value; a repeated ``(writer_id, seq)`` adds nothing."""
        if not self._seqs.is_repeat(writer_id, seq):
            self.value += k
            self.adds += 1
            self._seqs.applied(writer_id, seq)
        return self.value

    def get(self) -> int:
        return self.value

    def duplicates(self) -> int:
        """How many repeated ``(writer_id, seq)`` adds were dropped."""
        return self._seqs.duplicates

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def restored(self) -> Any:
        return self.restore_info
