"""What a workload is to the runner: setup, steps, a steady-state probe, invariants, teardown."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, TypeVar, get_args, get_origin

from pydantic import BaseModel, ConfigDict, ValidationError

from chaos import FaultKind, Schedule, ScheduledFault
from chaos.engine import Injection, MemoryOutcome
from chaos.errors import InvalidConfig
from scenarios.model._records import Problem, Verdict

__all__ = ["Extra", "FaultWindow", "Params", "RunContext", "Workload", "params_problems", "validate_params"]

CALL_TIMEOUT = 30.0
#: An optional extra of raychaos (``pip install 'raychaos[rl]'``) a workload imports.
Extra = Literal["rl", "apps"]

P = TypeVar("P", bound="Params")


class Params(BaseModel):
    """A workload's ``[params]``: subclass it with typed fields and their defaults.

    A key no field declares is refused (``extra="forbid"``: a misspelling would otherwise
    fall back to the default and run another experiment than the one asked), and values
    are not coerced (``strict``: ``"3"`` is not 3, ``true`` is not 1; an int is a float).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


_Params = Params  # the base, under a name a workload's own ``Params`` attribute cannot shadow


def params_problems(kind: type[Params], raw: Mapping[str, Any]) -> list[Problem]:
    """Every problem of ``raw`` as ``kind``'s params: field, value, fix (empty when valid)."""
    try:
        kind.model_validate(dict(raw))
    except ValidationError as exc:
        return [_problem(kind, error) for error in exc.errors()]
    return []


def _problem(kind: type[Params], error: Any) -> Problem:
    from scenarios.model._tables import MISSING, did_you_mean

    where = "params" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"])
    name = error["loc"][0] if error["loc"] else ""
    if error["type"] == "extra_forbidden":
        known = sorted(kind.model_fields)
        return Problem(where, error["input"], f"not a parameter of this workload; {did_you_mean(name, known)}"
                       f"it takes {', '.join(known) or 'none'}")
    field = kind.model_fields.get(str(name))
    expected = _type_name(field.annotation) if field else "valid"
    if error["type"] == "missing":  # pydantic's input is then the whole table: the field has no value
        return Problem(where, MISSING, f"required: this workload needs it ({expected})")
    return Problem(where, error["input"], f"must be {expected} ({error['msg'].lower()})")


def _type_name(annotation: Any) -> str:
    if get_origin(annotation) is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(annotation))
    return getattr(annotation, "__name__", str(annotation))


def validate_params(kind: type[P], raw: Mapping[str, Any], *, workload: str) -> P:
    """``raw`` as ``kind``'s params.

    Raises:
        InvalidConfig: one line per problem (field, value, fix), nothing started.
    """
    problems = params_problems(kind, raw)
    if problems:
        raise InvalidConfig(f"workload {workload!r}: " + "; ".join(str(p) for p in problems))
    return kind.model_validate(dict(raw))


@dataclass(frozen=True, slots=True)
class FaultWindow:
    """When a fault was on, seconds into the run: from its confirmation to its heal, and what it
    hit and observed (``injection``). In the fault-free twin the schedule's own span of it
    (``planned``: from its ``at`` for its ``seconds``), so that a verdict about the fault's
    trace measures the twin over the same window of its own run."""

    kind: FaultKind
    start: float
    end: float
    planned: bool = False
    injection: Injection | None = None

    def holds(self, t: float) -> bool:
        """``t`` falls in the window (its end excluded)."""
        return self.start <= t < self.end


class RunContext:
    """What a workload may use: the cluster, its options, a clock, counters and series.

    Counters (``count``) feed the throughput timeline; series (``point``) are curves such
    as the evaluation return; metrics (``metric``) are single figures for the summary.
    """

    def __init__(self, *, address: str, namespace: str, seed: int, params: Params,
                 storage: str, duration: float, faults: bool, plan: Schedule | None = None) -> None:
        self.address, self.namespace, self.seed = address, namespace, seed
        self.params, self.storage, self.faults = params, storage, faults
        #: The scenario's schedule (in the fault-free twin too, which injects none of it).
        self.plan = plan or Schedule(())
        self._settled: list[FaultWindow] = []
        self.duration = duration
        self.started = time.monotonic()
        self.deadline = self.started + duration
        self.stop = threading.Event()
        #: Set once every scheduled fault has been injected, healed and its recovery measured
        #: (at once for a run without faults): a workload may wait for it before it finishes.
        self.faults_settled = threading.Event()
        self._lock = threading.Lock()
        self.counters: dict[str, float] = {}
        self.series: dict[str, list[tuple[float, float]]] = {}
        self.metrics: dict[str, float] = {}
        self.injected: list[FaultKind] = []  # kinds of the faults injected so far (confirmed)
        self.injected_at: list[float] = []  # when each was confirmed, seconds into the run
        #: How each memory fault ended, as its heal observed it.
        self.memory_outcomes: list[MemoryOutcome] = []

    def start_clock(self) -> None:
        """Time zero of the run: set once setup is done, so schedules and the timeline skip it."""
        self.started = time.monotonic()
        self.deadline = self.started + self.duration

    def elapsed(self) -> float:
        return time.monotonic() - self.started

    def remaining(self) -> float:
        return max(0.0, self.deadline - time.monotonic())

    def over(self) -> bool:
        """The run should end: its duration is spent or it was stopped."""
        return self.stop.is_set() or time.monotonic() >= self.deadline

    def count(self, name: str, n: float = 1) -> None:
        with self._lock:
            self.counters[name] = self.counters.get(name, 0) + n

    def point(self, series: str, value: float) -> None:
        with self._lock:
            self.series.setdefault(series, []).append((round(self.elapsed(), 3), float(value)))

    def metric(self, name: str, value: float) -> None:
        with self._lock:
            self.metrics[name] = float(value)

    def injected_fault(self, kind: FaultKind) -> None:
        with self._lock:
            self.injected.append(kind)
            self.injected_at.append(self.elapsed())

    def injections(self, kind: FaultKind) -> list[float]:
        """When each fault of ``kind`` was confirmed, seconds into the run."""
        with self._lock:
            return [t for k, t in zip(self.injected, self.injected_at) if k == kind]

    def fault_settled(self, window: FaultWindow) -> None:
        """A fault that happened was healed: its window (the runner calls this)."""
        with self._lock:
            self._settled.append(window)

    def windows(self, kind: FaultKind) -> list[FaultWindow]:
        """When each fault of ``kind`` was on, in the order they were: in a run under faults those
        that happened, confirmed to healed; in the fault-free twin the schedule's planned spans."""
        if self.faults:
            with self._lock:
                return sorted((w for w in self._settled if w.kind is kind), key=lambda w: w.start)
        return [FaultWindow(kind, e.at, e.at + float(getattr(e.fault, "seconds", 0.0)), planned=True)
                for e in self.plan.entries if e.kind is kind]

    def memory_outcome(self, outcome: MemoryOutcome) -> None:
        """How a memory fault ended (e.g. Ray's memory monitor killed the allocation)."""
        with self._lock:
            self.memory_outcomes.append(outcome)

    def kills(self) -> int:
        """How many kill faults were injected in this run so far."""
        with self._lock:
            return self.injected.count(FaultKind.KILL)

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return dict(self.counters)

    def params_as(self, kind: type[P]) -> P:
        """This run's params as the workload's own model (validated when the scenario loaded)."""
        if not isinstance(self.params, kind):
            raise InvalidConfig(f"params are {type(self.params).__name__}, not {kind.__name__}: "
                                f"declare Params = {kind.__name__} on the workload")
        return self.params


class Workload:
    """Base of every workload. Subclasses name their invariants and implement the hooks.

    ``step`` does one unit of work and returns False once the workload is done (it may
    finish before the scenario's duration); ``probe`` is the steady-state hypothesis: it
    returns a short description when the system serves, and raises when it does not.
    """

    INVARIANTS: ClassVar[tuple[str, ...]] = ()
    #: Whether ``probe`` is a check that can fail. Set for every subclass that defines its own
    #: ``probe`` (a subclass may set it False again); without one the runner judges no steady
    #: state and no recovery, and the report says the workload has no probe.
    HAS_PROBE: ClassVar[bool] = False
    _probe_said: ClassVar[bool | None] = None  # HAS_PROBE as a class said it in words
    #: The ``[params]`` it takes, validated when the scenario loads (none by default).
    Params: ClassVar[type[_Params]] = _Params
    #: Also run the same seed without faults and report both side by side.
    BASELINE: ClassVar[bool] = False
    #: The invariants only a run under faults can meet (the fault's traces: "the slow disk
    #: slowed an add"). In the fault-free twin they are n/a, their measurement kept; one the
    #: twin measured as held is no evidence of the fault, so the run under faults' is unknown.
    FAULT_VERDICTS: ClassVar[tuple[str, ...]] = ()
    #: The extra whose packages it imports (None: the base install has them): ``raychaos list``
    #: shows it as a need, and ``raychaos run`` refuses before starting anything when it is missing.
    EXTRA: ClassVar[Extra | None] = None
    #: The invariants a scenario that leaves ``invariants`` out checks, when not every one of
    #: ``INVARIANTS`` can hold in the same run (None: all of ``INVARIANTS``).
    DEFAULT_INVARIANTS: ClassVar[tuple[str, ...] | None] = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "HAS_PROBE" not in cls.__dict__:
            cls.HAS_PROBE = _has_probe(cls)
        else:
            cls._probe_said = cls.__dict__["HAS_PROBE"]

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx

    @classmethod
    def schedule_problems(cls, entries: Sequence[ScheduledFault]) -> list[Problem]:
        """The faults of a schedule this workload cannot judge, each a problem the loader reports
        before anything runs (the base judges any schedule: none)."""
        return []

    def setup(self) -> None:
        """Create actors and warm up; runs before the first probe and the first fault."""

    def step(self) -> bool:
        raise NotImplementedError

    def probe(self) -> str:
        """The steady-state check: a short description when the system serves; raises when
        it does not. The base has none (``HAS_PROBE`` is False): the runner never calls it."""
        raise NotImplementedError(f"{type(self).__name__} has no steady-state probe (HAS_PROBE is False)")

    def invariants(self) -> list[Verdict]:
        return []

    def call_bounds(self) -> Mapping[str, float]:
        """Seconds a hook of this workload may take where the runner's defaults are too short
        (by hook name: ``step``, ``probe``, ``invariants``, ``teardown``): a hook that itself
        waits out a longer deadline must say so, or the runner aborts it first. Called after
        ``setup``, so setup's bound is always the runner's (300 s)."""
        return {}

    def teardown(self) -> None:
        """Release everything the workload created (actors, refs)."""

    def before_kill(self) -> None:
        """Called right before each kill is injected (the runner's fault thread): a workload that
        judges what Ray did with a killed actor looks at its targets once more here."""

    def actors_killed(self, actor_ids: tuple[str, ...]) -> None:
        """Called as each kill is confirmed, with the ids of the actors it killed (empty for a
        process that is no actor's)."""


def _has_probe(cls: type[Workload]) -> bool:
    """Whether a workload class that does not say ``HAS_PROBE`` has a probe: one of its own,
    or else what a base said in words, or else any base's (a mixin's too) but the default's."""
    if "probe" in cls.__dict__:
        return True
    if cls._probe_said is not None:
        return cls._probe_said
    return cls.probe is not Workload.probe
