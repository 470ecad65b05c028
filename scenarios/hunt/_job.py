"""A second driver job on the hunt's cluster: it makes one detached, named actor, waits until
the actor answers, and ends, its job with it; the hunt's driver then looks the actor up by name.
So a program's GCS faults fall across two driver jobs: the actor outlives the job that made it
(Ray's actor lifetimes: a detached actor is not fate-shared with its creator's job).

The hunt's driver runs it (:func:`make_by_job`) as ``python -m scenarios.hunt._job SPEC``,
SPEC a :class:`JobSpec` as JSON; the job prints the actor's id and exits 0, or exits 1 with
why on standard error."""

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


class JobFailed(RuntimeError):
    """The second driver job did not make its actor: the program's driver cannot go on."""


def make_by_job(spec: JobSpec) -> str:
    """Run the job; the id of the actor it made.

    Raises:
        JobFailed: it exited otherwise than 0, or ran past :data:`JOB_BOUND`."""
    root = str(Path(__file__).resolve().parents[2])  # the checkout this hunt runs: its workers import it
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
    try:
        done = subprocess.run([sys.executable, "-m", "scenarios.hunt._job", json.dumps(asdict(spec))], env=env,
                              capture_output=True, text=True, timeout=JOB_BOUND, check=False)
    except subprocess.TimeoutExpired:
        raise JobFailed(f"the job making actor {spec.name!r} ran past {JOB_BOUND:g} s") from None
    if done.returncode != 0:
        raise JobFailed(f"the job making actor {spec.name!r} exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


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
        return str(actor._actor_id.hex())
    finally:
        ray.shutdown()


if __name__ == "__main__":
    print(_main(JobSpec(**json.loads(sys.argv[1]))), flush=True)
