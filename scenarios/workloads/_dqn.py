"""The flagship workload: DQN on CartPole with env workers, the replay buffer and the parameter server.

Env workers are Ray actors (``EnvWorker``) that play CartPole with the latest weights and return
transitions, each with a unique id. The driver acknowledges a chunk once the replay buffer
actor has stored it (idempotent adds: ``writer_id``/``seq``). The learner, in the driver,
samples the buffer, computes a double-DQN gradient and pushes it to the parameter server,
which applies it (Adam) and serves the next weights. Buffer and server log every mutation
(WAL), so a SIGKILL loses nothing acknowledged: the invariants check exactly that.
"""

from __future__ import annotations

import functools
import os
from types import ModuleType
from typing import Any

import numpy as np

from actors import CheckpointConfig, ParameterServer, ReplayBufferActor, ReplayClient
from chaos.engine import import_extra
from scenarios.model._records import Verdict
from scenarios.model._workload import CALL_TIMEOUT, Params, Workload

__all__ = ["DQNCartPole", "EnvWorker", "evaluate", "make_qnet"]

GAMMA = 0.99
EVAL_EPISODES = 20


def _torch() -> ModuleType:
    return import_extra("torch", extra="rl", needed_by="the dqn-cartpole workload")


def _gym() -> ModuleType:
    return import_extra("gymnasium", extra="rl", needed_by="the dqn-cartpole workload")


def make_qnet() -> Any:
    """The Q-network: CartPole's 4 observations to 2 action values."""
    torch = _torch()

    return torch.nn.Sequential(torch.nn.Linear(4, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128),
                               torch.nn.ReLU(), torch.nn.Linear(128, 2))


def _greedy(net: Any, obs: np.ndarray) -> int:
    torch = _torch()

    with torch.no_grad():
        return int(net(torch.as_tensor(obs, dtype=torch.float32)).argmax())


class EnvWorker:
    """Plays CartPole with the weights it is given; keeps its env (and episode) between calls.

    A restarted worker starts a fresh episode; the chunk's ids stay the same, so a call
    retried after a crash returns transitions the driver has never acknowledged.
    """

    def __init__(self, index: int, seed: int) -> None:
        gym = _gym()
        torch = _torch()

        torch.set_num_threads(1)
        self.seed, self.net, self.env = seed, make_qnet(), gym.make("CartPole-v1")
        self.obs, _ = self.env.reset(seed=seed * 1000 + index)

    def collect(self, weights: dict[str, Any], chunk: int, steps: int, epsilon: float) -> dict[str, np.ndarray]:
        """Play ``steps`` steps epsilon-greedily; one row per transition, ``tid`` unique."""
        self.net.load_state_dict(weights)
        rng = np.random.default_rng([self.seed, chunk])
        rows: dict[str, list[Any]] = {k: [] for k in ("obs", "act", "rew", "next", "done")}
        for _ in range(steps):
            act = int(rng.integers(2)) if rng.random() < epsilon else _greedy(self.net, self.obs)
            nxt, rew, term, trunc, _ = self.env.step(act)
            for key, value in zip(rows, (self.obs, act, rew, nxt, term)):
                rows[key].append(value)
            self.obs = self.env.reset()[0] if term or trunc else nxt
        return {"obs": np.asarray(rows["obs"], np.float32), "act": np.asarray(rows["act"], np.int64),
                "rew": np.asarray(rows["rew"], np.float32), "next": np.asarray(rows["next"], np.float32),
                "done": np.asarray(rows["done"], np.float32),
                "tid": (np.int64(chunk) << 20) + np.arange(steps, dtype=np.int64)}

    def ping(self) -> int:
        return os.getpid()


def evaluate(net: Any, *, episodes: int = EVAL_EPISODES, seed: int = 10_000) -> float:
    """Mean return of the greedy policy over ``episodes`` seeded CartPole-v1 episodes."""
    gym = _gym()

    env, returns = gym.make("CartPole-v1"), []
    for i in range(episodes):
        obs, _ = env.reset(seed=seed + i)
        total, done = 0.0, False
        while not done:
            obs, rew, term, trunc, _ = env.step(_greedy(net, obs))
            total, done = total + float(rew), term or trunc
        returns.append(total)
    return float(np.mean(returns))


@functools.cache
def _remote(cls: type, num_cpus: float) -> Any:
    import ray

    return ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=num_cpus)(cls)


class DQNParams(Params):
    env_workers: int = 2
    chunk_steps: int = 256
    grads_per_chunk: int = 64
    batch_size: int = 64
    target_return: float = 195.0
    straggler_timeout: float = 2.0


class DQNCartPole(Workload):
    """DQN on CartPole-v1 under faults; done when the greedy policy reaches ``target_return``."""

    INVARIANTS = ("no_lost_transitions", "no_duplicate_transitions", "ps_version_matches_pushes",
                  "reaches_target_return")
    BASELINE = True
    EXTRA = "rl"
    Params = DQNParams
    #: The actors under test (a test plants bugs in subclasses of them).
    buffer_class: type = ReplayBufferActor
    server_class: type = ParameterServer

    def setup(self) -> None:
        torch = _torch()

        ctx = self.ctx
        torch.manual_seed(ctx.seed)
        torch.set_num_threads(1)
        p = ctx.params_as(DQNParams)
        self.workers, self.chunk_steps, self.grads_per_chunk = p.env_workers, p.chunk_steps, p.grads_per_chunk
        self.batch, self.target, self.straggler_timeout = p.batch_size, p.target_return, p.straggler_timeout
        self._start_actors()
        worker_cls = _remote(EnvWorker, 0.5)
        self.envs = [worker_cls.remote(i, ctx.seed) for i in range(self.workers)]
        self.idle = list(self.envs)
        self.online, self.frozen = make_qnet(), make_qnet()
        self._pull()
        self.frozen.load_state_dict(self.online.state_dict())
        self.acked: list[np.ndarray] = []
        self.pending: dict[Any, Any] = {}  # chunk ref -> the env worker playing it
        self.chunks = self.adds = self.pushes = self.grads = 0
        self.env_steps, self.solved, self.best = 0, False, 0.0
        #: The last batch's (indices, priorities), sent with the request for the next batch.
        self.priorities: tuple[np.ndarray, np.ndarray] | tuple[()] = ()

    def _start_actors(self) -> None:
        buffer_cls, server_cls = _remote(self.buffer_class, 0), _remote(self.server_class, 0)
        wal = functools.partial(CheckpointConfig, durability="wal", every_n=500, keep=2)
        opts = {"namespace": self.ctx.namespace}
        self.buffer = buffer_cls.options(name="replay", **opts).remote(
            200_000, checkpoint=wal(storage=f"{self.ctx.storage}/replay", incremental=True), seed=self.ctx.seed)
        self.replay = ReplayClient(self.buffer, timeout=CALL_TIMEOUT)  # a learner's step as bytes on the wire
        self.server = server_cls.options(name="params", **opts).remote(
            make_qnet, checkpoint=wal(storage=f"{self.ctx.storage}/params"), optimizer="Adam",
            optimizer_kwargs={"lr": 1e-3}, seed=self.ctx.seed)

    # -- the loop ----------------------------------------------------------------------------

    def step(self) -> bool:
        self._submit()
        self._acknowledge()
        if self.env_steps >= 1000:
            self._learn()
        # Solved early? Keep training until every fault has played out, so each one hits a
        # working system and its recovery is measured.
        return not (self.solved and self.ctx.faults_settled.is_set())

    def _submit(self) -> None:
        """Give every idle env worker the next chunk to play with the latest weights."""
        while self.idle:
            worker, epsilon = self.idle.pop(), max(0.05, 1.0 - self.env_steps / 8000)
            ref = worker.collect.remote(self._weights_ref, self.chunks, self.chunk_steps, epsilon)
            self.pending[ref], self.chunks = worker, self.chunks + 1

    def _acknowledge(self) -> None:
        """Store the chunks that are ready; a straggler's chunk waits for a later step."""
        import ray
        from ray.exceptions import RayError

        ready, _ = ray.wait(list(self.pending), num_returns=1, timeout=self.straggler_timeout)
        for ref in ready:
            self.idle.append(self.pending.pop(ref))
            try:
                batch = ray.get(ref, timeout=CALL_TIMEOUT)
            except RayError:
                self.ctx.count("chunks_lost")  # never acknowledged, so not a loss
                continue
            ray.get(self.buffer.add.remote(batch, writer_id="collector", seq=self.adds), timeout=CALL_TIMEOUT)
            self.adds += 1
            self.acked.append(batch["tid"])
            self.env_steps += len(batch["tid"])
            self.ctx.count("transitions", len(batch["tid"]))

    def _learn(self) -> None:
        import ray

        for _ in range(self.grads_per_chunk):
            self._gradient_step()
        if self.priorities:  # the chunk's last batch: its priorities before the next chunk's draws
            ray.get(self.buffer.update_priorities.remote(*self.priorities), timeout=CALL_TIMEOUT)
            self.priorities = ()
        score = evaluate(self.online)
        self.best = max(self.best, score)
        self.ctx.point("eval_return", score)
        if score >= self.target and not self.solved:
            self.solved = True
            self.ctx.metric("solved_at_s", self.ctx.elapsed())
            self.ctx.metric("solved_at_env_steps", self.env_steps)

    def _gradient_step(self) -> None:
        import ray

        # One round trip: the previous batch's priorities go with the request for the next.
        sample = self.replay.sample_and_update(self.batch, *self.priorities)
        grads, td = self._gradients(sample)
        result = ray.get(self.server.push.remote(grads, worker_id="learner", seq=self.pushes,
                                                 base_version=self.version), timeout=CALL_TIMEOUT)
        self.pushes += 1
        self.ctx.count("gradient_steps")
        self.priorities = (sample["indices"], np.abs(td) + 1e-3)
        self._pull(min_version=result.version)
        if self.pushes % 250 == 0:
            self.frozen.load_state_dict(self.online.state_dict())

    def _gradients(self, s: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray]:
        torch = _torch()
        F = _torch().nn.functional

        # ray.get hands out read-only views of the object store; torch wants writable arrays.
        s = {k: np.array(v) for k, v in s.items()}
        obs, nxt = torch.from_numpy(s["obs"]), torch.from_numpy(s["next"])
        with torch.no_grad():
            best = self.online(nxt).argmax(1, keepdim=True)
            target = torch.from_numpy(s["rew"]) + GAMMA * (1 - torch.from_numpy(s["done"])) * \
                self.frozen(nxt).gather(1, best).squeeze(1)
        q = self.online(obs).gather(1, torch.from_numpy(s["act"])[:, None]).squeeze(1)
        weights = torch.from_numpy(s["weights"].astype(np.float32))
        loss = (weights * F.smooth_l1_loss(q, target, reduction="none")).mean()
        self.online.zero_grad(set_to_none=True)
        loss.backward()
        grads = {n: p.grad.numpy().copy() for n, p in self.online.named_parameters()}
        return grads, (target - q).detach().numpy()

    def _pull(self, min_version: int = 0) -> None:
        import ray

        self.version, self._weights_ref = ray.get(self.server.pull.remote(min_version), timeout=CALL_TIMEOUT)
        self.online.load_state_dict(ray.get(self._weights_ref, timeout=CALL_TIMEOUT))

    # -- steady state and invariants -----------------------------------------------------------

    def probe(self) -> str:
        import ray

        size, version, *_ = ray.get([self.buffer.size.remote(), self.server.version.remote(),
                                     *(env.ping.remote() for env in self.envs)], timeout=5.0)
        return f"buffer holds {size} transitions, parameters at version {version}, {len(self.envs)} env workers answer"

    def invariants(self) -> list[Verdict]:
        import ray

        acked = np.concatenate(self.acked) if self.acked else np.empty(0, np.int64)
        # No column before the first add: the buffer learns its columns from it.
        stored = ray.get(self.buffer.column.remote("tid"), timeout=CALL_TIMEOUT) if len(acked) else acked
        lost = np.setdiff1d(acked, stored)
        dupes = len(stored) - len(np.unique(stored))
        version = ray.get(self.server.version.remote(), timeout=CALL_TIMEOUT)
        self.ctx.metric("acknowledged_transitions", len(acked))
        self.ctx.metric("best_return", self.best)
        self.ctx.metric("pushes", self.pushes)
        return [
            Verdict.over("no_lost_transitions", len(acked), held=len(lost) == 0,
                         detail=f"{len(acked)} acknowledged, {len(stored)} stored, {len(lost)} lost"),
            Verdict.over("no_duplicate_transitions", len(stored), held=dupes == 0,
                         detail=f"{dupes} duplicated ids among {len(stored)} in the buffer"),
            Verdict.over("ps_version_matches_pushes", self.pushes, held=version == self.pushes,
                         detail=f"server version {version}, acknowledged pushes {self.pushes}"),
            Verdict.of("reaches_target_return", self.best >= self.target,
                    f"best mean return {self.best:.1f} over {EVAL_EPISODES} episodes (target {self.target:g})"),
        ]

    def teardown(self) -> None:
        import ray

        for actor in [getattr(self, "buffer", None), getattr(self, "server", None), *getattr(self, "envs", [])]:
            if actor is not None:
                ray.kill(actor)
