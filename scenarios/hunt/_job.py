"""A second driver job on the hunt's cluster: it makes one detached, named actor, waits until
the actor answers, and ends, its job with it; the hunt's driver then looks the actor up by name.
So a program's GCS faults fall across two driver jobs: the actor outlives the job that made it
(Ray's actor lifetimes: a detached actor is not fate-shared with its creator's job).

The hunt's driver runs it (:func:`make_by_job`) as ``python -m scenarios.hunt._job SPEC``,
SPEC a :class:`JobSpec` as JSON; the job prints its job's id and the actor's and exits 0, or
exits 1 with why on standard error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

#: Seconds the job has to start, connect, make the actor and see it answer, and end.
JOB_BOUND = 60.0


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec:
    """The actor the job makes, and the cluster it makes it on."""

    address: str  # the cluster's GCS address
    node_ip: str  # the address of the driver's node, where this job's driver attaches too
    namespace: str  # the hunt driver's namespace: the name is looked up there
    name: str
    const: int
    max_restarts: int
    max_task_retries: int
    slow_restart: float
    asynchronous: bool
    resources: dict[str, float]  # where it runs (the step's placement)


@dataclass(frozen=True, slots=True, kw_only=True)
class Made:
    """What the job says it made: its own job's id and the actor's (hex)."""

    job: str
    actor: str


class JobFailed(RuntimeError):
    """The second driver job did not make its actor, or did not end: the program's driver cannot go on."""


def make_by_job(spec: JobSpec) -> Made:
    """Run the job (it dies with this process: ``PR_SET_PDEATHSIG``, set as it starts); what it
    made, once the GCS says the job ended (this process is a driver of the same cluster).

    Raises:
        JobFailed: it exited otherwise than 0 or said nothing, ran past :data:`JOB_BOUND`, or
            was not marked dead within it."""
    root = str(Path(__file__).resolve().parents[2])  # the checkout this hunt runs: its workers import it
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    try:
        done = subprocess.run([sys.executable, "-m", "scenarios.hunt._job", json.dumps(asdict(spec))], env=env,
                              capture_output=True, text=True, timeout=JOB_BOUND, check=False)
    except subprocess.TimeoutExpired:
        raise JobFailed(f"the job making actor {spec.name!r} ran past {JOB_BOUND:g} s") from None
    said = done.stdout.split()
    if done.returncode != 0 or len(said) < 2:
        raise JobFailed(f"the job making actor {spec.name!r} exited {done.returncode}, saying {done.stdout!r}: "
                        f"{done.stderr[-2000:]}")
    made = Made(job=said[-2], actor=said[-1])
    ended(made.job)
    return made


def ended(job: str, *, bound: float = JOB_BOUND) -> None:
    """Wait (``bound`` s) until the GCS's job table says driver job ``job`` (hex) is dead: Ray
    marks a job finished once its driver's disconnect reaches the GCS, after the process exits.

    Raises:
        JobFailed: it was not."""
    from ray._private import state

    from chaos import wait_until
    from chaos.errors import HangError

    try:
        wait_until(lambda: any(j["JobID"] == job and j["IsDead"] for j in state.state.job_table()),
                   timeout=bound, interval=0.05, what=f"job {job} to be marked dead")
    except HangError:
        raise JobFailed(f"the GCS did not mark job {job} dead within {bound:g} s of its driver's exit") from None


def die_with_parent(signum: int) -> None:
    """Have the kernel send this process ``signum`` when the process (thread) that started it
    dies, however it dies (``PR_SET_PDEATHSIG``). Called first thing in the child, not as a
    ``preexec_fn``: a driver has threads."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signum)  # 1: PR_SET_PDEATHSIG


def _main(spec: JobSpec) -> str:
    import logging

    import ray

    from scenarios.hunt._remote import HuntActor, HuntAsyncActor, remote

    ray.init(address=spec.address, namespace=spec.namespace, _node_ip_address=spec.node_ip, log_to_driver=False,
             logging_level=logging.WARNING)
    try:
        cls = HuntAsyncActor if spec.asynchronous else HuntActor
        actor = remote(cls).options(name=spec.name, lifetime="detached", max_restarts=spec.max_restarts,
                                    max_task_retries=spec.max_task_retries, num_cpus=0,
                                    resources=spec.resources).remote(spec.const, slow_restart=spec.slow_restart)
        ray.get(actor.__ray_ready__.remote(), timeout=JOB_BOUND / 2)
        return f"{ray.get_runtime_context().get_job_id()} {actor._actor_id.hex()}"
    finally:
        ray.shutdown()


if __name__ == "__main__":
    import signal

    die_with_parent(signal.SIGKILL)  # a job left without its hunt's driver has nothing to do
    print(_main(JobSpec(**json.loads(sys.argv[1]))), flush=True)
