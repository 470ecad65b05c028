"""``raychaos run --job COMMAND SCHEDULE``: the user's own script, submitted as a Ray job, under
an attack-style fault schedule, judged against the same command's fault-free run.

The runner runs the fault-free twin first (its ``baseline`` run), so the run under faults knows
the time to compare with and the bound to stop its job at. The twin hands its record on through
a small JSON file (``params.handoff``): each run is its own :class:`Job` instance. Each job gets
``RAYCHAOS_SEED`` (the run's seed, the same in both) in its environment.

Verdicts, each a pure function of records (:func:`job_succeeded`, :func:`within_ratio`,
:func:`fault_seen`): the job under faults succeeded; it took at most ``max_slowdown`` times the
fault-free run (each timed by Ray's record of the job); every actor the schedule killed came
back as the same logical thing, within this job: the same actor restarted by Ray (its restarts
counted up), a Tune trial restored from its checkpoint onto a new actor (Tune's ``restore`` call
on it), or a Train worker's rank in a new attempt of its run (Train's state API). A new actor of
the killed one's class is never an answer by itself: Tune starts a pending trial in a killed
one's slot, and its count of live actors is what it was. Optional probes are judged as
``raychaos attack`` judges them.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Any

from pydantic import Field

from chaos import ActorTarget, FaultKind, Kill, wait_until
from chaos.cluster import short
from chaos.engine import target_from_dict, target_to_dict
from chaos.errors import HangError
from scenarios.model._experiment import NO_OVERRIDES, Overrides, read_attack, within_scope
from scenarios.model._records import Problem, Verdict
from scenarios.model._scenario import Scenario, ScenarioError, _validate
from scenarios.model._workload import Params, Workload
from scenarios.workloads.user._attack import ProbeRun, probes_from, recovered

__all__ = ["ActorSighting", "Job", "JobEnd", "JobRecord", "KilledActors", "RestoreSighting", "TrainAttempt",
           "fault_seen", "job_seconds", "job_succeeded", "load_job", "within_ratio"]

#: The workload as scenario files name it: a ``module:Class`` path, so no registry entry is needed.
JOB_WORKLOAD = "scenarios.workloads.user._job:Job"
JOB_INVARIANTS = ("job_succeeded", "within_ratio", "fault_seen")
PROBE_INVARIANTS = ("probes_pass_after_heal", "probes_recover")
#: The environment variable each job reads its seed from (the same in both runs).
SEED_VARIABLE = "RAYCHAOS_SEED"
#: Ray Train's switch for its state API (``ray.train.constants``), on in every job.
TRAIN_STATE_VARIABLE = "RAY_TRAIN_ENABLE_STATE_TRACKING"
#: The dashboard's route of Ray Train (v2) runs and their attempts (``dashboard/modules/train``).
TRAIN_RUNS_ROUTE = "/api/train/v2/runs/v1"
#: Ray Train's worker actor class: its kills are answered by Train's attempts.
TRAIN_WORKER = "RayTrainWorker"
#: Seconds a job under faults may take when ``--job-timeout`` is not given: this many times its
#: fault-free run, and at least ``MIN_JOB_TIMEOUT``; the fault-free run gets ``DEFAULT_JOB_TIMEOUT``.
TIMEOUT_FACTOR, MIN_JOB_TIMEOUT, DEFAULT_JOB_TIMEOUT = 10.0, 60.0, 600.0
#: Seconds the dashboard's job agent has to accept a submission (it registers after the head starts).
SUBMIT_PATIENCE = 60.0
#: The port Ray's dashboard agent listens on by default; a job is submitted through the head's.
AGENT_PORT = 52365
#: Seconds ``run --job`` waits for that port to be free before it refuses to start a cluster.
AGENT_PORT_PATIENCE = 60.0
STOP_PATIENCE = 30.0
POLL = 0.5


class JobEnd(StrEnum):
    """How a job ended, as raychaos saw it."""

    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"  #: stopped by someone else
    TIMED_OUT = "TIMED_OUT"  #: still running at its bound: raychaos stopped it


_RAY_ENDS = {"SUCCEEDED": JobEnd.SUCCEEDED, "FAILED": JobEnd.FAILED, "STOPPED": JobEnd.STOPPED}


@dataclass(frozen=True, slots=True)
class JobRecord:
    """One submitted job: how it ended, how long from submission to its end, its id, and the
    last lines of its logs (for people)."""

    end: JobEnd
    seconds: float
    submission_id: str
    log_tail: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> JobRecord:
        data = json.loads(text)
        return cls(JobEnd(data["end"]), float(data["seconds"]), str(data["submission_id"]), str(data["log_tail"]))


@dataclass(frozen=True, slots=True)
class ActorSighting:
    """An actor matching a kill target as one State API listing showed it, ``at`` seconds in:
    its class and the job (hex id) that owns it, so a kill is judged by its own job's actors."""

    at: float
    actor_id: str
    alive: bool
    restarts: int
    class_name: str = ""
    job_id: str = ""
    #: PENDING_CREATION: its worker process runs its constructor (a kill can hit it there).
    creating: bool = False

    @property
    def there(self) -> bool:
        """Alive, or being created: a process a kill can hit."""
        return self.alive or self.creating


@dataclass(frozen=True, slots=True)
class RestoreSighting:
    """A ``restore`` call (Tune restoring a trial from its checkpoint) seen on an actor of this
    job, ``at`` seconds in: the library saying that actor took up a failed trial's work."""

    at: float
    actor_id: str
    class_name: str
    job_id: str


@dataclass(frozen=True, slots=True)
class TrainAttempt:
    """One attempt of a Ray Train run as Train's state API reports it: its run, when it started
    (Unix ns), its status, and each worker's world rank and actor id."""

    run_id: str
    attempt_id: str
    start_ns: int
    status: str
    workers: tuple[tuple[int, str], ...]


@dataclass(frozen=True, slots=True)
class KilledActors:
    """One injected kill: when it was confirmed (seconds in) and the actors it killed (empty when
    the runner could not say: ``fault_seen`` then fails closed)."""

    at: float
    actor_ids: tuple[str, ...]


# -- verdicts: pure functions of records ------------------------------------------------------


def job_succeeded(record: JobRecord | None) -> Verdict:
    """The job under faults ended ``SUCCEEDED`` (a job never submitted does not)."""
    if record is None:
        return Verdict.of("job_succeeded", False, "no job ran: the run ended before its job was submitted")
    said = f"; its log ends: {record.log_tail[-300:]}" if record.end is not JobEnd.SUCCEEDED else ""
    return Verdict.of("job_succeeded", record.end is JobEnd.SUCCEEDED,
                   f"job {record.submission_id} {record.end.value} after {record.seconds:.1f} s{said}", 1)


def within_ratio(faulty: JobRecord | None, baseline: JobRecord | None, *, ratio: float) -> Verdict:
    """The job under faults took at most ``ratio`` times its fault-free run. Both must have
    succeeded: a time of a failed run compares nothing."""
    name = "within_ratio"
    if baseline is None or baseline.end is not JobEnd.SUCCEEDED:
        why = "did not run" if baseline is None else f"ended {baseline.end.value}"
        return Verdict.of(name, False, f"no fault-free time to compare with: the fault-free run {why}")
    if faulty is None or faulty.end is not JobEnd.SUCCEEDED:
        why = "did not run" if faulty is None else f"ended {faulty.end.value}"
        return Verdict.of(name, False, f"the run under faults {why}: no time to compare")
    slowdown = faulty.seconds / max(baseline.seconds, 1e-9)
    return Verdict.of(name, slowdown <= ratio, f"{faulty.seconds:.1f} s under faults, {baseline.seconds:.1f} s "
                   f"without: {slowdown:.2f}x (bound {ratio:g}x)", 1)


def fault_seen(kills: Sequence[KilledActors], sightings: Sequence[ActorSighting], *, job_id: str | None,
               restores: Sequence[RestoreSighting] = (), attempts: Sequence[TrainAttempt] = ()) -> Verdict:
    """Every kill was answered within this job (``job_id``; other jobs' actors are not its
    answer) by the same logical thing coming back: each killed actor alive again with more
    restarts; or, for a Tune trial, a ``restore`` call on a new actor of its class after the
    kill (one per killed actor); or, for a Train worker, its world rank in a later attempt of
    its run. A new actor of the class is no answer by itself (Tune starts a pending trial in a
    killed one's slot). Fails closed: no kill landed, the job's id is unknown, or a killed actor
    was not seen before."""
    if not kills:
        return Verdict.of("fault_seen", False, "no kill landed: nothing was restarted because nothing was killed", 0)
    if not job_id:
        return Verdict.of("fault_seen", False, "the job's id is unknown (its driver never started): "
                          "no actor can be told to be its own", len(kills))
    own = [s for s in sightings if s.job_id == job_id]
    answers = _Answers(own, [r for r in restores if r.job_id == job_id], attempts)
    problems = [p for p in (_kill_answered(k, own, answers) for k in kills) if p]
    return Verdict.of("fault_seen", not problems, "; ".join(problems) or
                      f"{len(kills)} kill(s), each answered by the same actor restarted, its trial restored "
                      "or its worker's rank in a new attempt", len(kills))


class _Answers:
    """What may answer a kill, each restore used once (a restored trial answers one kill)."""

    def __init__(self, sightings: Sequence[ActorSighting], restores: Sequence[RestoreSighting],
                 attempts: Sequence[TrainAttempt]) -> None:
        self.sightings, self.restores, self.attempts = sightings, restores, attempts
        self.used: set[str] = set()

    def restored(self, at: float, cls: str) -> str:
        """The actor a Tune ``restore`` went to after ``at``, new since then (``""``: none)."""
        known = {s.actor_id for s in self.sightings if s.at <= at}
        for r in sorted(self.restores, key=lambda r: r.at):
            if r.at > at and r.class_name == cls and r.actor_id not in known | self.used:
                self.used.add(r.actor_id)
                return r.actor_id
        return ""

    def regrouped(self, actor_id: str) -> str:
        """The later attempt of ``actor_id``'s Train run that has its rank (``""``: none)."""
        for first in self.attempts:
            rank = next((r for r, a in first.workers if a == actor_id), None)
            if rank is None:
                continue
            later = [a for a in self.attempts if a.run_id == first.run_id and a.start_ns > first.start_ns
                     and any(r == rank for r, _ in a.workers)]
            if later:
                return min(later, key=lambda a: a.start_ns).attempt_id
        return ""


def _kill_answered(kill: KilledActors, sightings: Sequence[ActorSighting], answers: _Answers) -> str:
    """"" when every actor ``kill`` killed came back as the same logical thing, else what was missing."""
    if not kill.actor_ids:
        return f"kill at {kill.at:.1f} s: which actor it killed is unknown"
    if not any(s.at < kill.at for s in sightings):
        return f"kill at {kill.at:.1f} s: no listing of this job's actors before it"
    return "; ".join(p for p in (_answered(kill.at, a, sightings, answers) for a in kill.actor_ids) if p)


def _answered(at: float, actor_id: str, sightings: Sequence[ActorSighting], answers: _Answers) -> str:
    """"" when ``actor_id``, killed at ``at``, came back as itself, its trial or its worker's rank."""
    # Its last listing alive: ``at`` is when the kill was confirmed, and a listing between the
    # kill and its confirmation may show it dead already.
    # Being created counts: on a slower machine a Tune trial's actor was still running its
    # constructor when the kill hit its process.
    alive = [s for s in sightings if s.at < at and s.actor_id == actor_id and s.there]
    if not alive:
        return f"kill at {at:.1f} s: its actor {short(actor_id)} was never seen alive (or being created) before it"
    prior = max(alive, key=lambda s: s.at)
    if any(s.actor_id == actor_id and s.alive and s.restarts > prior.restarts for s in sightings if s.at > at):
        return ""
    if answers.regrouped(actor_id) or answers.restored(at, prior.class_name):
        return ""
    return (f"kill at {at:.1f} s: {prior.class_name} {short(actor_id)} neither restarted by Ray, nor its trial "
            "restored (no Tune restore on a new actor after it), nor its Train worker's rank in a new attempt; "
            "a new actor of its class is not the same trial or worker")


# -- the workload ------------------------------------------------------------------------------


class JobParams(Params):
    command: str
    working_dir: str
    #: Where the fault-free run leaves its :class:`JobRecord` for the run under faults.
    handoff: str
    max_slowdown: float = 3.0
    #: Seconds each job may run (None: the defaults above).
    job_timeout: float | None = None
    #: The schedule's kill targets (``target_to_dict``): whose restarts ``fault_seen`` looks for.
    kill_targets: list[dict[str, Any]] = Field(default_factory=list)
    probes: list[dict[str, Any]] = Field(default_factory=list)
    #: The submission id of the run under faults' job, the scope of its faults (the fault-free
    #: run's is Ray's own).
    submission_id: str | None = None
    #: The job's ``PATH`` (None: the cluster's): on an embedded cluster, the one raychaos runs
    #: with, so ``python`` in the command is the interpreter raychaos was started from.
    path: str | None = None
    every: float = 1.0
    recover_within: float = 30.0
    probe_timeout: float = 10.0


class Job(Workload):
    """The user's command as a Ray job; one ``step`` submits it and waits for its end."""

    INVARIANTS = JOB_INVARIANTS + PROBE_INVARIANTS
    FAULT_VERDICTS = ("within_ratio", "fault_seen")
    DEFAULT_INVARIANTS = JOB_INVARIANTS
    Params = JobParams

    def setup(self) -> None:
        import ray
        from ray.job_submission import JobSubmissionClient

        self.p = self.ctx.params_as(JobParams)
        self.baseline = _read_handoff(self.p.handoff) if self.ctx.faults else None
        self.timeout = _job_timeout(self.p.job_timeout, self.baseline, faults=self.ctx.faults)
        # The dashboard of the cluster this driver is connected to (embedded or --address).
        self.dashboard = f"http://{ray._private.worker.get_dashboard_url()}"
        self.client = JobSubmissionClient(self.dashboard)
        self.targets = [target_from_dict(t) for t in self.p.kill_targets]
        self.probes = probes_from(self.p.probes)
        self.record: JobRecord | None = None
        self.job_id: str | None = None
        #: The hex id of the job's driver (``get_job_info(...).job_id``): whose actors are its own.
        self.ray_job_id: str | None = None
        self.kills: list[KilledActors] = []
        self.sightings: list[ActorSighting] = []
        self.probe_runs: list[ProbeRun] = []
        #: What the libraries say came back: Tune's restores, Train's attempts (see fault_seen).
        self.restores: list[RestoreSighting] = []
        self.attempts: list[TrainAttempt] = []

    def call_bounds(self) -> Mapping[str, float]:
        return {"step": SUBMIT_PATIENCE + self.timeout + STOP_PATIENCE + 60.0,
                "invariants": len(self.probes) * self.p.probe_timeout + 60.0}

    def step(self) -> bool:
        job_id = self.job_id = self._submit()
        # The clock starts once the submission is taken: the wait for the dashboard's agent
        # (longest on the twin's fresh cluster) is not the job's time.
        started = time.monotonic()
        end, last_probe = None, 0.0
        while end is None and time.monotonic() - started < self.timeout:
            end = _RAY_ENDS.get(str(self.client.get_job_status(job_id)))
            self._look(job_id)
            if self.probes and time.monotonic() - last_probe >= self.p.every:
                last_probe = time.monotonic()
                self._probe_round()
            if end is None:
                self.ctx.stop.wait(POLL)
        if end is None:
            end = self._stop(job_id)
        info = self.client.get_job_info(job_id)
        self.ray_job_id = self.ray_job_id or info.job_id
        seconds = job_seconds(info.start_time, info.end_time, fallback=time.monotonic() - started)
        self.record = JobRecord(end=end, seconds=round(seconds, 3), submission_id=job_id,
                                log_tail=self.client.get_job_logs(job_id)[-2000:])
        self.ctx.metric("job seconds", seconds)
        if not self.ctx.faults:
            with open(self.p.handoff, "w", encoding="utf-8") as out:
                out.write(self.record.to_json())
        return False

    def teardown(self) -> None:
        """A job still running (the run was interrupted or aborted) is stopped: it would outlive
        the run on a cluster raychaos does not own."""
        job_id = getattr(self, "job_id", None)  # None too when setup did not get that far
        if job_id is not None and self.record is None:
            self._stop(job_id)

    def _submit(self) -> str:
        # Train reports its runs' attempts (which workers, which ranks) only with its state
        # tracking on: how a killed worker's rank is seen in a new attempt (fault_seen).
        env = {SEED_VARIABLE: str(self.ctx.seed), TRAIN_STATE_VARIABLE: "1",
               **({"PATH": self.p.path} if self.p.path else {})}

        # The run under faults' submission id is the one its faults are scoped to (load_job).
        submission = self.p.submission_id if self.ctx.faults else None

        def submit() -> str:
            return str(self.client.submit_job(entrypoint=self.p.command, submission_id=submission, runtime_env={
                "working_dir": self.p.working_dir, "env_vars": env}))

        # Right after a head starts its dashboard may have no job agent yet ("No available
        # agent to submit job, please try again later"): retried, bounded.
        try:
            return wait_until(submit, timeout=SUBMIT_PATIENCE, interval=0.5, what="the job's submission")
        except HangError as exc:
            raise HangError(f"{exc}; the head's dashboard agent takes the jobs: it listens on port "
                            f"{AGENT_PORT} unless the cluster was started with another "
                            "--dashboard-agent-listen-port, and cannot when another Ray on the machine "
                            f"holds that port (held now by {port_holder()})") from exc

    def _stop(self, job_id: str) -> JobEnd:
        """Stop a job past its bound and wait (bounded) until Ray says it ended."""
        self.client.stop_job(job_id)
        try:
            wait_until(lambda: str(self.client.get_job_status(job_id)) in _RAY_ENDS, timeout=STOP_PATIENCE,
                       interval=0.5, what=f"job {job_id} to stop")
        except HangError:
            pass  # still reported as timed out: it did not end in its bound either way
        return JobEnd.TIMED_OUT

    def before_kill(self) -> None:
        """Called by the runner right before each kill: a listing of the actors it may hit, so
        the one it kills was seen alive before it (listings a second apart, each taking seconds on
        a loaded machine, missed a Tune trial that started just before its kill)."""
        job_id = getattr(self, "job_id", None)
        if job_id is None:
            return
        try:
            self._look(job_id)
        except Exception:  # noqa: BLE001 - a look missed fails fault_seen closed, never the kill
            self.ctx.count("State API listings failed")

    def actors_killed(self, actor_ids: tuple[str, ...]) -> None:
        """Called by the runner as each kill is confirmed: the actors it killed, ``fault_seen``'s
        subject (any actor of the class would let another trial's or job's actor answer)."""
        self.kills.append(KilledActors(round(self.ctx.elapsed(), 3), actor_ids))

    def _look(self, submission_id: str) -> None:
        """One State API listing of the actors the schedule kills."""
        from ray.util.state import list_actors

        if not self.targets:
            return
        if self.ray_job_id is None:  # None until the job's driver starts
            self.ray_job_id = self.client.get_job_info(submission_id).job_id
        at = round(self.ctx.elapsed(), 3)
        try:
            rows = list_actors(address=self.ctx.address, limit=10_000, detail=True, raise_on_missing_output=False)
        except Exception:  # noqa: BLE001 - a listing missed is a sighting missed: fault_seen fails closed
            self.ctx.count("State API listings failed")
            return
        self.sightings += [ActorSighting(at=at, actor_id=a.actor_id, alive=a.state == "ALIVE",
                                         restarts=int(a.num_restarts or 0), class_name=_short(a.class_name),
                                         job_id=str(a.job_id or ""), creating=a.state == "PENDING_CREATION")
                           for a in rows if any(_matches(t, a) for t in self.targets)]
        if self.kills:
            self._look_for_answers()

    def _probe_round(self) -> list[ProbeRun]:
        found = []
        for probe in self.probes:
            ok, detail = probe.run(timeout=self.p.probe_timeout)
            found.append(ProbeRun(at=round(self.ctx.elapsed(), 3), probe=probe.label, ok=ok, detail=detail))
        self.probe_runs += found
        return found

    def _look_for_answers(self) -> None:
        """After a kill: Tune's restores on new actors of a killed class, Train's attempts."""
        killed = {a for k in self.kills for a in k.actor_ids}
        classes = {s.class_name for s in self.sightings if s.actor_id in killed}
        if not classes:
            return
        try:
            self._find_restores(classes, since=min(k.at for k in self.kills))
            if TRAIN_WORKER in classes:
                self.attempts = train_attempts(self.dashboard)
        except Exception:  # noqa: BLE001 - an answer missed fails fault_seen closed, never the run
            self.ctx.count("State API listings failed")

    def _find_restores(self, classes: set[str], *, since: float) -> None:
        """A ``restore`` call on each actor of ``classes`` first seen after ``since`` (once each)."""
        from ray.util.state import list_tasks

        seen_before = {s.actor_id for s in self.sightings if s.at <= since}
        done = {r.actor_id for r in self.restores}
        fresh = {s.actor_id: s for s in self.sightings if s.class_name in classes and s.job_id == self.ray_job_id
                 and s.actor_id not in seen_before | done}
        for actor_id, sighting in fresh.items():
            tasks = list_tasks(address=self.ctx.address, filters=[("actor_id", "=", actor_id)], limit=10_000,
                               raise_on_missing_output=False)
            if any(_method(t) == "restore" for t in tasks):
                self.restores.append(RestoreSighting(at=round(self.ctx.elapsed(), 3), actor_id=actor_id,
                                                     class_name=sighting.class_name, job_id=sighting.job_id))

    def invariants(self) -> list[Verdict]:
        verdicts = [job_succeeded(self.record), *(self._fault_verdicts() if self.ctx.faults else _REFERENCE)]
        return verdicts + (self._probe_verdicts() if self.probes else [])

    def _fault_verdicts(self) -> list[Verdict]:
        if self.kills:
            self._look_for_answers()  # once more after the job's end: a restore late in the job
        return [within_ratio(self.record, self.baseline, ratio=self.p.max_slowdown),
                fault_seen(self._kills(), self.sightings, job_id=self.ray_job_id, restores=self.restores,
                           attempts=self.attempts)]

    def _kills(self) -> list[KilledActors]:
        """The kills with their actors; one the context counted but the runner did not name
        (it could not say whom it killed) is kept, with no actor: it fails closed."""
        counted = self.ctx.injections(FaultKind.KILL)
        return self.kills + [KilledActors(round(t, 3), ()) for t in counted[len(self.kills):]]

    def _probe_verdicts(self) -> list[Verdict]:
        final = self._probe_round()
        failed = [f"{r.probe}: {r.detail}" for r in final if not r.ok]
        late = recovered(self.probe_runs, within=self.p.recover_within)
        return [Verdict.over("probes_pass_after_heal", len(final), held=not failed,
                             detail=f"after the job: {failed or f'all {len(final)} passed'}"),
                Verdict.over("probes_recover", len(self.probe_runs), held=not late,
                             detail=f"{len(self.probe_runs)} probe runs; not recovered: {late[:3] or 'none'}")]


#: The fault-free run's verdicts of what only a run under faults can show: not judged there
#: (the runner shows them as n/a: ``FAULT_VERDICTS``).
_REFERENCE = [Verdict.unknown("within_ratio", "the fault-free run is what the run under faults is compared with"),
              Verdict.unknown("fault_seen", "the fault-free run kills nothing")]


def _method(task: Any) -> str:
    """The method an actor task called: the last part of its name ("objective.restore": a
    Tune trainable's name is its function's, Ray's ``repr_name``)."""
    return str(task.name or task.func_or_class_name or "").rpartition(".")[2]


#: Seconds the dashboard has to answer Train's runs.
TRAIN_RUNS_TIMEOUT = 10.0


def train_attempts(dashboard: str) -> list[TrainAttempt]:
    """Every attempt of every Ray Train run the cluster's dashboard reports (Train's state API,
    on with ``RAY_TRAIN_ENABLE_STATE_TRACKING``); none when Train reports nothing."""
    import urllib.error
    import urllib.request

    from chaos.cluster import auth_headers

    request = urllib.request.Request(dashboard + TRAIN_RUNS_ROUTE, headers=auth_headers())
    try:
        with urllib.request.urlopen(request, timeout=TRAIN_RUNS_TIMEOUT) as reply:
            data = json.loads(reply.read())
    except urllib.error.HTTPError:  # no Train run yet: the dashboard finds no state actor (500)
        return []
    return attempts_of(data)


def attempts_of(data: Mapping[str, Any]) -> list[TrainAttempt]:
    """The attempts in Train's ``TrainRunsResponse`` JSON."""
    return [TrainAttempt(run_id=str(run["id"]), attempt_id=str(a["attempt_id"]), start_ns=int(a["start_time_ns"]),
                         status=str(a["status"]),
                         workers=tuple((int(w["world_rank"]), str(w["actor_id"])) for w in a.get("workers", [])))
            for run in data.get("train_runs", []) for a in run.get("attempts", [])]


def job_seconds(start_ms: int | None, end_ms: int | None, *, fallback: float) -> float:
    """How long the job ran, by Ray's own times of it (``JobInfo.start_time`` and ``end_time``,
    ms: from the submission taken to its end, no wait for the agent); ``fallback`` (seconds
    since the submission returned) when Ray has not both."""
    if start_ms is None or end_ms is None or end_ms < start_ms:
        return fallback
    return (end_ms - start_ms) / 1000.0


def _short(class_name: str | None) -> str:
    """Ray's qualified class name as a target names it: "f.<locals>.Flock" is "Flock"."""
    return str(class_name or "").rsplit(".", 1)[-1]


def _matches(target: Any, row: Any) -> bool:
    if not isinstance(target, ActorTarget):
        return False
    if target.actor_id:
        return bool(row.actor_id == target.actor_id)
    if target.name:
        return bool(row.name == target.name and (target.namespace in (None, row.ray_namespace)))
    # Ray records the qualified name: "f.<locals>.Flock" matches "Flock" (as target resolution does).
    return target.class_name in (row.class_name, str(row.class_name).rsplit(".", 1)[-1])


def _read_handoff(path: str) -> JobRecord | None:
    """The fault-free run's record, or None when it left none (it did not get to its end)."""
    try:
        with open(path, encoding="utf-8") as src:
            return JobRecord.from_json(src.read())
    except FileNotFoundError:
        return None


def _job_timeout(given: float | None, baseline: JobRecord | None, *, faults: bool) -> float:
    """Seconds the job may run: as given, else for the run under faults ``TIMEOUT_FACTOR`` times
    the fault-free run (at least ``MIN_JOB_TIMEOUT``), else ``DEFAULT_JOB_TIMEOUT``."""
    if given is not None:
        return given
    if faults and baseline is not None and baseline.end is JobEnd.SUCCEEDED:
        return max(MIN_JOB_TIMEOUT, TIMEOUT_FACTOR * baseline.seconds)
    return DEFAULT_JOB_TIMEOUT


# -- loading -----------------------------------------------------------------------------------


def job_problems(command: str, max_slowdown: float, job_timeout: float | None) -> list[Problem]:
    """What is wrong with ``run --job``'s options (empty when nothing)."""
    problems = []
    if not command.strip():
        problems.append(Problem("--job", command, "is empty; give the command that runs your script, "
                                "e.g. --job 'python train.py'"))
    if not max_slowdown > 1:
        problems.append(Problem("--max-slowdown", max_slowdown, "must be above 1 (a run under faults is "
                                "not faster than without); e.g. 3.0"))
    if job_timeout is not None and not job_timeout > 0:
        problems.append(Problem("--job-timeout", job_timeout, "must be a positive number of seconds"))
    return problems


def load_job(path: str, *, command: str, working_dir: str, handoff: str, max_slowdown: float = 3.0,
             job_timeout: float | None = None, overrides: Overrides = NO_OVERRIDES, seed: int = 0,
             embedded: bool = True) -> Scenario:
    """A scenario running ``command`` as a Ray job under the attack file at ``path`` (its
    probes, if any, judge the job besides; ``overrides``: the command line's, over the file's).
    ``embedded``: the cluster is one raychaos starts, so the job gets this process's ``PATH``
    with this interpreter's folder first (``python`` is the one raychaos runs on).

    Raises:
        ScenarioError: every problem found: of the options, a field an attack file cannot hold,
            or a schedule without a kill of an actor (``fault_seen`` would have nothing to see).
    """
    read = read_attack(path, overrides, not_for="a job's attack file (the job is your script)")
    problems = job_problems(command, max_slowdown, job_timeout) + read.problems + [
        Problem(name, dict(value), why) for name, value, why in (
            ("scope", read.scope, "not for run --job: its faults reach only the job it submits"),
            ("abort_when", read.abort_when, "not for run --job: the job is judged by its end; use it with "
                                            "raychaos attack"),
            ("load", read.load, "not for run --job: a job is judged by its end and time; use it with raychaos attack"),
            ("slo", read.slo, "not for run --job: it judges a [load]")) if value]
    if problems:
        raise ScenarioError(read.source, problems)
    submission = f"raychaos-{uuid.uuid4().hex[:12]}"  # the run under faults' job: its faults' scope
    data = read.data | {
        "workload": JOB_WORKLOAD, "invariants": list(JOB_INVARIANTS + (PROBE_INVARIANTS if read.probes else ())),
        "params": {"command": command, "working_dir": working_dir, "handoff": handoff,
                   "max_slowdown": float(max_slowdown), "job_timeout": job_timeout,
                   "path": _path() if embedded else None, "submission_id": submission, **read.params()}}
    data.setdefault("name", f"job-{os.path.splitext(os.path.basename(path))[0]}")
    return _with_kill_targets(within_scope(_validate(read.source, data, seed, None), {"job": submission}))


def agent_port_taken(port: int = AGENT_PORT, *, patience: float = 0.0) -> bool:
    """Whether something on this machine still listens on ``port`` after ``patience`` seconds
    (the agent of a cluster torn down just before lingers a moment): an embedded cluster's
    dashboard agent then cannot, and its jobs cannot be submitted (``ray.init`` has no option
    to move it)."""
    try:
        wait_until(lambda: not _listened(port), timeout=patience, interval=0.25, what=f"port {port} free")
    except HangError:
        return True
    return False


def port_holder(port: int = AGENT_PORT) -> str:
    """Who listens on ``port`` here (``pid 123 (ray::DashboardAgent)``), for a refusal to name
    what to stop; ``unknown`` when no process lists it (another namespace, or it just ended)."""
    import psutil

    try:
        pids = {c.pid for c in psutil.net_connections(kind="tcp")
                if c.status == psutil.CONN_LISTEN and c.laddr and c.laddr.port == port and c.pid}
    except psutil.Error:
        return "unknown"
    return ", ".join(f"pid {pid} ({_process_name(pid)})" for pid in sorted(pids)) or "unknown"


def _process_name(pid: int) -> str:
    import psutil

    try:
        return " ".join(psutil.Process(pid).cmdline())[:80] or psutil.Process(pid).name()
    except psutil.Error:
        return "ended"


def _listened(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


def _path() -> str:
    here = os.path.dirname(sys.executable)
    return os.pathsep.join([here, *(p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != here)])


def _with_kill_targets(scenario: Scenario) -> Scenario:
    """The scenario with its kills' targets in the params; refused when one is not an actor or
    there is none (``fault_seen`` judges what Ray did with killed actors)."""
    kills = [e.fault for e in scenario.schedule.entries if isinstance(e.fault, Kill)]
    others = [f.target.label() for f in kills if not isinstance(f.target, ActorTarget)]
    if not kills or others:
        value = others[0] if others else "no kill"
        raise ScenarioError(scenario.source or scenario.name, [Problem(
            "faults", value, "a job's schedule needs kills of actors (by class, name or id), and only "
            "those: fault_seen looks for Ray restarting or replacing each killed actor; e.g. target = "
            "{ kind = \"actor\", class_name = \"RayTrainWorker\" }")])
    targets = [target_to_dict(f.target) for f in kills]
    return replace(scenario, params={**scenario.params, "kill_targets": targets})

