"""A user's own workload, kept outside the package: a counter actor that Ray restarts, read
back after each kill. The suite installs it through the ``raychaos.workloads`` entry point
(tests/test_user_workloads.py) and runs it through ``raychaos run``."""

from __future__ import annotations

import ray

from scenarios import Params, Verdict, Workload


class Counter:
    def __init__(self) -> None:
        self.n = 0

    def add(self) -> int:
        self.n += 1
        return self.n


class SpinParams(Params):
    #: Calls per step; the test sets it, so the run shows its params arrived validated.
    calls: int = 1


class Spin(Workload):
    """Calls a restartable counter actor; it must answer again after every kill."""

    INVARIANTS = ("answers_after_kills", "was_killed")
    Params = SpinParams

    def setup(self) -> None:
        self.calls = self.ctx.params_as(SpinParams).calls
        actor = ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0)(Counter)
        self.counter = actor.options(name="spin", namespace=self.ctx.namespace).remote()
        ray.get(self.counter.add.remote(), timeout=30)

    def step(self) -> bool:
        ray.get([self.counter.add.remote() for _ in range(self.calls)], timeout=30)
        self.ctx.count("calls", self.calls)
        return True

    def invariants(self) -> list[Verdict]:
        answer = ray.get(self.counter.add.remote(), timeout=30)
        self.ctx.metric("calls_per_step", self.calls)
        return [Verdict.of("answers_after_kills", answer >= 1, f"answered {answer}"),
                Verdict.of("was_killed", self.ctx.kills() > 0, f"{self.ctx.kills()} kill(s) confirmed")]

    def teardown(self) -> None:
        ray.kill(self.counter)
