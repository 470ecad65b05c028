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
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ray import cloudpickle
from ray.exceptions import RayTaskError, WorkerCrashedError

from chaos import ClusterHandle, HangError, watch

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/

DEADLINE = 60.0


class CustomError(Exception):
    """A user exception of the test's own."""


class FinalError(Exception):
    """A user exception that cannot be subclassed: Ray cannot build RayTaskError(FinalError)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        raise TypeError("FinalError is final")


FAILS = {"value_error": ValueError, "custom": CustomError, "final": FinalError}


@dataclass(frozen=True)
class Node:
    """One task: what it does, what it depends on, and its retry settings."""

    kind: str  # ok | value_error | custom | final | crash | flaky_raise | flaky_crash
    deps: tuple[int, ...]
    max_retries: int
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
    return index + sum(deps)


def oracle(nodes: list[Node]) -> list[Any]:
    """Each node's outcome: its int value, or the set of exception types it may raise."""
    out: list[Any] = []
    for i, node in enumerate(nodes):
        failed = [out[d] for d in node.deps if isinstance(out[d], frozenset)]
        if failed:
            out.append(frozenset().union(*failed))  # a dependency's failure, unchanged
        elif node.kind in FAILS:
            out.append(frozenset({FAILS[node.kind]}))
        elif node.kind == "crash" or (node.kind == "flaky_crash" and node.max_retries == 0):
            out.append(frozenset({WorkerCrashedError}))
        elif node.kind == "flaky_raise" and not (node.max_retries and node.retry_exceptions):
            out.append(frozenset({ValueError}))
        else:
            out.append(i + sum(out[d] for d in node.deps))
    return out


@st.composite
def graphs(draw: Any) -> list[Node]:
    n = draw(st.integers(1, 5))
    kinds = st.sampled_from(["ok", "ok", "value_error", "custom", "final", "crash",
                             "flaky_raise", "flaky_crash"])
    return [Node(draw(kinds), tuple(draw(st.sets(st.integers(0, i - 1), max_size=2))) if i else (),
                 draw(st.integers(0, 1)), draw(st.sampled_from([False, True, [ValueError]])))
            for i in range(n)]


def raises_as_predicted(error: BaseException, allowed: frozenset) -> bool:
    if WorkerCrashedError in allowed and isinstance(error, WorkerCrashedError):
        return True
    if not isinstance(error, RayTaskError):
        return False
    # The user's type is kept: as the dual RayTaskError(X) type when X can be subclassed,
    # and always as .cause.
    cause_ok = any(isinstance(error.cause, t) for t in allowed)
    dual_ok = all(isinstance(error, t) for t in allowed if t is not FinalError and
                  isinstance(error.cause, t))
    return cause_ok and dual_ok


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(nodes=graphs())
def test_failures_propagate_as_predicted(ray_cluster: ClusterHandle, tmp_path_factory: Any,
                                         nodes: list[Node]) -> None:
    root = tmp_path_factory.mktemp("markers")
    refs: list[Any] = []
    for i, node in enumerate(nodes):
        task = run_node.options(max_retries=node.max_retries, retry_exceptions=node.retry_exceptions)
        refs.append(task.remote(i, node.kind, str(root / f"n{i}"), *[refs[d] for d in node.deps]))
    ready, pending = ray.wait(refs, num_returns=len(refs), timeout=DEADLINE)
    assert not pending and len(ready) == len(refs)  # failed refs are ready, never hidden
    for ref, predicted in zip(refs, oracle(nodes)):
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
