"""raychaos chaos engine: embedded clusters, faults, and the error hierarchy.

Nothing here imports ``ray`` at import time, so the pytest plugin stays cheap to load.
"""

from chaos._cluster import TEST_SYSTEM_CONFIG, ClusterHandle, local_cluster, ray_processes, reap
from chaos._errors import (
    ChaosError,
    CheckpointError,
    CheckpointFormatError,
    HangError,
    InvalidConfig,
    StorageUnreachable,
)
from chaos._wait import wait_until

__all__ = [
    "TEST_SYSTEM_CONFIG",
    "ChaosError",
    "CheckpointError",
    "CheckpointFormatError",
    "ClusterHandle",
    "HangError",
    "InvalidConfig",
    "StorageUnreachable",
    "local_cluster",
    "ray_processes",
    "reap",
    "wait_until",
]
