"""The replay buffer's errors and statistics (the buffer and its actor are exported by
``actors``)."""

from actors._replay import EmptyBufferError, ReplayStats, SchemaError
from actors._replay_actor import ReplayActorStats

__all__ = ["EmptyBufferError", "ReplayActorStats", "ReplayStats", "SchemaError"]
