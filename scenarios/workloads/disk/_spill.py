"""The ``spill-disk-faults`` workload: objects Ray spilled to a directory on a fault filesystem
(``spill_faultfs = true``; disk faults of ``mount = "$SPILL"``), read back while that disk is
slow and while it fails.

The driver puts more than the object store holds (``objects`` of ``object_mb`` MiB into a store
of ``object_store_mb``), so Ray spills most of them, then reads them back in turn, each read
bounded by ``get_timeout``: most reads restore an object from the spill directory. Each read is
recorded (when, how long, how it ended). The verdicts are pure functions of those records:

- ``no_wrong_value``: no read returned a value other than the one put, and every read that
  failed raised a documented error (Ray's ``GetTimeoutError`` at its bound, the
  ``ObjectLostError`` family, ``OutOfDiskError``, ``ObjectStoreFullError``);
- ``gets_bounded``: no read took longer than its bound (and a little slack);
- ``slowed_by_disk``: some read while the slow disk was on (from its confirmation, less a
  read's bound, until its heal or the failing disk's start) took ``slowed_at_least`` and
  returned the value: the slow disk reached the restores (its fault-free twin misses it);
- ``failing_disk_met``: some read ending while the failing disk was on (from its confirmation
  until its heal and a read's bound) returned no value (Ray 2.60 retries a restore that failed
  and the read waits out its bound): the failing disk reached the restores (its twin misses it);
- ``restored_after_heal``: once every fault is healed, every object reads back with the value
  put, each within ``heal_bound``.

The driver never puts while a fault is on: Ray 2.60 allocates past a full store in files of the
spill directory (its fallback allocation), and a failing create there aborts the raylet, which
ends this driver with it.
"""

from __future__ import annotations

import enum
import time
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from chaos import FaultKind
from scenarios.model._records import Verdict
from scenarios.model._workload import FaultWindow, Params, Workload

__all__ = ["DOCUMENTED", "Read", "ReadOutcome", "SpillDiskFaults", "SpillParams", "failing_disk_met",
           "gets_bounded", "in_fault_windows", "no_wrong_value", "outcome_of", "restored_after_heal", "slowed_by_disk"]

MIB = 1 << 20


class ReadOutcome(enum.Enum):
    """How one read of a spilled object ended."""

    CORRECT = "correct"  # the value put
    WRONG = "wrong"  # a value, not the one put
    TIMED_OUT = "timed_out"  # GetTimeoutError at the read's bound
    LOST = "lost"  # the ObjectLostError family
    OUT_OF_DISK = "out_of_disk"  # OutOfDiskError
    STORE_FULL = "store_full"  # ObjectStoreFullError
    OTHER = "other"  # any other exception: undocumented for a read


#: The ways a read may fail that Ray documents for an object it cannot hand out now.
DOCUMENTED: frozenset[ReadOutcome] = frozenset({ReadOutcome.TIMED_OUT, ReadOutcome.LOST,
                                               ReadOutcome.OUT_OF_DISK, ReadOutcome.STORE_FULL})


@dataclass(frozen=True, slots=True)
class Read:
    """One read as the driver saw it: the object's index, when it started (seconds into the
    run), how long it took, how it ended, and the exception's type when it failed."""

    index: int
    t: float
    seconds: float
    outcome: ReadOutcome
    error: str = ""


def outcome_of(exc: BaseException) -> ReadOutcome:
    """The outcome a read that raised ``exc`` had (by Ray's exception types, never their text)."""
    import ray.exceptions as rex

    for kind, outcome in ((rex.GetTimeoutError, ReadOutcome.TIMED_OUT), (rex.ObjectLostError, ReadOutcome.LOST),
                          (rex.OutOfDiskError, ReadOutcome.OUT_OF_DISK),
                          (rex.ObjectStoreFullError, ReadOutcome.STORE_FULL)):
        if isinstance(exc, kind):
            return outcome
    return ReadOutcome.OTHER


def _tally(reads: Sequence[Read]) -> str:
    counts = {o: sum(r.outcome is o for r in reads) for o in ReadOutcome}
    return ", ".join(f"{n} {o.value}" for o, n in counts.items() if n) or "no reads"


def no_wrong_value(reads: Sequence[Read]) -> Verdict:
    """No read returned a wrong value, and every failed read raised a documented error."""
    bad = [r for r in reads if r.outcome is ReadOutcome.WRONG or r.outcome is ReadOutcome.OTHER]
    detail = f"{len(reads)} reads: {_tally(reads)}"
    if bad:
        detail += f"; first bad: object {bad[0].index} at {bad[0].t:.2f} s, {bad[0].outcome.value} {bad[0].error}"
    return Verdict.over("no_wrong_value", len(reads), held=bool(reads) and not bad, detail=detail)


def gets_bounded(reads: Sequence[Read], *, bound: float) -> Verdict:
    """Every read ended within ``bound`` seconds (its own timeout and some slack): none hung."""
    late = [r for r in reads if r.seconds > bound]
    slowest = max((r.seconds for r in reads), default=0.0)
    detail = f"{len(late)} of {len(reads)} reads took over {bound:g} s (slowest {slowest:.2f} s)"
    if late:
        detail += f"; the first started at {late[0].t:.2f} s, {late[0].outcome.value} after {late[0].seconds:.2f} s"
    return Verdict.over("gets_bounded", len(reads), held=bool(reads) and not late, detail=detail)


def slowed_by_disk(reads: Sequence[Read], *, at_least: float, since: float | None, until: float) -> Verdict:
    """Some read that started in [``since``, ``until``) took ``at_least`` seconds and returned
    the value: a restore met the slow disk and completed. ``since`` is the slow disk's
    confirmation (in the fault-free twin, its planned start), ``until`` its heal, or the failing
    disk's start if that came first (restores stay slow after a failing disk heals, and that is
    not this disk). ``since`` None: no slow disk was on, nothing to measure in (unknown)."""
    if since is None:
        return Verdict.unknown("slowed_by_disk", "no slow disk was confirmed: no window to measure in")
    window = [r for r in reads if since <= r.t < until]
    slow = [r for r in window if r.seconds >= at_least and r.outcome is ReadOutcome.CORRECT]
    slowest = max((r.seconds for r in window if r.outcome is ReadOutcome.CORRECT), default=0.0)
    detail = (f"{len(slow)} of the {len(window)} reads started in [{since:.2f}, {until:.2f}) s returned the value "
              f"after >= {at_least:g} s (slowest correct read there {slowest:.2f} s)" if since is not None
              else "no slow disk was confirmed")
    return Verdict.over("slowed_by_disk", len(window), held=bool(slow), detail=detail)


def in_fault_windows(reads: Sequence[Read], *, slow: Sequence[FaultWindow], failing: Sequence[FaultWindow],
                     at_least: float, get_timeout: float) -> list[Verdict]:
    """``slowed_by_disk`` and ``failing_disk_met``, each measured inside its fault's first window
    (confirmed to healed; in the fault-free twin, the schedule's span): the slow disk's up to its
    heal or the failing disk's start, whichever is first; the failing disk's up to a read's
    timeout after its heal (a read begun before the heal ends by then)."""
    slow, failing = slow[:1], failing[:1]
    return [slowed_by_disk(reads, at_least=at_least, since=slow[0].start if slow else None,
                           until=min([*(w.end for w in slow), *(w.start for w in failing)], default=0.0)),
            failing_disk_met(reads, since=failing[0].start if failing else None,
                             until=failing[0].end + get_timeout if failing else 0.0)]


def failing_disk_met(reads: Sequence[Read], *, since: float | None, until: float) -> Verdict:
    """Some read that ended in [``since``, ``until``) returned no value: the failing disk
    reached the restores. ``since`` is the failing disk's confirmation (in the fault-free twin,
    its planned start), ``until`` its heal and a read's bound (a read that fails later is not
    this disk's). ``since`` None: none was confirmed, nothing to measure in (unknown)."""
    if since is None:
        return Verdict.unknown("failing_disk_met", "no failing disk was confirmed: no window to measure in")
    window = [r for r in reads if since <= r.t + r.seconds < until]
    failed = [r for r in window if r.outcome is not ReadOutcome.CORRECT]
    detail = (f"{len(failed)} of the {len(window)} reads ending in [{since:.2f}, {until:.2f}) s returned no value "
              f"({_tally(failed)})" if since is not None else "no failing disk was confirmed")
    return Verdict.over("failing_disk_met", len(window), held=bool(failed), detail=detail)


def restored_after_heal(reads: Sequence[Read], *, objects: int, bound: float) -> Verdict:
    """Once every fault was healed, each of the ``objects`` put read back with its value, each
    within ``bound`` seconds."""
    good = {r.index for r in reads if r.outcome is ReadOutcome.CORRECT and r.seconds <= bound}
    missing = sorted(set(range(objects)) - good)
    slowest = max((r.seconds for r in reads), default=0.0)
    detail = f"{objects - len(missing)} of {objects} objects read back with their value within {bound:g} s " \
             f"(slowest {slowest:.2f} s; {_tally(reads)})"
    if missing:
        detail += f"; not: objects {missing[:8]}"
    return Verdict.over("restored_after_heal", objects, held=objects > 0 and not missing, detail=detail)


class SpillParams(Params):
    """``spill-disk-faults``' ``[params]``."""

    #: Objects put before the run (more than the object store holds, so most are spilled).
    objects: int = 16
    #: MiB each object holds.
    object_mb: int = 8
    #: Seconds each read may wait (Ray's ``GetTimeoutError`` past it).
    get_timeout: float = 1.0
    #: Seconds past ``get_timeout`` a read may take before it counts as hung (reads timed out
    #: here after up to twice their timeout; a read held until the heal takes the failing
    #: disk's 3.5 s and more).
    slack: float = 2.0
    #: Seconds a read must take for the run to have met the slow disk (a restore here took
    #: 0.02 s on the bare mount, 0.75 s with 20 ms per read).
    slowed_at_least: float = 0.3
    #: Seconds each object may take to read back once the faults are healed (after 5 s of EIO
    #: an object was not back 20 s after the run's end once in three runs here; the scenario's
    #: failing disk is shorter).
    heal_bound: float = 30.0
    #: Seconds between reads (the fault filesystem serves every restore on a 2-core host).
    read_every: float = 0.1


class SpillDiskFaults(Workload):
    """Objects spilled to a faulty disk, read back while it is slow, while it fails, and after."""

    BASELINE = True  # the fault-free twin: slowed_by_disk and failing_disk_met must miss there
    FAULT_VERDICTS = ("slowed_by_disk", "failing_disk_met")
    INVARIANTS = ("no_wrong_value", "gets_bounded", "slowed_by_disk", "failing_disk_met", "restored_after_heal")
    Params = SpillParams

    def setup(self) -> None:
        import numpy as np
        import ray

        self.p = self.ctx.params_as(SpillParams)
        self.reads: list[Read] = []
        self.refs: list[Any] = []
        self.crcs: list[int] = []
        for i in range(self.p.objects):  # past the store's size: Ray spills the oldest
            value = np.random.default_rng([self.ctx.seed, i]).integers(0, 255, self.p.object_mb * MIB, dtype=np.uint8)
            self.crcs.append(zlib.crc32(value.data))
            self.refs.append(ray.put(value))
        for i in range(self.p.objects):  # the first restores start Ray's restore workers
            self._read(i, timeout=self.p.heal_bound)

    def _read(self, index: int, *, timeout: float) -> Read:
        """Read object ``index`` within ``timeout`` and say how it went (the value is dropped
        at once: a value held pins the object in the store)."""
        import ray

        start = time.monotonic()
        try:
            value = ray.get(self.refs[index], timeout=timeout)
            outcome = ReadOutcome.CORRECT if zlib.crc32(memoryview(value)) == self.crcs[index] else ReadOutcome.WRONG
            del value
            error = ""
        except Exception as exc:  # noqa: BLE001 - how a read fails is what is recorded
            outcome, error = outcome_of(exc), type(exc).__name__
        took = time.monotonic() - start
        return Read(index=index, t=round(self.ctx.elapsed() - took, 3), seconds=took, outcome=outcome, error=error)

    def step(self) -> bool:
        read = self._read(len(self.reads) % self.p.objects, timeout=self.p.get_timeout)
        self.reads.append(read)
        self.ctx.point("read_seconds", read.seconds)
        self.ctx.count(f"reads_{read.outcome.value}")
        self.ctx.stop.wait(self.p.read_every)  # pace the reads; a stop ends the wait at once
        return True

    def probe(self) -> str:
        read = self._read(len(self.reads) % self.p.objects, timeout=self.p.get_timeout)
        if read.outcome is not ReadOutcome.CORRECT:
            raise RuntimeError(f"object {read.index} did not read back: {read.outcome.value} {read.error}")
        return f"object {read.index} read back in {read.seconds:.2f} s"

    def invariants(self) -> list[Verdict]:
        after = [self._read(i, timeout=self.p.heal_bound) for i in range(self.p.objects)]
        return [no_wrong_value([*self.reads, *after]),
                gets_bounded(self.reads, bound=self.p.get_timeout + self.p.slack),
                *in_fault_windows(self.reads, slow=self.ctx.windows(FaultKind.SLOW_DISK),
                                  failing=self.ctx.windows(FaultKind.FAILING_DISK),
                                  at_least=self.p.slowed_at_least, get_timeout=self.p.get_timeout),
                restored_after_heal(after, objects=self.p.objects, bound=self.p.heal_bound)]

    def call_bounds(self) -> dict[str, float]:
        return {"step": self.p.get_timeout + self.p.read_every + 5.0,
                "invariants": self.p.objects * self.p.heal_bound + 30.0}

    def teardown(self) -> None:
        self.refs.clear()  # Ray deletes the spilled copies once no reference is left
