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
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from chaos import FaultKind
from scenarios.model._records import Verdict
from scenarios.model._workload import CALL_TIMEOUT, Params, Workload
from scenarios.workloads._surface import Ack, Ledger, _counter

__all__ = ["DISK_WORKLOADS", "Call", "CheckpointSample", "SlowCheckpointDisk", "checkpoint_age_bounded",
           "kept_serving", "oldest_checkpoint_age", "slowed_by_disk"]


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


def slowed_by_disk(calls: Sequence[Call], *, at_least: float, since: float | None) -> Verdict:
    """Some add that started ``since`` or later took ``at_least`` seconds: the slow disk reached
    the actor's storage (``since`` None: no slow disk was confirmed, so none did; a hiccup of
    the host before the fault is not the fault)."""
    slow = [c for c in calls if since is not None and c.t >= since and c.seconds >= at_least]
    slowest = max((c.seconds for c in calls), default=0.0)
    return Verdict.over("slowed_by_disk", len(calls), held=bool(slow),
                        detail=f"{len(slow)} of {len(calls)} adds took >= {at_least:g} s (slowest {slowest:.2f} s)")


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
    INVARIANTS = ("kept_serving", "slowed_by_disk", "checkpoint_age_bounded", "nothing_acknowledged_lost")
    Params = SlowCheckpointParams

    def setup(self) -> None:
        import ray

        self.p = self.ctx.params_as(SlowCheckpointParams)
        self.ledger = Ledger(_counter(self.ctx, "counter", durability="wal", every_n=self.p.every_n), "driver")
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
                    slowed_by_disk(self.calls, at_least=self.p.slowed_at_least, since=self._slowed_since()),
                    checkpoint_age_bounded(self.samples, end=end, bound=self.p.age_bound)]
        ray.kill(self.ledger.actor, no_restart=False)  # a crash: what is on disk is all it has
        return [*verdicts, self.ledger.verdict("nothing_acknowledged_lost")]

    def _slowed_since(self) -> float | None:
        """From a call's bound before the first slow disk was confirmed (its probe took the
        latency, and a call slowed with it started before), or None without one."""
        confirmed = self.ctx.injections(FaultKind.SLOW_DISK)
        return min(confirmed) - self.p.call_bound if confirmed else None

    def call_bounds(self) -> dict[str, float]:
        return {"step": 2 * self.p.call_bound + CALL_TIMEOUT}

    def teardown(self) -> None:
        import ray

        ray.kill(self.ledger.actor)


DISK_WORKLOADS: dict[str, type[Workload]] = {"slow-checkpoint-disk": SlowCheckpointDisk}
