"""Stateful Ray actors that survive crashes: the checkpoint mechanism and what is built on it."""

from actors._checkpoint import (
    Checkpointable,
    CheckpointConfig,
    CheckpointStats,
    Durability,
    Policy,
    RestartUnknown,
    RestoreInfo,
    StorageNotFresh,
    checkpoint_async,
    mutation,
)
from actors._codec import StateTree
from actors._counter import CheckpointedCounter
from actors._dedupe import Writer, WriterSeqs
from actors._failpoints import FAILPOINTS, ActorFailpoint
from actors._param_server import (
    GradientError,
    ParameterServer,
    PushResult,
    ServerStats,
    StaleGradientError,
    VersionTimeout,
)
from actors._replay import EmptyBufferError, PrioritizedReplayBuffer, ReplayStats, SchemaError
from actors._replay_actor import ReplayActorStats, ReplayBufferActor, ReplayClient
from actors._spare import SpareState, SpareWorkerError, keep_spare, spare_actor_env, spare_job_env
from actors._store import (
    FORMAT_VERSION,
    CheckpointInfo,
    CheckpointRetried,
    CheckpointStore,
    CheckpointWarning,
    LoadedCheckpoint,
)

__all__ = [
    "FAILPOINTS",
    "FORMAT_VERSION",
    "ActorFailpoint",
    "CheckpointConfig",
    "CheckpointInfo",
    "CheckpointRetried",
    "CheckpointStats",
    "CheckpointStore",
    "CheckpointWarning",
    "Checkpointable",
    "CheckpointedCounter",
    "Durability",
    "EmptyBufferError",
    "GradientError",
    "LoadedCheckpoint",
    "ParameterServer",
    "Policy",
    "PrioritizedReplayBuffer",
    "PushResult",
    "ReplayActorStats",
    "ReplayBufferActor",
    "ReplayClient",
    "ReplayStats",
    "RestartUnknown",
    "RestoreInfo",
    "SchemaError",
    "ServerStats",
    "SpareState",
    "SpareWorkerError",
    "StaleGradientError",
    "StateTree",
    "StorageNotFresh",
    "VersionTimeout",
    "Writer",
    "WriterSeqs",
    "checkpoint_async",
    "keep_spare",
    "mutation",
    "spare_actor_env",
    "spare_job_env",
]
