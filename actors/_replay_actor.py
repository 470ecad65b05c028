"""The replay buffer as a checkpointed, idempotent Ray actor."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from actors._checkpoint import (
    Checkpointable,
    CheckpointConfig,
    CheckpointStats,
    Restore,
    mutation,
)
from actors._codec import StateTree
from actors._dedupe import WriterSeqs
from actors._replay import PrioritizedReplayBuffer, ReplayStats
from actors._wire import check_pair, pack_batch, pack_request, unpack_batch, unpack_request
from chaos._errors import InvalidConfig

__all__ = ["ReplayActorStats", "ReplayBufferActor", "ReplayClient"]


@dataclass(frozen=True, slots=True)
class ReplayActorStats:
    """The buffer's counters, the duplicates dropped, and the checkpointing counters."""

    buffer: ReplayStats
    duplicate_adds: int
    writers: int
    checkpoint: CheckpointStats


class ReplayBufferActor(Checkpointable):
    """A :class:`PrioritizedReplayBuffer` that survives crashes; wrap it with ``ray.remote``.

    Adds that carry ``(writer_id, seq)`` are idempotent: with ``max_task_retries=-1`` Ray
    delivers a call at least once, so an add retried after ``ActorUnavailableError`` may
    arrive twice; the second is acknowledged and not stored. Each writer numbers its adds
    0, 1, 2, …; Ray's retries may deliver them out of order, which the table of applied
    ``seq`` per writer (part of the checkpointed state) allows for.

    ``sample`` is a mutation too: it advances the sampling RNG, whose state is restored,
    so a restored buffer draws the same samples as the lost one would have.

    Args:
        capacity: transitions kept (FIFO eviction).
        checkpoint: where and how to checkpoint (policy or WAL durability).
        alpha, beta, eps, seed: as for :class:`PrioritizedReplayBuffer`.
        restore: as for :meth:`Checkpointable.enable_checkpointing` (``"always"`` resumes
            a previous run's storage).
    """

    def __init__(self, capacity: int, *, checkpoint: CheckpointConfig, alpha: float = 0.6,
                 beta: float = 0.4, eps: float = 1e-6, seed: int | None = None,
                 restore: Restore = "auto") -> None:
        self.buffer = PrioritizedReplayBuffer(capacity, alpha=alpha, beta=beta, eps=eps, seed=seed)
        self._seqs = WriterSeqs()
        self.restore_info = self.enable_checkpointing(checkpoint, restore=restore)

    # -- state -----------------------------------------------------------------------------

    def state_dict(self) -> StateTree:
        return {"buffer": self.buffer.state_dict(), "writers": self._seqs.state_dict()}

    def load_state_dict(self, state: StateTree) -> None:
        self.buffer.load_state_dict(state["buffer"])
        self._seqs.load_state_dict(state["writers"])

    # The dedupe table is small, so full and delta checkpoints both carry all of it.
    def delta_state_dict(self) -> StateTree:
        return {"buffer": self.buffer.delta_state_dict(), "writers": self._seqs.state_dict()}

    def load_delta_state_dict(self, delta: StateTree) -> None:
        self.buffer.load_delta_state_dict(delta["buffer"])
        self._seqs.load_state_dict(delta["writers"])

    def mark_checkpointed(self) -> None:
        self.buffer.mark_clean()

    # -- mutations -------------------------------------------------------------------------

    @mutation
    def add(self, batch: Mapping[str, np.ndarray], priorities: np.ndarray | None = None, *,
            writer_id: str | None = None, seq: int | None = None) -> np.ndarray:
        """Store a batch; a repeated ``(writer_id, seq)`` stores nothing and returns no slots."""
        if self._seqs.is_repeat(writer_id, seq):
            return np.empty(0, dtype=np.int64)
        indices = self.buffer.add(batch, priorities)
        self._seqs.applied(writer_id, seq)
        return indices

    @mutation
    def sample(self, batch_size: int, *, beta: float | None = None) -> dict[str, np.ndarray]:
        return self.buffer.sample(batch_size, beta=beta)

    @mutation
    def update_priorities(self, indices: np.ndarray, priorities: np.ndarray) -> None:
        self.buffer.update_priorities(indices, priorities)

    @mutation
    def sample_and_update(self, batch_size: int, indices: np.ndarray | None = None,
                          priorities: np.ndarray | None = None, *, beta: float | None = None) -> dict[str, np.ndarray]:
        """Set the previous batch's priorities (when given), then draw the next batch: a
        learner's step in one round trip, logged as one mutation (replayed as one).

        Raises:
            InvalidConfig: only one of ``indices`` and ``priorities`` given, either invalid
                (as for :meth:`update_priorities`), or a draw :meth:`sample` would refuse;
                nothing is changed and nothing is drawn.
        """
        check_pair(indices, priorities)
        # The draw is checked before the update: a call that fails half done would hold an
        # update its log (written only for calls that return) does not replay.
        self.buffer.check_sample(batch_size, beta)
        if indices is not None and priorities is not None:
            self.buffer.update_priorities(indices, priorities)
        return self.buffer.sample(batch_size, beta=beta)

    def sample_and_update_packed(self, request: bytes) -> bytes:
        """:meth:`sample_and_update` as one ``bytes`` each way (``actors._wire``'s layout), which
        Ray moves far faster than several arguments and numpy arrays; :class:`ReplayClient`
        packs and unpacks. Logged as the one ``sample_and_update`` it makes.

        Raises:
            InvalidConfig: as :meth:`sample_and_update`, or bytes its layout does not account for.
        """
        asked = unpack_request(request)
        return pack_batch(self.sample_and_update(asked.batch_size, asked.indices, asked.priorities,
                                                 beta=asked.beta))

    # -- queries ---------------------------------------------------------------------------

    def size(self) -> int:
        return len(self.buffer)

    def column(self, name: str) -> np.ndarray:
        """The stored rows of column ``name``, by slot."""
        return self.buffer.column(name)

    def last_seq(self, writer_id: str) -> int:
        """The highest ``seq`` stored for ``writer_id`` (-1 when none)."""
        return self._seqs.last_of(writer_id)

    def stats(self) -> ReplayActorStats:
        return ReplayActorStats(buffer=self.buffer.stats(), duplicate_adds=self._seqs.duplicates,
                                writers=self._seqs.writers(), checkpoint=self.checkpoint_stats())

    def ping(self) -> None:
        """A no-op call, for measuring round trips against."""

    def pid(self) -> int:
        return os.getpid()


class ReplayClient:
    """The driver's side of a :class:`ReplayBufferActor` for a learner's loop: one round
    trip per step, one ``bytes`` each way, which Ray moves far faster than several
    arguments and numpy arrays (README has the figures).

    Args:
        actor: the ``ray.remote(ReplayBufferActor)`` handle.
        timeout: seconds each call may take before ``ray.get`` raises ``GetTimeoutError``.
    """

    def __init__(self, actor: Any, *, timeout: float = 60.0) -> None:
        if not timeout > 0:
            raise InvalidConfig(f"ReplayClient timeout={timeout!r}: give seconds > 0")
        self.actor, self.timeout = actor, timeout

    def sample_and_update(self, batch_size: int, indices: np.ndarray | None = None,
                          priorities: np.ndarray | None = None, *,
                          beta: float | None = None) -> dict[str, np.ndarray]:
        """As :meth:`ReplayBufferActor.sample_and_update`; the arrays are read-only views,
        as ``ray.get`` gives them."""
        import ray

        request = pack_request(batch_size, indices, priorities, beta)
        return unpack_batch(ray.get(self.actor.sample_and_update_packed.remote(request), timeout=self.timeout))
