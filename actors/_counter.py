"""The smallest checkpointed actor: a counter. The demo's and the tests' victim."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from actors._checkpoint import CheckpointConfig, Checkpointable, Durability, Policy, mutation


class CheckpointedCounter(Checkpointable):
    """A counter whose value and history length survive restarts.

    Wrap it with ``ray.remote(max_restarts=..., max_task_retries=-1)`` to run it as an actor.
    """

    def __init__(self, storage: str, *, durability: Durability = "policy",
                 policy: Policy = "every_n", every_n: int = 5) -> None:
        self.value, self.adds = 0, 0
        self.restore_info = self.enable_checkpointing(CheckpointConfig(
            storage=storage, durability=durability, policy=policy, every_n=every_n))

    def state_dict(self) -> Mapping[str, Any]:
        return {"value": self.value, "adds": self.adds}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.value, self.adds = int(state["value"]), int(state["adds"])

    @mutation
    def add(self, k: int = 1) -> int:
        self.value += k
        self.adds += 1
        return self.value

    def get(self) -> int:
        return self.value

    def pid(self) -> int:
        return os.getpid()

    def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def restored(self) -> Any:
        return self.restore_info
