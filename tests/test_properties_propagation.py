"""Exceptions propagate through ray.get and ray.wait as a pure-Python oracle predicts, and no
task hangs silently at max_retries=0: generated task graphs with failure plans, on real Ray."""

from __future__ import annotations

import os
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import ray
from hypothesis import event, example, given
from hypothesis import strategies as st
from ray import cloudpickle
from ray.exceptions import (
    ActorDiedError,
    ActorUnavailableError,
    GetTimeoutError,
    OwnerDiedError,
    RayTaskError,
    TaskCancelledError,
    WorkerCrashedError,
)

from chaos import ActorTarget, Chaos, HangError, Kill, Pause, TaskTarget, wait_until, watch
from chaos.cluster import ClusterHandle
from chaos.engine import StuckCause
from conftest import scaled

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/

DEADLINE = 60.0
#: How long after ray.cancel a cancelled task may still be running before its cancel is lost.
CANCEL_GRACE = 10.0


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


def oracle(nodes: list[Node], observed: dict[int, Any] | None = None) -> tuple[list[Any], list[bool]]:
    """Each node's outcome (its int value, or the exception types it may raise), and whether
    it is held back by a ``slow`` node (so a ray.get with a short timeout raises first).
    ``observed``: nodes whose outcome Ray decided by a race, as it turned out (a lost cancel)."""
    out: list[Any] = []
    held: list[bool] = []
    for i, node in enumerate(nodes):
        failed = [out[d] for d in node.deps if isinstance(out[d], frozenset)]
        own = failure(node)
        if observed and i in observed:
            out.append(observed[i])
        elif failed:
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


def stuck_report(pending: list[Any], refs: list[Any], nodes: list[Node], root: Path) -> str:
    """Evidence for a ref left pending: its node, whether its Python code started (its marker),
    and what the State API says of its task."""
    from ray.util.state import list_tasks

    lines = []
    for ref in pending:
        i = refs.index(ref)
        rows = list_tasks(address=ray.get_runtime_context().gcs_address, detail=True, timeout=10,
                          filters=[("task_id", "=", ref.task_id().hex())],
                          raise_on_missing_output=False)
        states = [(t.attempt_number, t.state, t.worker_pid, (t.error_type or "")) for t in rows]
        lines.append(f"node {i} {nodes[i]}: started={os.path.exists(root / f'n{i}')} tasks={states}")
    return "pending after the cancels:\n" + "\n".join(lines)


def cancel_and_find_lost(refs: list[Any], nodes: list[Node], root: Path) -> dict[int, Any]:
    """Cancel the cancel nodes at once, as a user would. Ray 2.60 can lose such a cancel on a
    busy machine (README, "What the properties found"; findings/cancel_lost_under_load.py): the
    task runs on. Such a node must be named CANCEL_LOST by the watchdog; it is then released
    and its outcome observed. Returns those outcomes by node index."""
    victims = {i: ref for i, (ref, node) in enumerate(zip(refs, nodes)) if node.kind in ("cancel", "cancel_force")}
    for i, ref in victims.items():
        ray.cancel(ref, force=nodes[i].kind == "cancel_force")
    if not victims:
        return {}
    report = watch(list(victims.values()), deadline=CANCEL_GRACE, raise_on_hang=False,
                   address=ray.get_runtime_context().gcs_address, cancelled=list(victims.values()))
    assert all(s.kind is StuckCause.CANCEL_LOST for s in report.stuck), report.message(CANCEL_GRACE)
    lost = [i for i, ref in victims.items() if ref.task_id().hex() in {s.task_id for s in report.stuck}]
    for i in lost:
        event("ray.cancel lost: the task ran on (Ray 2.60)")
        (root / f"n{i}.release").touch()
    return {i: observed(refs[i]) for i in lost}


def observed(ref: Any) -> Any:
    """The value of a task whose cancel was lost, or TaskCancelledError if it landed late."""
    try:
        return ray.get(ref, timeout=DEADLINE)
    except TaskCancelledError:
        return frozenset({TaskCancelledError})


def hold_then_release(refs: list[Any], nodes: list[Node], held: list[bool], root: Path) -> None:
    """Show that held refs time out, while ray.wait reports every other one ready (failed ones
    too, never hidden); then release the slow nodes."""
    free = [r for r, h in zip(refs, held) if not h]
    ready, pending = ray.wait(free, num_returns=len(free), timeout=DEADLINE)
    assert not pending and len(ready) == len(free), stuck_report(pending, refs, nodes, root)
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
@pytest.mark.property
@pytest.mark.slow  # make test's budget (42 s there on a slow day): the max_retries=0 property stays
@scaled(10)
@given(nodes=graphs())
def test_failures_propagate_as_predicted(ray_cluster: ClusterHandle, tmp_path_factory: Any,
                                         nodes: list[Node]) -> None:
    root = tmp_path_factory.mktemp("markers")
    refs: list[Any] = []
    for kind in sorted({node.kind for node in nodes}):
        event(kind)  # --hypothesis-show-statistics: how often each plan ran
    for i, node in enumerate(nodes):
        refs.append(submit(node, i, str(root / f"n{i}"), [refs[d] for d in node.deps]))
    outcomes, held = oracle(nodes, cancel_and_find_lost(refs, nodes, root))
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


# -- no silent hang at max_retries=0 -----------------------------------------------------------
# Each generated plan is a fault schedule on tasks that are never retried:
#   ok, crash, value_error  — end at once (value, WorkerCrashedError, ValueError)
#   infeasible              — asks for more CPUs than any node has: pending for ever
#   straggler               — a task whose worker is SIGSTOPped, with a dependent waiting on it
#   owner_killed            — an object owned by an actor that is SIGKILLed, with a dependent
# While the faults are on, every ref resolves or the watchdog names its cause; once healed,
# every one but the infeasible ends, in its value or its predicted exception.

# Owner death takes Ray about a second to notice; a paused or infeasible task is stuck for good.
WATCH = 5.0


@ray.remote(max_retries=0)
def add_one(value: Any) -> Any:
    return value + 1 if isinstance(value, int) else int(value[0]) + 1


@ray.remote
class Owner:
    def make(self, index: int) -> list[Any]:
        # Large enough for the shared-memory store: small objects are inlined into replies.
        return [ray.put(np.full(200_000, index))]


@dataclass
class Plan:
    """The refs of one node (its own, and a dependent's when it has one) and what to expect."""

    kind: str
    refs: list[Any]
    handle: Any = None


def start(kind: str, index: int, root: Path) -> Plan:
    marker = str(root / f"n{index}")
    if kind == "infeasible":
        return Plan(kind, [run_node.options(max_retries=0, num_cpus=64).remote(index, "ok", marker)])
    if kind == "straggler":
        held = run_node.options(max_retries=0, num_cpus=0, name=straggler(index, root)).remote(
            index, "slow", marker)
        return Plan(kind, [held, add_one.remote(held)])
    if kind == "owner_killed":
        owner = Owner.options(max_restarts=0, num_cpus=0).remote()
        (obj,) = ray.get(owner.make.remote(index), timeout=DEADLINE)
        return Plan(kind, [obj, add_one.remote(obj)], owner)
    return Plan(kind, [run_node.options(max_retries=0).remote(index, kind, marker)])


def straggler(index: int, root: Path) -> str:
    """A name no earlier example used: the State API may still list an old task as running."""
    return f"straggler-{root.name}-{index}"


def running(name: str, address: str) -> bool:
    from ray.util.state import list_tasks

    rows = list_tasks(address=address, filters=[("name", "=", name)], detail=True, timeout=10)
    return any(t.state == "RUNNING" and t.worker_pid for t in rows)


def inject(plans: list[Plan], chaos: Any, stack: ExitStack, root: Path, address: str) -> None:
    for i, plan in enumerate(plans):
        if plan.kind == "straggler":
            name = straggler(i, root)
            wait_until(lambda: running(name, address), timeout=DEADLINE, what=f"{name} to run")
            stack.enter_context(chaos.inject(Pause(TaskTarget(name), seconds=DEADLINE)))
        elif plan.kind == "owner_killed":
            chaos.kill(Kill(ActorTarget.of(plan.handle)))


def explained(stuck: Any, plans: list[Plan]) -> bool:
    """Is this stuck ref one the faults hold back, and does the watchdog name why?"""
    kind = next(p.kind for p in plans if any(r.task_id().hex() == stuck.task_id for r in p.refs))
    if kind == "infeasible":
        return stuck.kind is StuckCause.INFEASIBLE
    if kind == "straggler":
        return stuck.kind in (StuckCause.PAUSED, StuckCause.DEPENDENCY)
    # Ray's wait can leave a dead owner's object out of `ready`: then it must be named. The
    # watchdog names the owner's death one of two ways, by when it reads the State API: the
    # object failed, or the task that made it belongs to an actor now DEAD (a fresh clone saw
    # the second: "Owner.make: FINISHED, its actor Owner is DEAD").
    return kind == "owner_killed" and stuck.kind in (StuckCause.FAILED_OBJECT, StuckCause.ACTOR_UNAVAILABLE)


def check_outcome(plan: Plan, index: int) -> None:
    if plan.kind == "ok":
        assert ray.get(plan.refs[0], timeout=DEADLINE) == index
    elif plan.kind in ("crash", "value_error"):
        with pytest.raises(WorkerCrashedError if plan.kind == "crash" else ValueError):
            ray.get(plan.refs[0], timeout=DEADLINE)
    elif plan.kind == "straggler":
        assert ray.get(plan.refs, timeout=DEADLINE) == [index, index + 1]
    elif plan.kind == "owner_killed":  # its copy may still be local; else OwnerDiedError
        for ref in plan.refs:
            try:
                ray.get(ref, timeout=DEADLINE)
            except OwnerDiedError:
                pass


@example(kinds=["straggler", "owner_killed", "infeasible", "ok"])  # every hard case, every run
@pytest.mark.property
@pytest.mark.slow  # 27 s: make test's 10-minute budget
@scaled(4)
@given(kinds=st.lists(st.sampled_from(["ok", "crash", "value_error", "infeasible", "straggler",
                                       "owner_killed"]), min_size=1, max_size=4))
def test_nothing_hangs_silently_at_max_retries_zero(ray_cluster: ClusterHandle,
                                                    tmp_path_factory: Any, kinds: list[str]) -> None:
    root = tmp_path_factory.mktemp("markers")
    chaos = Chaos(address=ray_cluster.address)
    plans = [start(kind, i, root) for i, kind in enumerate(kinds)]
    refs = [r for p in plans for r in p.refs]
    with ExitStack() as faults:
        inject(plans, chaos, faults, root, ray_cluster.address)
        for i, plan in enumerate(plans):  # a straggler is done as soon as it runs again
            if plan.kind == "straggler":
                (root / f"n{i}.release").touch()
        report = watch(refs, deadline=WATCH, address=ray_cluster.address, raise_on_hang=False)
        unexplained = [s for s in report.stuck if not explained(s, plans)]
        assert not unexplained, report.message(WATCH)
    # Healed: everything ends (a dead owner's object is checked by ray.get, see above).
    live = [r for p in plans if p.kind not in ("infeasible", "owner_killed") for r in p.refs]
    watch(live, deadline=DEADLINE, address=ray_cluster.address)
    for i, plan in enumerate(plans):
        if plan.kind == "infeasible":  # the only way to hang here, and it is named
            with pytest.raises(HangError, match="infeasible resource request"):
                watch(plan.refs, deadline=0.5, address=ray_cluster.address)
            ray.cancel(plan.refs[0])
        else:
            check_outcome(plan, i)
