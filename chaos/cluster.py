"""The test cluster and its harness: a local multi-node Ray cluster with the settings chaos
needs, the Ray processes it runs, a Redis server for GCS fault tolerance, a size-capped
filesystem for disk faults, and the reaper that leaves no process behind."""

from chaos._capped import capped_filesystem
from chaos._cluster import TEST_SYSTEM_CONFIG, ClusterHandle, local_cluster, ray_processes, reap
from chaos._disk import free_bytes
from chaos._redis import redis_server

__all__ = [
    "TEST_SYSTEM_CONFIG",
    "ClusterHandle",
    "capped_filesystem",
    "free_bytes",
    "local_cluster",
    "ray_processes",
    "reap",
    "redis_server",
]
