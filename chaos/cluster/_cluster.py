"""Embedded Ray clusters that this process starts, owns and always tears down.

A bare ``ray.init()`` may attach to another Ray instance on the machine, so every
cluster here is started fresh (``address="local"`` or ``ray.cluster_utils.Cluster``) and
its address is handed out explicitly. Teardown records every descendant process before
shutting Ray down and kills whatever survives it, paused processes included, so nothing
is left running even after a test killed or paused Ray's own processes.
"""

from __future__ import annotations

import glob
import logging
import os
import shutil
import signal
import socket
import tempfile
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import psutil

from chaos._errors import FaultIneffective, InvalidConfig, InvalidFaultSpec
from chaos._ray_compat import ensure_token, shared_host_worker_args
from chaos._reclaim._reaper import Claim, ClaimKind, claim, release
from chaos._wait import wait_until
from chaos.net._cluster import join_workers, kill_workers, map_node_ids
from chaos.net._lab import NetLab, network_lab, registered, require_network

_log = logging.getLogger(__name__)

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
        lab: the network lab of a ``network=True`` cluster (its namespaces and addresses),
            None otherwise.
    """

    address: str
    nodes: int
    temp_dir: str
    cluster: Any = field(default=None, compare=False)
    lab: NetLab | None = field(default=None, compare=False)


#: GCS restart: how long the restarted server may take to answer and its nodes to be alive.
GCS_RESTART_TIMEOUT = 60.0
_HEADS: dict[str, Any] = {}  # gcs address -> the head's ray._private.node.Node, for KillGcs
#: Ray forks the GCS with PR_SET_PDEATHSIG(SIGKILL), and Linux ties that to the *thread* that
#: forked it: a GCS restarted from a thread that then ends (a fault's heal runs on the
#: schedule's thread, which ends after the last fault) is SIGKILLed with that thread, a second
#: into its new life, and the cluster hangs 60 s before Ray ends it. So every restart is forked
#: from this executor's one thread, which lives as long as this process.
_GCS_PARENT = ThreadPoolExecutor(max_workers=1, thread_name_prefix="raychaos-gcs-parent")


@dataclass(frozen=True, slots=True)
class _Head:
    """The head node of a cluster this process started: the one whose GCS it can restart."""

    node: Any

    @property
    def node_id(self) -> str:
        return str(self.node.node_id)

    def gcs_pid(self) -> int:
        from ray._private import ray_constants

        (info,) = self.node.all_processes[ray_constants.PROCESS_TYPE_GCS_SERVER]
        return int(info.process.pid)

    def kill_gcs(self) -> int:
        """SIGKILL the GCS server; returns its pid once it is gone."""
        pid = self.gcs_pid()
        self.node.kill_gcs_server()  # SIGKILL, then waits for the process
        if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
            raise FaultIneffective(f"gcs_server pid {pid} still runs after SIGKILL")
        return pid

    def restart_gcs(self, address: str) -> tuple[int, float]:
        """Start the GCS server again (same port, same storage); returns its pid and how long
        it took until it answered with every node it knew alive again."""
        import time

        start = time.monotonic()
        _GCS_PARENT.submit(self.node.start_gcs_server).result(timeout=GCS_RESTART_TIMEOUT)
        wait_until(lambda: _gcs_answers(address), timeout=GCS_RESTART_TIMEOUT, interval=0.1,
                   what=f"the restarted GCS at {address} to answer")
        return self.gcs_pid(), time.monotonic() - start


def _gcs_answers(address: str) -> bool:
    from ray.util.state import list_nodes

    try:
        return bool(list_nodes(address=address, limit=1, timeout=5, raise_on_missing_output=False))
    except Exception:  # noqa: BLE001 - not up yet: the wait retries until its deadline
        return False


def head_of(address: str) -> _Head:
    """The head of the cluster at ``address``, when this process started it.

    Raises:
        InvalidFaultSpec: another process started that cluster (its GCS is not ours to restart).
    """
    if address not in _HEADS:
        raise InvalidFaultSpec(f"the cluster at {address} was not started by this process, so its "
                               "GCS cannot be restarted from here; run KillGcs on a cluster from "
                               "chaos.local_cluster (or kill the GCS on its head yourself)")
    return _Head(_HEADS[address])


def head_down(address: str) -> list[str]:
    """The head processes (GCS server, raylet) of the cluster at ``address``, started by this
    process, that have exited or are stopped, each as ``gcs_server pid N exited with code C``;
    [] while they run or when another process started that cluster. A driver outlives an
    unreachable GCS by Ray's reconnect timeout (60 s) and then exits with nothing printed:
    this names the loss when it happens."""
    from ray._private import ray_constants

    node = _HEADS.get(address)
    if node is None:
        return []
    down = []
    if ray_constants.PROCESS_TYPE_GCS_SERVER not in node.all_processes:  # Ray forgets a GCS it killed
        down.append("gcs_server was killed and not started again")
    for kind in (ray_constants.PROCESS_TYPE_GCS_SERVER, ray_constants.PROCESS_TYPE_RAYLET):
        for info in node.all_processes.get(kind, []):
            if (code := info.process.poll()) is not None:
                down.append(f"{kind} pid {info.process.pid} exited with code {code}")
            elif _stopped(info.process.pid):
                down.append(f"{kind} pid {info.process.pid} is stopped (SIGSTOP) and was not resumed")
    return down


def _stopped(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() == psutil.STATUS_STOPPED)
    except psutil.Error:
        return False


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
    return list(alive)


def _descendants() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if _is_ray(p)]


@contextmanager
def local_cluster(
    *,
    nodes: int = 1,
    num_cpus: int = 2,
    num_gpus: int = 0,
    object_store_mb: int = 200,
    system_config: Mapping[str, object] | None = None,
    worker_resources: Mapping[str, float] | None = None,
    namespace: str = "raychaos",
    log_to_driver: bool = True,
    redis_address: str | None = None,
    worker_env: Mapping[str, str] | None = None,
    runtime_env: Mapping[str, object] | None = None,
    network: bool = False,
    own_ports: bool = False,
) -> Iterator[ClusterHandle]:
    """Start a fresh embedded Ray cluster, connect this driver to it, and tear it all down.

    The teardown survives the head's loss: a GCS or head raylet left stopped is resumed and a
    GCS that died is started again (an empty one, without Redis) before ``ray.shutdown``, which
    could otherwise block until Ray ends this process 60 s after the loss.

    Args:
        nodes: 1 for a plain local instance; more for a head plus ``nodes - 1`` workers
            (each node gets ``num_cpus`` CPUs; the head an ``rc_head`` resource, worker ``i`` an
            ``rc_node<i>`` resource and
            ``worker_resources``).
        num_cpus: logical CPUs per node.
        num_gpus: logical GPUs of a single node (scheduling only: nothing needs a real GPU).
        object_store_mb: object store size per node.
        system_config: Ray ``_system_config``; defaults to :data:`TEST_SYSTEM_CONFIG`.
        log_to_driver: forward workers' and raylets' output to this process.
        redis_address: ``host:port`` of a Redis for GCS fault tolerance (see
            :func:`chaos.cluster.redis_server`): the GCS keeps its tables there and survives a restart.
        worker_env: environment for the processes of the worker nodes (not the head), set
            when they start: Ray's testing knobs such as :func:`chaos.engine.rpc_failure_env`.
        runtime_env: this driver's job runtime env (``ray.init(runtime_env=...)``), e.g.
            ``actors.spare.spare_job_env()``.
        network: put each worker node in its own network namespace, with its own address on
            a bridge (the head stays on the host, on the bridge's address), so that network
            faults (:class:`chaos.Partition` and its siblings) can cut, thin and slow the links
            between nodes. Needs root, ``nft``, ``ip`` and ``tc``, and ``nodes >= 2``.
        own_ports: give the head's dashboard agent a free port instead of Ray's fixed 52365 (a
            single node is then started through ``ray.cluster_utils`` as well), so that several
            clusters can run on one machine at once: pytest-xdist workers, each with its own.

    Raises:
        InvalidConfig: a bad size, or this process is already connected to Ray.
        NetworkUnavailable: ``network`` was asked without root or without ``nft``/``ip``/``tc``
            (an :class:`InvalidConfig` too; the message names what is missing).
    """
    import ray

    _validate_cluster_args(nodes, num_cpus, object_store_mb)
    if network:
        _validate_network(nodes)
    if ray.is_initialized():
        raise InvalidConfig(
            "this process is already connected to Ray; call ray.shutdown() before "
            "starting an embedded cluster (one driver connection per process)"
        )
    temp_dir = tempfile.mkdtemp(prefix="rc-", dir="/tmp")  # short: Ray's socket paths are limited
    config = dict(TEST_SYSTEM_CONFIG if system_config is None else system_config)
    # Claimed before Ray starts: a driver killed from here on leaves its cluster's processes to its reaper.
    session = Claim(ClaimKind.RAY_SESSION, (temp_dir,))
    claim(session)
    try:
        init_args = {"namespace": namespace, "log_to_driver": log_to_driver,
                     "logging_level": logging.WARNING}
        if num_gpus:
            init_args["num_gpus"] = num_gpus
        if runtime_env is not None:
            init_args["runtime_env"] = dict(runtime_env)
        env = _NodeEnv(head={**_start_patience(), **({"RAY_REDIS_ADDRESS": redis_address} if redis_address else {})},
                       workers=dict(worker_env or {}))
        if env.workers and nodes == 1:
            raise InvalidConfig(f"worker_env {dict(env.workers)} needs worker nodes; pass nodes >= 2")
        with ExitStack() as stack:
            lab = stack.enter_context(network_lab(nodes - 1)) if network else None
            handle = stack.enter_context(_started(nodes, num_cpus, object_store_mb, config, temp_dir,
                                                  worker_resources, init_args, env, lab, own_ports=own_ports))
            if lab is not None:
                stack.enter_context(registered(handle.address, lab))
            yield handle
    finally:
        shutil.rmtree(temp_dir, ignore_errors=True)
        release(session)


def _validate_network(nodes: int) -> None:
    """A network cluster needs the lab's tools and at least one worker node to put apart."""
    require_network("local_cluster(network=True)")
    if nodes < 2:
        raise InvalidConfig(f"network=True puts worker nodes in namespaces, and nodes={nodes} has "
                            "none; pass nodes >= 2")


def _validate_cluster_args(nodes: int, num_cpus: int, object_store_mb: int) -> None:
    for name, value, low in (("nodes", nodes, 1), ("num_cpus", num_cpus, 1),
                             ("object_store_mb", object_store_mb, 80)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise InvalidConfig(f"`{name}` must be a whole number >= {low}, got {value!r}")


@dataclass(frozen=True, slots=True)
class _NodeEnv:
    """Environment variables for the processes of the head and of the worker nodes."""

    head: Mapping[str, str]
    workers: Mapping[str, str]


@contextmanager
def _environ(variables: Mapping[str, str]) -> Iterator[None]:
    """Ray's processes inherit this process's environment when they start: set ``variables``
    for the start only, then restore every one of them."""
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextmanager
def _started(nodes: int, num_cpus: int, object_store_mb: int, config: dict[str, Any],
             temp_dir: str, worker_resources: Mapping[str, float] | None,
             init_args: dict[str, Any], env: _NodeEnv,
             lab: NetLab | None = None, *, own_ports: bool = False) -> Iterator[ClusterHandle]:
    store = object_store_mb * 1024 * 1024
    cluster, address = None, ""
    try:
        with _gcs_log_on_failure(temp_dir):
            cluster, address = _start(nodes, num_cpus, store, config, temp_dir, worker_resources, init_args, env,
                                      lab, own_ports=own_ports)
        yield ClusterHandle(address=address, nodes=nodes, temp_dir=temp_dir, cluster=cluster, lab=lab)
    finally:
        _revive_head(address)
        _HEADS.pop(address, None)
        if lab is not None:  # first: else the teardown waits out their reconnect attempts
            kill_workers(lab)
        _teardown(cluster, temp_dir)


def _start(nodes: int, num_cpus: int, store: int, config: dict[str, Any], temp_dir: str,
           worker_resources: Mapping[str, float] | None, init_args: dict[str, Any], env: _NodeEnv,
           lab: NetLab | None, *, own_ports: bool) -> tuple[Any, str]:
    """The cluster started and this driver connected: (``ray.cluster_utils.Cluster`` or None, address)."""
    import ray

    cluster = None
    if nodes == 1 and not own_ports:
        with _environ(env.head):
            ctx = ray.init(address="local", num_cpus=num_cpus, object_store_memory=store,
                           _temp_dir=temp_dir, _system_config=config, include_dashboard=True,
                           **init_args)
        address = ctx.address_info["gcs_address"]
        _HEADS[address] = ray._private.worker._global_node
    else:
        cluster = _multi_node(nodes, num_cpus, store, config, temp_dir, worker_resources, env, lab,
                              own_ports=own_ports)
        # Before Ray 2.54 adding a node in this process leaves its address as this process's own:
        # the driver would attach to the last worker node added (shared_host_worker_args).
        head_ip = {"_node_ip_address": cluster.head_node.node_ip_address} if shared_host_worker_args() else {}
        ray.init(address=cluster.address, **head_ip, **{k: v for k, v in init_args.items() if k != "num_gpus"})
        address = cluster.address
        _HEADS[address] = cluster.head_node
        if lab is not None:
            map_node_ids(lab, nodes=nodes)
    return cluster, address


#: Seconds a starting head's GCS has to publish its port. Ray's 30 s was overrun once in a long
#: test session on a loaded 2-core machine; a GCS that never starts still fails, later.
GCS_START_PATIENCE = 90


def _start_patience() -> dict[str, str]:
    """Ray's GCS port wait for the start, unless the user set their own."""
    knob = "RAY_gcs_server_port_wait_time_s"
    return {} if knob in os.environ else {knob: str(GCS_START_PATIENCE)}


@contextmanager
def _gcs_log_on_failure(temp_dir: str) -> Iterator[None]:
    """A start that fails carries the tail of each GCS log of its session as a note: why the
    GCS did not come up is there, and the folder is removed right after."""
    try:
        yield
    except Exception as exc:
        for path in sorted(glob.glob(os.path.join(temp_dir, "session_*", "logs", "gcs_server.*"))):
            with open(path, encoding="utf-8", errors="replace") as log:
                exc.add_note(f"{path} (last lines):\n" + "".join(log.readlines()[-20:]))
        raise


def _multi_node(nodes: int, num_cpus: int, store: int, config: dict[str, Any], temp_dir: str,
                worker_resources: Mapping[str, float] | None, env: _NodeEnv, lab: NetLab | None,
                *, own_ports: bool = False) -> Any:
    from ray._private.utils import get_ray_address_file
    from ray.cluster_utils import Cluster

    # Cluster records its address under Ray's default temp root and fails if that is missing.
    os.makedirs(os.path.dirname(get_ray_address_file(None)), exist_ok=True)
    ensure_token(config)  # as ray.init does for a new cluster: Cluster's GCS aborts without one
    with _environ(env.head):
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": num_cpus, "object_store_memory": store, "_system_config": config,
            "temp_dir": temp_dir, "include_dashboard": True, "resources": {"rc_head": 1.0},
            # Unlike ray.init, Cluster's head fails if 8265 is taken (another cluster here); its
            # agent's port is a free one too (Ray's fixed 52365 is any other cluster's here).
            "dashboard_port": _free_port(),
            "dashboard_agent_listen_port": _free_port(),
            **({"node_ip_address": lab.head.address} if lab is not None else {}),
        })
    try:
        _add_workers(cluster, nodes, num_cpus, store, worker_resources, env, lab)
    except BaseException:
        cluster.shutdown()  # the caller never sees this cluster: its head must not outlive the failure
        raise
    return cluster


def _add_workers(cluster: Any, nodes: int, num_cpus: int, store: int,
                 worker_resources: Mapping[str, float] | None, env: _NodeEnv, lab: NetLab | None) -> None:
    if lab is not None:
        join_workers(lab, cluster.address, num_cpus=num_cpus, store=store, env=env.workers,
                     resources={i: {f"rc_node{i}": 1.0, **(worker_resources or {})} for i in range(1, nodes)})
        return
    for i in range(1, nodes):
        resources = {f"rc_node{i}": 1.0, **(worker_resources or {})}
        with _environ(env.workers):
            cluster.add_node(num_cpus=num_cpus, object_store_memory=store, resources=resources,
                             **shared_host_worker_args())
    cluster.wait_for_nodes(timeout=60)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _revive_head(address: str) -> None:
    """Resume a stopped head process and start a lost GCS again, so that the driver can
    disconnect: ``ray.shutdown`` joins Ray's error-listener thread, whose first read from the
    GCS has no deadline, and when the GCS died before that read the driver cannot disconnect
    until Ray ends it, 60 s after the loss (findings/shutdown_blocked_when_gcs_gone.py). The
    teardown that follows stops what this starts; a failed start is logged, not raised."""
    from ray._private import ray_constants

    node = _HEADS.get(address)
    if node is None:
        return
    _resume_stopped(node)
    gcs = node.all_processes.get(ray_constants.PROCESS_TYPE_GCS_SERVER, [])
    if gcs and all(info.process.poll() is None for info in gcs):
        return
    try:
        if gcs:  # killed from outside: Ray still lists it
            node.kill_gcs_server(check_alive=False)
        # Not restart_gcs: without Redis the new GCS is another cluster, which only needs to
        # answer (a wrong-cluster error ends the blocked read as well as a value would).
        _GCS_PARENT.submit(node.start_gcs_server).result(timeout=GCS_RESTART_TIMEOUT)
        wait_until(lambda: _listens(address), timeout=10, interval=0.05,
                   what=f"the GCS started again at {address} to listen")
    except Exception as exc:  # noqa: BLE001 - the teardown goes on; the driver may not outlive it
        _log.warning("raychaos: could not start the lost GCS at %s before the teardown: %s", address, exc)


def _resume_stopped(node: Any) -> None:
    """SIGCONT the head's GCS and raylet where they are alive and stopped."""
    from ray._private import ray_constants

    for kind in (ray_constants.PROCESS_TYPE_GCS_SERVER, ray_constants.PROCESS_TYPE_RAYLET):
        for info in node.all_processes.get(kind, []):
            if info.process.poll() is None and _stopped(info.process.pid):
                os.kill(info.process.pid, signal.SIGCONT)


def _listens(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        socket.create_connection((host, int(port)), timeout=1).close()
    except OSError:
        return False
    return True


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
