"""`raychaos run --job`: its verdicts on fabricated records, and its refusals of bad input
(nothing started). Ray-free."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from scenarios.cli import EXIT_BAD_INPUT, main
from scenarios.model._scenario import ScenarioError
from scenarios.workloads.user._job import (
    _REFERENCE,
    AGENT_PORT,
    DEFAULT_JOB_TIMEOUT,
    JOB_WORKLOAD,
    MIN_JOB_TIMEOUT,
    ActorSighting,
    Job,
    JobEnd,
    JobRecord,
    KilledActors,
    RestoreSighting,
    TrainAttempt,
    _job_timeout,
    agent_port_taken,
    fault_seen,
    job_seconds,
    job_succeeded,
    load_job,
    within_ratio,
)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
OK = JobRecord(JobEnd.SUCCEEDED, 30.0, "raysubmit_a")


JOB, OTHER_JOB = "01000000", "02000000"


def _sighted(at: float, *actors: tuple[str, bool, int], cls: str = "Worker", job: str = JOB) -> list[ActorSighting]:
    return [ActorSighting(at, actor_id, alive, restarts, cls, job) for actor_id, alive, restarts in actors]


def _killed(at: float, *actor_ids: str) -> list[KilledActors]:
    return [KilledActors(at, actor_ids)]


def test_job_succeeded_only_on_succeeded() -> None:
    assert job_succeeded(OK).held
    for end in (JobEnd.FAILED, JobEnd.STOPPED, JobEnd.TIMED_OUT):
        verdict = job_succeeded(JobRecord(end, 5.0, "raysubmit_b", "Traceback: boom"))
        assert not verdict.held and end.value in verdict.detail and "boom" in verdict.detail
    assert not job_succeeded(None).held


def test_within_ratio_bounds_the_slowdown() -> None:
    assert within_ratio(JobRecord(JobEnd.SUCCEEDED, 89.0, "f"), OK, ratio=3.0).held
    slow = within_ratio(JobRecord(JobEnd.SUCCEEDED, 91.0, "f"), OK, ratio=3.0)
    assert not slow.held and "3.03x" in slow.detail


def test_within_ratio_fails_closed_without_two_successes() -> None:
    failed, stopped_late = JobRecord(JobEnd.FAILED, 1.0, "x"), JobRecord(JobEnd.TIMED_OUT, 600.0, "y")
    assert not within_ratio(OK, None, ratio=3.0).held
    assert not within_ratio(OK, stopped_late, ratio=3.0).held  # a failed twin's time compares nothing
    assert not within_ratio(failed, OK, ratio=3.0).held  # fast because it failed: not within
    assert not within_ratio(None, OK, ratio=3.0).held


def _restored(at: float, actor_id: str, cls: str = "ImplicitFunc", job: str = JOB) -> list[RestoreSighting]:
    return [RestoreSighting(at, actor_id, cls, job)]


def _attempt(run: str, attempt: str, start_ns: int, *workers: str) -> TrainAttempt:
    return TrainAttempt(run, attempt, start_ns, "RUNNING", tuple(enumerate(workers)))


def test_fault_seen_by_a_restart_a_restored_trial_or_the_workers_rank_in_a_new_attempt() -> None:
    before = _sighted(1.0, ("w1", True, 0), ("w2", True, 0))
    restarted = before + _sighted(3.0, ("w1", True, 1), ("w2", True, 0))
    assert fault_seen(_killed(2.0, "w1"), restarted, job_id=JOB).held
    # A listing between the kill and its confirmation (at 2.0) shows it dead already.
    confirmed_late = before + _sighted(1.8, ("w1", False, 0), ("w2", True, 0)) + _sighted(3.0, ("w1", True, 1))
    assert fault_seen(_killed(2.0, "w1"), confirmed_late, job_id=JOB).held
    # Tune restores the killed trial from its checkpoint onto a new actor: its restore call says so.
    trials = _sighted(1.0, ("t1", True, 0), ("t2", True, 0), cls="ImplicitFunc")
    new = trials + _sighted(3.0, ("t1", False, 0), ("t2", True, 0), ("t3", True, 0), cls="ImplicitFunc")
    assert fault_seen(_killed(2.0, "t1"), new, job_id=JOB, restores=_restored(3.5, "t3")).held
    # Train replaces its whole worker group: the killed worker's rank is in the run's next attempt.
    regrouped = before + _sighted(3.0, ("w1", False, 0), ("w2", False, 0), ("w3", True, 0), ("w4", True, 0))
    attempts = [_attempt("r1", "a1", 10, "w1", "w2"), _attempt("r1", "a2", 20, "w3", "w4")]
    assert fault_seen(_killed(2.0, "w1"), regrouped, job_id=JOB, attempts=attempts).held


def test_a_new_actor_of_the_killed_ones_class_is_no_answer() -> None:
    """A Tune job with more trials than slots and max_failures=0: the killed trial is given up,
    a pending trial starts in its slot, and as many of the class are alive as before. That is
    not the killed trial coming back; counting the class took it for one (a false green)."""
    trials = _sighted(1.0, ("t1", True, 0), ("t2", True, 0), cls="ImplicitFunc")
    pending_started = trials + _sighted(3.0, ("t1", False, 0), ("t2", True, 0), ("t3", True, 0), cls="ImplicitFunc")
    verdict = fault_seen(_killed(2.0, "t1"), pending_started, job_id=JOB)
    assert not verdict.held and "a new actor of its class is not the same trial or worker" in verdict.detail
    # Train's new worker group without Train's report of it: no evidence it is the same run's workers.
    before = _sighted(1.0, ("w1", True, 0), ("w2", True, 0))
    regrouped = before + _sighted(3.0, ("w1", False, 0), ("w2", False, 0), ("w3", True, 0), ("w4", True, 0))
    assert not fault_seen(_killed(2.0, "w1"), regrouped, job_id=JOB).held


def test_a_restore_or_an_attempt_answers_only_what_it_can_be() -> None:
    trials = _sighted(1.0, ("t1", True, 0), ("t2", True, 0), cls="ImplicitFunc")
    later = trials + _sighted(3.0, ("t3", True, 0), cls="ImplicitFunc")
    kill = _killed(2.0, "t1")
    assert not fault_seen(kill, later, job_id=JOB, restores=_restored(1.5, "t3")).held  # before the kill
    assert not fault_seen(kill, later, job_id=JOB, restores=_restored(3.5, "t2")).held  # an actor seen before it
    assert not fault_seen(kill, later, job_id=JOB, restores=_restored(3.5, "t3", cls="Other")).held  # another class
    assert not fault_seen(kill, later, job_id=JOB, restores=_restored(3.5, "t3", job=OTHER_JOB)).held  # another job
    # One restore answers one killed trial, not two.
    two = _killed(2.0, "t1", "t2")
    assert not fault_seen(two, later, job_id=JOB, restores=_restored(3.5, "t3")).held
    both = later + _sighted(3.2, ("t4", True, 0), cls="ImplicitFunc")
    assert fault_seen(two, both, job_id=JOB, restores=_restored(3.5, "t3") + _restored(3.6, "t4")).held
    # Train: a later attempt of another run, or of this run without the killed worker's rank, is no answer.
    before = _sighted(1.0, ("w1", True, 0), ("w2", True, 0))
    wrong_run = [_attempt("r1", "a1", 10, "w1", "w2"), _attempt("r2", "b1", 20, "w3", "w4")]
    assert not fault_seen(_killed(2.0, "w1"), before, job_id=JOB, attempts=wrong_run).held
    smaller = [_attempt("r1", "a1", 10, "w0", "w1"), _attempt("r1", "a2", 20, "w3")]  # rank 1 missing
    assert not fault_seen(_killed(2.0, "w1"), before, job_id=JOB, attempts=smaller).held


def test_a_trial_killed_while_its_actor_was_being_created_is_judged_as_one_alive() -> None:
    """A Tune trial's actor still running its constructor (PENDING_CREATION) when the kill hit
    its process: seen there, then its trial restored onto a new actor."""
    creating = [ActorSighting(1.0, "t1", False, 0, "ImplicitFunc", JOB, creating=True),
                *_sighted(1.0, ("t2", True, 0), cls="ImplicitFunc")]
    replaced = _sighted(3.0, ("t1", False, 0), ("t2", True, 0), ("t3", True, 0), cls="ImplicitFunc")
    assert fault_seen(_killed(2.0, "t1"), creating + replaced, job_id=JOB, restores=_restored(3.5, "t3")).held
    assert not fault_seen(_killed(2.0, "t1"), creating + replaced, job_id=JOB).held  # no restore: red


def test_fault_seen_red_when_nothing_came_back() -> None:
    before = _sighted(1.0, ("w1", True, 0), ("w2", True, 0))
    dead = before + _sighted(3.0, ("w1", False, 0), ("w2", True, 0))  # the survivor is no answer
    verdict = fault_seen(_killed(2.0, "w1"), dead, job_id=JOB)
    assert not verdict.held and "neither restarted by Ray" in verdict.detail
    unchanged = before + _sighted(3.0, ("w1", True, 0), ("w2", True, 0))  # alive, no restart: not killed
    assert not fault_seen(_killed(2.0, "w1"), unchanged, job_id=JOB).held


def test_fault_seen_red_on_another_jobs_restarting_worker() -> None:
    """On --address another job's actor of the class restarting is not this job's answer."""
    before = _sighted(1.0, ("w1", True, 0)) + _sighted(1.0, ("x1", True, 0), job=OTHER_JOB)
    after = _sighted(3.0, ("w1", False, 0)) + _sighted(3.0, ("x1", True, 1), ("x2", True, 0), job=OTHER_JOB)
    assert not fault_seen(_killed(2.0, "w1"), before + after, job_id=JOB).held
    # A different class of this job (not the killed one's) coming up is no answer either.
    other_class = _sighted(3.0, ("w1", False, 0)) + _sighted(3.0, ("c1", True, 0), cls="Coordinator")
    assert not fault_seen(_killed(2.0, "w1"), _sighted(1.0, ("w1", True, 0)) + other_class, job_id=JOB).held


def test_fault_seen_fails_closed() -> None:
    restarted = _sighted(1.0, ("w1", True, 0)) + _sighted(3.0, ("w1", True, 1))
    assert fault_seen(_killed(2.0, "w1"), restarted, job_id=JOB).held  # the control: all below differ by one thing
    assert not fault_seen([], restarted, job_id=JOB).held  # no kill landed
    assert not fault_seen(_killed(2.0, "w1"), restarted, job_id=None).held  # whose actors: unknown
    assert not fault_seen(_killed(2.0), restarted, job_id=JOB).held  # whom it killed: unknown
    assert not fault_seen(_killed(2.0, "w9"), restarted, job_id=JOB).held  # the killed one never seen
    assert not fault_seen(_killed(0.5, "w1"), restarted, job_id=JOB).held  # nothing listed before it
    # A replacement seen before the kill does not answer it: only what comes after counts.
    early = _sighted(1.0, ("w1", True, 0)) + _sighted(1.5, ("w1", True, 0), ("w2", True, 0))
    assert not fault_seen(_killed(2.0, "w1"), early + _sighted(3.0, ("w2", True, 0)), job_id=JOB).held
    # Every kill must be answered, not one of them.
    one = _sighted(1.0, ("w1", True, 0)) + _sighted(3.0, ("w2", True, 0)) + _sighted(5.0, ("w2", False, 0))
    assert not fault_seen(_killed(2.0, "w1") + _killed(4.0, "w2"), one, job_id=JOB).held


def test_the_job_is_timed_by_rays_own_times() -> None:
    """A twin that waited 20 s for the dashboard's agent and ran 10 s is a 10 s baseline: an
    80 s job under faults is then 8x, past a 3x bound (from the submission call it read 2.67x)."""
    assert job_seconds(1_000, 11_000, fallback=30.0) == 10.0
    twin = JobRecord(JobEnd.SUCCEEDED, job_seconds(1_000, 11_000, fallback=30.0), "t")
    faulty = JobRecord(JobEnd.SUCCEEDED, job_seconds(50_000, 130_000, fallback=80.5), "f")
    verdict = within_ratio(faulty, twin, ratio=3.0)
    assert not verdict.held and "8.00x" in verdict.detail
    assert job_seconds(None, 11_000, fallback=12.5) == 12.5  # Ray has not both times: the clock's
    assert job_seconds(11_000, None, fallback=12.5) == 12.5


def test_the_twin_cannot_meet_the_fault_verdicts_so_they_are_na_and_every_report_passes() -> None:
    from scenarios.model._records import RunLabel, RunResult, RunStatus, Validity, Verdict
    from scenarios.reports._files import junit, summary
    from scenarios.runner._run import twin_verdicts

    assert [(v.name, v.validity) for v in _REFERENCE] == [
        ("within_ratio", Validity.UNKNOWN), ("fault_seen", Validity.UNKNOWN)]
    verdicts = twin_verdicts([Verdict.of("job_succeeded", True, "ok", 1), *_REFERENCE], Job.FAULT_VERDICTS)
    assert [v.validity for v in verdicts] == [Validity.HELD, Validity.NOT_APPLICABLE, Validity.NOT_APPLICABLE]
    twin = RunResult(scenario="job-s", label=RunLabel.BASELINE, seed=0, status=RunStatus.COMPLETED, seconds=10.0,
                     verdicts=tuple(verdicts), probes=(), samples=(), faults=())
    chaos = RunResult(scenario="job-s", label=RunLabel.CHAOS, seed=0, status=RunStatus.COMPLETED, seconds=20.0,
                      verdicts=tuple(Verdict.of(n, True, "ok", 1) for n in ("job_succeeded", "within_ratio",
                                                                            "fault_seen")),
                      probes=(), samples=(), faults=())
    assert summary([twin, chaos])["deviated"] is False and summary([twin, chaos])["outcome"] == "held"
    # A CI test reporter reads failures and errors: a passing run has none, its twin's two skipped.
    suites = {s.get("name"): (s.get("failures"), s.get("errors"), s.get("skipped")) for s in junit([twin, chaos])}
    assert suites == {"job-s[baseline]": ("0", "0", "2"), "job-s[chaos]": ("0", "0", "0")}


def test_load_job_builds_the_job_scenario(tmp_path: Path) -> None:
    scenario = load_job(str(EXAMPLES / "train" / "schedule.toml"), command="python train.py",
                        working_dir=str(tmp_path), handoff=str(tmp_path / "b.json"))
    assert scenario.workload == JOB_WORKLOAD
    assert scenario.invariants == ("job_succeeded", "within_ratio", "fault_seen")
    # Scoped to the job the run under faults submits: another job's RayTrainWorker is out of reach.
    submission = scenario.params["submission_id"]
    assert isinstance(submission, str) and submission.startswith("raychaos-")
    assert scenario.params["kill_targets"] == [{"kind": "actor", "actor_id": None, "name": None,
                                                "namespace": None, "class_name": "RayTrainWorker",
                                                "pick": "one", "job": submission, "max_targets": None,
                                                "max_share": None}]
    assert str(Path(sys.executable).parent) == str(scenario.params["path"]).split(os.pathsep)[0]


@pytest.mark.parametrize(("args", "said"), [
    (["--job", " "], "--job = ' ': is empty"),
    (["--job", "python t.py", "--max-slowdown", "1"], "--max-slowdown = 1.0: must be above 1"),
    (["--job", "python t.py", "--job-timeout", "0"], "--job-timeout = 0.0: must be a positive"),
    (["--job", "python t.py", "--no-baseline"], "--no-baseline with --job"),
    (["--probe", "true"], "--probe, --probe-python, --probe-http, --every, --probe-timeout and --recover-within "
                          "judge a job"),
])
def test_bad_options_refused_before_anything_starts(args: list[str], said: str) -> None:
    result = CliRunner().invoke(main, ["run", str(EXAMPLES / "train" / "schedule.toml"), *args])
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    assert said in result.output


@pytest.mark.parametrize(("text", "said"), [
    ('duration = 5\nworkload = "x"\n[[faults]]\nat = 1\nkind = "kill"\n'
     'target = { kind = "actor", class_name = "A" }\n', "workload = 'x': not for a job's attack file"),
    ('duration = 5\n[[faults]]\nat = 1\nkind = "kill"\ntarget = { kind = "worker" }\n',
     "a job's schedule needs kills of actors"),
    ('duration = 5\n[[faults]]\nat = 1\nkind = "pause"\nseconds = 1\n'
     'target = { kind = "actor", class_name = "A" }\n', "faults = 'no kill'"),
])
def test_schedules_that_are_not_a_jobs_refused(tmp_path: Path, text: str, said: str) -> None:
    path = tmp_path / "s.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ScenarioError, match="problem"):
        load_job(str(path), command="python t.py", working_dir=str(tmp_path), handoff=str(tmp_path / "b"))
    result = CliRunner().invoke(main, ["run", "--job", "python t.py", str(path)])
    assert result.exit_code == EXIT_BAD_INPUT and said in result.output, result.output


def test_the_job_timeout_follows_the_fault_free_run() -> None:
    assert _job_timeout(42.0, OK, faults=True) == 42.0  # given: as given, in both runs
    assert _job_timeout(None, OK, faults=True) == 300.0  # ten times the twin's 30 s
    assert _job_timeout(None, JobRecord(JobEnd.SUCCEEDED, 2.0, "q"), faults=True) == MIN_JOB_TIMEOUT
    assert _job_timeout(None, JobRecord(JobEnd.FAILED, 2.0, "q"), faults=True) == DEFAULT_JOB_TIMEOUT
    assert _job_timeout(None, None, faults=False) == DEFAULT_JOB_TIMEOUT


def test_the_twins_record_travels_whole(tmp_path: Path) -> None:
    record = JobRecord(JobEnd.TIMED_OUT, 12.5, "raysubmit_z", "last line")
    assert JobRecord.from_json(record.to_json()) == record


def test_a_taken_agent_port_refused_before_a_cluster_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("scenarios.workloads.user._job.AGENT_PORT_PATIENCE", 0.5)  # how long it waits: not the point
    with socket.socket() as held:
        ours = not agent_port_taken()  # else another Ray here holds it already: the same refusal
        if ours:
            held.bind(("127.0.0.1", AGENT_PORT))
            held.listen()
        assert agent_port_taken()
        result = CliRunner().invoke(main, ["run", "--job", "python t.py", str(EXAMPLES / "train" / "schedule.toml")])
    assert result.exit_code == EXIT_BAD_INPUT and f"port {AGENT_PORT} is taken" in result.output, result.output
    assert not ours or f"by pid {os.getpid()} (" in " ".join(result.output.split()), result.output  # who holds it


# -- each verdict's edges ----------------------------------------------------------------------------


def test_the_job_verdicts_count_one_job_and_a_slowdown_at_its_bound_holds() -> None:
    assert job_succeeded(OK).seen == 1 and within_ratio(OK, OK, ratio=3.0).seen == 1
    at_bound = JobRecord(JobEnd.SUCCEEDED, 3 * OK.seconds, "f")
    assert within_ratio(at_bound, OK, ratio=3.0).held  # exactly 3x: within
    assert fault_seen([], [], job_id=JOB).seen == 0


def test_a_kill_is_judged_by_what_was_seen_strictly_before_and_after_it() -> None:
    # Alive at the very moment of the kill's confirmation is not "before it"; restarted at it is not "after".
    at_kill = _sighted(2.0, ("w1", True, 0))
    assert "no listing of this job's actors before it" in fault_seen(_killed(2.0, "w1"), at_kill, job_id=JOB).detail
    seen = _sighted(1.0, ("w1", True, 0)) + _sighted(2.0, ("w1", True, 1))
    assert not fault_seen(_killed(2.0, "w1"), seen, job_id=JOB).held
    assert fault_seen(_killed(2.0, "w1"), seen + _sighted(2.1, ("w1", True, 1)), job_id=JOB).held
    # An actor first listed at the kill's own moment was there already: its restore is no answer.
    trials = _sighted(1.0, ("t1", True, 0), cls="ImplicitFunc") + _sighted(2.0, ("t3", True, 0), cls="ImplicitFunc")
    assert not fault_seen(_killed(2.0, "t1"), trials, job_id=JOB, restores=_restored(3.0, "t3")).held
    # A restore listed at the kill's own moment is not after it.
    later = _sighted(1.0, ("t1", True, 0), cls="ImplicitFunc") + _sighted(2.5, ("t3", True, 0), cls="ImplicitFunc")
    assert not fault_seen(_killed(2.0, "t1"), later, job_id=JOB, restores=_restored(2.0, "t3")).held
    assert fault_seen(_killed(2.0, "t1"), later, job_id=JOB, restores=_restored(2.01, "t3")).held


def test_a_tasks_method_is_the_last_part_of_its_name() -> None:
    from types import SimpleNamespace

    from scenarios.workloads.user._job import _method

    assert _method(SimpleNamespace(name="objective.restore", func_or_class_name="x.ImplicitFunc.train")) == "restore"
    assert _method(SimpleNamespace(name=None, func_or_class_name="a.b.ImplicitFunc.restore")) == "restore"
    assert _method(SimpleNamespace(name=None, func_or_class_name=None)) == ""


def test_the_job_is_timed_to_the_millisecond_and_a_zero_length_job_is_one() -> None:
    assert job_seconds(11_000, 11_000, fallback=9.9) == 0.0  # started and ended in the same ms: Ray's own times
    assert job_seconds(11_000, 10_999, fallback=9.9) == 9.9  # an end before its start is no time


def test_options_just_inside_their_bounds_are_taken() -> None:
    from scenarios.workloads.user._job import job_problems

    assert job_problems("python t.py", 1.5, 0.5) == []
    assert [p.field for p in job_problems("python t.py", 1.0, 0.0)] == ["--max-slowdown", "--job-timeout"]


def test_a_schedule_that_is_not_a_jobs_is_refused_naming_its_file(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text('duration = 5\n[[faults]]\nat = 1\nkind = "pause"\nseconds = 1\n'
                    'target = { kind = "actor", class_name = "A" }\n', encoding="utf-8")
    with pytest.raises(ScenarioError) as refused:
        load_job(str(path), command="python t.py", working_dir=str(tmp_path), handoff=str(tmp_path / "b"))
    assert refused.value.source == str(path), refused.value.source
