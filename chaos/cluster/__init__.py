"""The test cluster and its harness: a local multi-node Ray cluster with the settings chaos
needs, the Ray processes it runs, a Redis server for GCS fault tolerance, a size-capped
filesystem for disk faults, the reaper that leaves no process behind, and one typed view of
what Ray says of its nodes (live ones, every node's state and death time, short ids), and the
facts of the installed Ray release raychaos adapts to (its minor version, token authentication)."""

from chaos._ray_compat import (
    auth_headers,
    client_auth_mode,
    ray_minor,
    rpc_in_flight,
    shared_host_worker_args,
    token_auth_enabled,
)
from chaos._ray_state import NodeRow, NodeState, live_nodes, node_states, short
from chaos._reclaim._cleanup import cleanup_machine
from chaos.agents._disk import free_bytes
from chaos.cluster._cluster import TEST_SYSTEM_CONFIG, ClusterHandle, local_cluster, ray_processes, reap
from chaos.disks._capped import capped_filesystem
from chaos.gcs._redis import redis_server

__all__ = [
    "TEST_SYSTEM_CONFIG",
    "ClusterHandle",
    "NodeRow",
    "NodeState",
    "auth_headers",
    "capped_filesystem",
    "cleanup_machine",
    "client_auth_mode",
    "free_bytes",
    "live_nodes",
    "local_cluster",
    "node_states",
    "ray_minor",
    "ray_processes",
    "reap",
    "redis_server",
    "rpc_in_flight",
    "shared_host_worker_args",
    "short",
    "token_auth_enabled",
]
