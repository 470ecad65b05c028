"""The GCS's Redis lost, cut off and timed out: what the GCS and the cluster do."""

from __future__ import annotations

from scenarios.model._workload import Workload
from scenarios.workloads.gcs._redis_loss import RedisLoss

__all__ = ["WORKLOADS"]

WORKLOADS: dict[str, type[Workload]] = {"redis-loss": RedisLoss}
