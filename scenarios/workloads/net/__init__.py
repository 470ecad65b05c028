"""Workloads on a network lab: a partitioned worker, a partitioned head, a lossy and a
bandwidth-starved network. Each one's Ray-free verdicts live beside it."""

from __future__ import annotations

from scenarios.model._workload import Workload
from scenarios.workloads.net._lossy import BandwidthStarved, LossyNetwork
from scenarios.workloads.net._partition_head import PartitionHead
from scenarios.workloads.net._partition_worker import PartitionWorker

__all__ = ["WORKLOADS"]

WORKLOADS: dict[str, type[Workload]] = {
    "partition-worker": PartitionWorker,
    "partition-head": PartitionHead,
    "lossy-network": LossyNetwork,
    "bandwidth-starved": BandwidthStarved,
}
