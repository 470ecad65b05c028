"""The records of a scenario run: verdicts, probes, samples, faults, and the run itself."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

from chaos import FaultKind
from chaos.engine import FaultStatus

__all__ = ["NO_PROBE_NOTE", "FaultRecord", "Phase", "Probe", "Problem", "RunLabel", "RunResult", "RunStatus",
           "Sample", "Verdict", "seconds_text"]

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
class Verdict:
    """Did an invariant (or a steady-state check) hold, and the evidence."""

    name: str
    held: bool
    detail: str
    #: How many things the run did that the verdict is about; None where it checks by itself.
    seen: int | None = None

    @classmethod
    def over(cls, name: str, seen: int, *, held: bool, detail: str) -> Verdict:
        """The verdict of an invariant about ``seen`` things the run did (calls, adds, tasks,
        pushes). Over none it does not hold, whatever ``held`` says: "nothing acknowledged
        was lost" after no add was acknowledged checked nothing (fail closed)."""
        if seen > 0:
            return cls(name, held, detail, seen)
        return cls(name, False, f"nothing to check, none seen: {detail}", 0)


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


@dataclass(frozen=True, slots=True)
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


@dataclass(frozen=True, slots=True)
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
    def deviated(self) -> bool:
        """An invariant or a steady-state check broke, the run did not complete, or (with
        ``strict_faults``) a scheduled fault did not happen."""
        return (self.status is not RunStatus.COMPLETED or not all(v.held for v in self.verdicts)
                or (self.strict_faults and bool(self.missed_faults)))

    @property
    def peak_rss_bytes(self) -> int:
        return max((s.rss_bytes for s in self.samples), default=0)
