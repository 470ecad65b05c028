"""Lost objects and lineage reconstruction."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np

from chaos import wait_until
from scenarios.model._records import Verdict
from scenarios.model._workload import CALL_TIMEOUT, Params, Workload
from scenarios.workloads._kit import dead_nodes, worker_nodes

__all__ = ["GetOutcome", "LostObjects", "LostObjectsParams", "Made", "ObjectKind", "Putter", "classify_get_error",
           "combine", "expected_outcome", "objects_verdict", "produce"]

#: Objects this large live in the shared-memory store of the node that made them.
PLASMA_ELEMENTS = 50_000


def produce(i: int) -> np.ndarray:
    return np.full(PLASMA_ELEMENTS, i, dtype=np.int64)


def combine(*parts: np.ndarray) -> np.ndarray:
    """A task output made from its inputs (arrays from ``produce``): its first element is the
    sum of theirs (a module function: Ray's workers import it from here)."""
    return produce(int(sum(int(np.asarray(p)[0]) for p in parts)))


class Putter:
    """Owns the objects it ``ray.put``s: they die with it."""

    def put(self, i: int) -> list[Any]:
        import ray

        return [ray.put(produce(i))]

    def node(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())


class ObjectKind(StrEnum):
    """How an object was made, which decides what its loss does."""

    RETRIED_TASK = "retried_task"  #: a task's output, max_retries > 0: rebuilt from lineage
    ONCE_TASK = "once_task"  #: a task's output, max_retries=0: reconstruction fails
    WORKER_PUT = "worker_put"  #: ray.put by an actor on the node: its owner dies with it


class GetOutcome(StrEnum):
    """How ``ray.get`` of an object ended; an error classified by its type (``isinstance``
    on Ray's exceptions), its value named after the class for the reader."""

    VALUE = "value"
    WRONG_VALUE = "wrong value"
    RECONSTRUCTION_FAILED = "ObjectReconstructionFailedError"
    OWNER_DIED = "OwnerDiedError"
    OTHER_ERROR = "another error"


def classify_get_error(exc: BaseException) -> GetOutcome:
    """The outcome an error of ``ray.get`` stands for (Ray's two are siblings under
    ObjectLostError, so the order of the checks does not matter)."""
    from ray.exceptions import ObjectReconstructionFailedError, OwnerDiedError

    if isinstance(exc, OwnerDiedError):
        return GetOutcome.OWNER_DIED
    if isinstance(exc, ObjectReconstructionFailedError):
        return GetOutcome.RECONSTRUCTION_FAILED
    return GetOutcome.OTHER_ERROR


def expected_outcome(kind: ObjectKind, *, on_dead_node: bool) -> GetOutcome:
    """The oracle: what ``ray.get`` of an object ends in once the node holding its only copy
    died (Ray's documented object fault tolerance: lineage for task outputs with retries left,
    none for ``ray.put``; an object dies with its owner)."""
    if not on_dead_node or kind is ObjectKind.RETRIED_TASK:
        return GetOutcome.VALUE
    if kind is ObjectKind.ONCE_TASK:  # no retries: no reconstruction (Ray 2.60 raises the base class)
        return GetOutcome.RECONSTRUCTION_FAILED
    return GetOutcome.OWNER_DIED


@dataclass(frozen=True, slots=True)
class Made:
    """One object of the lost-objects run: how it was made, the node it lived on (read from
    Ray: the State API's node of the task that made it, or its owner's node), and how
    ``ray.get`` of it ended."""

    kind: ObjectKind
    node: str
    outcome: GetOutcome
    #: The error's type and message when ``ray.get`` raised: for the reader only.
    error: str = ""


def objects_verdict(made: list[Made], dead: set[str]) -> Verdict:
    """``lost_objects_as_predicted``: each object's ``ray.get`` ends as the oracle predicts.
    Only objects that lived on a node that died test the oracle's losses, so every kind must
    have one there; without that evidence the verdict is unknown (or broken, if one was wrong)."""
    wrong = [f"{m.kind.value} on {'the dead' if m.node in dead else 'a live'} node: {m.outcome}"
             f"{f' ({m.error})' if m.error else ''}, "
             f"want {expected_outcome(m.kind, on_dead_node=m.node in dead)}"
             for m in made if m.outcome != expected_outcome(m.kind, on_dead_node=m.node in dead)]
    seen = {str(o): sum(m.outcome == o for m in made) for o in sorted({m.outcome for m in made})}
    hit = {kind: sum(m.kind is kind and m.node in dead for m in made) for kind in ObjectKind}
    missing = [kind.value for kind, n in hit.items() if not n]
    detail = (f"{len(made)} objects, dead nodes {len(dead)}, on them {sum(hit.values())} "
              f"({', '.join(f'{k.value} {n}' for k, n in hit.items())}): {seen}; wrong: {wrong[:3] or 'none'}")
    verdict = Verdict.of("lost_objects_as_predicted", not wrong, detail, seen=len(made))
    return verdict.unless(f"no {', '.join(missing)} object lived on a node that died, so no loss was tested"
                          if missing else None)


class LostObjectsParams(Params):
    per_kind: int = 3


class LostObjects(Workload):
    """Objects made on the worker nodes, nobody holding a second copy; a worker node dies:
    each ``ray.get`` ends as the oracle predicts (rebuilt, or the documented error)."""

    BASELINE = True  # the fault-free twin: every trace of the fault must be missing there
    FAULT_VERDICTS = ("lost_objects_as_predicted",)
    INVARIANTS = ("lost_objects_as_predicted",)
    Params = LostObjectsParams

    def setup(self) -> None:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        self.made: list[tuple[ObjectKind, str, int, Any]] = []
        self.putters: list[Any] = []  # the owners of the put objects: alive unless their node dies
        self.dead_before = dead_nodes(self.ctx.address)  # the cluster's old losses are not this run's
        per = self.ctx.params_as(LostObjectsParams).per_kind
        # A resource, not only the affinity: Ray 2.60 places a request for no resources on any
        # node, soft affinity or not (seen here). Where each object was made is read back below.
        needs = {"num_cpus": 0, "resources": {"worker": 0.01}}
        for node in worker_nodes():
            where = NodeAffinitySchedulingStrategy(node, soft=True)
            putter = ray.remote(max_restarts=0, **needs)(Putter).options(scheduling_strategy=where).remote()
            self.putters.append(putter)
            home = ray.get(putter.node.remote(), timeout=CALL_TIMEOUT)
            for i in range(per):
                for kind, retries in ((ObjectKind.RETRIED_TASK, 3), (ObjectKind.ONCE_TASK, 0)):
                    ref = ray.remote(produce).options(max_retries=retries, scheduling_strategy=where,
                                                      **needs).remote(i)
                    self.made.append((kind, "", i, ref))
                self.made.append((ObjectKind.WORKER_PUT, home, i,
                                  ray.get(putter.put.remote(i), timeout=CALL_TIMEOUT)[0]))
        refs = [m[3] for m in self.made]
        ray.wait(refs, num_returns=len(refs), timeout=CALL_TIMEOUT, fetch_local=False)  # made, not copied
        # Task events reach the State API a moment after the task ends: wait until each is there.
        homes = wait_until(lambda: self._homes(), timeout=CALL_TIMEOUT, interval=0.2,
                           what="the State API to show where each task ran")
        self.made = [(k, node or homes[ref.task_id().hex()], i, ref) for k, node, i, ref in self.made]

    def _homes(self) -> dict[str, str] | None:
        """Where each task's first attempt ran, from the State API; None until all are known."""
        from ray.util.state import list_tasks

        wanted = {ref.task_id().hex() for kind, _, _, ref in self.made if kind is not ObjectKind.WORKER_PUT}
        rows = list_tasks(address=self.ctx.address, filters=[("name", "=", "produce")], limit=10_000,
                          raise_on_missing_output=False, timeout=CALL_TIMEOUT)
        homes = {t.task_id: t.node_id for t in sorted(rows, key=lambda t: -t.attempt_number)
                 if t.task_id in wanted and t.node_id}
        return homes if set(homes) == wanted else None

    def step(self) -> bool:
        self.ctx.count("idle")
        return not self.ctx.stop.wait(0.2) and not self.ctx.faults_settled.is_set()

    def invariants(self) -> list[Verdict]:
        dead = dead_nodes(self.ctx.address) - self.dead_before
        made = [self._outcome(kind, node, ref, i) for kind, node, i, ref in self.made]
        return [objects_verdict(made, dead)]

    def teardown(self) -> None:
        import ray

        for putter in self.putters:
            ray.kill(putter)

    def _outcome(self, kind: ObjectKind, node: str, ref: Any, i: int) -> Made:
        import ray

        try:
            value = ray.get(ref, timeout=CALL_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - the error's type is the outcome
            return Made(kind=kind, node=node, outcome=classify_get_error(exc),
                        error=f"{type(exc).__name__}: {exc}"[:160])
        whole = int(value[0]) == i and len(value) == PLASMA_ELEMENTS
        return Made(kind, node, GetOutcome.VALUE if whole else GetOutcome.WRONG_VALUE)
