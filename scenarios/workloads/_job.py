"""``raychaos run --job COMMAND SCHEDULE``: the user's own script, submitted as a Ray job, under
an attack-style fault schedule, judged against the same command's fault-free run.

The runner runs the fault-free twin first (its ``baseline`` run), so the run under faults knows
the time to compare with and the bound to stop its job at. The twin hands its record on through
a small JSON file (``params.handoff``): each run is its own :class:`Job` instance. Each job gets
``RAYCHAOS_SEED`` (the run's seed, the same in both) in its environment.

Verdicts, each a pure function of records (:func:`job_succeeded`, :func:`within_ratio`,
:func:`fault_seen`): the job under faults succeeded; it took at most ``max_slowdown`` times the
fault-free run; every kill the schedule made was answered by Ray bringing the killed actor back
(the same actor with more restarts, or a new actor of its kind: what Train and Tune do), as the
State API showed while the job ran. Optional probes are judged as ``raychaos attack`` judges them.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from enum import StrEnum
from typing import Any

from pydantic import Field

from chaos import FaultKind, Kill, wait_until
from chaos._targets import ActorTarget, target_from_dict, target_to_dict
from chaos.errors import HangError
from scenarios.model._records import Problem, Verdict
from scenarios.model._scenario import _ATTACK_FIELDS, Scenario, ScenarioError, _load, _validate
from scenarios.model._workload import Params, Workload
from scenarios.workloads._attack import ProbeRun, probes_from, recovered

__all__ = ["ActorSighting", "Job", "JobEnd", "JobRecord", "fault_seen", "job_succeeded", "load_job",
           "within_ratio"]

#: The workload as scenario files name it: a ``module:Class`` path, so no registry entry is needed.
JOB_WORKLOAD = "scenarios.workloads._job:Job"
JOB_INVARIANTS = ("job_succeeded", "within_ratio", "fault_seen")
PROBE_INVARIANTS = ("probes_pass_after_heal", "probes_recover")
#: The environment variable each job reads its seed from (the same in both runs).
SEED_VARIABLE = "RAYCHAOS_SEED"
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
    """An actor matching a kill target as one State API listing showed it, ``at`` seconds in."""

    at: float
    actor_id: str
    alive: bool
    restarts: int


# -- verdicts: pure functions of records ------------------------------------------------------


def job_succeeded(record: JobRecord | None) -> Verdict:
    """The job under faults ended ``SUCCEEDED`` (a job never submitted does not)."""
    if record is None:
        return Verdict("job_succeeded", False, "no job ran: the run ended before its job was submitted")
    said = f"; its log ends: {record.log_tail[-300:]}" if record.end is not JobEnd.SUCCEEDED else ""
    return Verdict("job_succeeded", record.end is JobEnd.SUCCEEDED,
                   f"job {record.submission_id} {record.end.value} after {record.seconds:.1f} s{said}", 1)


def within_ratio(faulty: JobRecord | None, baseline: JobRecord | None, *, ratio: float) -> Verdict:
    """The job under faults took at most ``ratio`` times its fault-free run. Both must have
    succeeded: a time of a failed run compares nothing."""
    name = "within_ratio"
    if baseline is None or baseline.end is not JobEnd.SUCCEEDED:
        why = "did not run" if baseline is None else f"ended {baseline.end.value}"
        return Verdict(name, False, f"no fault-free time to compare with: the fault-free run {why}")
    if faulty is None or faulty.end is not JobEnd.SUCCEEDED:
        why = "did not run" if faulty is None else f"ended {faulty.end.value}"
        return Verdict(name, False, f"the run under faults {why}: no time to compare")
    slowdown = faulty.seconds / max(baseline.seconds, 1e-9)
    return Verdict(name, slowdown <= ratio, f"{faulty.seconds:.1f} s under faults, {baseline.seconds:.1f} s "
                   f"without: {slowdown:.2f}x (bound {ratio:g}x)", 1)


def fault_seen(kills: Sequence[float], sightings: Sequence[ActorSighting]) -> Verdict:
    """Every kill (its time in seconds) was answered by Ray: after it, an actor matching the
    schedule's kill targets is alive that was not alive at the last listing before it, or one
    that was is alive with more restarts. Fails closed: no kill landed, or none was seen alive
    before its kill (what was killed, then, is unknown)."""
    if not kills:
        return Verdict("fault_seen", False, "no kill landed: nothing was restarted because nothing was killed", 0)
    problems = [p for p in (_kill_answered(t, sightings) for t in kills) if p]
    return Verdict("fault_seen", not problems, "; ".join(problems) or
                   f"{len(kills)} kill(s), each followed by a restarted or replaced actor (State API)", len(kills))


def _kill_answered(at: float, sightings: Sequence[ActorSighting]) -> str:
    """"" when the kill at ``at`` was answered, else what was missing."""
    listed = [s.at for s in sightings if s.at < at]
    if not listed:
        return f"kill at {at:.1f} s: no listing before it saw a target alive"
    last = max(listed)
    before = {s.actor_id: s.restarts for s in sightings if s.at == last and s.alive}
    if not before:
        return f"kill at {at:.1f} s: no target alive at the listing before it ({last:.1f} s)"
    back = [s for s in sightings if s.at > at and s.alive and s.restarts > before.get(s.actor_id, -1)]
    return "" if back else (f"kill at {at:.1f} s: no actor of the targets restarted or replaced after it "
                            f"({len([s for s in sightings if s.at > at])} sightings after)")


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
    probes: list[dict[str, str]] = Field(default_factory=list)
    #: The job's ``PATH`` (None: the cluster's): on an embedded cluster, the one raychaos runs
    #: with, so ``python`` in the command is the interpreter raychaos was started from.
    path: str | None = None
    every: float = 1.0
    recover_within: float = 30.0
    probe_timeout: float = 10.0


class Job(Workload):
    """The user's command as a Ray job; one ``step`` submits it and waits for its end."""

    INVARIANTS = JOB_INVARIANTS + PROBE_INVARIANTS
    DEFAULT_INVARIANTS = JOB_INVARIANTS
    Params = JobParams

    def setup(self) -> None:
        import ray
        from ray.job_submission import JobSubmissionClient

        self.p = self.ctx.params_as(JobParams)
        self.baseline = _read_handoff(self.p.handoff) if self.ctx.faults else None
        self.timeout = _job_timeout(self.p.job_timeout, self.baseline, faults=self.ctx.faults)
        # The dashboard of the cluster this driver is connected to (embedded or --address).
        self.client = JobSubmissionClient(f"http://{ray._private.worker.get_dashboard_url()}")
        self.targets = [target_from_dict(t) for t in self.p.kill_targets]
        self.probes = probes_from(self.p.probes)
        self.record: JobRecord | None = None
        self.job_id: str | None = None
        self.sightings: list[ActorSighting] = []
        self.probe_runs: list[ProbeRun] = []

    def call_bounds(self) -> Mapping[str, float]:
        return {"step": SUBMIT_PATIENCE + self.timeout + STOP_PATIENCE + 60.0,
                "invariants": len(self.probes) * self.p.probe_timeout + 60.0}

    def step(self) -> bool:
        started = time.monotonic()
        job_id = self.job_id = self._submit()
        end, last_probe = None, 0.0
        while end is None and time.monotonic() - started < self.timeout:
            end = _RAY_ENDS.get(str(self.client.get_job_status(job_id)))
            self._look()
            if self.probes and time.monotonic() - last_probe >= self.p.every:
                last_probe = time.monotonic()
                self._probe_round()
            if end is None:
                self.ctx.stop.wait(POLL)
        seconds = time.monotonic() - started
        if end is None:
            end = self._stop(job_id)
        self.record = JobRecord(end, round(seconds, 3), job_id, self.client.get_job_logs(job_id)[-2000:])
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
        env = {SEED_VARIABLE: str(self.ctx.seed), **({"PATH": self.p.path} if self.p.path else {})}

        def submit() -> str:
            return str(self.client.submit_job(entrypoint=self.p.command, runtime_env={
                "working_dir": self.p.working_dir, "env_vars": env}))

        # Right after a head starts its dashboard may have no job agent yet ("No available
        # agent to submit job, please try again later"): retried, bounded.
        try:
            return wait_until(submit, timeout=SUBMIT_PATIENCE, interval=0.5, what="the job's submission")
        except HangError as exc:
            raise HangError(f"{exc}; the head's dashboard agent takes the jobs: it listens on port "
                            f"{AGENT_PORT} unless the cluster was started with another "
                            "--dashboard-agent-listen-port, and cannot when another Ray on the machine "
                            "holds that port") from exc

    def _stop(self, job_id: str) -> JobEnd:
        """Stop a job past its bound and wait (bounded) until Ray says it ended."""
        self.client.stop_job(job_id)
        try:
            wait_until(lambda: str(self.client.get_job_status(job_id)) in _RAY_ENDS, timeout=STOP_PATIENCE,
                       interval=0.5, what=f"job {job_id} to stop")
        except HangError:
            pass  # still reported as timed out: it did not end in its bound either way
        return JobEnd.TIMED_OUT

    def _look(self) -> None:
        """One State API listing of the actors the schedule kills."""
        from ray.util.state import list_actors

        if not self.targets:
            return
        at = round(self.ctx.elapsed(), 3)
        try:
            rows = list_actors(address=self.ctx.address, limit=10_000, detail=True, raise_on_missing_output=False)
        except Exception:  # noqa: BLE001 - a listing missed is a sighting missed: fault_seen fails closed
            self.ctx.count("State API listings failed")
            return
        self.sightings += [ActorSighting(at, a.actor_id, a.state == "ALIVE", int(a.num_restarts or 0))
                           for a in rows if any(_matches(t, a) for t in self.targets)]

    def _probe_round(self) -> list[ProbeRun]:
        found = []
        for probe in self.probes:
            ok, detail = probe.run(timeout=self.p.probe_timeout)
            found.append(ProbeRun(round(self.ctx.elapsed(), 3), probe.spec, ok, detail))
        self.probe_runs += found
        return found

    def invariants(self) -> list[Verdict]:
        verdicts = [job_succeeded(self.record), *(self._fault_verdicts() if self.ctx.faults else _REFERENCE)]
        return verdicts + (self._probe_verdicts() if self.probes else [])

    def _fault_verdicts(self) -> list[Verdict]:
        return [within_ratio(self.record, self.baseline, ratio=self.p.max_slowdown),
                fault_seen(self.ctx.injections(FaultKind.KILL), self.sightings)]

    def _probe_verdicts(self) -> list[Verdict]:
        final = self._probe_round()
        failed = [f"{r.probe}: {r.detail}" for r in final if not r.ok]
        late = recovered(self.probe_runs, within=self.p.recover_within)
        return [Verdict.over("probes_pass_after_heal", len(final), held=not failed,
                             detail=f"after the job: {failed or f'all {len(final)} passed'}"),
                Verdict.over("probes_recover", len(self.probe_runs), held=not late,
                             detail=f"{len(self.probe_runs)} probe runs; not recovered: {late[:3] or 'none'}")]


#: The fault-free run's verdicts of what only a run under faults can show: it is their reference.
_REFERENCE = [Verdict("within_ratio", True, "the fault-free run: what the run under faults is timed against", 1),
              Verdict("fault_seen", True, "the fault-free run: no fault to see", 1)]


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
             job_timeout: float | None = None, probes: Sequence[Mapping[str, str]] = (),
             seed: int = 0, duration: float | None = None, embedded: bool = True) -> Scenario:
    """A scenario running ``command`` as a Ray job under the attack-style schedule at ``path``.
    ``embedded``: the cluster is one raychaos starts, so the job gets this process's ``PATH``
    with this interpreter's folder first (``python`` is the one raychaos runs on).

    Raises:
        ScenarioError: every problem found: of the options, a field an attack file cannot hold,
            or a schedule without a kill of an actor (``fault_seen`` would have nothing to see).
    """
    source, data = _load(path)
    problems = job_problems(command, max_slowdown, job_timeout) + [
        Problem(k, data[k], f"not for a job's schedule (the job is your script); a schedule holds "
                f"{', '.join(sorted(_ATTACK_FIELDS))}") for k in sorted(set(data) - _ATTACK_FIELDS)]
    if problems:
        raise ScenarioError(source, problems)
    data.setdefault("name", f"job-{os.path.splitext(os.path.basename(path))[0]}")
    data |= {"workload": JOB_WORKLOAD, "invariants": list(JOB_INVARIANTS + (PROBE_INVARIANTS if probes else ())),
             "params": {"command": command, "working_dir": working_dir, "handoff": handoff,
                        "max_slowdown": float(max_slowdown), "job_timeout": job_timeout,
                        "probes": [dict(p) for p in probes], "path": _path() if embedded else None}}
    if duration is not None:
        data["duration"] = duration
    scenario = _validate(source, data, seed, None)
    return _with_kill_targets(scenario)


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

