"""Workloads for disks that fail slowly, on a run's checkpoint storage mounted through a fault
filesystem (``storage_faultfs = true``; disk faults of ``mount = "$STORAGE"``).

``slow-checkpoint-disk``: a WAL counter (a :class:`actors.CheckpointedCounter`, ``durability =
"wal"``, a checkpoint every ``every_n`` adds) keeps taking keyed adds from the driver while
every ``fsync`` of its storage takes 200 ms longer. Every add is acknowledged within
``call_bound`` (slower, never hung, never failed), checkpoints keep being committed (the newest
is never older than ``age_bound`` while adds are acknowledged), and after a crash at the end the
restored counter holds every acknowledged add. ``slowed_by_disk`` is what the others stand on:
some add took the fault's latency, so the run did meet the slow disk (its fault-free twin
misses it).

``failing-checkpoint-disk``: a counter of ``durability = "policy"`` (a checkpoint every
``every_n`` adds, the call failing when its checkpoint fails) whose whole checkpoint folder
answers ``EIO``. Adds that need a checkpoint fail with the disk's errno named, none hangs and
none is acknowledged while the disk fails or without the checkpoint it needed
(``failure_reported``); every committed folder, read as the fault left it and at the end, is
whole (``no_half_checkpoint``); the checkpoint committed last before the fault is still in the
store once the fault is over, loads, and holds every add acknowledged up to its commit
(``last_good_kept``, read before the checkpoint on demand at the end); after that checkpoint
and a crash every acknowledged add is restored (``nothing_acknowledged_lost``: the policy's
window is not what is judged); adds are acknowledged again soon after the heal and
a checkpoint commits (``recovered_after_heal``).
"""

from __future__ import annotations

import errno
import time
import warnings
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from actors import CheckpointedCounter
from actors.checkpoint import CheckpointWarning
from chaos import FaultKind, History
from chaos.errors import CheckpointError, MutationNotLogged
from scenarios.model._records import Verdict
from scenarios.model._workload import CALL_TIMEOUT, FaultWindow, Params, Workload
from scenarios.workloads._kit import OP_STATUS, Ack, Ledger, kept, new_counter

__all__ = ["DISK_ERRNOS", "AddReply", "Call", "CheckpointSample", "DiskCall", "FailingCheckpointDisk",
           "FolderCheck", "ReportingCounter", "SlowCheckpointDisk", "cause_errno", "checkpoint_age_bounded",
           "covered_by_last_checkpoint", "failure_reported", "kept_serving", "last_good_kept", "no_half_checkpoint",
           "oldest_checkpoint_age", "recovered_after_heal", "slowed_by_disk", "stored_seqs"]


@dataclass(frozen=True, slots=True)
class Call:
    """One add as the driver saw it: when it started (seconds into the run), how long it took,
    how it ended."""

    t: float
    seconds: float
    ack: Ack


@dataclass(frozen=True, slots=True)
class CheckpointSample:
    """The actor's count of committed checkpoints at ``t`` seconds into the run."""

    t: float
    checkpoints: int


def kept_serving(calls: Sequence[Call], *, bound: float) -> Verdict:
    """Every add was acknowledged, none took longer than ``bound`` seconds."""
    failed = [c for c in calls if c.ack is not Ack.ACKED]
    slowest = max((c.seconds for c in calls), default=0.0)
    return Verdict.over("kept_serving", len(calls), held=not failed and slowest <= bound,
                        detail=f"{len(calls) - len(failed)} of {len(calls)} adds acknowledged, the slowest in "
                               f"{slowest:.2f} s (bound {bound:g} s)" + (f"; first not acknowledged at "
                                                                         f"{failed[0].t:.2f} s: {failed[0].ack}"
                                                                         if failed else ""))


def slowed_by_disk(calls: Sequence[Call], *, at_least: float, windows: Sequence[FaultWindow]) -> Verdict:
    """Some add that started while the slow disk was on (in one of ``windows``: confirmed to
    healed; in the fault-free twin, the schedule's span of it) took ``at_least`` seconds: the
    slow disk reached the actor's storage. Only adds inside a window count: a hiccup of the host
    before or after the fault is not the fault. No window: nothing to measure in, unknown."""
    if not windows:
        return Verdict.unknown("slowed_by_disk", "no slow disk was on (none confirmed): no window to measure in")
    inside = [c for c in calls if any(w.holds(c.t) for w in windows)]
    slow = [c for c in inside if c.seconds >= at_least]
    slowest = max((c.seconds for c in inside), default=0.0)
    spans = ", ".join(f"[{w.start:.2f}, {w.end:.2f}) s" for w in windows)
    return Verdict.over("slowed_by_disk", len(inside), held=bool(slow),
                        detail=f"{len(slow)} of the {len(inside)} adds started in {spans} took >= {at_least:g} s "
                               f"(slowest there {slowest:.2f} s)")


def oldest_checkpoint_age(samples: Sequence[CheckpointSample], *, end: float) -> float:
    """The longest the newest checkpoint went without a newer one: from each commit seen (a
    sample whose count rose; the first sample's for the start) to the next, or to ``end``."""
    if not samples:
        return end
    since, most, last = samples[0].t, 0.0, samples[0].checkpoints
    for sample in samples[1:]:
        if sample.checkpoints > last:
            most, since, last = max(most, sample.t - since), sample.t, sample.checkpoints
    return max(most, end - since)


def checkpoint_age_bounded(samples: Sequence[CheckpointSample], *, end: float, bound: float) -> Verdict:
    """Checkpoints kept being committed: the newest was never older than ``bound`` seconds, and
    at least one was committed during the run (a count that never rose checked nothing)."""
    age = oldest_checkpoint_age(samples, end=end)
    committed = samples[-1].checkpoints - samples[0].checkpoints if samples else 0
    return Verdict.over("checkpoint_age_bounded", committed, held=age <= bound,
                        detail=f"{committed} checkpoints committed; the newest was at most {age:.2f} s old "
                               f"(bound {bound:g} s)")


class SlowCheckpointParams(Params):
    """``slow-checkpoint-disk``'s ``[params]``."""

    #: A checkpoint every this many adds.
    every_n: int = 10
    #: Seconds any add may take: slowed by the disk, never hung (one that waited out the
    #: whole 5 s fault must break it; 1.2 s measured with the store on the mount, in-process).
    call_bound: float = 3.0
    #: Seconds the newest checkpoint may be old while adds come (below the fault's 5 s: a
    #: checkpointing stalled for the whole fault must break it; 1.4 s measured in-process).
    age_bound: float = 3.5
    #: Seconds an add must take for the run to have met the slow disk.
    slowed_at_least: float = 0.15


class SlowCheckpointDisk(Workload):
    """A WAL counter whose checkpoint storage's fsyncs are slowed: it keeps serving, keeps
    checkpointing, and loses nothing acknowledged across a crash."""

    BASELINE = True  # the fault-free twin: slowed_by_disk must be missing there
    FAULT_VERDICTS = ("slowed_by_disk",)
    INVARIANTS = ("kept_serving", "slowed_by_disk", "checkpoint_age_bounded", "nothing_acknowledged_lost")
    Params = SlowCheckpointParams

    def setup(self) -> None:
        import ray

        self.p = self.ctx.params_as(SlowCheckpointParams)
        self.ledger = Ledger(new_counter(self.ctx, "counter", durability="wal", every_n=self.p.every_n), "driver")
        self.calls: list[Call] = []
        self.samples: list[CheckpointSample] = []
        ray.get(self.ledger.actor.get.remote(), timeout=CALL_TIMEOUT)  # the run's time is for calls

    def step(self) -> bool:
        import ray

        start = time.monotonic()
        ack = self.ledger.add(timeout=2 * self.p.call_bound)
        took = time.monotonic() - start
        self.calls.append(Call(round(self.ctx.elapsed() - took, 3), took, ack))
        self.ctx.point("add_seconds", took)
        stats = ray.get(self.ledger.actor.checkpoint_stats.remote(), timeout=CALL_TIMEOUT)
        self.samples.append(CheckpointSample(self.ctx.elapsed(), stats.checkpoints))
        self.ctx.count("adds")
        return True

    def probe(self) -> str:
        import ray

        return f"counter {ray.get(self.ledger.actor.get.remote(), timeout=5)}"

    def invariants(self) -> list[Verdict]:
        import ray

        end = self.samples[-1].t if self.samples else 0.0
        verdicts = [kept_serving(self.calls, bound=self.p.call_bound),
                    slowed_by_disk(self.calls, at_least=self.p.slowed_at_least,
                                   windows=self.ctx.windows(FaultKind.SLOW_DISK)),
                    checkpoint_age_bounded(self.samples, end=end, bound=self.p.age_bound)]
        ray.kill(self.ledger.actor, no_restart=False)  # a crash: what is on disk is all it has
        return [*verdicts, self.ledger.verdict("nothing_acknowledged_lost")]

    def call_bounds(self) -> dict[str, float]:
        return {"step": 2 * self.p.call_bound + CALL_TIMEOUT}

    def teardown(self) -> None:
        import ray

        ray.kill(self.ledger.actor)


# -- failing-checkpoint-disk ---------------------------------------------------------------------

#: The errnos a failing disk answers with (FailingDisk's): a failure naming one names the disk.
DISK_ERRNOS: frozenset[int] = frozenset({errno.EIO, errno.ENOSPC, errno.EROFS})


@dataclass(frozen=True, slots=True)
class AddReply:
    """How the actor says one add ended: ``errno`` is the OS error its failure came from (0:
    acknowledged, or a failure that named none); ``error`` says the failure for people."""

    ack: Ack
    errno: int = 0
    error: str = ""


@dataclass(frozen=True, slots=True)
class DiskCall:
    """One keyed add as the driver saw it: its seq, when it started (seconds into the run),
    how long it took, how it ended, the errno its failure named (0: none) and the failure in words;
    then the actor's checkpointing right after it: the newest committed checkpoint's seq
    (``checkpoint``, 0: none) and the adds applied since it (``pending``)."""

    seq: int
    t: float
    seconds: float
    ack: Ack
    errno: int = 0
    error: str = ""
    checkpoint: int = 0
    pending: int = 0

    @property
    def end(self) -> float:
        return self.t + self.seconds


@dataclass(frozen=True, slots=True)
class FolderCheck:
    """One committed checkpoint folder as the store read it back: ``whole`` when its manifest
    parsed and every file matched it."""

    seq: int
    whole: bool


def cause_errno(exc: BaseException) -> int:
    """The errno of the first ``OSError`` in ``exc``'s chain of causes (0: none). Read in the
    actor: Ray carries an exception to the caller without its ``__cause__``, where it is."""
    seen: BaseException | None = exc
    for _ in range(16):  # a chain is short; a cycle must not spin
        if seen is None:
            break
        if isinstance(seen, OSError) and seen.errno:
            return int(seen.errno)
        seen = seen.__cause__ or seen.__context__
    return 0


class ReportingCounter(CheckpointedCounter):
    """A :class:`CheckpointedCounter` that answers each add with how it ended, the disk's errno
    included, and reads its committed folders back. ``report_failures=False`` plants an actor
    that answers a failed add as acknowledged (a silent OK)."""

    def __init__(self, storage: str, *, report_failures: bool = True, **options: Any) -> None:
        self.report_failures = report_failures
        super().__init__(storage, **options)

    def add_reported(self, k: int = 1, *, writer_id: str, seq: int) -> AddReply:
        try:
            self.add(k, writer_id=writer_id, seq=seq)
        except (CheckpointError, OSError) as exc:
            if not self.report_failures:
                return AddReply(Ack.ACKED)
            undone = isinstance(exc, MutationNotLogged) and exc.undone
            return AddReply(Ack.UNDONE if undone else Ack.UNKNOWN, cause_errno(exc),
                            f"{type(exc).__name__}: {exc}"[:300])
        return AddReply(Ack.ACKED)

    def committed_folders(self) -> list[FolderCheck]:
        """Each committed folder in the storage, read back and checked against its manifest."""
        store = self._checkpointer().store
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CheckpointWarning)  # an unusable folder is the finding
            return [FolderCheck(seq, store.load(seq) is not None) for seq in store.seqs()]


def failure_reported(calls: Sequence[DiskCall], *, since: float | None, until: float, bound: float, every_n: int,
                     errnos: Collection[int] = DISK_ERRNOS) -> Verdict:
    """Adds failed on the failing disk with its errno named: some add that ended in [``since``,
    ``until``) (the fault's window: its confirmation to its heal and a call's bound; in the
    fault-free twin, the schedule's span of it) did, every failed add did, none took over ``bound`` seconds,
    and none was acknowledged silently: between the first failure and the last, or with the
    checkpoint it needed not committed (``every_n`` or more adds pending after it, which under
    the policy only a failed checkpoint leaves: this holds up to the heal, whenever the
    failures stop being reported). ``since`` None: no failing disk was confirmed: unknown."""
    if since is None:
        return Verdict.unknown("failure_reported", "no failing disk was confirmed: no window to measure in")
    failed = [c for c in calls if c.ack is not Ack.ACKED]
    named = [c for c in failed if since <= c.end < until and c.errno in errnos]
    unnamed = [c for c in failed if c.errno not in errnos]
    hung = [c for c in calls if c.seconds > bound]
    silent = [c for c in calls if c.ack is Ack.ACKED and (c.pending >= every_n or
                                                         (failed and failed[0].t < c.t < failed[-1].t))]
    detail = (f"{len(named)} of {len(calls)} adds failed naming the disk's errno in [{since:.2f}, {until:.2f}) s; "
              f"{len(unnamed)} failed naming none, {len(hung)} took over {bound:g} s, {len(silent)} were "
              f"acknowledged silently (between the first and the last failure, or without the checkpoint "
              f"they needed)")
    if silent:
        detail += f" (first at {silent[0].t:.2f} s, {silent[0].pending} adds pending after it)"
    if unnamed:
        detail += f" (first unnamed at {unnamed[0].t:.2f} s: {unnamed[0].error or unnamed[0].ack})"
    elif named:
        detail += f"; the first: {named[0].error[:160]}"
    return Verdict.over("failure_reported", len(calls), held=bool(named) and not (unnamed or hung or silent),
                        detail=detail)


def no_half_checkpoint(folders: Sequence[FolderCheck]) -> Verdict:
    """Every committed checkpoint folder read back whole (manifest and every file matching)."""
    bad = sorted({f.seq for f in folders if not f.whole})
    return Verdict.over("no_half_checkpoint", len(folders), held=not bad,
                        detail=f"{len(folders) - len(bad)} of {len(folders)} committed folders read back whole"
                               + (f"; not whole: {bad}" if bad else ""))


def covered_by_last_checkpoint(calls: Sequence[DiskCall], *, since: float | None) -> tuple[int, list[int]]:
    """The checkpoint committed last before the fault's confirmation (``since``; 0: none) and
    the adds acknowledged up to the one that committed it: what that checkpoint holds."""
    before = [c for c in calls if since is not None and c.end < since and c.checkpoint]
    if not before:
        return 0, []
    last = max(c.checkpoint for c in before)
    committer = next(c.seq for c in calls if c.checkpoint == last)
    return last, [c.seq for c in calls if c.ack is Ack.ACKED and c.seq <= committer]


def last_good_kept(calls: Sequence[DiskCall], stored: Mapping[int, Collection[int] | None] | None, *,
                   since: float | None) -> Verdict:
    """The checkpoint committed last before the fault (``since``: its confirmation) survived it:
    the store, read once the fault was over and before any checkpoint on demand (``stored``:
    each folder's seq to the writer's seqs in it, None when it did not load), still holds it,
    it loads, and every add acknowledged up to its commit is in it. ``stored`` None: the store
    was not read; ``since`` None: no fault, nothing kept across it."""
    seq, covered = covered_by_last_checkpoint(calls, since=since)
    if not seq or stored is None:
        why = "no fault confirmed" if since is None else "no checkpoint committed before the fault" if not seq \
            else "the store was not read after the fault"
        return Verdict.over("last_good_kept", len(covered), held=False, detail=why)
    if seq not in stored:
        return Verdict.over("last_good_kept", len(covered), held=False,
                            detail=f"checkpoint {seq}, the last before the fault, is gone: the store held "
                                   f"{sorted(stored)}")
    inside = stored[seq]
    kept_seqs = set(inside or ())
    lost = [s for s in covered if s not in kept_seqs]
    return Verdict.over("last_good_kept", len(covered), held=inside is not None and not lost,
                        detail=f"checkpoint {seq}, the last before the fault, " + (
                            "did not load" if inside is None else
                            f"holds {len(covered) - len(lost)} of the {len(covered)} adds acknowledged up to "
                            f"its commit") + (f"; lost seqs {lost[:5]}" if inside is not None and lost else ""))


def stored_seqs(url: str, writer: str) -> dict[int, frozenset[int] | None]:
    """Each committed checkpoint folder under ``url`` to the seqs of ``writer`` its counter
    state holds (None: it did not load, or could not be read; none when the storage cannot be
    opened or listed)."""
    from actors.checkpoint import CheckpointStore

    try:
        store = CheckpointStore(url)
        seqs = store.seqs()
    except OSError:  # the storage still fails: it holds nothing that can be kept
        return {}
    found: dict[int, frozenset[int] | None] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CheckpointWarning)  # an unusable folder is the finding
        for seq in seqs:
            try:
                loaded = store.load(seq)
            except OSError:  # StorageUnreachable: unreadable still, so not kept either
                loaded = None
            runs = loaded[1].get("applied", {}).get(writer, []) if loaded is not None else None
            found[seq] = None if runs is None else frozenset(s for lo, hi in runs for s in range(lo, hi + 1))
    return found


def recovered_after_heal(calls: Sequence[DiskCall], samples: Sequence[CheckpointSample], *,
                         within: float) -> Verdict:
    """After the last failed add, an add was acknowledged within ``within`` seconds and a
    checkpoint was committed (the count rose past the one seen at that failure). Without a
    failed add there is nothing it recovered from: it does not hold."""
    failed = [c for c in calls if c.ack is not Ack.ACKED]
    if not failed:
        return Verdict.over("recovered_after_heal", 0, held=False, detail="no add failed")
    last = max(c.end for c in failed)
    acked = [c.t for c in calls if c.ack is Ack.ACKED and c.t >= last]
    at_failure = max((s.checkpoints for s in samples if s.t <= last), default=0)
    committed = max((s.checkpoints for s in samples), default=0) - at_failure
    gap = min(acked) - last if acked else float("inf")
    return Verdict.over("recovered_after_heal", len(failed), held=gap <= within and committed > 0,
                        detail=f"the first add acknowledged after the last failure ({last:.2f} s) came "
                               f"{gap:.2f} s later (bound {within:g} s); {max(committed, 0)} checkpoints "
                               "committed since")


class FailingCheckpointParams(Params):
    """``failing-checkpoint-disk``'s ``[params]``."""

    #: A checkpoint every this many adds: the add that takes it fails when it fails.
    every_n: int = 10
    #: Seconds any add may take: a failing disk must fail a call, never hang it.
    call_bound: float = 3.0
    #: Seconds from the last failed add to the next acknowledged one.
    recover_within: float = 2.0
    #: False plants an actor that answers a failed add as acknowledged (a silent OK).
    report_failures: bool = True
    #: ``"wal"`` logs each add in the same folder: the first add the disk fails can be neither
    #: logged nor undone, and the actor refuses every later add, without the disk's errno and
    #: after the heal too, until it restarts: failure_reported and recovered_after_heal are red there.
    durability: Literal["policy", "wal"] = "policy"


class FailingCheckpointDisk(Workload):
    """A policy counter whose checkpoint folder answers EIO: it reports the failures, never
    commits a half checkpoint, keeps what it had, and recovers when the disk is healed."""

    BASELINE = True  # the fault-free twin: failure_reported, recovered_after_heal, last_good_kept miss there
    FAULT_VERDICTS = ("failure_reported", "recovered_after_heal", "last_good_kept")
    INVARIANTS = ("failure_reported", "no_half_checkpoint", "last_good_kept", "recovered_after_heal",
                  "nothing_acknowledged_lost")
    Params = FailingCheckpointParams
    WRITER = "driver"

    def setup(self) -> None:
        import ray

        self.p = self.ctx.params_as(FailingCheckpointParams)
        self.actor = new_counter(self.ctx, "counter", cls=ReportingCounter, durability=self.p.durability,
                              every_n=self.p.every_n, report_failures=self.p.report_failures)
        self.url = f"{self.ctx.storage}/counter"
        self.history = History()
        self.calls: list[DiskCall] = []
        self.samples: list[CheckpointSample] = []
        self.folders: list[FolderCheck] = []
        self.stored: dict[int, frozenset[int] | None] | None = None  # the store once the fault was over
        ray.get(self.actor.get.remote(), timeout=CALL_TIMEOUT)  # the run's time is for calls

    def step(self) -> bool:
        import ray

        call = self._add(len(self.calls))
        stats = ray.get(self.actor.checkpoint_stats.remote(), timeout=CALL_TIMEOUT)
        self.calls.append(replace(call, checkpoint=stats.last_seq, pending=stats.mutations_since_checkpoint))
        self.ctx.point("add_seconds", call.seconds)
        self.samples.append(CheckpointSample(self.ctx.elapsed(), stats.checkpoints))
        if call.ack is Ack.ACKED and len(self.calls) > 1 and self.calls[-2].ack is not Ack.ACKED:
            # The folders as the fault left them, before later checkpoints prune them.
            self.folders += ray.get(self.actor.committed_folders.remote(), timeout=CALL_TIMEOUT)
            if self.stored is None:
                self.stored = stored_seqs(self.url, self.WRITER)
        self.ctx.count("adds")
        return True

    def _add(self, seq: int) -> DiskCall:
        """One keyed add, recorded in the history (a call that raised is of unknown fate)."""
        import ray

        self.history.invoke((self.WRITER, seq), self.WRITER)
        start = time.monotonic()
        try:
            reply = ray.get(self.actor.add_reported.remote(1, writer_id=self.WRITER, seq=seq),
                            timeout=2 * self.p.call_bound)
        except Exception as exc:  # noqa: BLE001 - a timeout or a dead actor: applied or not
            reply = AddReply(Ack.UNKNOWN, 0, f"{type(exc).__name__}: {exc}"[:300])
        took = time.monotonic() - start
        self.history.complete((self.WRITER, seq), OP_STATUS[reply.ack])
        return DiskCall(seq=seq, t=round(self.ctx.elapsed() - took, 3), seconds=took, ack=reply.ack, errno=reply.errno,
                        error=reply.error)

    def probe(self) -> str:
        import ray

        return f"counter {ray.get(self.actor.get.remote(), timeout=5)}"

    def invariants(self) -> list[Verdict]:
        import ray

        # The failing disk's window: confirmed to healed (in the fault-free twin, the schedule's span).
        window = self.ctx.windows(FaultKind.FAILING_DISK)[:1]
        since = window[0].start if window else None
        until = window[0].end + self.p.call_bound if window else 0.0
        self.folders += ray.get(self.actor.committed_folders.remote(), timeout=CALL_TIMEOUT)
        if self.stored is None:  # no add acknowledged after a failure: the store as it is now
            self.stored = stored_seqs(self.url, self.WRITER)
        # Policy durability loses the adds since the last checkpoint by design: one on demand
        # first, so that the crash judges what the store kept, not the policy's window.
        ray.get(self.actor.checkpoint.remote(), timeout=CALL_TIMEOUT)
        ray.kill(self.actor, no_restart=False)  # a crash: what is on disk is all it has
        value, applied = ray.get([self.actor.get.remote(), self.actor.applied_seqs.remote(self.WRITER)],
                                 timeout=CALL_TIMEOUT)
        return [failure_reported(self.calls, since=since, until=until, bound=self.p.call_bound,
                                 every_n=self.p.every_n),
                no_half_checkpoint(self.folders),
                last_good_kept(self.calls, self.stored, since=since),
                recovered_after_heal(self.calls, self.samples, within=self.p.recover_within),
                kept("nothing_acknowledged_lost", self.WRITER, value, self.history.ops(), applied)]

    def call_bounds(self) -> dict[str, float]:
        return {"step": 2 * self.p.call_bound + 2 * CALL_TIMEOUT}

    def teardown(self) -> None:
        import ray

        ray.kill(self.actor)
