"""The built-in workloads' verdicts require their evidence, their probes can fail, and their
errors are judged by type: each check below is shown false on the case it exists for, with
the numbers a real run reports. Ray-free but for the probes' test (marked ``ray``)."""

from __future__ import annotations

import pytest
import ray
from ray.exceptions import (
    ActorUnavailableError,
    GetTimeoutError,
    ObjectLostError,
    ObjectReconstructionFailedError,
    RayActorError,
)
from ray.exceptions import OwnerDiedError as RayOwnerDiedError
from ray.util.state import get_actor

from chaos import wait_until
from chaos.cluster import ClusterHandle
from scenarios import Workload
from scenarios.model._records import Validity, Verdict
from scenarios.model._workload import RunContext
from scenarios.workloads._builtin import (
    blocked_verdict,
    counters_verdict,
    fresh_task_probe,
    loop_bound,
    new_oom_kills,
    owner_death_verdict,
    probe_task,
    task_evidence,
)
from scenarios.workloads._registry import builtin_workloads
from scenarios.workloads.surface._nodes import gone_verdict
from scenarios.workloads.surface._objects import GetOutcome, Made, ObjectKind, classify_get_error, objects_verdict
from scenarios.workloads.surface._rpc import UNAVAILABLE, RpcFailures, RpcParams, Target, call_error_kind

#: Every built-in workload by name (the one registry).
WORKLOADS = builtin_workloads()


def test_the_loop_bound_follows_the_wait_timeout() -> None:
    assert loop_bound(0.5) == 1.0 and loop_bound(0.3, 0.2) == 0.5


def test_a_loop_blocked_through_a_whole_pause_is_blocked() -> None:
    # straggler's numbers: ray.wait timeout 0.5 s, a task paused 4 s, the loop waiting on it.
    verdict = blocked_verdict(20, 4.5, 0.5, None)
    assert not verdict.held and "4.50 s, bound 1 s" in verdict.detail, verdict
    assert blocked_verdict(20, 0.9, 0.5, None).held  # a slow turn, not a block


def test_no_turn_is_no_verdict() -> None:
    verdict = blocked_verdict(0, 0.0, 0.5, None)
    assert not verdict.held and verdict.seen == 0, verdict


def _made(node: str, outcomes: dict[ObjectKind, str] | None = None) -> list[Made]:
    return [Made(kind, node, (outcomes or {}).get(kind, "value")) for kind in ObjectKind]


def test_lost_objects_are_inconclusive_when_none_lived_on_the_dead_node() -> None:
    # A node died, but not the one holding the objects: every get returns its value, as the
    # oracle says of live nodes, and no loss was tested.
    verdict = objects_verdict(_made("a"), {"b"})
    assert verdict.validity is Validity.UNKNOWN and verdict.detail.startswith(
        "unknown: no retried_task, once_task, worker_put object lived on a node that died"), verdict


def test_lost_objects_need_every_kind_on_the_dead_node() -> None:
    lost = {ObjectKind.ONCE_TASK: "ObjectReconstructionFailedError", ObjectKind.WORKER_PUT: "OwnerDiedError"}
    assert objects_verdict([*_made("a"), *_made("b", lost)], {"b"}).held
    partial = [m for m in _made("b", lost) if m.kind is not ObjectKind.WORKER_PUT]
    verdict = objects_verdict([*_made("a"), *partial], {"b"})
    assert verdict.validity is Validity.UNKNOWN and "unknown: no worker_put object" in verdict.detail, verdict
    wrong = objects_verdict(_made("b"), {"b"})  # a once-only task's output came back: not lost
    assert not wrong.held and "once_task on the dead node: value" in wrong.detail, wrong


def test_node_loss_counters_need_one_on_the_dead_node() -> None:
    kept = [Verdict.of("actor_state_recovered", True, "w0: 5 acknowledged", 5),
            Verdict.of("actor_state_recovered", True, "w1: 5 acknowledged", 5)]
    assert counters_verdict(kept, ["a", "b"], {"b"}).held
    missed = counters_verdict(kept, ["a", "b"], {"c"})  # the node that died held neither
    assert missed.validity is Validity.UNKNOWN and missed.detail.startswith("unknown: no counter lived on a node")
    lost = [kept[0], Verdict.of("actor_state_recovered", False, "w1: 1 lost", 5)]
    assert not counters_verdict(lost, ["a", "b"], {"b"}).held
    assert counters_verdict(lost, ["a", "b"], {"c"}).validity is Validity.BROKEN  # a loss seen is a loss


def test_node_loss_task_verdicts_need_an_attempt_on_the_dead_node() -> None:
    clean = Verdict.of("no_error_visible", True, "40 tasks ended; errors seen by the driver: none", 40)
    assert task_evidence(clean, 3) == clean
    missed = task_evidence(clean, 0)
    assert missed.validity is Validity.UNKNOWN and missed.detail.startswith("unknown: no task attempt ran on a node")


# -- steady-state probes: each a check that can fail, or none ---------------------------------


@pytest.mark.parametrize("name", ["train-torch-ddp", "tune-trials", "lost-objects"])
def test_workloads_with_nothing_to_probe_have_no_probe(name: str) -> None:
    # A count of journal records, or of objects made, cannot fail: no probe, said as such.
    assert WORKLOADS[name].probe is Workload.probe


def _context(address: str) -> RunContext:
    return RunContext(address=address, namespace="evidence", seed=0, params=RpcParams(), storage="/tmp/unused",
                      duration=1.0, faults=False)


@pytest.mark.ray
def test_the_built_in_probes_fail_when_what_they_watch_does_not_serve(ray_cluster: ClusterHandle) -> None:
    # rpc-failures: the target is asked directly; once it is dead the probe raises.
    workload = RpcFailures(_context(ray_cluster.address))
    workload.target = ray.remote(num_cpus=0)(Target).remote()
    assert workload.probe() == "the target answers: 0 runs so far"
    ray.kill(workload.target)
    # ray.kill only asks: a call made at once can still be served. The probe is judged on a
    # target the GCS lists dead.
    actor_id = workload.target._actor_id.hex()
    wait_until(lambda: getattr(get_actor(actor_id, address=ray_cluster.address), "state", None) == "DEAD",
               timeout=30, what="the killed target listed dead")
    with pytest.raises(RayActorError):
        workload.probe()
    # sampling, starvation, owner-death: a fresh task that cannot run is a GetTimeoutError.
    assert fresh_task_probe(probe_task()) == "a fresh task answered (63)"
    with pytest.raises(GetTimeoutError):
        fresh_task_probe(probe_task({"no-such-resource": 1.0}), timeout=1.0)


# -- errors decided by their type, never by their class's name ----------------------------------

_REF = "ab" * 14  # an object ref's hex, for Ray's exceptions' constructors


class RenamedOwnerDied(RayOwnerDiedError):
    """Ray's error under another class name (a subclass, as a later Ray may add)."""


class OwnerDiedError(ObjectLostError):
    """Not Ray's OwnerDiedError, only its name."""


def test_get_errors_are_classified_by_type() -> None:
    assert classify_get_error(RayOwnerDiedError(_REF, "", "")) is GetOutcome.OWNER_DIED
    assert classify_get_error(RenamedOwnerDied(_REF, "", "")) is GetOutcome.OWNER_DIED
    assert classify_get_error(ObjectReconstructionFailedError(_REF, "", "")) is GetOutcome.RECONSTRUCTION_FAILED
    assert classify_get_error(OwnerDiedError(_REF, "", "")) is GetOutcome.OTHER_ERROR
    assert classify_get_error(ObjectLostError(_REF, "", "")) is GetOutcome.OTHER_ERROR


def test_owner_death_is_judged_by_the_errors_type() -> None:
    assert owner_death_verdict([RenamedOwnerDied(_REF, "", "")] * 2, 10.0, 0.1).held
    impostor = owner_death_verdict([OwnerDiedError(_REF, "", "")], 10.0, 0.1)
    assert not impostor.held and "OwnerDiedError ×1" in impostor.detail, impostor
    assert not owner_death_verdict([RayOwnerDiedError(_REF, "", ""), None], 10.0, 0.1).held  # a value
    assert not owner_death_verdict([GetTimeoutError("hung")], 10.0, 30.0).held


def test_rpc_errors_count_as_unavailable_by_type() -> None:
    class Renamed(ActorUnavailableError):
        pass

    assert call_error_kind(Renamed("gone", None)) == UNAVAILABLE == call_error_kind(ActorUnavailableError("gone", None))
    assert call_error_kind(GetTimeoutError("slow")) == "other: GetTimeoutError"


# -- memory_monitor_fired: this run's kills only -----------------------------------------------


def test_oom_kills_of_earlier_runs_of_the_job_do_not_count() -> None:
    # One pytest session is one Ray job: a memory test before this run left its kill behind.
    before = {("t1", 0): "sample_env"}
    assert new_oom_kills(before, before) == []
    assert new_oom_kills(before, {**before, ("t1", 1): "sample_env", ("t2", 0): "hog"}) == ["sample_env", "hog"]


# -- node_gone_at_deadline: the drained node, at the drain's end -------------------------------


def test_node_gone_at_deadline_checks_the_node_and_the_time() -> None:
    workers = ["a" * 56, "b" * 56]
    assert gone_verdict([6.5], {workers[1]: 6.8}, workers, 5.0).held
    for drained, dead_at, why in (
            ([6.5], {}, "need one drain and one node dead"),  # nothing died
            ([6.5], {workers[0]: 6.6, workers[1]: 6.8}, "need one drain and one node dead"),  # two died
            ([6.5], {"c" * 56: 6.7}, "not the drained worker node of the run"),  # another node died
            ([6.5], {workers[1]: 0.4}, "seen dead -6.1 s")):  # long before the drain ended
        verdict = gone_verdict(drained, dead_at, workers, 5.0)
        assert not verdict.held and why in verdict.detail, verdict
    # A worker of the run died, but not the one the drain hit: not the drain's doing.
    assert gone_verdict([6.5], {workers[1]: 6.8}, workers, 5.0, drained_nodes={workers[1]}).held
    other = gone_verdict([6.5], {workers[1]: 6.8}, workers, 5.0, drained_nodes={workers[0]})
    assert not other.held and "not the drained worker node" in other.detail


def test_the_harness_probe_and_warm_up_on_a_dead_node_are_no_evidence_of_the_workload() -> None:
    from types import SimpleNamespace

    from scenarios.workloads._builtin import PROBE_TASK, WARM_UP_TASK, attempts_among

    def row(node: str, name: str) -> SimpleNamespace:
        return SimpleNamespace(node_id=node, name=name)

    harness = [row("dead", PROBE_TASK), row("dead", WARM_UP_TASK), row("alive", "sample_env")]
    assert attempts_among(harness, {"dead"}) == 0
    assert attempts_among([*harness, row("dead", "sample_env")], {"dead"}) == 1
