"""Exceptions propagate through ray.get and ray.wait as a pure-Python oracle predicts, and no
task hangs silently at max_retries=0: generated task graphs with failure plans, on real Ray."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import ray
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from ray import cloudpickle
from ray.exceptions import (
    ActorDiedError,
    ActorUnavailableError,
    GetTimeoutError,
    RayTaskError,
    TaskCancelledError,
    WorkerCrashedError,
)

from chaos import ClusterHandle, HangError, wait_until, watch

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/

DEADLINE = 60.0


class CustomError(Exception):
    """A user exception of the test's own."""


class FinalError(Exception):
    """A user exception that cannot be subclassed: Ray cannot build RayTaskError(FinalError)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        raise TypeError("FinalError is final")


FAILS = {"value_error": ValueError, "custom": CustomError, "final": FinalError}
# Plans that hold their node back until the driver acts: they depend on nothing, so what the
# driver does (cancel, or release after a timed-out get) is the only thing that decides them.
HELD = ("cancel", "cancel_force", "slow")
ACTOR = ("actor_exit", "actor_flaky_exit")


@dataclass(frozen=True)
class Node:
    """One task or actor call: what it does, what it depends on, and its retry settings."""

    # ok | value_error | custom | final | crash | flaky_raise | flaky_crash    (tasks)
    # actor_exit | actor_flaky_exit      (a call whose actor's process exits in it)
    # cancel | cancel_force              (ray.cancel while it runs, force=False / True)
    # slow                               (runs until released: a ray.get with a timeout first)
    kind: str
    deps: tuple[int, ...]
    max_retries: int  # tasks' max_retries; for actor calls, max_task_retries
    retry_exceptions: Any  # False | True | [ValueError]


@ray.remote
def run_node(index: int, kind: str, marker: str, *deps: Any) -> int:
    first_attempt = not os.path.exists(marker)
    Path(marker).touch()
    if kind in FAILS:
        raise FAILS[kind](f"node {index}")
    if kind == "crash" or (kind == "flaky_crash" and first_attempt):
        os._exit(1)
    if kind == "flaky_raise" and first_attempt:
        raise ValueError(f"node {index}, first attempt")
    if kind in HELD:  # polls, so that a cancel without force (a KeyboardInterrupt) lands
        wait_until(lambda: os.path.exists(marker + ".release"), timeout=DEADLINE, interval=0.01,
                   what=f"node {index} to be released")
    return index + sum(deps)


@ray.remote
class Host:
    """One actor per actor node; its process exits inside the call (always, or first time)."""

    def run(self, index: int, kind: str, marker: str, *deps: Any) -> int:
        first_attempt = not os.path.exists(marker)
        Path(marker).touch()
        if kind == "actor_exit" or first_attempt:
            os._exit(1)
        return index + sum(deps)


def submit(node: Node, index: int, marker: str, deps: list[Any]) -> Any:
    if node.kind in ACTOR:  # actor_exit: no restarts; actor_flaky_exit: one restart
        restarts = 0 if node.kind == "actor_exit" else 1
        host = Host.options(max_restarts=restarts, max_task_retries=node.max_retries).remote()
        return host.run.remote(index, node.kind, marker, *deps)
    task = run_node.options(max_retries=node.max_retries, retry_exceptions=node.retry_exceptions,
                            num_cpus=0 if node.kind in HELD else 1)
    return task.remote(index, node.kind, marker, *deps)


def failure(node: Node) -> frozenset | None:
    """The exception types a node's own plan ends in (None: it returns its value)."""
    retried = node.max_retries > 0
    if node.kind in FAILS:
        return frozenset({FAILS[node.kind]})
    if node.kind == "crash" or (node.kind == "flaky_crash" and not retried):
        return frozenset({WorkerCrashedError})
    if node.kind == "flaky_raise" and not (retried and node.retry_exceptions):
        return frozenset({ValueError})
    if node.kind == "actor_exit":
        return frozenset({ActorDiedError})
    if node.kind == "actor_flaky_exit" and not retried:  # restarted, but the call not retried
        return frozenset({ActorUnavailableError})
    if node.kind in ("cancel", "cancel_force"):
        return frozenset({TaskCancelledError})
    return None


def oracle(nodes: list[Node]) -> tuple[list[Any], list[bool]]:
    """Each node's outcome (its int value, or the exception types it may raise), and whether
    it is held back by a ``slow`` node (so a ray.get with a short timeout raises first)."""
    out: list[Any] = []
    held: list[bool] = []
    for i, node in enumerate(nodes):
        failed = [out[d] for d in node.deps if isinstance(out[d], frozenset)]
        own = failure(node)
        if failed:
            out.append(frozenset().union(*failed))  # a dependency's failure, unchanged
        else:
            out.append(own if own is not None else i + sum(out[d] for d in node.deps))
        held.append(node.kind == "slow" or any(held[d] for d in node.deps))
    return out, held


@st.composite
def graphs(draw: Any) -> list[Node]:
    n = draw(st.integers(1, 5))
    kinds = st.sampled_from(["ok", "ok", "value_error", "custom", "final", "crash", "flaky_raise",
                             "flaky_crash", *ACTOR, *HELD])
    nodes = []
    for i in range(n):
        kind = draw(kinds)
        deps = () if kind in HELD or not i else tuple(draw(st.sets(st.integers(0, i - 1), max_size=2)))
        nodes.append(Node(kind, deps, draw(st.integers(0, 1)),
                          draw(st.sampled_from([False, True, [ValueError]]))))
    return nodes


def raises_as_predicted(error: BaseException, allowed: frozenset) -> bool:
    cause = error.cause if isinstance(error, RayTaskError) else error
    if not any(isinstance(cause, t) for t in allowed):
        return False
    # The type is kept: as the dual RayTaskError(X) type whenever X can be subclassed, and
    # always as .cause.
    return isinstance(cause, FinalError) or isinstance(error, type(cause))


def hold_then_release(refs: list[Any], nodes: list[Node], held: list[bool], root: Path) -> None:
    """Cancel the cancel nodes; show that held refs time out, while ray.wait reports every
    other one ready (failed ones too, never hidden); then release the slow nodes."""
    for ref, node in zip(refs, nodes):
        if node.kind in ("cancel", "cancel_force"):
            ray.cancel(ref, force=node.kind == "cancel_force")
    free = [r for r, h in zip(refs, held) if not h]
    ready, pending = ray.wait(free, num_returns=len(free), timeout=DEADLINE)
    assert not pending and len(ready) == len(free)
    for ref in (r for r, h in zip(refs, held) if h):
        with pytest.raises(GetTimeoutError):
            ray.get(ref, timeout=0.2)
        assert ray.wait([ref], timeout=0)[0] == []
    for i, node in enumerate(nodes):
        if node.kind in HELD:
            (root / f"n{i}.release").touch()


# Every plan runs in every CI run, whatever the generated graphs: a held node next to a
# failing one under a shared dependent, a cancelled one with a dependent, and every actor plan.
@example(nodes=[Node("slow", (), 0, False), Node("value_error", (), 0, False),
                Node("ok", (0, 1), 0, False), Node("cancel", (), 0, False), Node("ok", (3,), 0, False)])
@example(nodes=[Node("actor_exit", (), 0, False), Node("actor_flaky_exit", (), 1, False),
                Node("actor_flaky_exit", (), 0, False), Node("cancel_force", (), 1, False),
                Node("final", (1,), 0, False)])
@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(nodes=graphs())
def test_failures_propagate_as_predicted(ray_cluster: ClusterHandle, tmp_path_factory: Any,
                                         nodes: list[Node]) -> None:
    root = tmp_path_factory.mktemp("markers")
    refs: list[Any] = []
    for kind in sorted({node.kind for node in nodes}):
        event(kind)  # --hypothesis-show-statistics: how often each plan ran
    for i, node in enumerate(nodes):
        refs.append(submit(node, i, str(root / f"n{i}"), [refs[d] for d in node.deps]))
    outcomes, held = oracle(nodes)
    hold_then_release(refs, nodes, held, root)
    ready, pending = ray.wait(refs, num_returns=len(refs), timeout=DEADLINE)
    assert not pending and len(ready) == len(refs)  # failed refs are ready, never hidden
    for ref, predicted in zip(refs, outcomes):
        if isinstance(predicted, frozenset):
            with pytest.raises(Exception) as excinfo:
                ray.get(ref, timeout=DEADLINE)
            assert raises_as_predicted(excinfo.value, predicted), (excinfo.value, predicted)
        else:
            assert ray.get(ref, timeout=DEADLINE) == predicted  # siblings stay retrievable


@settings(max_examples=6, deadline=None, suppress_health_check=list(HealthCheck))
@given(kinds=st.lists(st.sampled_from(["ok", "crash", "value_error", "infeasible"]), min_size=1,
                      max_size=5))
def test_nothing_hangs_silently_at_max_retries_zero(ray_cluster: ClusterHandle,
                                                    tmp_path_factory: Any, kinds: list[str]) -> None:
    root = tmp_path_factory.mktemp("markers")
    refs = []
    for i, kind in enumerate(kinds):
        options: dict[str, Any] = {"max_retries": 0}
        if kind == "infeasible":
            options["num_cpus"] = 64
        refs.append(run_node.options(**options).remote(i, "ok" if kind == "infeasible" else kind,
                                                        str(root / f"n{i}")))
    report = watch(refs, deadline=5.0, address=ray_cluster.address, raise_on_hang=False)
    stuck = {s.task_id for s in report.stuck}
    if "infeasible" in kinds:  # the failing form of the same wait raises, naming the cause
        with pytest.raises(HangError, match="infeasible resource request"):
            watch(refs, deadline=0.5, address=ray_cluster.address)
    for ref, kind in zip(refs, kinds):
        if kind == "infeasible":  # the only way to hang here, and it is named
            cause = next(s.cause for s in report.stuck if s.task_id == ref.task_id().hex())
            assert cause.startswith("infeasible resource request")
            ray.cancel(ref)
        else:
            assert ref.task_id().hex() not in stuck
