"""Blast radius on a shared cluster, without Ray: what a fault may reach (scope, caps), which
targets are unscoped, the refusal that names the jobs, and the attack's stop condition."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from chaos import ActorTarget, Kill, NodeTarget, Schedule, ScheduledFault, TaskTarget, WorkerTarget
from chaos._scope import JobRow, _refusal, unscoped_targets
from chaos._targets import RayProcess, _capped
from chaos.errors import InvalidFaultSpec, TargetNotFound
from scenarios import ScenarioError
from scenarios.model._experiment import load_attack
from scenarios.workloads.user._attack import ProbeRun, failing_streak

FOUR = [RayProcess(pid=p, node_id="n", label=f"w {p}") for p in (11, 12, 13, 14)]


@pytest.mark.parametrize(("target", "hits"), [
    (ActorTarget(class_name="W"), 1),
    (ActorTarget(class_name="W", pick="all"), 4),
    (ActorTarget(class_name="W", pick="all", max_targets=2), 2),
    (ActorTarget(class_name="W", pick="all", max_share=0.5), 2),
    (ActorTarget(class_name="W", pick="all", max_share=0.6, max_targets=3), 2),
    (ActorTarget(class_name="W", max_share=0.25), 1),
])
def test_a_fault_hits_at_most_its_caps_chosen_by_the_seed(target: ActorTarget, hits: int) -> None:
    chosen = _capped(target, list(FOUR), random.Random(7))
    assert len(chosen) == hits and set(chosen) <= set(FOUR)
    assert chosen == _capped(target, list(FOUR), random.Random(7))  # the same seed, the same actors


def test_a_share_that_allows_none_refuses_the_fault_instead_of_hitting_nothing() -> None:
    with pytest.raises(TargetNotFound, match=r"max_share = 0.2 of the 4 live actor\(s\) .* allows none"):
        _capped(ActorTarget(class_name="W", max_share=0.2), list(FOUR), random.Random(0))


@pytest.mark.parametrize(("fields", "field"), [
    ({"max_targets": 0}, "max_targets"), ({"max_targets": True}, "max_targets"), ({"max_share": 1.5}, "max_share"),
    ({"max_share": 0}, "max_share"), ({"job": " "}, "job"),
])
def test_bad_caps_and_scopes_are_refused_by_name(fields: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidFaultSpec, match=f"{field} = "):
        ActorTarget(class_name="W", **fields)  # type: ignore[arg-type]


def test_only_targets_that_match_across_jobs_are_unscoped() -> None:
    entries = [Kill(ActorTarget(class_name="W")), Kill(ActorTarget(class_name="W", namespace="team-a")),
               Kill(ActorTarget(class_name="V", job="02000000")), Kill(ActorTarget(name="counter")),
               Kill(TaskTarget(name="step")), Kill(TaskTarget(name="step", job="raysubmit_x")),
               Kill(WorkerTarget()), Kill(WorkerTarget(job="03000000")), Kill(ActorTarget(class_name="W"))]
    schedule = Schedule(tuple(ScheduledFault(float(i), f) for i, f in enumerate(entries)))
    assert unscoped_targets(schedule) == ["one actor(s) of class W", "worker of task 'step'",
                                          "a random busy worker"]
    assert unscoped_targets(Schedule((ScheduledFault(1.0, Kill(NodeTarget())),))) == []


def test_the_refusal_names_the_jobs_the_targets_and_the_fix() -> None:
    jobs = [JobRow(job_id="02000000", submission_id="raysubmit_a", entrypoint="python train.py"),
            JobRow(job_id="03000000", submission_id=None, entrypoint="")]
    said = _refusal(["one actor(s) of class RayTrainWorker"], jobs, "10.0.0.1:6379")
    assert said.startswith("2 jobs run on the cluster at 10.0.0.1:6379: 02000000 (raysubmit_a, python train.py); "
                           "03000000; and one actor(s) of class RayTrainWorker would reach any of them")
    assert 'scope = { job = "<job or submission id>" }' in said and "nothing was injected" in said


SCOPED = """kind = "attack"
duration = 10
scope = { namespace = "team-a", job = "raysubmit_a" }
[[probes]]
kind = "command"
command = "true"
[[faults]]
at = 1
kind = "kill"
target = { kind = "actor", class_name = "W" }
[[faults]]
at = 2
kind = "kill"
target = { kind = "actor", class_name = "W", job = "02000000" }
[[faults]]
at = 3
kind = "pause"
seconds = 1
target = { kind = "worker" }
[[faults]]
at = 4
kind = "kill_node"
"""


def test_an_attack_files_scope_reaches_each_target_that_names_none(tmp_path: Path) -> None:
    path = tmp_path / "a.toml"
    path.write_text(SCOPED, encoding="utf-8")
    targets = [getattr(e.fault, "target", None) for e in load_attack(str(path)).schedule.entries]
    assert targets[:3] == [ActorTarget(class_name="W", namespace="team-a", job="raysubmit_a"),
                           ActorTarget(class_name="W", namespace="team-a", job="02000000"),  # its own job kept
                           WorkerTarget(job="raysubmit_a")]
    assert targets[3] == NodeTarget()  # a node fault hits the whole node: the dry run names who lives there


def test_a_bad_scope_or_stop_condition_is_one_line_each(tmp_path: Path) -> None:
    path = tmp_path / "a.toml"
    path.write_text(SCOPED.replace('scope = { namespace = "team-a", job = "raysubmit_a" }',
                                   'scope = { jbo = "x", namespace = "" }\nabort_when = { probe_failures = 0 }'),
                    encoding="utf-8")
    with pytest.raises(ScenarioError) as caught:
        load_attack(str(path))
    assert [p.field for p in caught.value.problems] == ["scope.jbo", "scope.namespace", "abort_when.probe_failures"]
    assert "did you mean 'job'?" in str(caught.value)


def test_a_probe_failing_n_rounds_in_a_row_is_the_stop_condition() -> None:
    runs = [ProbeRun(1.0, "p", False, "503"), ProbeRun(1.0, "q", False, "503"), ProbeRun(2.0, "p", True, "200"),
            ProbeRun(2.0, "q", False, "503"), ProbeRun(3.0, "p", False, "503"), ProbeRun(3.0, "q", False, "503")]
    assert (failing_streak(runs, "p"), failing_streak(runs, "q"), failing_streak(runs, "r")) == (1, 3, 0)
