"""What a workload is to the runner: setup, steps, a steady-state probe, invariants, teardown."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any, ClassVar

from chaos import InvalidConfig, MemoryOutcome
from scenarios._records import Verdict

__all__ = ["RunContext", "Workload"]

CALL_TIMEOUT = 30.0


class RunContext:
    """What a workload may use: the cluster, its options, a clock, counters and series.

    Counters (``count``) feed the throughput timeline; series (``point``) are curves such
    as the evaluation return; metrics (``metric``) are single figures for the summary.
    """

    def __init__(self, *, address: str, namespace: str, seed: int, params: Mapping[str, Any],
                 storage: str, duration: float, faults: bool) -> None:
        self.address, self.namespace, self.seed = address, namespace, seed
        self.params, self.storage, self.faults = dict(params), storage, faults
        self.params_read: set[str] = set()  # what the workload asked for (see unknown_params)
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
        self.injected: list[str] = []  # kinds of the faults injected so far (confirmed)
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

    def injected_fault(self, kind: str) -> None:
        with self._lock:
            self.injected.append(kind)
            self.injected_at.append(self.elapsed())

    def injections(self, kind: str) -> list[float]:
        """When each fault of ``kind`` was confirmed, seconds into the run."""
        with self._lock:
            return [t for k, t in zip(self.injected, self.injected_at) if k == kind]

    def memory_outcome(self, outcome: MemoryOutcome) -> None:
        """How a memory fault ended (e.g. Ray's memory monitor killed the allocation)."""
        with self._lock:
            self.memory_outcomes.append(outcome)

    def kills(self) -> int:
        """How many kill faults were injected in this run so far."""
        with self._lock:
            return self.injected.count("kill")

    def check_params(self, workload: str) -> None:
        """Raise for ``[params]`` keys the workload's ``setup`` did not ask for.

        Raises:
            InvalidConfig: names each unknown key, its value, and the keys the workload reads.
        """
        unknown = sorted(set(self.params) - self.params_read)
        if unknown:
            given = ", ".join(f"params.{k} = {self.params[k]!r}" for k in unknown)
            raise InvalidConfig(f"{given}: not a parameter of workload {workload!r}; it reads "
                                f"{', '.join(sorted(self.params_read)) or 'none'}")

    def snapshot(self) -> dict[str, float]:
        with self._lock:
            return dict(self.counters)

    def param(self, name: str, default: Any, kind: type | tuple[type, ...]) -> Any:
        """A workload option from the scenario's ``[params]``, type-checked. Read them all in
        ``setup``: a ``[params]`` key no setup asked for is an error (a misspelling would
        otherwise fall back to the default without a word)."""
        self.params_read.add(name)
        value = self.params.get(name, default)
        if isinstance(value, bool) and kind is not bool or not isinstance(value, kind):
            raise InvalidConfig(f"params.{name} = {value!r}: must be {getattr(kind, '__name__', kind)}")
        return value


class Workload:
    """Base of every workload. Subclasses name their invariants and implement the hooks.

    ``step`` does one unit of work and returns False once the workload is done (it may
    finish before the scenario's duration); ``probe`` is the steady-state hypothesis: it
    returns a short description when the system serves, and raises when it does not.
    """

    INVARIANTS: ClassVar[tuple[str, ...]] = ()
    #: Also run the same seed without faults and report both side by side.
    BASELINE: ClassVar[bool] = False

    def __init__(self, ctx: RunContext) -> None:
        self.ctx = ctx

    def setup(self) -> None:
        """Create actors and warm up; runs before the first probe and the first fault."""

    def step(self) -> bool:
        raise NotImplementedError

    def probe(self) -> str:
        return "no probe"

    def invariants(self) -> list[Verdict]:
        return []

    def teardown(self) -> None:
        """Release everything the workload created (actors, refs)."""
