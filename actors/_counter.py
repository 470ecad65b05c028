"""The smallest checkpointed actor: a counter. The demo's and the tests' victim."""

from __future__ import annotations

import bisect
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
        # Every applied seq per writer, as runs [first, last]: exact where WriterSeqs is not
        # (it closes a gap after REORDER_WINDOW later seqs), so a checker can name a lost add.
        self._applied: dict[str, list[list[int]]] = {}
        self.restore_info = self.enable_checkpointing(CheckpointConfig(
            storage=storage, durability=durability, policy=policy, every_n=every_n,
            checkpoint_on_sigterm=checkpoint_on_sigterm), restore=restore)

    def state_dict(self) -> StateTree:
        return {"value": self.value, "adds": self.adds, "writers": self._seqs.state_dict(),
                "applied": self._applied}

    def load_state_dict(self, state: StateTree) -> None:
        self.value, self.adds = int(state["value"]), int(state["adds"])
        if "writers" in state:  # absent from checkpoints written before adds were idempotent
            self._seqs.load_state_dict(state["writers"])
        # Absent from older checkpoints: their applied seqs are unknown and read back as none.
        self._applied = {str(w): [[int(lo), int(hi)] for lo, hi in runs]
                         for w, runs in state.get("applied", {}).items()}

    @mutation
    def add(self, k: int = 1, *, writer_id: str | None = None, seq: int | None = None) -> int:
        """Add ``k`` and return the value; a repeated ``(writer_id, seq)`` adds nothing."""
        if not self._seqs.is_repeat(writer_id, seq):
            self.value += k
            self.adds += 1
            self._seqs.applied(writer_id, seq)
            if writer_id is not None and seq is not None:
                _insert(self._applied.setdefault(str(writer_id), []), int(seq))
        return self.value

    def get(self) -> int:
        return self.value

    def applied_seqs(self, writer_id: str) -> list[int]:
        """Every ``seq`` of ``writer_id`` whose add was applied, ascending: the set a history
        checker compares with the writer's acknowledged and refused calls."""
        return [seq for lo, hi in self._applied.get(str(writer_id), []) for seq in range(lo, hi + 1)]

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


def _insert(runs: list[list[int]], seq: int) -> None:
    """Add ``seq`` to sorted, disjoint, non-adjacent runs ``[first, last]``, merging neighbours."""
    i = bisect.bisect_right([first for first, _ in runs], seq)  # runs[i - 1] starts at or below seq
    if i and runs[i - 1][1] >= seq:
        return
    left = bool(i) and runs[i - 1][1] == seq - 1
    right = i < len(runs) and runs[i][0] == seq + 1
    if left and right:
        runs[i - 1][1] = runs.pop(i)[1]
    elif left:
        runs[i - 1][1] = seq
    elif right:
        runs[i][0] = seq
    else:
        runs.insert(i, [seq, seq])
