"""The hunt's node faults on a cluster of its own (a head, one removable node, and one node whose
processes fail RPCs): a task pinned to the removable node is held running until the node is
removed, a replacement joins at once, and the program keeps to the oracle (NodeDiedError
without retries, the value with them); a return whose only copy was there is rebuilt; what runs
on the node failing RPCs returns every value."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from chaos.cluster import ClusterHandle
from chaos.errors import FaultIneffective
from scenarios.hunt import (
    Actor,
    Arg,
    Call,
    ErrorKind,
    Fault,
    FaultKind,
    Naming,
    Program,
    Put,
    Seen,
    Stream,
    Task,
    Wait,
    run_program,
)
from scenarios.hunt._fleet import HuntSetup, hunt_cluster
from scenarios.hunt._model import BEYOND, LATE_REPLACEMENT
from scenarios.hunt._run import NODE_BOUND, NODE_STORE, Interpreter

# make slow lands each node fault kind once (one case of each: a plant that marks any of them
# missed is red in CI); make deep runs every case.
pytestmark = [pytest.mark.ray, pytest.mark.slow]
DEEP = pytest.mark.deep


def removal(retries: int) -> Program:
    """A removed task (boxed: the ref it put dies with its node) read by a borrower, a task
    beside it and a wait; then the head's steps go on."""
    return Program((Put(1), Task(2, (Arg(0),), max_retries=retries, boxed=True), Task(3, (Arg(1, nested=True),)),
                    Task(4, (Arg(0),)), Wait((1, 2, 3), 3, None)),
                   (Fault(FaultKind.NODE_REMOVAL, 1, 3),))


@pytest.fixture(scope="module")
def removable(no_shared_cluster: None) -> Iterator[ClusterHandle]:
    """The hunt's cluster: a head, one removable node (a smaller store), one failing RPCs and one
    delaying them; the GCS keeps its tables on a Redis of its own."""
    with hunt_cluster(HuntSetup()) as handle:
        yield handle


@pytest.mark.parametrize("retries", [pytest.param(0, marks=DEEP), 1], ids=["no-retries", "a-retry"])
def test_a_node_removal_lands_and_keeps_to_the_oracle(removable: ClusterHandle, retries: int) -> None:
    program = removal(retries)
    verdict = run_program(program, address=removable.address, cluster=removable.cluster)
    assert not verdict.new, verdict.report()
    assert list(verdict.landed) == list(program.faults), f"faults missed: {verdict.missed}"


@pytest.mark.parametrize("restarts", [pytest.param(0, marks=DEEP), -1], ids=["dies", "restarts-late"])
def test_the_removal_of_an_actors_node_lands_and_keeps_to_the_oracle(removable: ClusterHandle, restarts: int) -> None:
    """A named actor on the removable node, a call held in flight there and one queued behind it,
    a boxed call's ref it owns: the node goes, and its replacement joins only
    ``LATE_REPLACEMENT`` seconds later; without restarts every call raises, with them the actor's
    restart waits for the replacement, runs there, and the calls return their values."""
    program = Program((Put(1), Actor(2, (Arg(0),), restarts, -1, Naming.NAMED), Call(1, 3, boxed=True),
                       Call(1, 4), Call(1, 5), Task(6, (Arg(0),))),
                      (Fault(FaultKind.ACTOR_NODE_REMOVAL, 3, 4, replace_after=LATE_REPLACEMENT),))
    verdict = run_program(program, address=removable.address, cluster=removable.cluster)
    assert not verdict.new, verdict.report()
    assert list(verdict.landed) == list(program.faults), f"faults missed: {verdict.missed}"
    assert restarts == 0 or verdict.ok, verdict.report()


def test_two_gcs_restarts_with_work_in_flight_land_and_change_no_outcome(removable: ClusterHandle) -> None:
    """The GCS killed and started again while a task, an actor's calls and a stream run, before
    an actor is created and a named one looked up, and again once that actor's call is in
    flight: every value as without the restarts."""
    program = Program((Put(1), Actor(2, (Arg(0),), 1, -1), Call(1, 3), Task(4, (Arg(0),), boxed=True),
                       Actor(5, (Arg(3, nested=True),), 0, 0, Naming.NAMED), Call(4, 6), Wait((2, 3, 5), 3, None)),
                      (Fault(FaultKind.GCS_RESTART, 2, 3), Fault(FaultKind.GCS_RESTART, 5, 5)))
    verdict = run_program(program, address=removable.address, cluster=removable.cluster, gcs_restart=True)
    assert list(verdict.landed) == list(program.faults), f"faults missed: {verdict.missed}"
    assert not verdict.failures, verdict.report()


def test_an_actor_another_job_made_outlives_that_job_a_restart_and_two_gcs_restarts(removable: ClusterHandle) -> None:
    """A second driver job makes a detached actor and ends; the GCS restarts, the actor is
    SIGKILLed and restarts (its maker's job long gone), the GCS restarts again with a call in
    flight: every call returns its value. Ray's own records show the actor was another job's,
    and that job ended."""
    from ray.util.state import list_actors, list_jobs

    program = Program((Actor(1, max_restarts=-1, max_task_retries=-1, naming=Naming.DETACHED, by_job=True),
                       Call(0, 2), Call(0, 3), Call(0, 4)),
                      (Fault(FaultKind.GCS_RESTART, 0, 0), Fault(FaultKind.KILL_ACTOR, 2, 2),
                       Fault(FaultKind.GCS_RESTART, 3, 3)))
    verdict = run_program(program, address=removable.address, cluster=removable.cluster, gcs_restart=True)
    assert list(verdict.landed) == list(program.faults), f"faults missed: {verdict.missed}"
    assert not verdict.failures, verdict.report()
    import ray

    ours = ray.get_runtime_context().get_job_id()
    made = [a for a in list_actors(address=removable.address, filters=[("class_name", "=", "HuntActor")], limit=10_000)
            if a.name and a.name.endswith("-0") and a.job_id != ours]
    ended = {j.job_id for j in list_jobs(address=removable.address) if j.status == "SUCCEEDED"}
    assert made and made[-1].job_id in ended, (made, ended)


class AtHome(Interpreter):
    """A planted placement bug: every step runs on the head, an away task's too."""

    def placement(self, index: int) -> dict[str, float]:
        return {"rc_head": 0.001}


def test_an_away_task_takes_and_makes_values_bigger_than_its_nodes_store(removable: ClusterHandle) -> None:
    """A put bigger than the removable node's store (75 MiB) is the argument of a task there,
    another task there returns a value as big, read by a task on the head: every value comes back,
    and the run saw each task run there. A third returns nothing (its first attempt raises, no
    retry): not counted. Placed on the head instead (a plant), the run counts none of them."""
    program = Program((Put(1, size=BEYOND), Task(2, (Arg(0),), away=True), Task(3, away=True, size=BEYOND),
                       Task(4, away=True, size=BEYOND, flaky=True), Task(5, (Arg(2),))))
    verdict = run_program(program, address=removable.address, cluster=removable.cluster)
    assert verdict.ok and verdict.beyond == (1, 2), verdict.report()
    planted = AtHome(program=program, address=removable.address, cluster=removable.cluster).run()
    assert planted.ok and planted.beyond == (), planted.report()


@pytest.mark.parametrize("retries", [pytest.param(0, marks=DEEP), 1], ids=["no-retries", "a-retry"])
def test_the_removal_of_the_node_holding_a_return_lands_and_keeps_to_the_oracle(
        removable: ClusterHandle, retries: int) -> None:
    """A finished task's big return, its only copy on the removable node, then the node goes:
    with a retry left lineage reconstruction runs the task again (every value, exactly); without,
    the get may raise ObjectLostError, and its borrower with it."""
    program = Program((Put(1), Task(2, (Arg(0),), max_retries=retries), Task(3, (Arg(1, nested=True),))),
                      (Fault(FaultKind.OBJECT_NODE_REMOVAL, 1, 1),))
    interpreter = Interpreter(program, removable.address, cluster=removable.cluster)
    verdict = interpreter.run()
    assert list(verdict.landed) == list(program.faults), f"faults missed: {verdict.missed}"
    assert not verdict.failures, verdict.report()
    lost = [i for i, seen in interpreter.seen.items() if getattr(seen, "error", None) is ErrorKind.OBJECT_LOST]
    assert lost == ([] if retries else [1, 2]), interpreter.seen  # the only copy went: rebuilt, or lost for good


#: Runs of a victim its fault has to land in: whether a call made for the victim fails is chance
#: (each victim below landed it in 5 runs of 5; a task with one borrowed ref and a put, counting
#: its own process's calls only, in 2 of 6: Ray 2.60, 2026-12-05, this machine), and a run where
#: none did tested nothing.
TRIES = 3
RPC_VICTIMS = {
    # Refs borrowed from the driver, two of them values it holds (each asked of it: GetObjectStatus),
    # one in its store (moved by the node's raylet: Pull), and a ref it puts (pinned: PinObjectIDs).
    "task": Program((Put(1), Task(2), Task(3), Task(4, (Arg(0, nested=True), Arg(1, nested=True), Arg(2, nested=True)),
                                                   boxed=True), Task(5, (Arg(3),))),
                    (Fault(FaultKind.RPC_FAILURES, 3, 3),)),
    # Each item is reported back by a call of the stream's own (ReportGeneratorItemReturns), a
    # share of them failed: with 20, the fault lands but for 0.7 ** 20 (1 in 1,250) of runs.
    "stream": Program((Put(1), Task(2, (Arg(0),)), Stream(3, 20, 20, (Arg(1, nested=True),))),
                      (Fault(FaultKind.RPC_FAILURES, 2, 2),)),
    # Each call borrows a ref (its worker asks the owner about it): RPCs of its own to fail.
    "actor": Program((Put(1), Actor(2, (Arg(0, nested=True),), 1, -1), Call(1, 3, (Arg(0, nested=True),), boxed=True),
                      Call(1, 4, (Arg(0, nested=True),)), Call(1, 5, (Arg(0, nested=True),)), Task(5, (Arg(2),))),
                     (Fault(FaultKind.RPC_FAILURES, 1, 1),)),
}


@pytest.mark.parametrize("victim", [v if v == "stream" else pytest.param(v, marks=DEEP) for v in RPC_VICTIMS])
def test_what_runs_on_the_node_failing_rpcs_returns_every_value(removable: ClusterHandle, victim: str) -> None:
    """A borrowed ref and a boxed return, a stream's items reported back, an actor's calls: the
    node's processes fail a share of their RPCs all along; Ray retries, and nothing changes."""
    program = RPC_VICTIMS[victim]
    for _ in range(TRIES):
        verdict = run_program(program, address=removable.address, cluster=removable.cluster, rpc_failures=True)
        assert not verdict.failures, verdict.report()
        if verdict.landed:
            break
    assert list(verdict.landed) == list(program.faults), f"no call of the victim's own failed in {TRIES} runs"


#: A removal's victim pinned to the removable node by node affinity (soft=False): its retry, its
#: restart, its lost return's reconstruction each has no node to go to once the node is removed.
PINNED = {
    "task": Program((Put(1), Task(2, (Arg(0),), max_retries=1), Task(3, (Arg(1, nested=True),))),
                    (Fault(FaultKind.NODE_REMOVAL, 1, 2, pinned=True),)),
    "actor": Program((Actor(2, max_restarts=1, max_task_retries=-1), Call(0, 3), Call(0, 4)),
                     (Fault(FaultKind.ACTOR_NODE_REMOVAL, 1, 2, pinned=True),)),
    "return": Program((Put(1), Task(2, (Arg(0),), max_retries=1), Task(3, (Arg(1, nested=True),))),
                      (Fault(FaultKind.OBJECT_NODE_REMOVAL, 1, 1, pinned=True),)),
    "stream": Program((Put(1), Stream(2, 3, 2, (Arg(0),), max_retries=1)),
                      (Fault(FaultKind.OBJECT_NODE_REMOVAL, 1, 1, pinned=True),)),
}


@pytest.mark.parametrize("victim", [v if v == "actor" else pytest.param(v, marks=DEEP) for v in PINNED])
def test_a_removals_victim_pinned_to_its_node_lands_and_has_nowhere_to_go(removable: ClusterHandle,
                                                                          victim: str) -> None:
    """What needs the removed node again raises Ray's unschedulable errors, replacement or not."""
    program = PINNED[victim]
    interpreter = Interpreter(program, removable.address, cluster=removable.cluster)
    verdict = interpreter.run()
    assert list(verdict.landed) == list(program.faults), f"faults missed: {verdict.missed}"
    assert not verdict.failures, verdict.report()
    errors = {getattr(seen, "error", None) for seen in interpreter.seen.values()}
    assert errors & {ErrorKind.TASK_UNSCHEDULABLE, ErrorKind.ACTOR_UNSCHEDULABLE}, interpreter.seen


class Unpinned(Interpreter):
    """A planted placement bug: a pinned victim is not pinned, so its retry runs on the replacement."""

    def where(self, index: int) -> dict[str, Any]:
        return {"resources": self.placement(index)}


def test_a_pinned_task_whose_retry_ran_elsewhere_is_red(removable: ClusterHandle) -> None:
    program = PINNED["task"]
    verdict = Unpinned(program, removable.address, cluster=removable.cluster).run()
    assert list(verdict.landed) == list(program.faults), f"faults missed: {verdict.missed}"
    assert {f.signature.seen for f in verdict.new} == {Seen.VALUE_NOT_ERROR}, verdict.report()


def test_the_loss_of_a_placement_group_bundles_node_lands_and_its_actor_restarts_in_it(
        removable: ClusterHandle) -> None:
    """A restartable actor in its group's one bundle on the removable node, a call held in flight:
    the node goes, its replacement joins late, Ray places the bundle again there and restarts the
    actor in it; every call returns its value (a grouped actor on the head is untouched)."""
    program = Program((Actor(2, max_restarts=1, max_task_retries=-1, grouped=True), Call(0, 3), Call(0, 4),
                       Actor(5, grouped=True), Call(3, 1)),
                      (Fault(FaultKind.ACTOR_NODE_REMOVAL, 1, 2, replace_after=LATE_REPLACEMENT),))
    verdict = run_program(program, address=removable.address, cluster=removable.cluster)
    assert list(verdict.landed) == list(program.faults), f"faults missed: {verdict.missed}"
    assert not verdict.failures, verdict.report()


@pytest.mark.parametrize("kind", [FaultKind.REDIS_CLIENT_KILL, pytest.param(FaultKind.REDIS_IDLE_TIMEOUT, marks=DEEP),
                                  pytest.param(FaultKind.REDIS_RESTART, marks=DEEP)], ids=lambda k: k.value)
def test_a_redis_fault_lands_the_gcs_comes_back_and_no_outcome_changes(removable: ClusterHandle,
                                                                       kind: FaultKind) -> None:
    """The GCS's Redis connections killed, closed once idle, or Redis restarted, with an actor's
    call and a task in flight: the GCS exits, the driver starts it again, every value comes back."""
    program = Program((Put(1), Actor(2, max_restarts=1), Call(1, 3), Task(4, (Arg(0),)), Call(1, 1)),
                      (Fault(kind, 2, 3),))
    verdict = run_program(program, address=removable.address, cluster=removable.cluster, gcs_restart=True)
    assert list(verdict.landed) == list(program.faults), f"faults missed: {verdict.missed}"
    assert not verdict.failures, verdict.report()


#: A stream on the removable node, its items too big to inline: the driver takes three of four
#: as refs, the stream ends, the node goes; the gets rebuild them by running the generator again,
#: which yields one item fewer when non-deterministic.
LOST_STREAM = {
    "rebuilt": Program((Put(1), Stream(2, 4, 3, (Arg(0),), max_retries=1)),
                       (Fault(FaultKind.OBJECT_NODE_REMOVAL, 1, 1),)),
    "replayed-otherwise": Program((Put(1), Stream(2, 4, 4, (Arg(0),), max_retries=1, varying=-1)),
                                  (Fault(FaultKind.OBJECT_NODE_REMOVAL, 1, 1, replace_after=LATE_REPLACEMENT),)),
}


LOST_STREAM["spilled-first"] = Program((Put(1), Stream(2, 4, 3, (Arg(0),), max_retries=1)),
                                       (Fault(FaultKind.OBJECT_NODE_REMOVAL, 1, 1, spilled=True),))


@pytest.mark.parametrize("case", ["rebuilt", pytest.param("replayed-otherwise", marks=DEEP), "spilled-first"])
def test_a_streams_items_lost_with_their_node_land_and_keep_to_the_oracle(removable: ClusterHandle,
                                                                          case: str) -> None:
    program = LOST_STREAM[case]
    interpreter = Interpreter(program, removable.address, cluster=removable.cluster)
    verdict = interpreter.run()
    assert list(verdict.landed) == list(program.faults), f"faults missed: {verdict.missed}"
    assert not verdict.failures, verdict.report()
    want = {"rebuilt": None, "replayed-otherwise": ErrorKind.REPLAY_INCONSISTENT, "spilled-first": None}[case]
    assert getattr(interpreter.seen[1], "error", None) is want, interpreter.seen


class Deterministic(Interpreter):
    """A planted replay bug: the generator is run with the count it had at first, so the replay
    Ray must fail gives every item back."""

    def consume(self, index: int, step: Stream) -> Any:
        return super().consume(index, dataclasses.replace(step, varying=0))


def test_a_lost_streams_replay_that_gave_every_item_back_is_red(removable: ClusterHandle) -> None:
    program = LOST_STREAM["replayed-otherwise"]
    verdict = Deterministic(program, removable.address, cluster=removable.cluster).run()
    assert list(verdict.landed) == list(program.faults), f"faults missed: {verdict.missed}"
    assert {f.signature.seen for f in verdict.new} == {Seen.VALUE_NOT_ERROR}, verdict.report()


@pytest.mark.parametrize("victim", ["actor", pytest.param("stream", marks=DEEP)])
def test_what_runs_on_the_node_delaying_rpcs_lands_and_returns_every_value(removable: ClusterHandle,
                                                                           victim: str) -> None:
    """An actor (a call borrowing the driver's put, a boxed one) or a stream on the node whose
    processes delay every task pushed to them: each value as without the delay."""
    program = {"actor": Program((Put(1), Actor(2, (Arg(0, nested=True),), 1, -1), Call(1, 3, boxed=True),
                                 Call(1, 4, (Arg(0, nested=True),)), Task(5, (Arg(2),))),
                                (Fault(FaultKind.RPC_DELAY, 1, 1),)),
               "stream": Program((Put(1), Stream(3, 4, 4, (Arg(0, nested=True),), size=200 << 10)),
                                 (Fault(FaultKind.RPC_DELAY, 1, 1),))}[victim]
    verdict = run_program(program, address=removable.address, cluster=removable.cluster, rpc_delay=True)
    assert list(verdict.landed) == list(program.faults), f"faults missed: {verdict.missed}"
    assert not verdict.failures, verdict.report()
    missed = run_program(program, address=removable.address, cluster=removable.cluster)  # no slow node: fail closed
    assert list(missed.missed) == list(program.faults) and not missed.landed


@DEEP
def test_a_slow_node_whose_knob_ray_ignores_is_refused(removable: ClusterHandle,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail closed: a knob naming no method Ray delays (misspelt) leaves calls fast, so the node is
    refused with what was measured, rather than RPC delays counted landed on configuration alone."""
    import scenarios.hunt._rpc as rpc

    monkeypatch.setattr(rpc, "DELAY_KNOB", rpc.DELAY_KNOB.replace("PushTask", "PushTasks"))
    monkeypatch.setattr(rpc, "HUNT_SLOW", "hunt_slow_misspelt")  # its probe runs there, not on the cluster's own
    before = {n.node_id for n in removable.cluster.worker_nodes}
    try:
        with pytest.raises(FaultIneffective, match="this Ray does not apply RAY_testing_asio_delay_us"):
            rpc.add_slow_node(removable.cluster, object_store_bytes=NODE_STORE, bound=NODE_BOUND)
    finally:
        for node in [n for n in removable.cluster.worker_nodes if n.node_id not in before]:
            removable.cluster.remove_node(node)
