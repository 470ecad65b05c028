"""The checkpoint mechanism's details: the store and its on-disk format, what a save and a
load report, the warnings and restore errors, the refusal a superseded incarnation meets, and
the failpoints placed in the mechanism."""

from actors._checkpoint import CheckpointStats, RestartUnknown, StorageNotFresh
from actors._failpoints import FAILPOINTS, ActorFailpoint
from actors._fence import Superseded
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
    "CheckpointInfo",
    "CheckpointRetried",
    "CheckpointStats",
    "CheckpointStore",
    "CheckpointWarning",
    "LoadedCheckpoint",
    "RestartUnknown",
    "StorageNotFresh",
    "Superseded",
]
