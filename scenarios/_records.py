"""The records of a scenario run: verdicts, probes, samples, faults, and the run itself."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["FaultRecord", "Phase", "Probe", "RunResult", "RunStatus", "Sample", "Verdict"]

Phase = Literal["before", "during", "after"]
#: As chaostoolkit's journal: completed (ran to its end), interrupted (Ctrl-C), aborted (the
#: workload itself raised). Whether an invariant broke is ``deviated``, apart from the status.
RunStatus = Literal["completed", "interrupted", "aborted"]


@dataclass(frozen=True, slots=True)
class Verdict:
    """Did an invariant (or a steady-state check) hold, and the evidence."""

    name: str
    held: bool
    detail: str


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


@dataclass(frozen=True, slots=True)
class FaultRecord:
    """A fault as it happened: when it started and was healed, and how long recovery took."""

    at: float
    start: float
    end: float
    kind: str
    target: str
    outcome: str
    mttr: float | None


@dataclass(frozen=True, slots=True)
class RunResult:
    """One run of a scenario (``label`` ``"chaos"``, or ``"baseline"`` for the fault-free twin)."""

    scenario: str
    label: str
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

    @property
    def deviated(self) -> bool:
        """An invariant or a steady-state check broke, or the run did not complete."""
        return self.status != "completed" or not all(v.held for v in self.verdicts)

    @property
    def peak_rss_bytes(self) -> int:
        return max((s.rss_bytes for s in self.samples), default=0)
