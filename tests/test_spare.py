"""Spare workers for actor restarts (actors._spare): the set-up's refusals, and on real Ray a
restarted parameter server landing in its spare, which is then replaced, one per node, and
replaced again when it is lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import ray

from actors import CheckpointConfig, ParameterServer, keep_spare
from actors._spare import PRELOAD_VAR, PRELOADED_VAR, preload
from actors.spare import spare_actor_env, spare_job_env
from chaos.cluster import ClusterHandle
from chaos.errors import InvalidConfig
from conftest import CALL_TIMEOUT
from test_byvalue import ours_imported_by
from test_param_server import LINEAR


def test_the_actor_env_names_the_modules_and_refuses_anything_else() -> None:
    assert spare_actor_env("torch", "torch._dynamo") == {"env_vars": {PRELOAD_VAR: "torch,torch._dynamo"}}
    for bad in ((), ("torch", ""), ("torch;rm",), ("torch", 3)):
        with pytest.raises(InvalidConfig, match="name the modules to preload as dotted paths"):
            spare_actor_env(*bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("hook", [preload, spare_job_env()["worker_process_setup_hook"]])
def test_the_hook_imports_what_the_env_names_and_nothing_without_it(
        hook: Callable[[], None], monkeypatch: pytest.MonkeyPatch) -> None:
    sys.modules.pop("colorsys", None)
    monkeypatch.delenv(PRELOAD_VAR, raising=False)
    hook()
    assert "colorsys" not in sys.modules and os.environ[PRELOADED_VAR] == ""
    monkeypatch.setenv(PRELOAD_VAR, "colorsys")
    hook()
    assert "colorsys" in sys.modules and os.environ[PRELOADED_VAR] == "colorsys"


def test_the_jobs_hook_runs_without_importing_a_package_of_ours(tmp_path: Path) -> None:
    """Every worker of the job runs the hook: importing this package there cost each 1.1 s."""
    assert ours_imported_by(spare_job_env()["worker_process_setup_hook"], tmp_path) == []
    assert ours_imported_by(preload, tmp_path) == ["actors", "chaos"]


def test_keep_spare_outside_an_actor_is_refused() -> None:
    with pytest.raises(InvalidConfig, match="runs inside a Ray actor"):
        keep_spare()


@pytest.mark.slow  # a worker that imports torch: seconds
def test_a_server_asking_for_a_spare_without_the_jobs_hook_fails_its_first_start(
        ray_cluster: ClusterHandle, tmp_path: Path) -> None:
    """The session's cluster has no setup hook: a spare would import nothing, so the server
    refuses to start rather than promise a warm restart it cannot give."""
    ps = ray.remote(max_restarts=0)(ParameterServer).options(runtime_env=spare_actor_env("torch")).remote(
        LINEAR, checkpoint=CheckpointConfig(storage=str(tmp_path)), spare_worker=True)
    with pytest.raises(ray.exceptions.ActorDiedError) as died:
        ray.get(ps.version.remote(), timeout=CALL_TIMEOUT)
    assert "spare_job_env()" in str(died.value) and "restart it cold" in str(died.value)


SCRIPT = r"""
import json, os, signal, sys, tempfile
import ray
from actors import CheckpointConfig, ParameterServer, keep_spare
from actors.spare import SpareState, spare_actor_env, spare_job_env
from actors._spare import spares_of
from chaos import local_cluster, wait_until

def model():
    import torch
    return torch.nn.Linear(4, 2)

def spares(job):
    return spares_of({"RAY_JOB_ID": job, "RAYCHAOS_PRELOAD": "torch,torch._dynamo,actors"}, starting=False)

with tempfile.TemporaryDirectory() as root, \
        local_cluster(num_cpus=2, log_to_driver=False, runtime_env=spare_job_env()):
    ps = ray.remote(max_restarts=2, max_task_retries=-1)(ParameterServer).options(
        runtime_env=spare_actor_env("torch", "torch._dynamo", "actors")).remote(
        model, checkpoint=CheckpointConfig(storage=root), spare_worker=True)
    first = ray.get(ps.pid.remote(), timeout=120)
    job = ray.get_runtime_context().get_job_id()
    wait_until(lambda: len(spares(job)) == 1, timeout=120, interval=0.1, what="the first spare")
    spare = spares(job)[0]
    again = ray.get(ps.__ray_call__.remote(lambda self: keep_spare()), timeout=60)
    os.kill(first, signal.SIGKILL)
    wait_until(lambda: ray.get(ps.pid.remote(), timeout=60) != first, timeout=120, interval=0.05,
               what="the restart")
    restarted = ray.get(ps.pid.remote(), timeout=60)
    wait_until(lambda: [p for p in spares(job) if p != spare], timeout=120, interval=0.1, what="the next spare")
    after = spares(job)
    lost = after[0]
    os.kill(lost, signal.SIGKILL)  # a spare that goes (reaped, killed): the server's keeper asks again
    wait_until(lambda: [p for p in spares(job) if p != lost], timeout=120, interval=0.1, what="a spare after the loss")
    print(json.dumps({"spare": spare, "restarted": restarted, "again": again.value,
                      "spares_after": len(after), "error": ray.get(ps.stats.remote()).spare_error,
                      "version": ray.get(ps.pull.remote(0), timeout=60)[0]}))
"""


@pytest.mark.slow  # a cluster of its own (a job's runtime env is set when its driver connects)
def test_a_restarted_server_lands_in_its_spare_which_is_then_replaced_and_a_lost_one_too(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[1]),
                                                        os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600,
                         env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["restarted"] == seen["spare"], f"the restart did not land in the spare: {seen}"
    assert seen["again"] == "present", "a second spare was asked for while one waited"
    assert seen["spares_after"] == 1 and seen["error"] is None and seen["version"] == 0, seen


def test_a_spare_is_refused_for_an_env_that_would_not_preload(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray keeps a task's runtime env per thread: read on another thread of the actor's it is
    empty, and a spare asked for in it would import nothing (this happened)."""
    from actors._spare import keep_spare_for

    monkeypatch.setenv(PRELOAD_VAR, "torch")
    monkeypatch.setenv(PRELOADED_VAR, "torch")
    for env in ("{}", json.dumps({"env_vars": {PRELOAD_VAR: "numpy"}})):
        with pytest.raises(InvalidConfig, match="restart it cold"):
            keep_spare_for(env)
    monkeypatch.setenv(PRELOADED_VAR, "")  # the hook did not run in this worker
    with pytest.raises(InvalidConfig, match="restart it cold"):
        keep_spare_for(json.dumps({"env_vars": {PRELOAD_VAR: "torch"}}))


def test_a_server_asking_for_a_spare_outside_ray_or_with_a_non_bool_is_refused(tmp_path: Path) -> None:
    cfg = CheckpointConfig(storage=str(tmp_path))
    with pytest.raises(InvalidConfig, match="`spare_worker` must be True or False, got 'yes'"):
        ParameterServer(LINEAR, checkpoint=cfg, spare_worker="yes")  # type: ignore[arg-type]
    with pytest.raises(InvalidConfig, match="runs inside a Ray actor"):
        ParameterServer(LINEAR, checkpoint=cfg, spare_worker=True)


def test_asking_for_a_spare_that_never_shows_up_gives_up_naming_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """The raylet may answer a request and start nothing: ensure_spare asks again, then fails
    closed (the server shows this in stats().spare_error) rather than promise a warm restart."""
    from actors import _spare
    from actors.spare import SpareState, SpareWorkerError

    asked: list[str] = []
    monkeypatch.setattr(_spare, "keep_spare_for", lambda env: asked.append(env) or SpareState.REQUESTED)
    monkeypatch.setattr(_spare, "_spares_here", lambda: [])
    with pytest.raises(SpareWorkerError, match="asked the raylet 2 times for a spare worker, and none started"):
        _spare.ensure_spare("{}", attempts=2, within=0.3)
    assert asked == ["{}", "{}"]
    asked.clear()
    with pytest.raises(SpareWorkerError):
        _spare.ensure_spare("{}", asked=True, attempts=2, within=0.3)
    assert asked == ["{}"]  # the request just made is waited for, not repeated (two spares, once)
    monkeypatch.setattr(_spare, "_spares_here", lambda: [4242])
    _spare.ensure_spare("{}", asked=True, attempts=2, within=0.3)  # it showed up: done


def test_the_keeper_asks_again_when_its_spare_goes(monkeypatch: pytest.MonkeyPatch) -> None:
    """A spare seen once may go: an idle worker the raylet started for the actor itself is reaped
    after a second idle. The parameter-server benchmark's second server saw one, asked for none,
    and had no spare for the next 60 s; the keeper looks again and asks."""
    import threading

    from actors import _spare
    from actors.spare import SpareState

    present = [[4242], [4242], [], [4343]]  # what each look finds: the spare, then none, then the new one
    asked: list[str] = []
    stop = threading.Event()

    def look() -> list[int]:
        found = present.pop(0) if present else [4343]
        if not present:
            stop.set()
        return found

    def keep(env: str) -> SpareState:
        if look():
            return SpareState.PRESENT
        asked.append(env)
        return SpareState.REQUESTED

    monkeypatch.setattr(_spare, "keep_spare_for", keep)
    monkeypatch.setattr(_spare, "_spares_here", look)
    _spare.keep_spare_alive("{}", every=0.01, stop=stop)
    assert asked == ["{}"] and not present
