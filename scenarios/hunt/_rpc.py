"""The hunt's node that fails RPCs: started with Ray's RPC failure knob for every method, and
the failures its processes injected into the calls a step makes itself while it ran (what makes
the fault land); and its node that delays them, started with Ray's RPC delay knob."""

from __future__ import annotations

import datetime
import glob
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: The custom resource of the node whose processes fail RPCs (only RPC_FAILURES victims ask for it).
HUNT_RPC = "hunt_rpc"
#: Percent of requests lost before they are sent, of replies lost after the server ran the
#: call, and of calls failed while the server still runs them: each, on every method, unbounded.
RPC_SHARE = 10
#: The line Ray 2.60's knob logs (INFO, ``grpc_client.h``) for every failure it injects into a
#: call its process makes (the client side: see chaos.engine.rpc_failures_injected), with the
#: logging process's local time to the millisecond: "[2026-12-05 18:00:12,753 I <pid> <tid>]
#: grpc_client.h:137: Inject RPC response failure for CoreWorkerService.grpc_client.PushTask".
_INJECTED = re.compile(rb"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ (\d+) \d+\].*?Inject RPC "
                       rb"(?:request|response) failure (?:while request in flight )?for (\S+)")
#: The calls made for a step itself, the only ones that count: the knob fails the calls its
#: node's processes make, and the driver, on the head, submits the step (PushTask and the lease
#: requests are the driver's calls, never failed here). Each was seen failed inside a victim
#: step's window on this machine (Ray 2.60, 2026-12-05). The step's own process: a stream
#: reporting each item to its owner (ReportGeneratorItemReturns); a borrowed ref whose value its
#: owner holds, asked of it (GetObjectStatus, Ray's FutureResolver); a ref the step puts, pinned
#: as the primary copy by its raylet (PinObjectIDs); the ownership protocol of the refs it borrows
#: or puts, between it and the driver (the core workers' own per-object pubsub, not the GCS's).
WORKER_METHODS = frozenset({
    "CoreWorkerService.grpc_client.ReportGeneratorItemReturns",
    "CoreWorkerService.grpc_client.GetObjectStatus",
    "NodeManagerService.grpc_client.PinObjectIDs",
    "CoreWorkerService.grpc_client.PubsubCommandBatch",
    "CoreWorkerService.grpc_client.PubsubLongPolling",
})
#: The raylet of the step's node, for the step: telling an actor that a call's args have arrived
#: (ActorCallArgWaitComplete, the actor call's submission path) and moving the step's objects
#: (ObjectManagerService Pull and Push). Of three hangs of an actor call there (the known finding
#: findings/actor_call_hangs_after_gcs_restart_with_rpc_failures.py; 2026-12-05), one came with
#: these failed and none of the actor process's own, one with both, one with background failures
#: only (then the fault is missed, and the hang reported under no fault). Its object-location
#: pubsub and location updates (UpdateObjectLocationBatch) are left out: one long poll per owner
#: serves every object of that owner, earlier programs' too. Left out of both as background:
#: every GCS service (task events, KV, node liveness, GCS pubsub), a worker's start-up
#: (GetSystemConfig), freeing objects (FreeLocalObjects), KillActor.
RAYLET_METHODS = frozenset({
    "CoreWorkerService.grpc_client.ActorCallArgWaitComplete",
    "ObjectManagerService.grpc_client.Pull",
    "ObjectManagerService.grpc_client.Push",
})
#: Seconds a window is widened by on each side: the log's clock is cut to the millisecond.
SLACK = 0.002


def add_rpc_node(cluster: Any, *, object_store_bytes: int, bound: float) -> None:
    """Add to ``cluster`` (a ``ray.cluster_utils.Cluster``) one node of 1 CPU holding
    :data:`HUNT_RPC`, whose raylet and workers fail :data:`RPC_SHARE` % of their RPCs three ways."""
    from chaos import RpcFailure
    from chaos.cluster import rpc_in_flight, shared_host_worker_args
    from chaos.engine import rpc_failure_env

    # Ray's knob fails calls in flight since 2.52; before it, requests and responses only.
    env = rpc_failure_env(RpcFailure("*", request_percent=RPC_SHARE, response_percent=RPC_SHARE,
                                     in_flight_percent=RPC_SHARE if rpc_in_flight() else 0))
    cluster.add_node(num_cpus=1, object_store_memory=object_store_bytes, resources={HUNT_RPC: 100.0}, env_vars=env,
                     **shared_host_worker_args())
    cluster.wait_for_nodes(timeout=bound)


#: The custom resource of the node whose processes delay RPC handlers (only RPC_DELAY victims ask for it).
HUNT_SLOW = "hunt_slow"
#: Microseconds every task or call pushed to a worker on that node waits before it runs (fixed:
#: a process started with the knob delays each one), and the most a lease granted by its raylet,
#: an object pulled there and the reply to a stream item's report wait (each drawn up to it).
PUSH_DELAY_US = 200_000
PUSH_DELAY_S = PUSH_DELAY_US / 1e6
#: Ray's asio delay knob (``RAY_testing_asio_delay_us``: ``method=min_us:max_us``, comma-separated),
#: read by each process of the node as it starts.
DELAY_KNOB = ",".join(f"{method}={low}:{PUSH_DELAY_US}" for method, low in (
    ("CoreWorkerService.grpc_server.PushTask", PUSH_DELAY_US),
    ("NodeManagerService.grpc_server.RequestWorkerLease", 0),
    ("ObjectManagerService.grpc_server.Pull", 0),
    ("CoreWorkerService.grpc_client.ReportGeneratorItemReturns", 0)))


def add_slow_node(cluster: Any, *, object_store_bytes: int, bound: float) -> None:
    """Add to ``cluster`` (its driver connected) one node of 1 CPU holding :data:`HUNT_SLOW`,
    whose raylet and workers delay RPC handlers by :data:`DELAY_KNOB`, and confirm the knob took:
    a call of an actor there takes at least the fixed push delay.

    Raises:
        FaultIneffective: the call came back sooner (a Ray that ignores the knob, or reads it
            under another name): no RPC delay could land on that node.
    """
    from chaos.cluster import shared_host_worker_args
    from chaos.errors import FaultIneffective

    cluster.add_node(num_cpus=1, object_store_memory=object_store_bytes, resources={HUNT_SLOW: 100.0},
                     env_vars={"RAY_testing_asio_delay_us": DELAY_KNOB}, **shared_host_worker_args())
    cluster.wait_for_nodes(timeout=bound)
    took = _one_call_there(bound)
    if took < PUSH_DELAY_S:
        raise FaultIneffective(f"a call of an actor on the slow node came back in {took * 1000:.0f} ms, under the "
                               f"{PUSH_DELAY_S * 1000:.0f} ms its knob ({DELAY_KNOB!r}) fixes: this Ray does not "
                               "apply RAY_testing_asio_delay_us; run the hunt without rpc_delay")


def _one_call_there(bound: float) -> float:
    """Seconds one call of a fresh actor on the slow node takes, once the actor is up."""
    import ray

    @ray.remote(num_cpus=0, resources={HUNT_SLOW: 0.01})
    class Echo:
        def ping(self) -> int:
            return 0

    echo = Echo.remote()  # type: ignore[attr-defined]
    try:
        ray.get(echo.ping.remote(), timeout=bound)  # it is up
        started = time.monotonic()
        ray.get(echo.ping.remote(), timeout=bound)
        return time.monotonic() - started
    finally:
        ray.kill(echo)


def delayed_process(pid: int) -> bool:
    """Was process ``pid`` started with the slow node's knob (its environment says so)? False
    when it is gone or unreadable: fail closed."""
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return f"RAY_testing_asio_delay_us={DELAY_KNOB}".encode() in environ


def rpc_raylet(cluster: Any) -> int | None:
    """The pid of the raylet of ``cluster``'s :data:`HUNT_RPC` node (None without one)."""
    from ray._private import ray_constants

    nodes = [n for n in cluster.worker_nodes if HUNT_RPC in (n._ray_params.resources or {})]
    raylets = nodes[0].all_processes.get(ray_constants.PROCESS_TYPE_RAYLET, []) if len(nodes) == 1 else []
    return int(raylets[0].process.pid) if raylets else None


@dataclass(frozen=True, slots=True)
class Injected:
    """One failure Ray's knob injected: into a call of process ``pid``, at ``at`` (seconds since
    the epoch, as ``time.time()``), of ``method`` (``Service.grpc_client.Method``)."""

    pid: int
    at: float
    method: str

    def made_for_a_step(self, *, by_raylet: bool) -> bool:
        """Is it a call made for a step itself (by the step's process, or by its node's raylet),
        not that process's background?"""
        return self.method in (RAYLET_METHODS if by_raylet else WORKER_METHODS)


@dataclass(frozen=True, slots=True)
class Window:
    """From a step's submission to its result coming back (``time.time()`` seconds)."""

    start: float
    end: float

    def holds(self, at: float) -> bool:
        return self.start - SLACK <= at <= self.end + SLACK


@dataclass
class Injections:
    """RPC failures Ray's knob logged into workers' logs under a logs folder since this count
    began, reading only what each log gained (a long hunt's logs grow to many megabytes)."""

    logs: str
    offsets: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_now(cls, logs: str) -> Injections:
        return cls(logs, {path: size for path in _files(logs) if (size := _size(path)) is not None})

    def new(self) -> list[Injected]:
        """The failures workers and raylets logged since the last call or :meth:`from_now`, in
        whole lines (a line still being written waits for its end), each by the pid it names."""
        return [record for path in _files(self.logs) for line in self._gained(path).splitlines()
                if (record := _parsed(line)) is not None]

    def _gained(self, path: str) -> bytes:
        start = self.offsets.get(path, 0)
        try:
            with open(path, "rb") as log:
                log.seek(start)
                chunk = log.read()
        except OSError:  # rotated or removed meanwhile: nothing to read there
            return b""
        whole = chunk.rfind(b"\n") + 1
        self.offsets[path] = start + whole
        return chunk[:whole]


def _parsed(line: bytes) -> Injected | None:
    """The failure a knob's line records, or None for any other line."""
    if b"Inject RPC " not in line or (match := _INJECTED.search(line)) is None:
        return None
    stamp = datetime.datetime.strptime(match.group(1).decode(), "%Y-%m-%d %H:%M:%S,%f")
    return Injected(pid=int(match.group(2)), at=stamp.timestamp(),  # local time, as Ray logs it
                    method=match.group(3).decode())


def _files(logs: str) -> list[str]:
    """Workers' logs and raylets' (``raylet.out``, ``raylet.<n>.out``: a cluster's nodes share one folder)."""
    return [*glob.glob(os.path.join(logs, "python-core-worker-*.log")), *glob.glob(os.path.join(logs, "raylet*.out"))]


def _size(path: str) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:  # Ray's log monitor moved it to logs/old/ meanwhile: a dead worker's
        return None
