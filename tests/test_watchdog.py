"""The watchdog names what is stuck and why, instead of a silent hang."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest
import ray
from ray.util.state import list_tasks

from chaos import ActorTarget, Chaos, HangError, Kill, Pause, TaskTarget, wait_until, watch
from chaos.cluster import ClusterHandle
from chaos.engine import StuckCause
from conftest import CALL_TIMEOUT


@ray.remote(max_retries=0)
def quick() -> int:
    return 1


@ray.remote(max_retries=3)
def slow(seconds: float) -> str:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.05)
    return "done"


@ray.remote(max_retries=0)
def consume(value: str) -> str:
    return value + "!"


@ray.remote
class Server:
    def pid(self) -> int:
        return os.getpid()

    def hello(self) -> str:
        return "hello"


def test_resolved_refs_pass_quietly(ray_cluster: ClusterHandle) -> None:
    report = watch([quick.remote() for _ in range(3)], deadline=CALL_TIMEOUT, address=ray_cluster.address)
    assert report.ready == 3 and report.stuck == ()


def test_an_infeasible_task_is_named(ray_cluster: ClusterHandle) -> None:
    ref = quick.options(num_cpus=64).remote()
    with pytest.raises(HangError, match=r"infeasible resource request \{'CPU': 64.0\}: no node has that much"):
        watch([ref, quick.remote()], deadline=2.0, address=ray_cluster.address)
    report = watch([ref], deadline=0.1, address=ray_cluster.address, raise_on_hang=False)
    assert report.stuck[0].kind is StuckCause.INFEASIBLE
    ray.cancel(ref)


def test_a_call_behind_a_paused_actor_is_named(ray_cluster: ClusterHandle) -> None:
    server = Server.remote()
    ray.get(server.pid.remote(), timeout=CALL_TIMEOUT)
    chaos = Chaos(address=ray_cluster.address)
    with chaos.inject(Pause(ActorTarget.of(server), seconds=30)):
        ref = server.hello.remote()
        report = watch([ref], deadline=2.0, address=ray_cluster.address, raise_on_hang=False)
        assert "paused (SIGSTOP): a straggler holds it" in report.stuck[0].cause
        assert report.stuck[0].kind is StuckCause.PAUSED
    assert ray.get(ref, timeout=CALL_TIMEOUT) == "hello"
    ray.kill(server)


@pytest.mark.slow  # make test's budget (a fresh clone took 9 min 49 s); the other five watchdog tests stay
def test_a_task_depending_on_a_killed_one_is_named(ray_cluster: ClusterHandle) -> None:
    dep = slow.options(name="dependency").remote(8.0)
    child = consume.remote(dep)
    wait_until(lambda: list_tasks(address=ray_cluster.address, filters=[
        ("name", "=", "dependency"), ("state", "=", "RUNNING")]), timeout=30, what="dependency running")
    Chaos(address=ray_cluster.address).kill(Kill(TaskTarget("dependency")))
    with pytest.raises(HangError, match="waiting for a dependency: an argument ObjectRef has not been produced"):
        watch([child], deadline=1.5, address=ray_cluster.address)
    assert ray.get(child, timeout=CALL_TIMEOUT) == "done!"  # the retry finished it after all


@ray.remote
class Owner:
    def make(self) -> list:
        return [ray.put(np.zeros(200_000))]  # in the shared store, owned by this actor


def test_a_dead_owners_object_is_named_as_failed_not_pending(ray_cluster: ClusterHandle) -> None:
    from ray.exceptions import OwnerDiedError
    from ray.util.state import get_actor

    from chaos._watchdog import diagnose

    owner = Owner.options(max_restarts=0, num_cpus=0).remote()
    (obj,) = ray.get(owner.make.remote(), timeout=CALL_TIMEOUT)
    Chaos(address=ray_cluster.address).kill(Kill(ActorTarget.of(owner)))
    wait_until(lambda: get_actor(owner._actor_id.hex(), address=ray_cluster.address).state == "DEAD",
               timeout=CALL_TIMEOUT, what="the owner to be dead")

    def freed() -> bool:  # until the raylet frees this node's copy, ray.get still returns it
        try:
            ray.get(obj, timeout=CALL_TIMEOUT)
        except OwnerDiedError:
            return True
        return False

    wait_until(freed, timeout=CALL_TIMEOUT, what="the dead owner's object to be freed")
    # What watch() says of it when ray.wait leaves it out of `ready` (as Ray 2.60's can).
    stuck = diagnose(obj, ray_cluster.address)
    assert stuck.cause.startswith("ray.get raises OwnerDiedError, yet ray.wait did not report it ready")
    assert stuck.kind is StuckCause.FAILED_OBJECT


def test_a_cancelled_task_still_running_is_named_cancel_lost(ray_cluster: ClusterHandle) -> None:
    # Ray 2.60 can lose a cancel issued right after submit (README); this pins the naming, on a
    # running task the caller says it cancelled, since the race itself cannot be forced.
    ref = slow.options(name="cancel-lost", max_retries=0).remote(30.0)
    wait_until(lambda: list_tasks(address=ray_cluster.address, filters=[
        ("name", "=", "cancel-lost"), ("state", "=", "RUNNING")]), timeout=30, what="the task running")
    report = watch([ref], deadline=0.5, address=ray_cluster.address, raise_on_hang=False, cancelled=[ref])
    assert report.stuck[0].kind is StuckCause.CANCEL_LOST
    assert "ray.cancel was called on it, yet it is still RUNNING" in report.stuck[0].cause
    plain = watch([ref], deadline=0.1, address=ray_cluster.address, raise_on_hang=False)
    assert plain.stuck[0].kind is StuckCause.RUNNING  # not cancelled: merely slow
    ray.cancel(ref, force=True)
