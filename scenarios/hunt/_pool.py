"""Workers started ahead on the head: each actor a program makes, and each task held running
without a CPU, needs a worker process of its own, and starting one (importing Ray) takes most of
a second of a 2-core machine. Ray's raylet starts workers ahead on request (its
``PrestartWorkers`` RPC); a worker so
started waits idle for ``keep_alive`` seconds, and the next actor or task of the same job and
runtime env takes it instead of starting one.

The hunt tops the head's idle workers up to :data:`WARM` at the end of each program, once its
faults have landed and its probe answered, so a worker the next program takes from the pool was
started after every fault of the program before it. It asks only for what is missing: asking
for two after every program, idle workers piled up and an object-store pressure landed less
often (its victim not spilled within its bound in 4 of a test's 15 programs, against 0 of 15
without a pool; topping up, 0 of 20 on a two-node cluster: Ray 2.60, 2026-12-07). A request
that fails changes nothing but speed: the steps then start their own workers, as without a pool.
The probe's actor never takes a pooled worker (``_run.PROBE_ENV``)."""

from __future__ import annotations

from functools import cache
from typing import Any

#: Idle workers the head keeps for the next program's actors and held tasks.
WARM = 2
#: Seconds a prestarted worker waits for an actor or task before the raylet ends it.
KEEP_ALIVE = 30
#: Seconds the raylet has to accept the request.
REQUEST_BOUND = 5.0


def top_up(address: str, raylet_pid: int, *, warm: int = WARM) -> int:
    """Ask the raylet at ``address`` (``ip:port``; process ``raylet_pid``, on this machine) for as
    many workers as it lacks to have ``warm`` idle ones; how many were asked for (0 when none was
    missing, or the request failed)."""
    missing = warm - len(idle_workers(raylet_pid))
    return missing if missing > 0 and prestart(address, count=missing) else 0


def idle_workers(raylet_pid: int) -> list[int]:
    """The pids of the raylet's idle workers: its children Ray titles ``ray::IDLE`` (a worker
    that has not taken a task or actor, or is between tasks)."""
    import psutil

    try:
        children = psutil.Process(raylet_pid).children()
    except psutil.Error:
        return []
    return [c.pid for c in children if _title(c) == "ray::IDLE"]


def _title(process: Any) -> str:
    import psutil

    try:
        return str((process.cmdline() or [""])[0]).strip()
    except psutil.Error:  # gone, or a zombie: not idle
        return ""


def prestart(address: str, *, count: int = WARM) -> bool:
    """Ask the raylet at ``address`` (``ip:port``) to start ``count`` workers for this driver's
    job ahead of need; False when it could not be asked (nothing answers there, an RPC error)."""
    import grpc

    try:
        _stub(address).PrestartWorkers(_request(count), metadata=_auth(), timeout=REQUEST_BOUND)
    except grpc.RpcError:
        return False
    return True


def _auth() -> tuple[tuple[str, str], ...]:
    """The token metadata a raylet in token mode asks of a caller; none on a Ray without the
    token mode's module."""
    try:
        from ray._private.authentication.grpc_authentication_client_interceptor import (
            _get_authentication_metadata_tuple,
        )
    except ImportError:
        return ()
    return tuple(_get_authentication_metadata_tuple())


def _request(count: int) -> Any:
    """This job's request: its workers must match the job and its (empty) runtime env to be taken."""
    import ray
    from ray._private.utils import get_runtime_env_info
    from ray.core.generated import common_pb2, node_manager_pb2
    from ray.runtime_env import RuntimeEnv

    job = ray.get_runtime_context().get_job_id()
    env = get_runtime_env_info(RuntimeEnv(**ray.get_runtime_context().runtime_env), is_job_runtime_env=False,
                               serialize=False)
    return node_manager_pb2.PrestartWorkersRequest(language=common_pb2.PYTHON, job_id=bytes.fromhex(job),
                                                   runtime_env_info=env, keep_alive_duration_secs=KEEP_ALIVE,
                                                   num_workers=count)


@cache
def _stub(address: str) -> Any:
    """One channel per raylet address for the driver's life (a replaced node has a new port)."""
    import grpc
    from ray.core.generated import node_manager_pb2_grpc

    return node_manager_pb2_grpc.NodeManagerServiceStub(grpc.insecure_channel(address))
