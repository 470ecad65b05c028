"""A spare worker for an actor's restart: idle, never used, its heavy imports already done.

A restarted torch actor spends most of its MTTR in a fresh worker importing torch (2 s here)
and, at its optimizer's first construction, torch._dynamo (2.3 s more). Ray never starts an
actor in a worker that has run a task (ray-project/ray #22482), nor in one of another runtime
env, so no warm worker of the job's could take the restart. A spare can: the actor asks its
node's raylet to prestart one worker *in the actor's own runtime env*; the job's
``worker_process_setup_hook`` (:func:`preload`) makes that worker import the modules the
actor's env names before it runs anything; when the actor's process dies, Ray restarts the
actor in the idle spare, and the new incarnation asks for the next one (and asks again if no
worker shows up: the raylet answers before it starts one, and sometimes does not).

Set up (both are needed, and :func:`keep_spare` checks both):

    ray.init(runtime_env=actors.spare.spare_job_env())
    ray.remote(ParameterServer).options(runtime_env=actors.spare.spare_actor_env("torch", ...))

Every worker of the job runs the hook; it imports nothing where the env names nothing, so
only the actor's workers (and its spare) pay for the imports. Asking goes through the raylet's
``PrestartWorkers`` RPC, which Ray 2.60's own workers use but does not expose in Python: a
Ray that lacks it fails the first start with :class:`SpareWorkerError`, never silently.
"""

from __future__ import annotations

import enum
import json
import os
import threading
from collections.abc import Mapping
from typing import Any

import psutil

from chaos._byvalue import by_value
from chaos._errors import ChaosError, HangError, InvalidConfig
from chaos._wait import wait_until

__all__ = ["PRELOADED_VAR", "PRELOAD_VAR", "SpareState", "SpareWorkerError", "current_env", "ensure_spare",
           "keep_spare", "keep_spare_alive", "keep_spare_for", "preload", "spare_actor_env", "spare_job_env",
           "spares_of"]

#: The modules a worker imports before it registers, comma-separated (the actor's runtime env).
PRELOAD_VAR = "RAYCHAOS_PRELOAD"
#: Set by the hook in each worker it ran in: the modules it imported.
PRELOADED_VAR = "RAYCHAOS_PRELOADED"
#: How long Ray keeps an idle spare before its usual idle-worker reaping applies to it.
KEEP_ALIVE_S = 24 * 3600
RPC_TIMEOUT_S = 10.0
ASK_ATTEMPTS = 3
#: How long a requested spare may take to show up (its process starts; it need not be warm yet).
APPEAR_WITHIN_S = 20.0
#: How often an actor's keeper looks again for its spare (:func:`keep_spare_alive`).
RECHECK_S = 2.0


class SpareWorkerError(ChaosError, RuntimeError):
    """No spare worker could be had: the raylet's RPC missing or failing, or no worker started."""


class SpareState(enum.Enum):
    """What :func:`keep_spare` found on the actor's node."""

    REQUESTED = "requested"  # none was there: the raylet was asked to start one
    PRESENT = "present"  # one is there already (idle, or still importing)


def preload() -> None:
    """The job's ``worker_process_setup_hook``: import the modules ``RAYCHAOS_PRELOAD`` names,
    then say which in ``RAYCHAOS_PRELOADED`` (what :func:`keep_spare` checks).

    It names nothing outside itself: :func:`spare_job_env` hands Ray a copy that is pickled
    by value, so a worker runs it without importing this package (importing it cost every
    worker of the job 1.1 s more at its start here: a bare actor's restart 2.1 s, not 1.0 s).
    """
    import importlib
    import os

    names = os.environ.get("RAYCHAOS_PRELOAD", "")
    for name in filter(None, names.split(",")):
        importlib.import_module(name)
    os.environ["RAYCHAOS_PRELOADED"] = names


def spare_job_env() -> dict[str, object]:
    """The job's runtime env (``ray.init(runtime_env=...)``) whose workers preload what their
    own env names (:func:`spare_actor_env`), and import nothing where it names nothing."""
    # A function of no module (cloudpickle pickles it by value): Ray stores it with the job.
    return {"worker_process_setup_hook": by_value(preload, "raychaos_preload")}


def spare_actor_env(*modules: str) -> dict[str, object]:
    """An actor's runtime env (``.options(runtime_env=...)``) whose workers, and spare, import
    ``modules`` before they run anything.

    Raises:
        InvalidConfig: no module, or a name that is not a dotted module path.
    """
    if not modules or not all(isinstance(m, str) and m and all(p.isidentifier() for p in m.split("."))
                              for m in modules):
        raise InvalidConfig(f"spare_actor_env{modules!r}: name the modules to preload as dotted paths, "
                            "e.g. spare_actor_env('torch', 'torch._dynamo')")
    return {"env_vars": {PRELOAD_VAR: ",".join(modules)}}


def keep_spare() -> SpareState:
    """From inside an actor: make sure one spare worker in this actor's runtime env waits on
    its node (one per actor and node: none is asked for while one is there or starting).
    Call it on the thread that runs the actor's ``__init__`` or methods, or hand
    :func:`current_env`'s value to :func:`keep_spare_for` on another.

    Raises:
        InvalidConfig: the job's env lacks :func:`spare_job_env`'s hook, or the actor's
            :func:`spare_actor_env`'s modules: a spare would restart the actor cold.
        SpareWorkerError: the raylet could not be asked.
    """
    return keep_spare_for(current_env())


def current_env() -> str:
    """This actor's runtime env, serialized as its task carries it. Ray keeps it per thread
    (a thread of the actor's own sees an empty one): read it on the actor's thread.

    Raises:
        InvalidConfig: not inside a Ray actor.
    """
    import ray

    if not ray.is_initialized() or ray.get_runtime_context().get_actor_id() is None:
        raise InvalidConfig("keep_spare() runs inside a Ray actor (its __init__ or a method): a spare "
                            "worker is for an actor's restart")
    serialized: str = ray._private.worker.global_worker.core_worker.get_current_runtime_env()
    return serialized


def keep_spare_for(serialized_env: str) -> SpareState:
    """:func:`keep_spare` for the actor whose runtime env is ``serialized_env`` (from
    :func:`current_env`), from any thread."""
    _check_env(json.loads(serialized_env or "{}"))
    if _spares_here():
        return SpareState.PRESENT
    _prestart(serialized_env)
    return SpareState.REQUESTED


def ensure_spare(serialized_env: str, *, asked: bool = False, attempts: int = ASK_ATTEMPTS,
                 within: float = APPEAR_WITHIN_S) -> None:
    """Ask until a spare is there (``asked``: a request was just made, so wait for it first:
    its process appears only once the raylet has set up its env, ~1.5 s here, and asking
    again before then would start two). The raylet answers a request before it starts the
    worker, and may then not start it, so a request is done only when its worker shows up.

    Raises:
        InvalidConfig: as :func:`keep_spare`.
        SpareWorkerError: no spare showed up after ``attempts`` requests.
    """
    for _ in range(attempts):
        if not asked and keep_spare_for(serialized_env) is SpareState.PRESENT:
            return
        asked = False
        try:
            wait_until(_spares_here, timeout=within, interval=0.2, what="the spare worker")
            return
        except HangError:
            continue
    raise SpareWorkerError(f"asked the raylet {attempts} times for a spare worker, and none started "
                           f"within {within:g} s of a request: the next restart will be cold")


def keep_spare_alive(serialized_env: str, *, asked: bool = False, every: float = RECHECK_S,
                     stop: threading.Event | None = None) -> None:
    """:func:`ensure_spare`, then again every ``every`` seconds until ``stop`` is set (an
    actor's keeper thread: its process's life, when no ``stop`` is given).

    A spare seen once is not one kept: an idle worker in the actor's env may be one the raylet
    started for the actor itself and no longer needs, which it reaps after a second idle. Seen
    in the parameter-server benchmark: the second server found the first's leftover worker,
    asked for none, and had no spare for the next 60 s.

    Raises:
        InvalidConfig, SpareWorkerError: as :func:`ensure_spare`.
    """
    stop = stop or threading.Event()
    while True:
        ensure_spare(serialized_env, asked=asked)
        asked = False
        if stop.wait(every):  # the keeper's pace: a wait with an end, not a synchronisation
            return


def _check_env(env: dict[str, Any]) -> None:
    wanted = os.environ.get(PRELOAD_VAR)
    named = (env.get("env_vars") or {}).get(PRELOAD_VAR)
    if not wanted or named != wanted or os.environ.get(PRELOADED_VAR) != wanted:
        raise InvalidConfig(
            f"a spare worker needs the job started with ray.init(runtime_env=actors.spare.spare_job_env()) "
            f"and the actor with .options(runtime_env=actors.spare.spare_actor_env(...)); this actor's env "
            f"is {env} and its worker preloaded {os.environ.get(PRELOADED_VAR)!r}: its spare would "
            "restart it cold")


def _spares_here() -> list[int]:
    """Pids of this node's workers of this job, in this actor's env, idle or starting."""
    return spares_of({name: os.environ.get(name) for name in ("RAY_JOB_ID", "RAY_RAYLET_PID", PRELOAD_VAR)})


def spares_of(identity: Mapping[str, str | None], *, starting: bool = True) -> list[int]:
    """Pids of this machine's idle workers (and, with ``starting``, those still starting)
    whose environment holds ``identity`` (variable -> value), the calling process aside."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        line = " ".join(proc.info["cmdline"] or [])
        if proc.info["pid"] == os.getpid() or not ("ray::IDLE" in line or (starting and "default_worker.py" in line)):
            continue
        try:
            environ = proc.environ()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
        if all(environ.get(name) == value for name, value in identity.items()):
            found.append(proc.info["pid"])
    return found


def _prestart(serialized_env: str) -> None:
    """Ask this node's raylet for one worker in the runtime env ``serialized_env`` (the exact
    string of this actor's task: Ray matches a worker to an actor by the string's hash)."""
    import ray

    try:
        from ray._private.utils import get_runtime_env_info
        from ray.core.generated import common_pb2, node_manager_pb2, node_manager_pb2_grpc
        from ray.runtime_env import RuntimeEnv

        from chaos._ray_compat import init_grpc_channel

        info = get_runtime_env_info(RuntimeEnv.deserialize(serialized_env), serialize=False)
        info.serialized_runtime_env = serialized_env
        context = ray.get_runtime_context()
        node = next(n for n in ray.nodes() if n["NodeID"] == context.get_node_id())
        request = node_manager_pb2.PrestartWorkersRequest(
            language=common_pb2.Language.Value("PYTHON"), job_id=bytes.fromhex(context.get_job_id()),
            runtime_env_info=info, keep_alive_duration_secs=KEEP_ALIVE_S, num_workers=1)
        channel = init_grpc_channel(f"{node['NodeManagerAddress']}:{node['NodeManagerPort']}")
        try:
            node_manager_pb2_grpc.NodeManagerServiceStub(channel).PrestartWorkers(request, timeout=RPC_TIMEOUT_S)
        finally:
            channel.close()
    except Exception as exc:  # an ImportError, a gRPC error, a node missing: all one failure here
        raise SpareWorkerError(f"could not ask the raylet for a spare worker ({type(exc).__name__}: {exc}); "
                               "this Ray may lack the PrestartWorkers RPC (Ray 2.60 has it)") from exc
