"""The records of a scenario run: verdicts, probes, samples, faults, and the run itself."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

from chaos import FaultKind
from chaos.engine import FaultStatus
from chaos.history import Validity, Verdict, compose

__all__ = [
    "NO_PROBE_NOTE",
    "OUTCOME_WORDS",
    "VALIDITY_WORDS",
    "FaultRecord",
    "Phase",
    "Probe",
    "Problem",
    "RunLabel",
    "RunResult",
    "RunStatus",
    "Sample",
    "Validity",
    "Verdict",
    "outcome_of",
    "seconds_text",
]

Phase = Literal["before", "during", "after"]

#: What the reports say of a run whose workload has no steady-state probe.
NO_PROBE_NOTE = ("no steady-state probe: the workload has none, so neither the steady state nor "
                 "recovery from a fault was checked")


class RunLabel(StrEnum):
    """Which of a scenario's runs: the one under faults, or its fault-free twin (same seed)."""

    CHAOS = "chaos"
    BASELINE = "baseline"


class RunStatus(StrEnum):
    """Where a run is, as chaostoolkit's journal: it starts ``RUNNING`` and ends
    ``COMPLETED`` (ran to its end), ``INTERRUPTED`` (Ctrl-C: no probes, no invariants) or
    ``ABORTED`` (the workload itself raised, a call into it ran past its bound, or a scheduled
    fault was left without its record). Whether an invariant broke is ``deviated``."""

    RUNNING = "running"
    COMPLETED = "completed"
    INTERRUPTED = "interrupted"
    ABORTED = "aborted"


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a scenario file: where, what value, and how to fix it."""

    field: str
    value: object
    fix: str

    def __str__(self) -> str:
        return f"{self.field} = {self.value!r}: {self.fix}"


@dataclass(frozen=True, slots=True)
class Probe:
    """One steady-state probe of the workload: at ``t`` seconds into the run."""

    phase: Phase
    t: float
    ok: bool
    detail: str


@dataclass(frozen=True, slots=True)
class Sample:
    """The workload's counters at ``t`` seconds, and the run's processes' memory then."""

    t: float
    counters: Mapping[str, float]
    rss_bytes: int


def seconds_text(value: float | None) -> str:
    """A duration or time for people; a dash when there is none (never confirmed, no MTTR)."""
    return "—" if value is None else f"{value:.2f} s"


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultRecord:
    """A fault as it happened: when it started, took effect (``confirmed``; None if never) and
    was healed, how long recovery took, and whether it happened at all (``status``; only
    ``INJECTED`` did)."""

    at: float
    start: float
    end: float
    kind: FaultKind
    target: str
    outcome: str
    mttr: float | None
    status: FaultStatus = FaultStatus.INJECTED
    confirmed: float | None = None
    #: Which schedule entry this is (its index); every entry ends with exactly one record.
    index: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RunResult:
    """One run of a scenario (``label``: under faults, or the fault-free twin).

    ``strict_faults``: a scheduled fault that did not happen (not found, refused,
    ineffective, not reached) makes the run deviate; the scenario can opt out in words.
    """

    scenario: str
    label: RunLabel
    seed: int
    status: RunStatus
    seconds: float
    verdicts: tuple[Verdict, ...]
    probes: tuple[Probe, ...]
    samples: tuple[Sample, ...]
    faults: tuple[FaultRecord, ...]
    metrics: Mapping[str, float] = field(default_factory=dict)
    series: Mapping[str, tuple[tuple[float, float], ...]] = field(default_factory=dict)
    error: str = ""
    strict_faults: bool = True
    #: Verdicts the workload gave for invariants the scenario did not declare: shown in the
    #: report, never judged (they do not make the run deviate, nor pass).
    unjudged: tuple[Verdict, ...] = ()
    #: The workload has a steady-state probe. False: no steady state and no recovery were
    #: checked, and the report says so (they are absent, never "held").
    probed: bool = True

    @property
    def missed_faults(self) -> tuple[FaultRecord, ...]:
        """The scheduled faults that did not happen."""
        return tuple(f for f in self.faults if f.status is not FaultStatus.INJECTED)

    @property
    def outcome(self) -> Validity:
        """The run as one validity: ``BROKEN`` when it did not complete, a verdict broke or (with
        ``strict_faults``) a scheduled fault did not happen; else ``UNKNOWN`` when a verdict
        could not be judged; else ``HELD``. n/a verdicts count for nothing; a fault-free twin
        whose every verdict is n/a is n/a itself."""
        if self.status is not RunStatus.COMPLETED or (self.strict_faults and self.missed_faults):
            return Validity.BROKEN
        found = [v.validity for v in self.verdicts]
        if self.label is RunLabel.BASELINE and found and all(v is Validity.NOT_APPLICABLE for v in found):
            # A twin asked only for faults' traces judged nothing and broke nothing: it counts
            # for nothing, as each of its verdicts does (the run under faults is judged).
            return Validity.NOT_APPLICABLE
        return compose(found)

    @property
    def deviated(self) -> bool:
        """The run did not pass: it broke (see :attr:`outcome`) or could not be judged."""
        return self.outcome not in (Validity.HELD, Validity.NOT_APPLICABLE)

    @property
    def peak_rss_bytes(self) -> int:
        return max((s.rss_bytes for s in self.samples), default=0)


#: How every report names a verdict's validity (the console, the HTML, JUnit's message).
VALIDITY_WORDS: Mapping[Validity, str] = {Validity.HELD: "held", Validity.BROKEN: "BROKEN",
                                          Validity.UNKNOWN: "UNKNOWN", Validity.NOT_APPLICABLE: "n/a"}
#: How every report names a scenario's outcome.
OUTCOME_WORDS: Mapping[Validity, str] = {Validity.HELD: "ALL INVARIANTS HELD", Validity.BROKEN: "DEVIATED",
                                         Validity.UNKNOWN: "INCONCLUSIVE", Validity.NOT_APPLICABLE: "INCONCLUSIVE"}


def outcome_of(results: Sequence[RunResult]) -> Validity:
    """A scenario's outcome over its runs (the fault-free twin's too: a twin that broke what
    needs no fault is a finding like any other; its fault traces are n/a and count for nothing)."""
    return compose(r.outcome for r in results)
