"""The lessons of the chapter's section 4.2 actors."""

from __future__ import annotations

import os
import signal
import tempfile
import time
from typing import Any

from actors import CheckpointedCounter
from chaos import wait_until
from scenarios.lessons._kit import (
    TIMEOUT,
    Result,
    actor_state,
    free_cpus,
    remote,
    timed,
)
from scenarios.lessons._model import Lesson, Measure, lesson


class _SyncService:
    def slow(self) -> None:
        time.sleep(2.0)  # a long inference call

    def ping(self) -> float:
        return time.monotonic()


class _AsyncService:
    async def slow(self) -> None:
        import asyncio

        await asyncio.sleep(2.0)

    async def ping(self) -> float:
        return time.monotonic()


def _ping_latency(service: Any) -> float:
    import ray

    ray.get(service.ping.remote(), timeout=TIMEOUT)
    slow = service.slow.remote()
    latency = timed(lambda: ray.get(service.ping.remote(), timeout=TIMEOUT))
    ray.get(slow, timeout=TIMEOUT)
    ray.kill(service)
    return latency


@lesson(id="04-blocking-method", section="4.2", title="A long actor method blocks every other call",
        mistake="a plain actor: ping() queued behind a 2 s slow()",
        fix="an async actor (or concurrency groups): ping() answers while slow() waits",
        why="A plain actor runs one method at a time, in call order. Async methods (or "
            "concurrency groups, or splitting the work) let short calls through.")
def blocking_method(address: str) -> Result:
    mistake = _ping_latency(remote(_SyncService, num_cpus=0).remote())
    fix = _ping_latency(remote(_AsyncService, num_cpus=0).remote())
    # Ideally 2 s (behind all of slow()) against a round trip; the fix must save half of it.
    return [Measure(what="ping latency during slow()", unit="s", mistake=mistake, fix=fix, margin=1.0)], []


class _Idle:
    def ready(self) -> bool:
        return True

    def finish(self) -> None:
        import ray

        ray.actor.exit_actor()  # the actor ends itself: its resources are released, no restart


@lesson(id="05-leaked-actors", section="4.2", title="Never destroying actors",
        mistake="two finished actors kept alive", fix="ray.kill (or exit_actor) when done",
        why="An actor keeps the resources it asked for until it exits: idle actors starve new work. "
            "ray.kill(handle) or ray.actor.exit_actor() from inside releases them.")
def leaked_actors(address: str) -> Result:
    import ray

    before = free_cpus(address)
    actors = [remote(_Idle, num_cpus=0.5).remote() for _ in range(2)]
    ray.get([a.ready.remote() for a in actors], timeout=TIMEOUT)
    # Resource views are refreshed asynchronously: wait (bounded) until the view settles.
    wait_until(lambda: free_cpus(address) <= before - 1.0, timeout=TIMEOUT, what="the actors' CPUs to show")
    held = before - free_cpus(address)
    ray.kill(actors[0])  # from outside, by its handle
    ended = actors[1].finish.remote()  # from inside: ray.actor.exit_actor()
    ray.wait([ended], timeout=TIMEOUT)
    wait_until(lambda: free_cpus(address) >= before, timeout=TIMEOUT, what="the ended actors' CPUs to return")
    states = sorted(actor_state(address, a) for a in actors)
    return ([Measure(what="CPUs held by finished actors", unit="CPUs", mistake=held, fix=before - free_cpus(address))],
            [f"after ray.kill and exit_actor the two actors are {' and '.join(states)}"])


class _PlainCounter:
    def __init__(self) -> None:
        self.value = 0

    def add(self, n: int) -> int:
        self.value += n
        return self.value

    def get(self) -> int:
        return self.value

    def pid(self) -> int:
        return os.getpid()


def _lost_after_kill(counter: Any, adds: int) -> int:
    import ray

    for _ in range(adds):
        ray.get(counter.add.remote(1), timeout=TIMEOUT)
    old = ray.get(counter.pid.remote(), timeout=TIMEOUT)
    os.kill(old, signal.SIGKILL)
    wait_until(lambda: ray.get(counter.pid.remote(), timeout=TIMEOUT) != old, timeout=TIMEOUT,
               what="the actor's restart")
    lost = adds - int(ray.get(counter.get.remote(), timeout=TIMEOUT))
    ray.kill(counter)
    return lost


@lesson(id="06-restarts-without-state", section="4.2", title="Relying on max_restarts alone",
        mistake="max_restarts=1, state in memory, SIGKILL",
        fix="a checkpointed actor (actors.CheckpointedCounter, WAL)",
        why="A restart re-runs __init__ in a new process: the process comes back, its memory does not. "
            "Checkpoint what matters (actors.Checkpointable: checkpoint + write-ahead log).")
def restarts_without_state(address: str) -> Result:
    opts = {"max_restarts": 1, "max_task_retries": -1, "num_cpus": 0}
    plain = _lost_after_kill(remote(_PlainCounter, **opts).remote(), 10)
    with tempfile.TemporaryDirectory(prefix="raychaos-lesson-") as root:
        counter = remote(CheckpointedCounter, **opts).remote(root, durability="wal", every_n=100)
        saved = _lost_after_kill(counter, 10)
    return [Measure(what="adds lost to one SIGKILL", unit="of 10", mistake=plain, fix=saved)], []


LESSONS: tuple[Lesson, ...] = (blocking_method, leaked_actors, restarts_without_state,)
