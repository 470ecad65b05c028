"""Embedded Ray clusters that this process starts, owns and always tears down.

A bare ``ray.init()`` may attach to another Ray instance on the machine, so every
cluster here is started fresh (``address="local"`` or ``ray.cluster_utils.Cluster``) and
its address is handed out explicitly. Teardown records every descendant process before
shutting Ray down and kills whatever survives it, paused processes included, so nothing
is left running even after a test killed or paused Ray's own processes.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import signal
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psutil

from chaos._errors import InvalidConfig

__all__ = ["TEST_SYSTEM_CONFIG", "ClusterHandle", "local_cluster", "ray_processes", "reap"]

#: Faster failure detection than Ray's defaults (5 s delay, 3 s period, 5 misses) yet
#: slack enough not to declare a busy node on a 2-core machine dead.
TEST_SYSTEM_CONFIG: Mapping[str, Any] = {
    "health_check_initial_delay_ms": 1000,
    "health_check_period_ms": 1000,
    "health_check_timeout_ms": 2000,
    "health_check_failure_threshold": 3,
    "task_retry_delay_ms": 100,
}

_RAY_MARKERS = ("raylet", "gcs_server", "default_worker", "ray::", "dashboard", "log_monitor",
                "runtime_env", "ray/autoscaler", "ray_client_server")


@dataclass(frozen=True, slots=True)
class ClusterHandle:
    """A running embedded cluster. Pass ``address`` explicitly to everything (State API too).

    Attributes:
        address: the GCS address, for ``ray.init(address=...)`` and ``ray.util.state``.
        nodes: how many nodes it started with (head included).
        temp_dir: Ray's temporary root for this cluster; removed at teardown.
        cluster: the ``ray.cluster_utils.Cluster`` of a multi-node cluster (to add or
            remove nodes), None for a single node.
    """

    address: str
    nodes: int
    temp_dir: str
    cluster: Any = field(default=None, compare=False)


def _is_ray(proc: psutil.Process) -> bool:
    try:
        text = proc.name() + " " + " ".join(proc.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    return any(marker in text for marker in _RAY_MARKERS)


def ray_processes() -> list[psutil.Process]:
    """Every Ray process on this machine (raylets, GCS, workers, agents), whoever started it."""
    return [p for p in psutil.process_iter() if p.pid != os.getpid() and _is_ray(p)]


def reap(procs: list[psutil.Process], *, timeout: float = 10.0) -> list[psutil.Process]:
    """Wait up to ``timeout`` for ``procs`` to exit, then SIGCONT + SIGKILL the rest.

    Returns the processes that were still alive and had to be killed.
    """
    _, alive = psutil.wait_procs(procs, timeout=timeout)
    for proc in alive:
        for sig in (signal.SIGCONT, signal.SIGKILL):  # a paused process must not linger
            try:
                proc.send_signal(sig)
            except psutil.NoSuchProcess:
                break
    psutil.wait_procs(alive, timeout=timeout)
    return alive


def _descendants() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if _is_ray(p)]


@contextmanager
def local_cluster(
    *,
    nodes: int = 1,
    num_cpus: int = 2,
    num_gpus: int = 0,
    object_store_mb: int = 200,
    system_config: Mapping[str, Any] | None = None,
    worker_resources: Mapping[str, float] | None = None,
    namespace: str = "raychaos",
    log_to_driver: bool = True,
) -> Iterator[ClusterHandle]:
    """Start a fresh embedded Ray cluster, connect this driver to it, and tear it all down.

    Args:
        nodes: 1 for a plain local instance; more for a head plus ``nodes - 1`` workers
            (each node gets ``num_cpus`` CPUs; the head an ``rc_head`` resource, worker ``i`` an ``rc_node<i>`` resource and
            ``worker_resources``).
        num_cpus: logical CPUs per node.
        num_gpus: logical GPUs of a single node (scheduling only: nothing needs a real GPU).
        object_store_mb: object store size per node.
        system_config: Ray ``_system_config``; defaults to :data:`TEST_SYSTEM_CONFIG`.
        log_to_driver: forward workers' and raylets' output to this process.

    Raises:
        InvalidConfig: a bad size, or this process is already connected to Ray.
    """
    import ray

    _validate_cluster_args(nodes, num_cpus, object_store_mb)
    if ray.is_initialized():
        raise InvalidConfig(
            "this process is already connected to Ray; call ray.shutdown() before "
            "starting an embedded cluster (one driver connection per process)"
        )
    temp_dir = tempfile.mkdtemp(prefix="rc-", dir="/tmp")  # short: Ray's socket paths are limited
    config = dict(TEST_SYSTEM_CONFIG if system_config is None else system_config)
    try:
        init_args = {"namespace": namespace, "log_to_driver": log_to_driver,
                     "logging_level": logging.WARNING}
        if num_gpus:
            init_args["num_gpus"] = num_gpus
        with _started(nodes, num_cpus, object_store_mb, config, temp_dir, worker_resources,
                      init_args) as handle:
            yield handle
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)


def _validate_cluster_args(nodes: int, num_cpus: int, object_store_mb: int) -> None:
    for name, value, low in (("nodes", nodes, 1), ("num_cpus", num_cpus, 1),
                             ("object_store_mb", object_store_mb, 80)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InvalidConfig(f"`{name}` must be a whole number >= {low}, got {value!r}")


@contextmanager
def _started(nodes: int, num_cpus: int, object_store_mb: int, config: dict[str, Any],
             temp_dir: str, worker_resources: Mapping[str, float] | None,
             init_args: dict[str, Any]) -> Iterator[ClusterHandle]:
    import ray

    store = object_store_mb * 1024 * 1024
    cluster = None
    try:
        if nodes == 1:
            ctx = ray.init(address="local", num_cpus=num_cpus, object_store_memory=store,
                           _temp_dir=temp_dir, _system_config=config, include_dashboard=True,
                           **init_args)
            address = ctx.address_info["gcs_address"]
        else:
            cluster = _multi_node(nodes, num_cpus, store, config, temp_dir, worker_resources)
            ray.init(address=cluster.address, **{k: v for k, v in init_args.items() if k != "num_gpus"})
            address = cluster.address
        yield ClusterHandle(address=address, nodes=nodes, temp_dir=temp_dir, cluster=cluster)
    finally:
        _teardown(cluster, temp_dir)


def _multi_node(nodes: int, num_cpus: int, store: int, config: dict[str, Any], temp_dir: str,
                worker_resources: Mapping[str, float] | None) -> Any:
    from ray._private.utils import get_ray_address_file
    from ray.cluster_utils import Cluster

    # Cluster records its address under Ray's default temp root and fails if that is missing.
    os.makedirs(os.path.dirname(get_ray_address_file(None)), exist_ok=True)
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": num_cpus, "object_store_memory": store, "_system_config": config,
        "temp_dir": temp_dir, "include_dashboard": True, "resources": {"rc_head": 1.0},
        # Unlike ray.init, Cluster's head fails if 8265 is taken (another cluster on this machine).
        "dashboard_port": _free_port(),
    })
    for i in range(1, nodes):
        resources = {f"rc_node{i}": 1.0, **(worker_resources or {})}
        cluster.add_node(num_cpus=num_cpus, object_store_memory=store, resources=resources)
    cluster.wait_for_nodes(timeout=60)
    return cluster


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _teardown(cluster: Any, temp_dir: str) -> None:
    import ray

    procs = _descendants()
    try:
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
    finally:
        reap(procs)
        # Anything of this session that escaped the process tree (reparented to init).
        reap([p for p in ray_processes() if _mentions(p, temp_dir)], timeout=5.0)


def _mentions(proc: psutil.Process, text: str) -> bool:
    try:
        return any(text in arg for arg in proc.cmdline())
    except psutil.Error:
        return False
