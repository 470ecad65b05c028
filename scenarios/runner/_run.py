"""Runs a scenario: steady state before, faults while the workload works, recovery, invariants.

The order follows chaostoolkit's run: probe the steady state, inject the schedule (each fault
healed in ``finally``, also on Ctrl-C), probe during and after, then check the invariants.
Every fault's recovery time (MTTR) is the time from its injection until the workload's probe
succeeds again after its heal (said apart when it held only once the run had ended).
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import psutil

from chaos import (
    Chaos,
    FaultKind,
    HangError,
    MemoryPressure,
    RpcFailure,
    Schedule,
    ScheduledFault,
    local_cluster,
    wait_until,
)
from chaos.agents import AGENT_START_TIMEOUT, stop_agents
from chaos.cluster import TEST_SYSTEM_CONFIG, capped_filesystem, client_auth_mode, ray_processes, redis_server
from chaos.disks import STORAGE
from chaos.engine import (
    MAX_FAULT_SECONDS,
    NODE_DEATH_CONFIRM,
    FaultOutcome,
    FaultStatus,
    Injection,
    MemoryWatch,
    ScheduleObserver,
    fault_specs,
    preflight,
    rpc_failure_env,
    rpc_failures_injected,
    run_schedule,
    unconfirmed_rpc_failures,
)
from chaos.errors import InvalidConfig
from chaos.journal import EndEvent, Journal, RecoverEvent, StartEvent, VerdictEntry
from scenarios.model._bounded import CallHang, bounded
from scenarios.model._records import (
    FaultRecord,
    Phase,
    Probe,
    RunLabel,
    RunResult,
    RunStatus,
    Sample,
    Validity,
    Verdict,
)
from scenarios.model._scenario import AT_END_SLACK, Scenario, SteadyState, resolve_workload
from scenarios.model._workload import FaultWindow, Params, RunContext, Workload, validate_params
from scenarios.runner._disk_storage import aim_disk_faults, storage_on_faultfs
from scenarios.runner._interrupt import interrupt_once
from scenarios.runner._ray_events import RayAccount, ray_account, ray_events
from scenarios.runner._spill_dir import spill_on_faultfs

__all__ = ["CHECKED_NOTHING", "RECOVERED", "Progress", "at_end_schedule", "declared_verdicts", "recovery_verdicts",
           "run_scenario", "steady_verdicts", "undeclared_verdicts"]

RECOVERY_TIMEOUT = 60.0
#: The verdict every run with faults gets when its recovery can be measured.
RECOVERED = "recovered_after_each_fault"
#: The one verdict of a run that judged nothing (no declared invariant, no steady state, no
#: recovery: a Scenario built in code, which load_scenario's refusal never saw): it fails.
CHECKED_NOTHING = Verdict.of("something checked", False, "the run judged no invariant, steady state or recovery: "
                          "it checked nothing; declare invariants, or give the workload a probe")
#: A fault's recovery text when the workload has no probe to measure it with.
NO_PROBE_RECOVERY = "no probe: the workload has no steady-state probe, so recovery was not measured"
SAMPLE_EVERY = 0.5

Progress = Callable[[str, RunContext | None], None]
T = TypeVar("T")


def _quiet(message: str, ctx: RunContext | None) -> None:
    """The default progress callback: say nothing."""


@dataclass(frozen=True, slots=True)
class _Knob:
    """Ray's RPC failure knob on an embedded cluster: its entries, and the folder its
    processes log under (where Ray writes a line for each failure the knob injects)."""

    failures: tuple[RpcFailure, ...]
    log_root: str


@dataclass(frozen=True, slots=True)
class _Run:
    """What one run needs: where it writes, with which seed, and whether it injects faults."""

    scenario: Scenario
    address: str
    seed: int
    label: RunLabel
    faults: bool
    journal_path: str | None
    storage: str
    embedded: bool
    knob: _Knob | None = None
    #: The fault traces the fault-free twin met too (measured held): no evidence of the fault here.
    twin_met: Mapping[str, str] = field(default_factory=dict)


def run_scenario(scenario: Scenario, *, seed: int = 0, address: str | None = None,
                 report_dir: str | None = None, baseline: bool | None = None,
                 progress: Progress = _quiet,
                 workloads: Mapping[str, type[Workload]] | None = None,
                 agent_timeout: float = AGENT_START_TIMEOUT) -> list[RunResult]:
    """Run ``scenario`` (and its fault-free baseline when the workload asks) and return the runs.

    Args:
        address: an existing cluster's address; None starts an embedded one (torn down after).
        report_dir: where ``journal.jsonl`` (and ``baseline.journal.jsonl``) go; None: memory.
        baseline: run the fault-free twin too (default: as the workload says).
        workloads: workloads by name, besides the built-in ones and ``module:Class`` paths.
        agent_timeout: seconds each node's chaos agent has to start and answer, on an
            existing cluster (checked before any run, with what each fault kind needs there).

    Raises:
        InvalidConfig: the workload is unknown or its ``params`` invalid, or the scenario
            has no fault and does not say ``strict_faults=False`` (nothing started).
        ClusterUnfit: on an existing cluster, a node lacks what a fault of the schedule needs
            (its agent did not start, ...): each named, before any run (nothing injected).
        KeyboardInterrupt: after Ctrl-C, once every fault is healed, the run journaled
            ``interrupted`` and, for an embedded cluster, Ray is down. Further Ctrl-Cs while
            that happens are noted and ignored (each step of it is bounded).
    """
    workload_cls = resolve_workload(scenario.workload, workloads)
    params = validate_params(workload_cls.Params, scenario.params, workload=scenario.workload)
    if scenario.faultless and scenario.strict_faults:  # load_scenario refuses such a file too
        raise InvalidConfig(f"scenario {scenario.name!r} has no fault, so its run would pass untested "
                            "under faults; give it a schedule, or strict_faults=False to run it without faults")
    if scenario.heal == "at_end":
        scenario = replace(scenario, schedule=at_end_schedule(scenario.schedule, scenario.duration))
    with interrupt_once():
        scenario, oom_config = _with_oom_headroom(scenario, address)
        with spill_on_faultfs(scenario, address) as (scenario, spill_config), \
                _cluster(scenario, address, {**oom_config, **spill_config}) as (addr, knob), \
                tempfile.TemporaryDirectory(prefix="raychaos-") as tmp:
            if address is not None:  # a cluster someone else runs: refused now, not halfway through
                preflight(scenario.schedule, address=addr, timeout=agent_timeout)
            wants_baseline = workload_cls.BASELINE if baseline is None else baseline
            labels = ([RunLabel.BASELINE] if wants_baseline else []) + [RunLabel.CHAOS]
            results: list[RunResult] = []
            for label in labels:
                journal = _journal_path(report_dir, label)
                with _storage(scenario, f"{tmp}/{label}") as storage:
                    run = _Run(scenario=_at_storage(scenario, storage), address=addr, seed=seed, label=label,
                               faults=label is RunLabel.CHAOS, journal_path=journal, storage=storage,
                               embedded=address is None, knob=knob, twin_met=twin_met(results))
                    results.append(_run_once(run, workload_cls, params, progress))
            return results


@contextmanager
def _storage(scenario: Scenario, path: str) -> Iterator[str]:
    """A run's checkpoint storage: ``path``, or a capped tmpfs when ``storage_mb`` asks;
    mounted through a fault filesystem when ``storage_faultfs`` asks."""
    if scenario.storage_mb is None:
        with storage_on_faultfs(scenario, path) as root:
            yield root
        return
    with capped_filesystem(scenario.storage_mb) as capped, storage_on_faultfs(scenario, capped) as root:
        yield root


def _at_storage(scenario: Scenario, storage: str) -> Scenario:
    """The scenario with every fault of ``path = "$STORAGE"`` (a full disk, a corrupted file)
    and the disk faults of ``mount = "$STORAGE"`` aimed at this run's storage."""
    entries = tuple(ScheduledFault(e.at, replace(e.fault, path=storage))
                    if getattr(e.fault, "path", None) == STORAGE else e
                    for e in scenario.schedule.entries)
    return aim_disk_faults(replace(scenario, schedule=Schedule(entries, scenario.schedule.seed)), storage)


def at_end_schedule(schedule: Schedule, duration: float) -> Schedule:
    """The schedule as ``heal = "at_end"`` runs it: each fault that ends itself after its
    ``seconds`` (a pause, a CPU hog, a memory allocation, a frozen node: the agent on the node
    keeps that deadline) asked to last to the run's end and ``AT_END_SLACK`` past it, so that
    the driver's heal at the end is what ends it, as the journal and the report say. A fault
    asked to last longer keeps its own seconds."""
    def held(entry: ScheduledFault) -> ScheduledFault:
        seconds = getattr(entry.fault, "seconds", None)
        if seconds is None:
            return entry  # an instant fault (a kill): nothing to hold
        to_end = min(MAX_FAULT_SECONDS, duration - entry.at + AT_END_SLACK)
        return ScheduledFault(entry.at, replace(entry.fault, seconds=max(seconds, to_end)))

    return Schedule(tuple(held(e) for e in schedule.entries), schedule.seed)


def _journal_path(report_dir: str | None, label: RunLabel) -> str | None:
    if report_dir is None:
        return None
    os.makedirs(report_dir, exist_ok=True)
    path = os.path.join(report_dir, "journal.jsonl" if label is RunLabel.CHAOS else f"{label}.journal.jsonl")
    if os.path.exists(path):
        os.remove(path)  # a fresh journal per run; the report folder is this run's
    return path


@contextmanager
def _cluster(scenario: Scenario, address: str | None,
             extra_config: dict[str, Any]) -> Iterator[tuple[str, _Knob | None]]:
    """The cluster a scenario runs on (its address), and its RPC failure knob if it sets one."""
    import ray

    if address is None:
        config = {**TEST_SYSTEM_CONFIG, **scenario.system_config, **extra_config}
        with ExitStack() as stack:
            redis = stack.enter_context(redis_server()) if scenario.gcs_fault_tolerance else None
            env = rpc_failure_env(*scenario.rpc_failures) if scenario.rpc_failures else None
            handle = stack.enter_context(local_cluster(
                nodes=scenario.nodes, num_cpus=scenario.num_cpus, system_config=config,
                worker_resources={"worker": 100}, log_to_driver=False, redis_address=redis,
                worker_env=env, network=scenario.network, object_store_mb=scenario.object_store_mb))
            yield handle.address, _Knob(scenario.rpc_failures, handle.temp_dir) if scenario.rpc_failures else None
        return
    if scenario.gcs_fault_tolerance or scenario.rpc_failures:
        raise InvalidConfig(f"scenario {scenario.name!r} sets up the cluster it runs on "
                            "(gcs_fault_tolerance, rpc_failures): run it without --address")
    if ray.is_initialized():  # this process is already a driver (a test, a notebook): reuse it
        connected = ray.get_runtime_context().gcs_address
        if connected != address:
            raise InvalidConfig(f"this process is connected to the Ray cluster at {connected!r}, "
                                f"not {address!r}; pass --address {connected} or call ray.shutdown()")
        yield connected, None
        return
    # A cluster with token authentication demands the client's token, sent only in token mode
    # (from ~/.ray/auth_token or RAY_AUTH_TOKEN, as Ray reads them); which mode this Ray's client
    # may ask for without knowing the cluster's: chaos.cluster.client_auth_mode.
    if (mode := client_auth_mode()) is not None:
        os.environ.setdefault("RAY_AUTH_MODE", mode)
    ray.init(address=address, namespace="raychaos", log_to_driver=False)
    try:
        yield ray.get_runtime_context().gcs_address, None
    finally:
        stop_agents()  # detached agents would outlive the run on a cluster we do not own
        ray.shutdown()


def _with_oom_headroom(scenario: Scenario, address: str | None) -> tuple[Scenario, dict[str, Any]]:
    """For ``oom_headroom_gib``: the threshold to give Ray, and the faults aimed past it."""
    if scenario.oom_headroom_gib is None or address is not None:
        return scenario, {}
    threshold = _oom_threshold(scenario.oom_headroom_gib)
    return (aim_memory_faults(scenario, threshold),
            {"memory_usage_threshold": threshold, "memory_monitor_refresh_ms": 100})


def _oom_threshold(headroom_gib: float) -> float:
    vm = psutil.virtual_memory()
    used = float(vm.total - vm.available + headroom_gib * 2**30)
    return round(min(0.9, used / float(vm.total)), 3)


def aim_memory_faults(scenario: Scenario, threshold: float) -> Scenario:
    """The scenario with each memory fault aimed just past Ray's memory monitor threshold."""
    entries = tuple(
        ScheduledFault(e.at, replace(e.fault, fraction=min(threshold + 0.05, 0.92),
                                     host_cap=min(threshold + 0.1, 0.95)))
        if isinstance(e.fault, MemoryPressure) else e for e in scenario.schedule.entries)
    return replace(scenario, schedule=Schedule(entries, scenario.schedule.seed))


# -- one run -------------------------------------------------------------------------------


#: Seconds each call into a workload may take. Past it the run is aborted, naming the call and
#: its bound (a hook blocked on a paused service would otherwise hang the run for ever). Wide:
#: a library's setup builds its actors, an invariant may wait out its own deadlines.
CALL_BOUNDS: Mapping[str, float] = {"setup": 300.0, "step": 120.0, "probe": 60.0, "invariants": 300.0,
                                    "teardown": 60.0}


def _hook_bounds(workload: Workload) -> Mapping[str, float]:
    """``workload.call_bounds()``, each a hook asked for after setup with a positive bound.

    Raises:
        InvalidConfig: a name no hook has, ``setup`` (whose bound has passed when this is
            asked), or a bound that is not a positive number of seconds.
    """
    bounds = workload.call_bounds()
    later = sorted(set(CALL_BOUNDS) - {"setup"})
    for hook, seconds in bounds.items():
        if hook not in later or not seconds > 0:
            raise InvalidConfig(f"{type(workload).__name__}.call_bounds() gives {hook!r}: {seconds!r}; give "
                                f"positive seconds for hooks among {later} (setup's bound is the runner's "
                                f"{CALL_BOUNDS['setup']:g} s: call_bounds() is asked after setup)")
    return bounds


class _Bounded:
    """The workload as the runner calls it: each hook with its deadline (``CALL_BOUNDS``).

    A hook past its bound records the run's failure, stops the run and raises
    :class:`CallHang`; from then on the workload counts as broken (``hung``): every hook but
    ``teardown`` refuses at once, since its hung call may still be running in its thread.
    """

    def __init__(self, workload: Workload, rec: _Recorder, ctx: RunContext,
                 bounds: Mapping[str, float] = CALL_BOUNDS) -> None:
        self.workload, self.rec, self.ctx, self.bounds = workload, rec, ctx, bounds
        self.HAS_PROBE = workload.HAS_PROBE
        self.hung: str | None = None  # what hung, once something did
        #: Whether setup returned: a workload that never set up has nothing to probe or judge.
        self.set_up = False

    def _call(self, hook: str, call: Callable[[], T]) -> T:
        what = f"{type(self.workload).__name__}.{hook}()"
        if self.hung is not None and hook != "teardown":
            raise CallHang(f"{what} not called: {self.hung}")
        try:
            return bounded(call, what=what, seconds=self.bounds[hook])
        except CallHang as exc:
            self.hung = str(exc)
            self.rec.fail(str(exc))
            self.ctx.stop.set()
            raise

    def setup(self) -> None:
        self._call("setup", self.workload.setup)
        self.set_up = True
        self.bounds = {**self.bounds, **_hook_bounds(self.workload)}

    def step(self) -> bool:
        return self._call("step", self.workload.step)

    def probe(self) -> str:
        return self._call("probe", self.workload.probe)

    def invariants(self) -> list[Verdict]:
        return self._call("invariants", self.workload.invariants)

    def teardown(self) -> None:
        self._call("teardown", self.workload.teardown)


class _Recorder:
    """Collects a run's probes, samples and fault records from several threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.probes: list[Probe] = []
        self.samples: list[Sample] = []
        self.faults: list[FaultRecord] = []
        self.sampler: threading.Thread | None = None
        self.ray_before = RayAccount()  # Ray's own account at time zero (see _ray_events)
        #: Why the run cannot count as completed, whatever the workload did (first one first).
        self.failures: list[str] = []
        self.interrupted = threading.Event()  # Ctrl-C: nothing more is judged
        self._faults_closed = False

    def probe(self, probe: Probe) -> None:
        with self.lock:
            self.probes.append(probe)

    def sample(self, sample: Sample) -> None:
        with self.lock:
            self.samples.append(sample)

    def fault(self, record: FaultRecord) -> None:
        with self.lock:
            if not self._faults_closed:  # a record after the check: its entry is already FAILED
                self.faults.append(record)

    def close_faults(self, schedule: Schedule, *, why: str) -> None:
        """Make every schedule entry end with exactly one record (see :func:`complete_records`);
        a missing one fails the run, naming it. Records that come later are dropped: their
        entries were already recorded as failed."""
        with self.lock:
            self._faults_closed = True
            self.faults, problems = complete_records(schedule, self.faults, why=why)
            self.failures += [f"fault records: {p}" for p in problems]

    def fail(self, why: str) -> None:
        with self.lock:
            self.failures.append(why)

    def knob_records(self, records: Sequence[FaultRecord]) -> None:
        """The RPC failure knob's records: of no schedule entry, so past the entries' check."""
        with self.lock:
            self.faults.extend(records)


def _run_once(run: _Run, workload_cls: type[Workload], params: Params, progress: Progress) -> RunResult:
    scenario = run.scenario
    ctx = RunContext(address=run.address, namespace="raychaos" if run.faults else "raychaos-baseline", seed=run.seed,
                     params=params, storage=run.storage, duration=scenario.duration,
                     faults=run.faults, plan=scenario.schedule)
    journal = Journal(run.journal_path)
    chaos = Chaos(address=run.address, journal=journal, seed=run.seed)
    rec = _Recorder()
    workload = _Bounded(workload_cls(ctx), rec, ctx)
    started = _start_once(journal, lambda: StartEvent(
        scenario=scenario.name, source=scenario.source, run=run.label, seed=run.seed, heal=scenario.heal,
        duration=scenario.duration, schedule=_schedule(run).planned()))
    progress(f"{scenario.name} [{run.label}]: setting up", ctx)
    status, error = RunStatus.RUNNING, ""
    verdicts: list[Verdict] = []
    unjudged: list[Verdict] = []
    knob = run.knob if run.faults else None
    fired_before = rpc_failures_injected(knob.log_root) if knob else {}  # an earlier run's too
    try:
        status, error = _exercise(run, workload, ctx, chaos, rec, progress, started)
    except KeyboardInterrupt:
        status, error = RunStatus.INTERRUPTED, "interrupted by Ctrl-C: no probes after it, no invariants"
        progress(f"{scenario.name} [{run.label}]: interrupted, healing", ctx)
        raise
    finally:
        started()  # a run that ended before time zero: its journal still opens with its start
        ctx.stop.set()
        chaos.heal_all()  # the rollback: runs after Ctrl-C too
        if knob is not None and status is not RunStatus.INTERRUPTED:
            rec.knob_records(knob_records(knob, fired_before, ctx.elapsed()))
        verdicts, unjudged = _conclude(run, workload, ctx, rec, status)
        status, error = _with_failures(status, error, rec.failures)
        if status is RunStatus.ABORTED:  # its one cause is its error: nothing it judged can stand
            verdicts, unjudged = [], []
        if rec.sampler is not None:
            rec.sampler.join(timeout=5)
        journal.record(EndEvent(outcome=status.value, seconds=ctx.elapsed(),
                                verdicts=tuple(VerdictEntry.of(v)
                                               for v in verdicts),
                                faults=tuple(f.status for f in rec.faults)))
        journal.close()
    return RunResult(scenario=scenario.name, label=run.label, seed=run.seed, status=status,
                     seconds=round(ctx.elapsed(), 3),
                     verdicts=tuple(verdicts), probes=tuple(rec.probes), samples=tuple(rec.samples),
                     faults=tuple(sorted(rec.faults, key=lambda f: f.start)), metrics=dict(ctx.metrics),
                     series={k: tuple(v) for k,
                             v in ctx.series.items()}, error=error, strict_faults=scenario.strict_faults,
                     unjudged=tuple(unjudged), probed=workload.HAS_PROBE)


#: Seconds to wait for Ray's log lines of the knob's failures to reach the files.
KNOB_LOG_WAIT = 3.0


def knob_records(knob: _Knob, before: Mapping[str, int], elapsed: float, *,
                 wait: float = KNOB_LOG_WAIT) -> list[FaultRecord]:
    """One record per RPC failure entry of the run: ``INJECTED`` when Ray logged at least one
    failure of its method during the run (counts above ``before``, what earlier runs on the
    cluster had logged), ``INEFFECTIVE`` otherwise: a knob entry that injected nothing (a
    misspelled method, calls that never leave a worker node's processes) tested nothing."""
    def fired() -> dict[str, int]:
        now = rpc_failures_injected(knob.log_root)
        return {m: n - before.get(m, 0) for m, n in now.items() if n > before.get(m, 0)}

    def all_fired() -> dict[str, int] | None:
        counts = fired()
        return None if unconfirmed_rpc_failures(knob.failures, counts) else counts

    try:
        counts = wait_until(all_fired, timeout=wait, interval=0.2, what="Ray's log lines of injected RPC failures")
    except HangError:
        counts = fired()
    return [_knob_record(f, counts, elapsed) for f in knob.failures]


def _knob_record(failure: RpcFailure, counts: Mapping[str, int], elapsed: float) -> FaultRecord:
    (problem,) = unconfirmed_rpc_failures((failure,), counts) or ("",)
    if problem:
        return FaultRecord(at=0.0, start=0.0, end=elapsed, kind=FaultKind.RPC_FAILURE, target=failure.method,
                           outcome=f"ineffective: {problem}", mttr=None, status=FaultStatus.INEFFECTIVE, confirmed=None)
    seen = sum(counts.values()) if failure.method == "*" else counts[failure.method]  # at least 1: confirmed
    return FaultRecord(at=0.0, start=0.0, end=elapsed, kind=FaultKind.RPC_FAILURE, target=failure.method,
                       outcome=f"Ray's knob injected {seen} failure(s) of this method during the run (its logs)",
                       mttr=None, status=FaultStatus.INJECTED, confirmed=elapsed)


def _with_failures(status: RunStatus, error: str, failures: Sequence[str]) -> tuple[RunStatus, str]:
    """The run's status once the runner's own findings count: a call past its bound or a fault
    without its record aborts a run the workload completed (it cannot be trusted as one)."""
    if status is RunStatus.INTERRUPTED or not failures:
        return status, error
    return RunStatus.ABORTED, "; ".join([*([error] if error else []), *(f for f in failures if f not in error)])


def _start_once(journal: Journal, make: Callable[[], StartEvent]) -> Callable[[], None]:
    """Journal the run's start event once. Its time is time zero (a reader's ``inject.mono -
    start.mono`` is the fault's time in the run), so it is made when the clock starts, after
    setup and warm-up; journaled before them, it added their seconds to every fault's."""
    done = threading.Event()

    def record() -> None:
        if not done.is_set():
            done.set()
            journal.record(make())
    return record


def _schedule(run: _Run) -> Schedule:
    return run.scenario.schedule if run.faults else Schedule(())


def _exercise(run: _Run, workload: _Bounded, ctx: RunContext, chaos: Chaos, rec: _Recorder,
              progress: Progress, started: Callable[[], None]) -> tuple[RunStatus, str]:
    """Setup, probe before, the workload's loop under faults. Returns (status, error)."""
    try:
        workload.setup()
        chaos.warm_up(_schedule(run))  # agents and the State API, before time zero
        rec.ray_before = ray_account(ctx.address, ctx.namespace)
        ctx.start_clock()
        started()
        rec.sampler = threading.Thread(target=_sample, args=(ctx, rec, run.embedded), daemon=True,
                                       name="raychaos-sampler")
        rec.sampler.start()
        if workload.HAS_PROBE:
            rec.probe(_probe(workload, ctx, "before"))
        progress(f"{run.scenario.name} [{run.label}]: running", ctx)
        with _faults_running(run, workload, ctx, chaos, rec):
            while not ctx.over() and workload.step():
                progress("", ctx)
        return RunStatus.COMPLETED, ""
    except Exception as exc:  # noqa: BLE001 - the workload's failure is the run's result
        return RunStatus.ABORTED, f"{type(exc).__name__}: {exc}"


def _conclude(run: _Run, workload: _Bounded, ctx: RunContext, rec: _Recorder,
              status: RunStatus) -> tuple[list[Verdict], list[Verdict]]:
    """Probe after, check invariants and steady state, tear down. Never raises. Returns the
    judged verdicts and those of undeclared invariants (shown, not judged). An interrupted
    run gets no probe and no verdict: nothing was checked, so nothing held; nor does an
    aborted run (its error is its one cause: a workload that hung, whose hooks are not called
    again but teardown; a setup that raised, whose state the invariants would read; a cluster
    the faults could not reach, which its probes, still passing, would call "held")."""
    verdicts: list[Verdict] = []
    unjudged: list[Verdict] = []
    try:
        if status not in (RunStatus.INTERRUPTED, RunStatus.ABORTED) and workload.hung is None and workload.set_up:
            if workload.HAS_PROBE:
                rec.probe(_probe(workload, ctx, "after"))
            verdicts, unjudged = _judged(run, workload, rec)
            after = ray_account(ctx.address, ctx.namespace, since=rec.ray_before)
            kept = not any(_forgets_task_events(f.kind) for f in rec.faults)
            ctx.metrics.update(ray_events(rec.ray_before, after, task_events_kept=kept))
    except Exception as exc:  # noqa: BLE001 - reported as a broken verdict, not a crash
        verdicts.append(Verdict.of("invariants checked", False, f"{type(exc).__name__}: {exc}"))
    finally:
        try:
            workload.teardown()
        except Exception:  # noqa: BLE001 - teardown is best effort; the cluster goes next
            pass
    return verdicts, unjudged


def _forgets_task_events(kind: FaultKind) -> bool:
    """A fault of this kind restarts the GCS (see ``FaultSpec.forgets_task_events``); Ray's RPC
    failure knob, set for the whole run, has no spec and restarts nothing."""
    spec = fault_specs().get(kind)
    return spec is not None and spec.forgets_task_events


def _judged(run: _Run, workload: _Bounded, rec: _Recorder) -> tuple[list[Verdict], list[Verdict]]:
    """The run's verdicts (declared invariants, steady state, recovery; against its twin, or as
    the twin) and its undeclared ones, shown unjudged (the twin's fault traces n/a there too)."""
    produced = workload.invariants()
    verdicts = declared_verdicts(run.scenario.invariants, produced)
    unjudged = undeclared_verdicts(run.scenario.invariants, produced)
    verdicts += steady_verdicts(run.scenario.steady_state, rec.probes, has_probe=workload.HAS_PROBE)
    if _recovery_judged(run.scenario, workload):
        verdicts += recovery_verdicts(rec.faults, within=run.scenario.recovery_within)
    verdicts = verdicts or [CHECKED_NOTHING]
    fault_verdicts = type(workload.workload).FAULT_VERDICTS
    if run.faults:
        return against_twin(verdicts, run.twin_met), unjudged
    return twin_verdicts(verdicts, fault_verdicts), twin_verdicts(unjudged, fault_verdicts)


#: Why a fault's trace does not apply to the fault-free twin.
FAULT_FREE = "a fault-free run cannot meet it (the fault-free twin, shown for comparison)"
#: The steady-state check of the faults' span: a run without faults has none.
DURING = "steady state during"


def twin_verdicts(verdicts: Sequence[Verdict], fault_verdicts: Collection[str]) -> list[Verdict]:
    """The fault-free twin's verdicts: each that only a run under faults can meet (the workload's
    ``FAULT_VERDICTS``, and the steady state during faults) is n/a, its measurement kept."""
    return [v.not_applicable(FAULT_FREE) if v.name in fault_verdicts or v.name == DURING else v for v in verdicts]


def twin_met(results: Sequence[RunResult]) -> dict[str, str]:
    """The fault traces the fault-free twin among ``results`` met too (by name, its evidence)."""
    return {v.name: v.detail for r in results if r.label is RunLabel.BASELINE for v in r.verdicts
            if v.measured is Validity.HELD}


def against_twin(verdicts: Sequence[Verdict], met: Mapping[str, str]) -> list[Verdict]:
    """The run under faults' verdicts, each fault trace the twin met too unknown instead of held:
    a trace a run without the fault shows as well is no evidence that the fault left it."""
    return [v.unless(f"the fault-free twin met it too ({met[v.name][:200]}): no evidence the fault left it")
            if v.name in met else v for v in verdicts]


def declared_verdicts(declared: Sequence[str], produced: Sequence[Verdict]) -> list[Verdict]:
    """Exactly one verdict per declared invariant, in the declared order: one the workload
    did not produce, or produced twice, is a broken verdict naming the problem (a run
    never passes on an invariant nobody checked). Verdicts not declared are left to
    :func:`undeclared_verdicts`: the report shows them, unjudged."""
    out = []
    for name in declared:
        found = [v for v in produced if v.name == name]
        if len(found) == 1:
            out.append(found[0])
        elif not found:
            out.append(Verdict.of(name, False, "no verdict: the workload did not report this "
                                            "declared invariant, so it was never checked"))
        else:
            out.append(Verdict.of(name, False, f"{len(found)} verdicts for one invariant: "
                                            + "; ".join(f"{v.held}: {v.detail}" for v in found)))
    return out


def undeclared_verdicts(declared: Sequence[str], produced: Sequence[Verdict]) -> list[Verdict]:
    """The workload's verdicts for invariants the scenario did not declare, in its order: not
    judged (the scenario chose its invariants), but shown, never silently dropped."""
    return [v for v in produced if v.name not in declared]


def steady_verdicts(steady: SteadyState, probes: Sequence[Probe], *, has_probe: bool = True) -> list[Verdict]:
    """One verdict per steady-state check the scenario asks for. A check no probe reached
    (a run shorter than ``probe_every``, say) does not hold. A workload without a probe gets
    none: its steady state was never checked, so it is absent (the report says why), not held."""
    if not has_probe:
        return []
    out = []
    for phase, wanted in (("before", steady.before), ("after", steady.after)):
        got = [p for p in probes if p.phase == phase]
        if wanted:
            out.append(Verdict.over(f"steady state {phase}", len(got), held=all(p.ok for p in got),
                                    detail=got[-1].detail if got else f"no probe ran {phase} the faults"))
    during = [p for p in probes if p.phase == "during"]
    if steady.during_min > 0:
        share = sum(p.ok for p in during) / len(during) if during else 0.0
        out.append(Verdict.over(DURING, len(during), held=share >= steady.during_min,
                                detail=f"{share:.0%} of {len(during)} probes held (need {steady.during_min:.0%}, "
                                f"one every {steady.probe_every:g} s)"))
    return out


def _recovery_judged(scenario: Scenario, workload: Workload | _Bounded) -> bool:
    """Whether each fault's recovery is a verdict: the workload has a probe to measure it and
    the scenario expects the steady state back (``steady_state.after = false`` says it does
    not, e.g. an actor killed past its restarts)."""
    return workload.HAS_PROBE and scenario.steady_state.after


def recovery_verdicts(faults: Sequence[FaultRecord], *, within: float) -> list[Verdict]:
    """``recovered_after_each_fault``: every fault that happened was followed, within
    ``within`` seconds of its heal, by a probe that held. One that did not recover (no MTTR:
    not in time, or the run ended first) or took longer breaks it, named. None when no fault
    happened (the missed faults speak for themselves)."""
    # The RPC failure knob is never healed during a run: there is no heal to recover after.
    happened = [f for f in faults if f.status is FaultStatus.INJECTED and f.kind is not FaultKind.RPC_FAILURE]
    if not happened:
        return []
    late = [f for f in happened if f.mttr is None or _after_heal(f) > within]
    slowest = max((_after_heal(f) for f in happened if f.mttr is not None), default=0.0)
    detail = ("; ".join(f"{f.kind} of {f.target} at {f.at:g} s: {_late_text(f, within)}" for f in late)
              if late else f"{len(happened)} fault(s), each recovered within {within:g} s of its heal "
              f"(slowest {slowest:.2f} s)")
    return [Verdict.over(RECOVERED, len(happened), held=not late, detail=detail)]


def _after_heal(f: FaultRecord) -> float:
    """Seconds from the fault's heal until the probe held again (its MTTR counts from injection)."""
    return max(0.0, f.start + (f.mttr or 0.0) - f.end)


def _late_text(f: FaultRecord, within: float) -> str:
    if f.mttr is None:
        return f"not recovered within {within:g} s of its heal ({f.outcome})"
    return f"recovered {_after_heal(f):.2f} s after its heal, past the {within:g} s bound"


def _probe(workload: Workload | _Bounded, ctx: RunContext, phase: Phase) -> Probe:
    try:
        return Probe(phase=phase, t=round(ctx.elapsed(), 3), ok=True, detail=workload.probe())
    except Exception as exc:  # noqa: BLE001 - a failed probe is a result
        return Probe(phase=phase, t=round(ctx.elapsed(), 3), ok=False, detail=f"{type(exc).__name__}: {exc}"[:300])


def _sample(ctx: RunContext, rec: _Recorder, embedded: bool) -> None:
    """Every SAMPLE_EVERY seconds: the counters and the memory of this run's processes."""
    while not ctx.stop.wait(SAMPLE_EVERY):
        rec.sample(Sample(round(ctx.elapsed(), 3), ctx.snapshot(), _rss(embedded=embedded)))
    rec.sample(Sample(round(ctx.elapsed(), 3), ctx.snapshot(), _rss(embedded=embedded)))


def _rss(*, embedded: bool) -> int:
    """Memory of this run's processes (PSS: shared pages split, not counted in each): the
    driver and everything it started (an embedded cluster is all descendants), plus every
    Ray process here when attached to an existing cluster."""
    me = psutil.Process()
    procs = {p.pid: p for p in [me, *me.children(recursive=True), *([] if embedded else ray_processes())]}
    total = 0
    for proc in procs.values():
        try:
            total += proc.memory_full_info().pss
        except psutil.Error:
            continue
    return total


# -- faults: chaos.engine.run_schedule, the one fault loop, with this run's observer -------------------


@contextmanager
def _faults_running(run: _Run, workload: _Bounded, ctx: RunContext, chaos: Chaos,
                    rec: _Recorder) -> Iterator[None]:
    schedule = _schedule(run)
    if not schedule.entries:
        ctx.faults_settled.set()
        yield
        return
    observer = _RunObserver(run.scenario, workload, ctx, chaos, rec)
    driver = threading.Thread(target=_drive, args=(chaos, schedule, ctx, observer), daemon=True,
                              name="raychaos-faults")
    prober = threading.Thread(target=_probe_during, args=(run, workload, ctx, rec), daemon=True,
                              name="raychaos-probe")
    driver.start()
    if workload.HAS_PROBE:
        prober.start()
    try:
        yield
    except KeyboardInterrupt:
        rec.interrupted.set()  # no recovery is judged after Ctrl-C: its waits end at once
        raise
    finally:
        ctx.stop.set()
        # Each fault's recovery waits its bound, plus one probe's, after the heals the stop starts.
        # A fault settles after its confirmation, its hold and its recovery's wait (probes included).
        bound = run.scenario.recovery_within + workload.bounds["probe"] + NODE_DEATH_CONFIRM + 30
        driver.join(timeout=bound)
        rec.close_faults(schedule, why=f"the fault driver was still running {bound:g} s after the run's end"
                         if driver.is_alive() else "the fault driver ended without settling it")
        if prober.is_alive():
            prober.join(timeout=CALL_BOUNDS["probe"] + 5)


def complete_records(schedule: Schedule, records: Sequence[FaultRecord], *,
                     why: str) -> tuple[list[FaultRecord], list[str]]:
    """Exactly one record per schedule entry, in the schedule's order, and what was wrong: an
    entry without a record gets a ``FAILED`` one saying ``why``; an entry with several gets one
    ``FAILED`` record naming their statuses; a record of no entry is named and dropped."""
    out, problems = [], []
    for i, entry in enumerate(schedule.entries):
        found = [r for r in records if r.index == i]
        if len(found) == 1:
            out.append(found[0])
            continue
        name = f"faults[{i}] {entry.kind} of {entry.target_label} at {entry.at:g} s"
        text = (f"no record: {why}" if not found else
                f"{len(found)} records for one fault: {', '.join(r.status.value for r in found)}")
        problems.append(f"{name}: {text}")
        out.append(FaultRecord(at=entry.at, start=entry.at, end=entry.at, kind=entry.kind, target=entry.target_label,
                               outcome=f"{FaultStatus.FAILED.value}: {text}", mttr=None, status=FaultStatus.FAILED,
                               confirmed=None, index=i))
    problems += [f"a record of no scheduled fault: {r.kind} of {r.target} at {r.at:g} s (index {r.index})"
                 for r in records if r.index is None or not 0 <= r.index < len(schedule.entries)]
    return out, problems


def _drive(chaos: Chaos, schedule: Schedule, ctx: RunContext, observer: _RunObserver) -> None:
    try:
        run_schedule(chaos, schedule, stop=ctx.stop, start=ctx.started, observer=observer)
    finally:
        ctx.faults_settled.set()


def _probe_during(run: _Run, workload: _Bounded, ctx: RunContext, rec: _Recorder) -> None:
    while not ctx.stop.wait(run.scenario.steady_state.probe_every):
        rec.probe(_probe(workload, ctx, "during"))


class _RunObserver(ScheduleObserver):
    """Holds each fault per the heal strategy, counts it, measures its recovery, records it."""

    def __init__(self, scenario: Scenario, workload: _Bounded, ctx: RunContext, chaos: Chaos,
                 rec: _Recorder) -> None:
        self.scenario, self.workload, self.ctx, self.chaos, self.rec = scenario, workload, ctx, chaos, rec

    def hold(self, entry: ScheduledFault) -> float:
        if self.scenario.heal == "at_end":
            return self.ctx.remaining()
        return float(getattr(entry.fault, "seconds", 0.0))

    def injecting(self, index: int, entry: ScheduledFault) -> None:
        # A workload judging Ray's answer to a kill looks at its targets once more: the kill's
        # actor may have started after its last look (a slow machine's Tune trial did).
        if entry.kind is FaultKind.KILL:
            self.workload.workload.before_kill()

    def injected(self, index: int, entry: ScheduledFault, injection: Injection) -> None:
        self.ctx.injected_fault(entry.kind)
        # A workload judging Ray's answer to a kill (the job's fault_seen) needs whom it killed.
        if entry.kind is FaultKind.KILL:
            self.workload.workload.actors_killed(tuple(p.actor_id for p in injection.processes if p.actor_id))

    def settled(self, outcome: FaultOutcome) -> FaultOutcome:
        entry, target = outcome.entry, outcome.entry.target_label
        start = entry.at if outcome.started is None else outcome.started
        end = start if outcome.ended is None else outcome.ended
        if not outcome.ok:
            self.rec.fault(FaultRecord(at=entry.at, start=start, end=end, kind=entry.kind, target=target,
                                       outcome=f"{outcome.status.value}: {outcome.error}"[:500], mttr=None,
                                       status=outcome.status, confirmed=outcome.confirmed, index=outcome.index))
            return outcome
        healed = self._heal_observed(outcome.injection)
        confirmed = start if outcome.confirmed is None else outcome.confirmed
        self.ctx.fault_settled(FaultWindow(entry.kind, confirmed, max(end, confirmed), injection=outcome.injection))
        judged = _recovery_judged(self.scenario, self.workload)
        mttr, recovered = _recovery(self.workload, self.ctx, start, within=self.scenario.recovery_within,
                                    give_up_at_stop=not judged, abandon=self.rec.interrupted)
        text = f"{healed}; {recovered}" if healed else recovered
        self.chaos.journal.record(RecoverEvent(at=entry.at, fault=entry.fault, target=target, outcome=text,
                                               seconds=mttr))
        self.rec.fault(FaultRecord(at=entry.at, start=start, end=end, kind=entry.kind, target=target, outcome=text,
                                   mttr=mttr, status=outcome.status,
                                   confirmed=outcome.confirmed, index=outcome.index))
        return outcome

    def _heal_observed(self, injection: Injection) -> str:
        if isinstance(injection.found, MemoryWatch) and injection.found.result is not None:
            self.ctx.memory_outcome(injection.found.result.outcome)
        return injection.heal_note()


def _recovery(workload: Workload | _Bounded, ctx: RunContext, start: float, *, within: float = RECOVERY_TIMEOUT,
              give_up_at_stop: bool = True, abandon: threading.Event | None = None) -> tuple[float | None, str]:
    """Seconds from injection until the probe holds again, waiting ``within`` seconds (None if
    it did not in time, or the workload has no probe: then nothing was measured, and the text
    says so). ``give_up_at_stop``: once the run has stopped, a failing probe ends the wait
    (for a scenario that does not expect the steady state back); otherwise the fault keeps its
    whole bound, the run's end or not, since its recovery is judged. ``abandon`` set (Ctrl-C):
    a failing probe ends the wait at once, judged or not."""
    if not workload.HAS_PROBE:
        return None, NO_PROBE_RECOVERY

    def healthy() -> str:
        # The probe first: a workload that ends itself on the fault (owner-death) has still
        # recovered if its probe holds; the stop only cuts short a probe that keeps failing.
        try:
            workload.probe()
        except CallHang:
            return "hung"  # the workload is broken from here on: the run is aborted already
        except Exception:
            if (give_up_at_stop and ctx.stop.is_set()) or (abandon is not None and abandon.is_set()):
                return "stopped"
            raise
        # Said apart: a steady state that returned only once the load stopped did not return under it.
        return "recovered after the run ended" if ctx.stop.is_set() else "recovered"

    try:
        outcome = wait_until(healthy, timeout=within, interval=0.05, what="the steady state")
    except HangError:
        return None, f"not recovered within {within:g} s"
    if outcome == "stopped":
        return None, "the run ended before the steady state returned"
    if outcome == "hung":
        return None, "not measured: a call into the workload ran past its bound"
    return round(ctx.elapsed() - start, 3), outcome
