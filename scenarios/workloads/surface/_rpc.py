"""RPC failures through Ray's own knob."""

from __future__ import annotations

from typing import Any

from scenarios.model._records import Verdict
from scenarios.model._workload import CALL_TIMEOUT, Params, Workload

__all__ = ["UNAVAILABLE", "Caller", "RpcFailures", "RpcParams", "Target", "call_error_kind"]


class Target:
    """Counts how many times its method ran: more runs than calls means retried deliveries."""

    def __init__(self) -> None:
        self.runs = 0

    def echo(self, x: int) -> int:
        self.runs += 1
        return x

    def count(self) -> int:
        return self.runs


class Caller:
    """Calls the target from a worker node, where the RPC failure knob is set."""

    def run(self, target: Any, start: int, n: int) -> tuple[int, dict[str, int]]:
        import ray

        ok, errors = 0, dict[str, int]()
        for i in range(start, start + n):
            try:
                ok += ray.get(target.echo.remote(i), timeout=CALL_TIMEOUT) == i
            except Exception as exc:  # noqa: BLE001 - counted by kind, the verdict decides
                kind = call_error_kind(exc)
                errors[kind] = errors.get(kind, 0) + 1
        return ok, errors


#: The key of the calls that failed with ActorUnavailableError (or a subclass) in
#: :meth:`Caller.run`'s counts; any other error counts under ``other: <its type>``.
UNAVAILABLE = "ActorUnavailableError"


def call_error_kind(exc: BaseException) -> str:
    """The key a failed call counts under: decided by ``isinstance`` on Ray's exception type,
    the type's name only for the reader of an unexpected one."""
    from ray.exceptions import ActorUnavailableError

    return UNAVAILABLE if isinstance(exc, ActorUnavailableError) else f"other: {type(exc).__name__}"


class RpcParams(Params):
    max_task_retries: int = -1
    #: How long one batch of calls may take before it counts as a hang.
    batch_timeout: float = 20 * CALL_TIMEOUT


class RpcFailures(Workload):
    """Actor calls between processes of the worker nodes, whose replies Ray's RPC failure knob
    drops: with ``max_task_retries=-1`` every call returns its value (and the lost replies show
    as extra runs: at-least-once); with 0 the failures reach the caller as
    ``ActorUnavailableError``, and nothing hangs."""

    INVARIANTS = ("results_correct", "retried_deliveries_seen", "errors_surface", "no_hang")
    Params = RpcParams
    target_class: type = Target
    caller_class: type = Caller

    def setup(self) -> None:
        import ray

        retries = self.ctx.params_as(RpcParams).max_task_retries
        self.target = ray.remote(num_cpus=0, resources={"worker": 1},
                                 max_task_retries=retries)(self.target_class).remote()
        self.caller = ray.remote(num_cpus=0, resources={"worker": 1})(self.caller_class).remote()
        self.calls, self.ok, self.hung = 0, 0, ""
        self.errors: dict[str, int] = {}
        # A batch of 20 calls, each bounded by CALL_TIMEOUT: past this, it hangs.
        self.batch_timeout = self.ctx.params_as(RpcParams).batch_timeout

    def step(self) -> bool:
        import ray

        try:
            ok, errors = ray.get(self.caller.run.remote(self.target, self.calls, 20), timeout=self.batch_timeout)
        except Exception as exc:  # noqa: BLE001 - a batch that did not end is a hang
            self.hung = f"{type(exc).__name__}: {exc}"[:200]
            return False
        self.calls, self.ok = self.calls + 20, self.ok + ok
        for name, n in errors.items():
            self.errors[name] = self.errors.get(name, 0) + n
        self.ctx.count("calls", 20)
        return True

    def probe(self) -> str:
        """The target answers the driver within 5 s (the driver's calls cross no worker node's
        failure knob): it is alive and serving, whatever the knob does to the caller's calls."""
        import ray

        return f"the target answers: {ray.get(self.target.count.remote(), timeout=5.0)} runs so far"

    def invariants(self) -> list[Verdict]:
        import ray

        runs = ray.get(self.target.count.remote(), timeout=CALL_TIMEOUT)
        summary = f"{self.calls} calls, {self.ok} right values, {runs} runs, errors {self.errors or 'none'}"
        return [Verdict.over("results_correct", self.calls, held=self.ok == self.calls, detail=summary),
                Verdict.of("retried_deliveries_seen", runs > self.calls, summary),
                Verdict.of("errors_surface", bool(self.errors.get(UNAVAILABLE)), summary),
                Verdict.over("no_hang", self.calls + bool(self.hung), held=not self.hung, detail=self.hung or summary)]

    def teardown(self) -> None:
        import ray

        ray.kill(self.target)
        ray.kill(self.caller)
