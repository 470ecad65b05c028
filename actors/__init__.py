"""Stateful Ray actors that survive crashes: the checkpoint mechanism and what is built on it.

What a user writes code against is exported here. The details live in named submodules, each
with its own ``__all__``: ``actors.checkpoint`` (the store, its format and warnings, the
restore errors, the mechanism's failpoints), ``actors.replay`` and ``actors.param_server``
(their errors and statistics), ``actors.spare`` (the spare worker's state and environment).
"""

from actors._checkpoint import (
    Checkpointable,
    CheckpointConfig,
    Durability,
    Policy,
    RestoreInfo,
    checkpoint_async,
    mutation,
)
from actors._codec import StateTree
from actors._counter import CheckpointedCounter
from actors._dedupe import Writer, WriterSeqs
from actors._param_server import ParameterServer
from actors._replay import PrioritizedReplayBuffer
from actors._replay_actor import ReplayBufferActor, ReplayClient
from actors._spare import keep_spare

__all__ = [
    "CheckpointConfig",
    "Checkpointable",
    "CheckpointedCounter",
    "Durability",
    "ParameterServer",
    "Policy",
    "PrioritizedReplayBuffer",
    "ReplayBufferActor",
    "ReplayClient",
    "RestoreInfo",
    "StateTree",
    "Writer",
    "WriterSeqs",
    "checkpoint_async",
    "keep_spare",
    "mutation",
]
