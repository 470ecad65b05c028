"""ParameterServer on real Ray processes: broadcast by ref, retries after kills, recovery, e2e."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import ray
import torch
from ray import cloudpickle

from actors import CheckpointConfig, ParameterServer
from actors.param_server import StaleGradientError, VersionTimeout
from chaos import wait_until
from chaos.cluster import ClusterHandle
from conftest import CALL_TIMEOUT, actor_pid
from test_param_server import LINEAR, grads, reference

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/


def start(storage: str, durability: str = "wal", *, cls: type = ParameterServer,
          every_n: int = 1000, factory: Callable[[], Any] = LINEAR, **kwargs: Any) -> Any:
    remote = ray.remote(max_restarts=5, max_task_retries=-1, max_concurrency=4)(cls)
    cfg = CheckpointConfig(storage=storage, durability=durability, every_n=every_n)
    return remote.remote(factory, checkpoint=cfg, **kwargs)


def call(ref: Any) -> Any:
    return ray.get(ref, timeout=CALL_TIMEOUT)


@pytest.mark.slow  # make test's budget on a slower day
def test_every_puller_of_a_version_gets_the_same_ref_and_one_put(ray_cluster: ClusterHandle,
                                                                  storage: str) -> None:
    ps = start(storage)
    (v1, r1), (v2, r2) = call(ps.pull.remote()), call(ps.pull.remote())
    assert (v1, v2) == (0, 0) and r1 == r2 and call(ps.stats.remote()).puts == 1
    call(ps.push.remote(grads(1), worker_id="w", seq=0, base_version=0))
    v3, r3 = call(ps.pull.remote(1))
    assert v3 == 1 and r3 != r1 and call(ps.stats.remote()).puts == 2
    torch.testing.assert_close(call(r3)["weight"], call(ps.weights.remote())["weight"])
    ray.kill(ps)


@pytest.mark.slow  # make test's budget on a slower day
@pytest.mark.deep  # CI's budget
def test_pull_waits_for_a_version_then_times_out(ray_cluster: ClusterHandle, storage: str) -> None:
    ps = start(storage)
    waiting = ps.pull.remote(1, timeout=20.0)
    call(ps.push.remote(grads(1), worker_id="w", seq=0, base_version=0))  # a concurrent push wakes it
    assert call(waiting)[0] == 1
    with pytest.raises(VersionTimeout, match=r"asked for version 5, the server is at 1 after waiting 0\.2 s"):
        call(ps.pull.remote(5, timeout=0.2))
    ray.kill(ps)


class DiesAfterPush(ParameterServer):
    """Applies and logs the push of seq 1, then SIGKILLs itself before replying, once: Ray
    retries that push on the restarted server."""

    def __init__(self, *args: Any, marker: str, **kwargs: Any) -> None:
        self.marker = marker
        super().__init__(*args, **kwargs)

    def push(self, *args: Any, **kwargs: Any) -> Any:
        result = super().push(*args, **kwargs)
        if kwargs["seq"] == 1 and not os.path.exists(self.marker):
            Path(self.marker).write_text("died once")
            os.kill(os.getpid(), signal.SIGKILL)
        return result


@pytest.mark.slow  # make test's budget (a fresh clone took 9 min 49 s): the wal restore test stays there
@pytest.mark.parametrize("durability", ["policy", "wal"])
def test_push_retried_after_a_kill_is_applied_once(ray_cluster: ClusterHandle, storage: str,
                                                  tmp_path: Path, durability: str) -> None:
    ps = start(storage, durability, cls=DiesAfterPush, every_n=1, marker=str(tmp_path / "died"),
               optimizer="Adam", optimizer_kwargs={"lr": 0.1})
    call(ps.push.remote(grads(1), worker_id="w", seq=0, base_version=0))
    result = call(ps.push.remote(grads(2), worker_id="w", seq=1, base_version=1))  # dies, retried
    assert (tmp_path / "died").exists()
    assert result.duplicate and result.version == 2
    expected = reference([grads(1), grads(2)], optimizer="Adam", lr=0.1)
    for name, value in call(ps.weights.remote()).items():
        torch.testing.assert_close(value, expected[name], rtol=0, atol=0)
    assert call(ps.version.remote()) == 2
    ray.kill(ps)


@pytest.mark.parametrize("durability", [pytest.param("policy", marks=pytest.mark.slow), "wal"])
def test_sigkill_restores_checkpoint_or_pre_kill_state(ray_cluster: ClusterHandle, storage: str,
                                                      durability: str,
                                                      sigkill: Callable[..., int]) -> None:
    ps = start(storage, durability, optimizer="Adam", optimizer_kwargs={"lr": 0.05})
    for seq in range(3):
        call(ps.push.remote(grads(seq + 1), worker_id="w", seq=seq, base_version=seq))
    call(ps.checkpoint.remote())
    at_checkpoint = call(ps.digest.remote())
    for seq in range(3, 5):
        call(ps.push.remote(grads(seq + 1), worker_id="w", seq=seq, base_version=seq))
    before = call(ps.digest.remote())
    sigkill(ps)
    expected_digest, expected_version = (before, 5) if durability == "wal" else (at_checkpoint, 3)
    assert call(ps.digest.remote()) == expected_digest
    assert call(ps.version.remote()) == expected_version
    ray.kill(ps)


@pytest.mark.slow
@pytest.mark.deep  # CI's budget: the server's staleness and averaging are unit-tested in make test
def test_staleness_and_sync_averaging_through_the_actor(ray_cluster: ClusterHandle, storage: str) -> None:
    stale = start(storage + "-stale", max_staleness=0)
    call(stale.push.remote(grads(1), worker_id="a", seq=0, base_version=0))
    with pytest.raises(StaleGradientError, match="1 behind the server's 1"):
        call(stale.push.remote(grads(2), worker_id="b", seq=0, base_version=0))
    assert call(stale.version.remote()) == 1
    sync = start(storage + "-sync", mode="sync", sync_k=3, optimizer_kwargs={"lr": 1.0})
    results = [call(sync.push.remote(grads(s), worker_id=f"w{s}", seq=0, base_version=0))
               for s in (1.0, 2.0, 3.0)]
    assert [r.applied for r in results] == [False, False, True] and call(sync.version.remote()) == 1
    mean = {n: torch.stack([grads(s)[n] for s in (1.0, 2.0, 3.0)]).mean(0) for n in ("weight", "bias")}
    expected = reference([mean], lr=1.0)
    for name, value in call(sync.weights.remote()).items():
        torch.testing.assert_close(value, expected[name], rtol=1e-6, atol=1e-6)
    ray.kill(stale)
    ray.kill(sync)


# -- end to end: policy-gradient CartPole workers while the server is killed twice ------------


def cartpole_policy() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))


@ray.remote(max_restarts=0)
class PolicyGradientWorker:
    """Pulls weights, plays one CartPole episode, pushes its REINFORCE gradient; repeats."""

    def __init__(self, ps: Any, worker_id: str, seed: int) -> None:
        import gymnasium as gym

        self.ps, self.worker_id = ps, worker_id
        self.env, self.seed = gym.make("CartPole-v1", max_episode_steps=100), seed
        self.model = cartpole_policy()

    def _weights(self) -> int:
        for _ in range(10):  # a ref owned by a server that died is lost: pull again
            version, ref = ray.get(self.ps.pull.remote(0), timeout=CALL_TIMEOUT)
            try:
                self.model.load_state_dict(ray.get(ref, timeout=CALL_TIMEOUT))
                return version
            except ray.exceptions.ObjectLostError:
                continue
        raise RuntimeError("could not fetch weights in 10 pulls")

    def _gradient(self, episode: int) -> dict[str, torch.Tensor]:
        obs, _ = self.env.reset(seed=self.seed * 1000 + episode)
        logps, rewards, done = [], [], False
        while not done:
            dist = torch.distributions.Categorical(logits=self.model(torch.as_tensor(obs)))
            action = dist.sample()
            logps.append(dist.log_prob(action))
            obs, reward, terminated, truncated, _ = self.env.step(int(action))
            rewards.append(reward)
            done = terminated or truncated
        returns = torch.as_tensor(np.cumsum(rewards[::-1])[::-1].copy(), dtype=torch.float32)
        self.model.zero_grad()
        (-(torch.stack(logps) * (returns - returns.mean())).sum()).backward()
        return {n: p.grad.clone() for n, p in self.model.named_parameters()}

    def run(self, pushes: int) -> list[Any]:
        acked = []
        for seq in range(pushes):
            version = self._weights()
            grad = self._gradient(seq)
            acked.append(ray.get(self.ps.push.remote(grad, worker_id=self.worker_id, seq=seq,
                                                     base_version=version), timeout=CALL_TIMEOUT))
        return acked


@pytest.mark.slow
def test_cartpole_workers_survive_two_server_kills(ray_cluster: ClusterHandle, storage: str) -> None:
    ps = start(storage, "wal", factory=cartpole_policy, every_n=10, optimizer="Adam",
               optimizer_kwargs={"lr": 0.01})
    workers = [PolicyGradientWorker.remote(ps, f"w{i}", i) for i in range(3)]
    runs = [w.run.remote(12) for w in workers]
    for threshold in (6, 18):
        wait_until(lambda: call(ps.version.remote()) >= threshold, timeout=120,
                   what=f"server version {threshold}")
        os.kill(actor_pid(ps), signal.SIGKILL)
    acked = [r for run in ray.get(runs, timeout=240) for r in run]
    stats = call(ps.stats.remote())
    assert len(acked) == 36
    assert stats.version == stats.applied_pushes == 36  # every acknowledged push, once
    assert all(r.applied or r.duplicate for r in acked)
    assert stats.checkpoint.restore.restored  # it really came back from its checkpoint and log
    for w in workers:
        ray.kill(w)
    ray.kill(ps)
