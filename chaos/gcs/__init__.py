"""The GCS and the Redis behind it (GCS fault tolerance): the head's GCS process
(:func:`head_of`), the throwaway Redis a cluster of raychaos's runs on (:class:`RedisServer`,
:func:`redis_of`), and the Redis faults (:class:`KillRedis`, :class:`RedisClientKill`,
:class:`RedisIdleTimeout`): fault kinds like any other, scheduled on a cluster this process started
with GCS fault tolerance, or injected into a Redis of its own by :func:`inject_redis_fault`."""

from chaos.cluster._cluster import head_of
from chaos.gcs._faults import (
    KillRedis,
    RedisClientKill,
    RedisEvent,
    RedisFault,
    RedisIdleTimeout,
    gcs_connections,
    inject_redis_fault,
)
from chaos.gcs._redis import RedisServer, redis_of

__all__ = ["KillRedis", "RedisClientKill", "RedisEvent", "RedisFault", "RedisIdleTimeout", "RedisServer",
           "gcs_connections", "head_of", "inject_redis_fault", "redis_of"]
