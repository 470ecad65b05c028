"""The built-in workloads, by the name scenario files use in ``workload = "..."``."""

from __future__ import annotations

import time
from collections.abc import Mapping
from types import ModuleType
from typing import Any, ClassVar

import numpy as np

from actors import CheckpointConfig, CheckpointedCounter, Durability, ParameterServer, ReplayBufferActor
from chaos import FaultKind, watch
from chaos.cluster import short
from chaos.engine import MemoryOutcome, StuckCause, by_value, import_extra
from scenarios.model._records import Verdict
from scenarios.model._workload import CALL_TIMEOUT, Params, Workload
from scenarios.workloads._dqn import DQNCartPole
from scenarios.workloads._kit import Ledger, dead_nodes, new_counter, worker_nodes

__all__ = ["WORKLOADS"]


#: The steady-state probe's task (a copy of ``sample_env`` under the harness's own name).
PROBE_TASK = "raychaos_probe"
#: The task that starts a worker process on each worker node before time zero (node-loss): its
#: attempts are not the workload's, and never evidence that a node's loss reached the workload.
WARM_UP_TASK = "raychaos_warm_up"


def sample_env(index: int, steps: int) -> int:
    """A CPU-bound stand-in for an env rollout; its value is checkable: the sum of its steps."""
    total = 0
    for i in range(steps):
        total += (index * 7 + i) % 13
    return total


def probe_task(resources: dict[str, float] | None = None) -> Any:
    """The steady-state probe's task: ``sample_env`` under the harness's own name (a fault
    aimed at ``sample_env`` never lands on it), shipped by value (its fresh worker does not
    first import this package), needing no CPU (held or busy CPUs do not queue it)."""
    import ray

    return ray.remote(by_value(sample_env, PROBE_TASK)).options(num_cpus=0, max_retries=0,
                                                              resources=resources or {})


def fresh_task_probe(task: Any, *, timeout: float = 5.0) -> str:
    """The cluster still serves work: a small fresh ``task`` (from :func:`probe_task`) returns
    its value within ``timeout`` seconds, else GetTimeoutError (it is cancelled then, so that
    probes never queue up behind each other)."""
    import ray

    ref = task.remote(1, 10)
    try:
        value = ray.get(ref, timeout=timeout)
    except ray.exceptions.GetTimeoutError:
        ray.cancel(ref)  # not force: a probe that did start ends by itself at once
        raise
    if value != _expected(1, 10):
        raise RuntimeError(f"the probe task returned {value!r}, not {_expected(1, 10)}: the cluster "
                           "computes wrong values")
    return f"a fresh task answered ({value})"


def _expected(index: int, steps: int) -> int:
    """``sample_env``'s value in closed form: the terms repeat every 13 steps (sum 0..12 = 78)."""
    return 78 * (steps // 13) + sum((index * 7 + i) % 13 for i in range(steps % 13))


class TasksParams(Params):
    max_retries: int = 3
    width: int = 4
    steps: int = 600_000
    wait_timeout: float = 1.0
    #: How long tasks still in flight at the end may take to end (else: a silent hang).
    drain_timeout: float = CALL_TIMEOUT
    #: How much longer than the ray.wait timeout one loop iteration may take (None: as long
    #: again as the timeout, see :func:`loop_bound`).
    block_slack: float | None = None


class _Tasks(Workload):
    """Keeps ``width`` ``sample_env`` tasks in flight; collects them with ``ray.wait`` timeouts."""

    INVARIANTS: ClassVar[tuple[str, ...]] = (
        "results_correct", "every_task_terminal", "crashes_surface", "no_error_visible", "loop_never_blocked",
        "memory_monitor_fired")
    #: Without ``invariants`` in the file: those that hold together at the default
    #: ``max_retries`` (3). ``crashes_surface`` is for ``max_retries = 0`` and contradicts
    #: ``no_error_visible``; ``memory_monitor_fired`` needs a memory fault: name them in the file.
    DEFAULT_INVARIANTS: ClassVar[tuple[str, ...] | None] = (
        "results_correct", "every_task_terminal", "no_error_visible", "loop_never_blocked")
    #: Traces only a fault leaves (a crash per kill, the memory monitor's kills): n/a in the twin.
    FAULT_VERDICTS: ClassVar[tuple[str, ...]] = ("crashes_surface", "memory_monitor_fired")
    Params = TasksParams
    resources: ClassVar[dict[str, float]] = {}
    #: The task under test: its value must be ``_expected(index, steps)``.
    task_function = staticmethod(sample_env)

    def setup(self) -> None:
        import ray

        p = self.ctx.params_as(TasksParams)
        self.retries, self.width, self.steps = p.max_retries, p.width, p.steps
        self.wait_timeout, self.drain_timeout, self.block_slack = p.wait_timeout, p.drain_timeout, p.block_slack
        self.task = ray.remote(self.task_function).options(max_retries=self.retries, num_cpus=0.5,
                                                           resources=self.resources)
        self.probe_task = probe_task(self.resources)
        self.pending: dict[Any, tuple[int, float]] = {}
        self.done: dict[int, object] = {}
        self.submitted, self.turns, self.max_gap = 0, 0, 0.0
        self.last: float | None = None  # when the last turn ended
        # The job's OOM kills so far: earlier runs of this driver's job are not this run's.
        self.oom_before = _oom_killed_attempts(self.ctx.address)

    def step(self) -> bool:
        import ray

        begun = time.monotonic()
        while len(self.pending) < self.width and not self.ctx.over():
            self.pending[self._submit(self.submitted)] = (self.submitted, time.monotonic())
            self.submitted += 1
        ready, _ = ray.wait(list(self.pending), num_returns=1, timeout=self.wait_timeout)
        for ref in ready:
            self.done[self.pending.pop(ref)[0]] = self._outcome(ref)
            self.ctx.count("tasks")
        now = time.monotonic()
        # The first turn from its own start: setup, chaos's warm-up and the runner's first
        # steady-state probe (a fresh worker's cold start) come before it and are not the loop's.
        gap = now - (self.last if self.last is not None else begun)
        self.turns, self.max_gap, self.last = self.turns + 1, max(self.max_gap, gap), now
        return True

    def _submit(self, index: int) -> Any:
        return self.task.remote(index, self.steps)

    def _outcome(self, ref: Any) -> object:
        import ray
        from ray.exceptions import RayError

        try:
            return ray.get(ref, timeout=CALL_TIMEOUT)
        except RayError as exc:
            return exc

    def probe(self) -> str:
        return fresh_task_probe(self.probe_task)

    def _drain(self) -> list[int]:
        """Every task still in flight must end within one deadline: the no-silent-hang check."""
        import ray

        refs = list(self.pending)
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=self.drain_timeout) if refs else ([], [])
        done = set(ready)
        hung = []
        for ref in refs:
            index, _ = self.pending.pop(ref)
            if ref in done:
                self.done[index] = self._outcome(ref)
            else:
                hung.append(index)
                ray.cancel(ref, force=True)
        return hung

    def invariants(self) -> list[Verdict]:
        from ray.exceptions import WorkerCrashedError

        hung = self._drain()
        values = {i: v for i, v in self.done.items() if not isinstance(v, BaseException)}
        errors = {i: v for i, v in self.done.items() if isinstance(v, BaseException)}
        wrong = [i for i, v in values.items() if v != _expected(i, self.steps)]
        crashes = [e for e in errors.values() if isinstance(e, WorkerCrashedError)]
        kills = len(self.ctx.injections(FaultKind.KILL))
        kinds = sorted({type(e).__name__ for e in errors.values()})
        return [
            Verdict.over("results_correct", len(values), held=not wrong,
                         detail=f"{len(values)} values, {len(wrong)} wrong"),
            Verdict.over("every_task_terminal", self.submitted, held=not hung,
                         detail=f"{len(self.done)} of {self.submitted} tasks ended; {len(hung)} still pending "
                         f"{self.drain_timeout:g} s after the run"),
            # Each kill was confirmed on a worker running this workload's task: one crash each.
            Verdict.of("crashes_surface", 0 < len(crashes) == kills and len(crashes) == len(errors),
                    f"{len(crashes)} WorkerCrashedError for {kills} kills at max_retries={self.retries}; "
                    f"errors: {kinds or 'none'}"),
            Verdict.over("no_error_visible", len(self.done), held=not errors,
                         detail=f"{len(self.done)} tasks ended; errors seen by the driver: {kinds or 'none'}"),
            blocked_verdict(self.turns, self.max_gap, self.wait_timeout, self.block_slack),
            self._memory_verdict(),
        ]

    def _memory_verdict(self) -> Verdict:
        """Ray's memory monitor killed a task: the allocation, or (it kills the most recently
        started task, retriable ones first) one of this run's own, which Ray then retried."""
        seen = list(self.ctx.memory_outcomes)
        others = new_oom_kills(self.oom_before, _oom_killed_attempts(self.ctx.address))
        fired = MemoryOutcome.OOM_KILLED in seen or bool(others)
        return Verdict.of("memory_monitor_fired", fired,
                       f"memory faults ended: {', '.join(seen) or 'none healed'}; task attempts the "
                       f"monitor killed: {len(others)} ({', '.join(sorted(set(others))) or 'none'})")

    def teardown(self) -> None:
        import ray

        for ref in self.pending:
            ray.cancel(ref, force=True)


def loop_bound(wait_timeout: float, slack: float | None = None) -> float:
    """The longest one turn of a ``ray.wait``-driven loop may take: the wait's timeout plus
    ``slack`` for the rest of the turn (collecting ready results, submitting), by default as
    long again as the timeout. Derived from the timeout, not a fixed allowance: a loop blocked
    on a paused task for a few seconds must not pass as a slow turn (a 5 s allowance over a
    0.5 s wait let a loop blocked through a whole 4 s pause hold)."""
    return wait_timeout + (wait_timeout if slack is None else slack)


def blocked_verdict(turns: int, max_gap: float, wait_timeout: float, slack: float | None) -> Verdict:
    """``loop_never_blocked``: no turn of ``turns`` took ``loop_bound`` or longer."""
    bound = loop_bound(wait_timeout, slack)
    return Verdict.over("loop_never_blocked", turns, held=max_gap < bound,
                        detail=f"longest of {turns} loop iterations {max_gap:.2f} s, bound {bound:g} s "
                        f"(ray.wait timeout {wait_timeout:g} s plus {bound - wait_timeout:g} s for the rest of "
                        "a turn); a pause no longer than the bound cannot be told from a slow turn")


def _oom_killed_attempts(address: str) -> dict[tuple[str, int], str]:
    """This job's task attempts that failed with OUT_OF_MEMORY (State API): the task's name
    by (task id, attempt number)."""
    import ray
    from ray.util.state import list_tasks

    rows = list_tasks(address=address, filters=[("job_id", "=", ray.get_runtime_context().get_job_id()),
                                                ("error_type", "=", "OUT_OF_MEMORY")],
                      limit=10_000, raise_on_missing_output=False, timeout=CALL_TIMEOUT)
    return {(str(row.task_id), int(row.attempt_number)): str(row.name) for row in rows}


def new_oom_kills(before: Mapping[tuple[str, int], str], now: Mapping[tuple[str, int], str]) -> list[str]:
    """The names of the attempts the memory monitor killed since ``before`` was read: one
    driver's job spans every run it makes, so its earlier runs' kills are not this one's."""
    return [name for attempt, name in now.items() if attempt not in before]


class _WorkerNodeTasks(_Tasks):
    """The same tasks, kept off the head and dealt to the worker nodes in turn, so a node loss
    hits them whichever node it takes. Left to Ray's scheduler, 83 of 90 attempts of one run
    went to one worker node and a run on a slower machine had none on the node that died."""

    resources: ClassVar[dict[str, float]] = {"worker": 1}

    def setup(self) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        super().setup()
        # Soft: a retry after the node's death runs on a node that is alive.
        places = [NodeAffinitySchedulingStrategy(node, soft=True) for node in worker_nodes()]
        self.on_node = [ray.remote(self.task_function).options(
            max_retries=self.retries, num_cpus=0.5, resources=self.resources, scheduling_strategy=place)
            for place in places]
        # A worker process waiting on each node before time zero: on a slow machine the first
        # attempts on a node were still waiting for theirs when the node died, and none ran there.
        warm = ray.remote(by_value(sample_env, WARM_UP_TASK))
        ray.get([warm.options(num_cpus=0.5, resources=self.resources, scheduling_strategy=place).remote(0, 1)
                 for place in places], timeout=CALL_TIMEOUT)

    def _submit(self, index: int) -> Any:
        if not self.on_node:
            return super()._submit(index)
        return self.on_node[index % len(self.on_node)].remote(index, self.steps)


class CrashLoopParams(Params):
    max_restarts: int = 3
    capacity: int = 100_000


class _CrashLoop(Workload):
    """A replay buffer actor fed with idempotent adds while it is killed again and again."""

    INVARIANTS = ("no_lost_transitions", "dies_after_max_restarts", "recovers_within_max_restarts")
    Params = CrashLoopParams
    #: The actor under test (a test plants bugs in a subclass of it).
    buffer_class: type = ReplayBufferActor

    def setup(self) -> None:
        import ray

        p = self.ctx.params_as(CrashLoopParams)
        self.max_restarts, self.capacity = p.max_restarts, p.capacity
        cls = ray.remote(max_restarts=self._granted_restarts(), max_task_retries=-1,
                         num_cpus=0)(self.buffer_class)
        config = CheckpointConfig(storage=f"{self.ctx.storage}/replay", durability="wal", every_n=50)
        self.buffer = cls.options(name="replay", namespace=self.ctx.namespace).remote(self.capacity, checkpoint=config)
        self.acked, self.error = 0, ""
        self.died: float | None = None  # when the actor was found dead, seconds into the run
        ray.get(self.buffer.size.remote(), timeout=CALL_TIMEOUT)

    def _granted_restarts(self) -> int:
        """The ``max_restarts`` the actor really gets (the one the invariants expect)."""
        return self.max_restarts

    def step(self) -> bool:
        import ray
        from ray.exceptions import ActorDiedError

        batch = {"tid": np.arange(self.acked * 8, self.acked * 8 + 8, dtype=np.int64)}
        try:
            ray.get(self.buffer.add.remote(batch, writer_id="w", seq=self.acked), timeout=CALL_TIMEOUT)
        except ActorDiedError as exc:
            self.died, self.error = self.ctx.elapsed(), type(exc).__name__
            return False
        self.acked += 1
        self.ctx.count("adds")
        return True

    def probe(self) -> str:
        import ray

        return f"buffer holds {ray.get(self.buffer.size.remote(), timeout=5.0)} transitions"

    def invariants(self) -> list[Verdict]:
        kills = self.ctx.kills()
        expect_death, alive = kills > self.max_restarts, self.died is None
        death = f"{self.error} at {self.died:.1f} s" if self.died is not None else "alive at the end"
        restarts = self._restarts()
        expected = min(kills, self.max_restarts)
        return [
            Verdict.of("dies_after_max_restarts", alive != expect_death,
                    f"{kills} kills, max_restarts={self.max_restarts}: {death}"),
            self._lost_verdict() if alive else Verdict.of(
                "no_lost_transitions", False, f"the buffer is dead ({death}): nothing to read back"),
            Verdict.of("recovers_within_max_restarts", restarts == expected and (alive or expect_death),
                    f"Ray restarted it {restarts} times for {kills} kills (expected {expected}, "
                    f"max_restarts={self.max_restarts}); {death}"),
        ]

    def _lost_verdict(self) -> Verdict:
        import ray

        # No column before the first add: the buffer learns its columns from it.
        stored = ray.get(self.buffer.column.remote("tid"), timeout=CALL_TIMEOUT) if self.acked else np.empty(0)
        kept = np.arange(self.acked * 8)[-self.capacity:]  # FIFO: the newest `capacity` stay
        lost = np.setdiff1d(kept, stored)
        return Verdict.over("no_lost_transitions", self.acked, held=len(lost) == 0 and len(stored) == len(kept),
                            detail=f"{self.acked * 8} acknowledged, {len(kept)} kept by FIFO eviction, "
                            f"{len(stored)} stored, {len(lost)} lost")

    def _restarts(self) -> int:
        """How many times Ray restarted the buffer (the State API's count, not ours)."""
        from ray.util.state import list_actors

        rows = list_actors(address=self.ctx.address, detail=True, raise_on_missing_output=False,
                           filters=[("actor_id", "=", self.buffer._actor_id.hex())], timeout=CALL_TIMEOUT)
        return int(rows[0].num_restarts) if rows else -1

    def teardown(self) -> None:
        import ray

        ray.kill(self.buffer)


def _torch() -> ModuleType:
    return import_extra("torch", extra="rl", needed_by="the parameter-server workload")


def _tiny_model() -> Any:
    torch = _torch()

    return torch.nn.Linear(4, 2)


class ParamServerParams(Params):
    durability: Durability = "wal"


class _ParamServer(Workload):
    """Known gradients pushed to a parameter server that is killed; a local replica checks it."""

    INVARIANTS = ("ps_version_matches_pushes", "weights_match_replica")
    EXTRA = "rl"
    Params = ParamServerParams
    #: The actor under test (a test plants bugs in a subclass of it).
    server_class: type = ParameterServer

    def setup(self) -> None:
        import ray
        torch = _torch()

        durability = self.ctx.params_as(ParamServerParams).durability
        cls = ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0)(self.server_class)
        config = CheckpointConfig(storage=f"{self.ctx.storage}/params", durability=durability, every_n=20)
        self.server = cls.options(name="params", namespace=self.ctx.namespace).remote(
            _tiny_model, checkpoint=config, optimizer="SGD", optimizer_kwargs={"lr": 0.1}, seed=self.ctx.seed)
        torch.manual_seed(self.ctx.seed)
        self.replica = _tiny_model()
        self.rng, self.pushes = np.random.default_rng(self.ctx.seed), 0
        ray.get(self.server.version.remote(), timeout=CALL_TIMEOUT)

    def step(self) -> bool:
        import ray
        torch = _torch()

        grads = {n: self.rng.standard_normal(p.shape).astype(np.float32)
                 for n, p in self.replica.named_parameters()}
        ray.get(self.server.push.remote(grads, worker_id="w", seq=self.pushes, base_version=self.pushes),
                timeout=CALL_TIMEOUT)
        with torch.no_grad():
            for n, p in self.replica.named_parameters():
                p -= 0.1 * torch.from_numpy(grads[n])
        self.pushes += 1
        self.ctx.count("pushes")
        return True

    def probe(self) -> str:
        import ray

        return f"parameters at version {ray.get(self.server.version.remote(), timeout=5.0)}"

    def invariants(self) -> list[Verdict]:
        import ray

        version = ray.get(self.server.version.remote(), timeout=CALL_TIMEOUT)
        weights = ray.get(self.server.weights.remote(), timeout=CALL_TIMEOUT)
        gap = max(float((weights[n] - p.detach()).abs().max()) for n, p in self.replica.state_dict().items())
        return [Verdict.over("ps_version_matches_pushes", self.pushes, held=version == self.pushes,
                             detail=f"server version {version}, acknowledged pushes {self.pushes}"),
                Verdict.over("weights_match_replica", self.pushes, held=gap < 1e-4,
                             detail=f"largest difference {gap:.2e} after {self.pushes} pushes")]

    def teardown(self) -> None:
        import ray

        ray.kill(self.server)


class StarvationParams(Params):
    #: How long after the heal the starved tasks may take to finish.
    finish_timeout: float = CALL_TIMEOUT
    #: CPUs of the request the watchdog must name infeasible.
    infeasible_cpus: float = 64.0


class _Starvation(Workload):
    """Tasks wait while their CPUs are held; an infeasible request is named by the watchdog."""

    INVARIANTS = ("starved_tasks_finish", "infeasible_diagnosed")
    Params = StarvationParams

    def setup(self) -> None:
        import ray

        self.task = ray.remote(sample_env).options(num_cpus=1, max_retries=0)
        self.probe_task = probe_task()  # no CPU: the held CPUs starve the workload's tasks, not it
        self.refs: list[Any] = []
        p = self.ctx.params_as(StarvationParams)
        self.finish_timeout, self.infeasible_cpus = p.finish_timeout, p.infeasible_cpus

    def step(self) -> bool:
        import ray

        if len(self.refs) < 6:
            self.refs.append(self.task.remote(len(self.refs), 100_000))
        ray.wait(self.refs, num_returns=len(self.refs), timeout=0.5)
        self.ctx.count("submitted")
        return True

    def probe(self) -> str:
        return fresh_task_probe(self.probe_task)

    def invariants(self) -> list[Verdict]:
        import ray

        finish, request = self.finish_timeout, self.infeasible_cpus
        report = watch(self.refs, deadline=finish, address=self.ctx.address, raise_on_hang=False)
        probe = ray.remote(sample_env).options(num_cpus=request, max_retries=0).remote(0, 10)
        seen = watch([probe], deadline=3.0, address=self.ctx.address, raise_on_hang=False).stuck
        ray.cancel(probe, force=True)
        named = [s for s in seen if s.kind is StuckCause.INFEASIBLE]
        diagnosis = (named or seen)[0].cause if (named or seen) else "it ran: no diagnosis to check"
        return [Verdict.over("starved_tasks_finish", len(self.refs), held=not report.stuck,
                             detail=f"{len(self.refs)} tasks, {len(report.stuck)} still pending {finish:g} s "
                             "after the heal"),
                Verdict.of("infeasible_diagnosed", bool(named),
                        f"a request for {request:g} CPUs: {diagnosis[:240]}")]


class _NodeLoss(_WorkerNodeTasks):
    """Tasks on worker nodes plus a WAL-checkpointed counter on each worker node; a node dies.
    Its verdicts need their evidence: a counter and a task attempt on the node that died."""

    INVARIANTS: ClassVar[tuple[str, ...]] = (*_Tasks.INVARIANTS, "actor_state_recovered")
    #: Without ``invariants`` in the file (a node loss stalls the loop while Ray notices it).
    DEFAULT_INVARIANTS: ClassVar[tuple[str, ...] | None] = (
        "results_correct", "every_task_terminal", "no_error_visible", "actor_state_recovered")
    #: The actor under test (a test plants bugs in a subclass of it).
    counter_class: type = CheckpointedCounter

    def setup(self) -> None:
        import ray

        super().setup()
        self.dead_before = dead_nodes(self.ctx.address)  # the cluster's old losses are not this run's
        # One counter per worker node: whichever node dies, one of them was on it.
        counters = [new_counter(self.ctx, f"counter{i}", cls=self.counter_class, node=node, durability="wal",
                             every_n=20) for i, node in enumerate(worker_nodes())]
        # Up before time zero: a cold start on a busy worker node is not the node loss's.
        self.homes = ray.get([c.node_id.remote() for c in counters], timeout=CALL_TIMEOUT)
        self.ledgers = [Ledger(c, f"w{i}") for i, c in enumerate(counters)]

    def step(self) -> bool:
        # Ray redelivers an add whose reply the node's death lost: the seq makes it count once.
        for ledger in self.ledgers:
            ledger.add()
        return super().step()

    def invariants(self) -> list[Verdict]:
        dead = dead_nodes(self.ctx.address) - self.dead_before
        ran = _attempts_on(self.ctx.address, dead)
        tasks = [task_evidence(v, ran) if v.name == "no_error_visible" else v for v in super().invariants()]
        return [*tasks, counters_verdict([ledger.verdict("actor_state_recovered") for ledger in self.ledgers],
                                         self.homes, dead)]

    def teardown(self) -> None:
        import ray

        super().teardown()
        for ledger in self.ledgers:
            ray.kill(ledger.actor)


def _attempts_on(address: str, nodes: set[str]) -> int:
    """How many of this job's plain task attempts (the harness's probe and warm-up aside) ran on
    ``nodes``, per the State API."""
    import ray
    from ray.util.state import list_tasks

    if not nodes:
        return 0
    rows = list_tasks(address=address, filters=[("job_id", "=", ray.get_runtime_context().get_job_id()),
                                                ("type", "=", "NORMAL_TASK")],
                      limit=10_000, raise_on_missing_output=False, timeout=CALL_TIMEOUT)
    return attempts_among(rows, nodes)


def attempts_among(rows: Any, nodes: set[str]) -> int:
    """How many of the State API's task ``rows`` ran on ``nodes``, the harness's own probe and
    warm-up aside (neither is evidence that a node's loss reached the workload)."""
    return sum(row.node_id in nodes and row.name not in (PROBE_TASK, WARM_UP_TASK) for row in rows)


def task_evidence(verdict: Verdict, attempts_on_dead: int) -> Verdict:
    """``verdict`` about the tasks, unknown instead of held when no task attempt ran on a node
    that died: then the node loss never reached the tasks it claims to test."""
    return verdict.unless(None if attempts_on_dead else "no task attempt ran on a node that died (State API)")


def counters_verdict(each: list[Verdict], homes: list[str], dead: set[str]) -> Verdict:
    """``actor_state_recovered``: every counter holds its acknowledged adds, and one of them
    lived on a node that died (else it is unknown: the loss never reached a counter)."""
    name = each[0].name if each else "actor_state_recovered"
    hit = [short(home) for home in homes if home in dead]
    detail = (f"counters were on {[short(h) for h in homes]}, on a dead node: {hit or 'none'}; "
              + "; ".join(v.detail for v in each))
    seen = min((v.seen or 0 for v in each), default=0)
    verdict = Verdict.of(name, bool(each) and all(v.held for v in each), detail, seen)
    return verdict.unless(None if hit else "no counter lived on a node that died")


class _Owner:
    """Creates objects and returns refs to them: it owns them."""

    def make(self, n: int) -> list[Any]:
        import ray

        # Large enough for the shared-memory store: small objects are inlined into replies.
        return [ray.put(np.full(200_000, n))]

    def ping(self) -> int:
        return 1


class OwnerDeathParams(Params):
    #: How long ray.get may keep serving a dead owner's object (until the raylet frees it).
    surface_within: float = 10.0


def owner_death_verdict(ended: list[BaseException | None], within: float, took: float) -> Verdict:
    """``owner_death_surfaces``: each sampled ref's ``ray.get`` raised OwnerDiedError (by
    type: ``isinstance``) within ``within`` seconds; a value (None) or another error breaks it."""
    from ray.exceptions import OwnerDiedError

    names = [type(e).__name__ if e is not None else "value" for e in ended]
    seen = ", ".join(f"{k} ×{names.count(k)}" for k in sorted(set(names))) or "no refs"
    return Verdict.of("owner_death_surfaces", bool(ended) and all(isinstance(e, OwnerDiedError) for e in ended),
                   f"ray.get on {len(ended)} of the dead owner's refs within {within:g} s: {seen} ({took:.2f} s)")


class _OwnerDeath(Workload):
    """The driver holds refs owned by an actor that is killed: ``ray.get`` must raise, not hang."""

    INVARIANTS = ("owner_death_surfaces",)
    FAULT_VERDICTS = ("owner_death_surfaces",)  # no owner died in the twin: nothing to surface
    Params = OwnerDeathParams

    def setup(self) -> None:
        import ray

        self.owner = ray.remote(max_restarts=0, num_cpus=0)(_Owner).options(
            name="owner", namespace=self.ctx.namespace).remote()
        # The first ref before time zero: the owner's worker starts first (seconds on a loaded
        # machine), and a kill at 2 s can land before any ref exists.
        self.refs: list[Any] = ray.get(self.owner.make.remote(0), timeout=CALL_TIMEOUT)
        self.ctx.count("objects")
        self.surface_within = self.ctx.params_as(OwnerDeathParams).surface_within
        self.probe_task = probe_task()

    def step(self) -> bool:
        import ray
        from ray.exceptions import RayActorError

        try:
            self.refs += ray.get(self.owner.make.remote(len(self.refs)), timeout=CALL_TIMEOUT)
            self.ctx.count("objects")
        except RayActorError:
            return False  # the owner is gone: the invariant checks what its refs do now
        return len(self.refs) < 10_000

    def probe(self) -> str:
        # The killed owner is the fault, not the steady state: the cluster must go on serving
        # new work (its refs' fate is the invariant's).
        return fresh_task_probe(self.probe_task)

    def invariants(self) -> list[Verdict]:
        """Once the owner is dead, ``ray.get`` on its refs raises OwnerDiedError within
        ``surface_within`` seconds (a copy in this node's store may serve it until the raylet
        frees it, so a value is asked again until then); never a hang, never another error."""
        within, start = self.surface_within, time.monotonic()
        sample = self.refs[:: max(1, len(self.refs) // 5)][:5]
        ended = [self._surfaced(ref, start + within) for ref in sample]
        return [owner_death_verdict(ended, within, time.monotonic() - start)]

    @staticmethod
    def _surfaced(ref: Any, deadline: float) -> BaseException | None:
        """The error a ``ray.get`` begun by ``deadline`` ends in (each get is bounded by
        ``CALL_TIMEOUT`` s: GetTimeoutError, a hang; the owner's death may take seconds to
        reach a get begun just after it), or None: still a value at ``deadline``."""
        import ray
        from ray.exceptions import RayError

        while True:
            try:
                ray.get(ref, timeout=CALL_TIMEOUT)
            except RayError as exc:
                error: BaseException = exc
                return error
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.1)  # the poll interval of a deadline-bounded wait: not freed yet

    def teardown(self) -> None:
        import ray

        ray.kill(self.owner)


WORKLOADS: dict[str, type[Workload]] = {
    "dqn-cartpole": DQNCartPole,
    "sampling": _Tasks,
    "replay-crash-loop": _CrashLoop,
    "parameter-server": _ParamServer,
    "starvation": _Starvation,
    "node-loss": _NodeLoss,
    "owner-death": _OwnerDeath,
}
