"""The ``power-loss`` workload: the flagship's replay buffer and parameter server, their
checkpoint storage on a fault filesystem (``storage_faultfs = true``), through a power loss.

The actors are the dqn-cartpole flagship's (:class:`actors.ReplayBufferActor`,
:class:`actors.ParameterServer` over its Q-network, Adam), under ``wal`` durability. The
driver stands in for a collector and a learner, which write independently: each adds a chunk of
transitions (unique ids) to the buffer or pushes a gradient of the network's shapes to the
server as soon as its last write ended, keyed (``writer_id``/``seq``), and records how each
ended. The scenario's schedule does to the
actors what a machine losing power does: both are stopped (SIGSTOP), every write no fsync
covered is dropped from their storage, then both are SIGKILLed and Ray restarts them from
what the disk kept.

A SIGKILL alone never tests the disk: the page cache outlives the process. Here the log's
records must have reached the disk before each call was acknowledged, which the WAL does with
``fsync_every = 1``; with the store's default batching (``fsync_every = 32``) or under
``policy`` durability, acknowledged writes are lost, and the loss verdicts say so.

Verdicts: every acknowledged transition is in the restored buffer (``no_lost_transitions``),
none twice (``no_duplicate_transitions``); the server's version counts the acknowledged pushes
(``ps_version_matches_pushes``); both actors were restarted after the power loss and restored
from their storage (``restored_after_power_loss``: what the fault-free twin misses); each
acknowledged a write again within ``answer_within`` seconds of it (``both_answer_again``); and the
power loss found both stopped: confirmed after both pauses and before both kills, with no
write failed by a resumed actor (``stopped_at_power_loss``).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Literal

import numpy as np
from pydantic import Field

from actors import CheckpointConfig, ParameterServer, ReplayBufferActor
from actors._checkpoint import Restore, RestoreInfo
from chaos import FaultKind
from chaos.disks import DiskInjection
from scenarios.model._records import Verdict
from scenarios.model._workload import CALL_TIMEOUT, FaultWindow, Params, Workload
from scenarios.workloads._dqn import make_qnet
from scenarios.workloads._kit import Ack

__all__ = [
    "CUT_JUDGED",
    "Cut",
    "PowerLoss",
    "PowerLossParams",
    "Restart",
    "Role",
    "Timeline",
    "Write",
    "both_answer_again",
    "buffer_config",
    "cut_of",
    "judged_by_cut",
    "no_duplicate_transitions",
    "no_lost_transitions",
    "ps_version_matches_pushes",
    "restored_after_power_loss",
    "server_config",
    "stopped_at_power_loss",
    "unreached",
]

#: Transitions per add: one chunk's ids.
CHUNK = 16


class Role(StrEnum):
    """Which of the flagship's actors a write went to (its actor name too)."""

    REPLAY = "replay"
    PARAMS = "params"


@dataclass(frozen=True, slots=True)
class Write:
    """One keyed write as the driver saw it: to which actor, its seq, when it started (seconds
    into the run), how long it took, how it ended; ``raised``: the actor answered with an error
    (not a timeout nor a death, which Ray retries)."""

    role: Role
    seq: int
    t: float
    seconds: float
    ack: Ack
    raised: bool = False
    error: str = ""

    @property
    def end(self) -> float:
        return self.t + self.seconds


@dataclass(frozen=True, slots=True)
class Restart:
    """One actor at the end: its process before the faults and now, and how its running
    incarnation started (Ray's restart restores from the storage)."""

    role: Role
    pid_before: int
    pid_after: int
    restore: RestoreInfo


@dataclass(frozen=True, slots=True)
class Cut:
    """What the power loss cut of the actors' storage: for each actor, how many of its files had
    open handles that died (its writer was cut mid-write), and how many files were reverted to
    their synced bytes."""

    handles: Mapping[Role, int]
    files_reverted: int

    def describe(self) -> str:
        return (", ".join(f"{role}: {self.handles.get(role, 0)} open files cut" for role in Role)
                + f"; {self.files_reverted} files reverted to their synced bytes")


#: The verdicts a SIGKILL and the log's replay meet without any power loss: they stand as
#: evidence of the disk's durability only when the power loss cut each actor's open files.
CUT_JUDGED = ("no_lost_transitions", "no_duplicate_transitions", "ps_version_matches_pushes",
              "restored_after_power_loss", "both_answer_again")


def cut_of(windows: Sequence[FaultWindow]) -> Cut | None:
    """What the first power loss of the run cut (None: none was confirmed with what it did)."""
    for window in windows:
        disk = window.injection.found if window.injection is not None else None
        if isinstance(disk, DiskInjection) and disk.power_loss is not None:
            lost = disk.power_loss
            return Cut({role: lost.cut_under(role.value) for role in Role}, lost.files_reverted)
    return None


def unreached(cut: Cut | None) -> str | None:
    """Why the power loss is no evidence for the loss verdicts (None: it cut every actor's open
    files). A power loss that cut no open file of an actor's storage dropped nothing that actor
    was writing: what it restores, a SIGKILL and its log's replay restore as well."""
    if cut is None:
        return "no power loss was confirmed with what it cut of the actors' storage"
    missed = [role.value for role in Role if cut.handles.get(role, 0) == 0]
    if not missed:
        return None
    return (f"the power loss cut no open file of the {' and '.join(missed)} actor's storage ({cut.describe()}): "
            "a SIGKILL and the log's replay meet this as well")


@dataclass(frozen=True, slots=True)
class Timeline:
    """When the faults that make the power loss were confirmed, seconds into the run."""

    pauses: tuple[float, ...]
    power_losses: tuple[float, ...]
    kills: tuple[float, ...]


def tids(seq: int) -> np.ndarray:
    """The transition ids of add ``seq``: unique across the run."""
    return np.arange(seq * CHUNK, (seq + 1) * CHUNK, dtype=np.int64)


def has_room(seq: int, capacity: int) -> bool:
    """Add ``seq`` fits without overwriting an earlier one: a buffer evicts its oldest transitions
    once full, which ``no_lost_transitions`` would count as lost."""
    return (seq + 1) * CHUNK <= capacity


def no_lost_transitions(acked: Sequence[int] | np.ndarray, stored: Sequence[int] | np.ndarray) -> Verdict:
    """Every acknowledged transition id is in the restored buffer."""
    lost = np.setdiff1d(np.asarray(acked, dtype=np.int64), np.asarray(stored, dtype=np.int64))
    return Verdict.over("no_lost_transitions", len(acked), held=len(lost) == 0,
                        detail=f"{len(acked)} acknowledged, {len(stored)} stored, {len(lost)} lost"
                               + (f" (first {lost[:3].tolist()})" if len(lost) else ""))


def no_duplicate_transitions(stored: Sequence[int] | np.ndarray) -> Verdict:
    """No transition id is stored twice (a retried add applied again)."""
    dupes = len(stored) - len(np.unique(np.asarray(stored)))
    return Verdict.over("no_duplicate_transitions", len(stored), held=dupes == 0,
                        detail=f"{dupes} duplicated ids among {len(stored)} in the buffer")


def ps_version_matches_pushes(version: int, writes: Sequence[Write]) -> Verdict:
    """The server's version counts every acknowledged push, and at most the pushes of unknown
    fate besides (a call that timed out may have been applied)."""
    pushes = [w for w in writes if w.role is Role.PARAMS]
    acked = sum(w.ack is Ack.ACKED for w in pushes)
    unknown = sum(w.ack is Ack.UNKNOWN for w in pushes)
    return Verdict.over("ps_version_matches_pushes", acked, held=acked <= version <= acked + unknown,
                        detail=f"server version {version}, acknowledged pushes {acked}"
                               + (f", {unknown} of unknown fate" if unknown else ""))


def restored_after_power_loss(restarts: Sequence[Restart], *, power_loss: float | None) -> Verdict:
    """A power loss was confirmed, and each actor runs in a new process that restored its state
    from its storage (a checkpoint, log records, or both): what a run without the power loss
    lacks. Whether the restored state holds every acknowledged write is the loss verdicts' to
    say; a stop that came right after a checkpoint leaves no log record to replay, and the
    restart restored no less."""
    fresh = [r for r in restarts if r.pid_after != r.pid_before and (r.restore.seq > 0 or r.restore.replayed > 0)]
    said = "; ".join(f"{r.role}: pid {r.pid_before} -> {r.pid_after}, checkpoint {r.restore.seq}, "
                     f"{r.restore.replayed} log records replayed in {r.restore.seconds:.2f} s" for r in restarts)
    held = power_loss is not None and len(restarts) == len(Role) and len(fresh) == len(restarts)
    when = "no power loss confirmed" if power_loss is None else f"power loss confirmed at {power_loss:.2f} s"
    return Verdict.over("restored_after_power_loss", len(restarts), held=held, detail=f"{when}; {said}")


def both_answer_again(writes: Sequence[Write], *, since: float | None, within: float) -> Verdict:
    """Each actor acknowledged a write after ``since`` (the power loss), the first within
    ``within`` seconds of it; ``since`` None: no power loss, nothing answered again. The actors
    were stopped at the power loss and killed after it, so only their restarts answer then (the
    first such answer is often a call in flight at the stop, which Ray retried). An actor that
    never did is described by how its writes ending after ``since`` ended."""
    gaps: dict[Role, float] = {}
    for role in Role:
        ends = [w.end for w in writes if w.role is role and w.ack is Ack.ACKED and since is not None
                and w.end >= since]
        gaps[role] = min(ends) - since if ends and since is not None else float("inf")
    worst = max(gaps.values())
    said = ", ".join(f"{role} after {gap:.2f} s" if gap != float("inf") else _unanswered(writes, role, since)
                     for role, gap in gaps.items())
    return Verdict.over("both_answer_again", len(writes), held=since is not None and worst <= within,
                        detail=f"first write acknowledged after the power loss: {said} (bound {within:g} s)")


def _unanswered(writes: Sequence[Write], role: Role, since: float | None) -> str:
    """``params never``, with the writes that ended after ``since``: how many, the first's fate."""
    after = [w for w in writes if w.role is role and since is not None and w.end >= since]
    if not after:
        return f"{role} never (no write of it ended after the power loss)"
    first = min(after, key=lambda w: w.end)
    return (f"{role} never ({len(after)} writes ended after it; the first, seq {first.seq} sent at "
            f"{first.t:.2f} s, after {first.seconds:.2f} s: {first.ack.value} {first.error})")


def stopped_at_power_loss(timeline: Timeline, writes: Sequence[Write]) -> Verdict:
    """The power loss found both actors stopped: confirmed after both pauses and before both
    kills, and no write was failed by an actor (one that ran on after the power loss gets
    ``EIO`` from its dead handles and fails the call)."""
    first = min(timeline.power_losses, default=None)
    before = sum(t < first for t in timeline.pauses) if first is not None else 0
    after = sum(t > first for t in timeline.kills) if first is not None else 0
    raised = [w for w in writes if w.raised]
    held = first is not None and before >= len(Role) and after >= len(Role) and not raised
    detail = (f"{before} pauses confirmed before the power loss, {after} kills after it"
              if first is not None else "no power loss confirmed")
    detail += f"; {len(raised)} writes failed by an actor" + (f" (first: {raised[0].error[:160]})" if raised else "")
    return Verdict.over("stopped_at_power_loss", len(timeline.pauses) + len(timeline.kills), held=held,
                        detail=detail)


def judged_by_cut(verdicts: Sequence[Verdict], cut: Cut | None) -> list[Verdict]:
    """The run under faults' verdicts, each of :data:`CUT_JUDGED` unknown instead of held unless
    the power loss cut every actor's open files (what it cut is said in each)."""
    missing = unreached(cut)
    return [_by_cut(v, cut, missing) if v.name in CUT_JUDGED else v for v in verdicts]


def _by_cut(verdict: Verdict, cut: Cut | None, missing: str | None) -> Verdict:
    if missing is not None or cut is None:
        return verdict.unless(missing)
    return replace(verdict, detail=f"{verdict.detail}; the power loss cut {cut.describe()}")


class PowerLossParams(Params):
    """``power-loss``'s ``[params]``."""

    #: A checkpoint every this many writes of each actor (the flagship's).
    every_n: int = 500
    #: ``"policy"`` plants actors that lose the writes after their last checkpoint.
    durability: Literal["policy", "wal"] = "wal"
    #: The log fsyncs after this many records at the latest: 1 keeps every acknowledged write
    #: through a power loss; the store's default, 32, plants the window it loses.
    fsync_every: int = 1
    #: ... or when this many seconds passed since its last fsync (checked at each record).
    fsync_interval: float = 0.05
    #: Seconds from the power loss to each actor's first acknowledged write (the restarted
    #: server imports torch first: 1.3 to 3.3 s measured; 10 s was crossed once in a full slow
    #: tier on a machine half as fast): a call's own bound, ``call_timeout``.
    answer_within: float = 20.0
    #: Seconds a write may wait for its answer (it spans the stop, the kill and the restart).
    call_timeout: float = 20.0
    #: Transitions the buffer holds. Adds stop (and the run ends) before one would overwrite an
    #: acknowledged transition: a FIFO eviction is no loss, and would read as one.
    capacity: int = Field(default=200_000, ge=CHUNK)


def buffer_config(storage: str, p: PowerLossParams) -> CheckpointConfig:
    """The replay buffer's checkpointing: the flagship's, with the run's log fsyncs."""
    return CheckpointConfig(storage=f"{storage}/{Role.REPLAY}", durability=p.durability, every_n=p.every_n,
                            keep=2, incremental=True, fsync_every=p.fsync_every, fsync_interval=p.fsync_interval)


def server_config(storage: str, p: PowerLossParams) -> CheckpointConfig:
    """The parameter server's checkpointing: the flagship's, with the run's log fsyncs."""
    return CheckpointConfig(storage=f"{storage}/{Role.PARAMS}", durability=p.durability, every_n=p.every_n,
                            keep=2, fsync_every=p.fsync_every, fsync_interval=p.fsync_interval)


def new_buffer(storage: str, p: PowerLossParams, *, seed: int, restore: Restore = "auto") -> ReplayBufferActor:
    """The flagship's buffer in this process (``restore="always"`` for a restart Ray does not
    report); the workload runs the same class and options as a Ray actor."""
    return ReplayBufferActor(p.capacity, checkpoint=buffer_config(storage, p), seed=seed, restore=restore)


def new_server(storage: str, p: PowerLossParams, *, seed: int, restore: Restore = "auto") -> ParameterServer:
    """The flagship's server over its Q-network, with Adam, in this process (as :func:`new_buffer`)."""
    return ParameterServer(make_qnet, checkpoint=server_config(storage, p), optimizer="Adam",
                           optimizer_kwargs={"lr": 1e-3}, seed=seed, restore=restore)


def gradient(shapes: Mapping[str, tuple[int, ...]], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A small random gradient of the network's shapes (what a learner's step pushes)."""
    return {name: (1e-3 * rng.standard_normal(shape)).astype(np.float32) for name, shape in shapes.items()}


#: Seconds a step waits for one of the writes in flight to end.
STEP_WAIT = 0.5


@dataclass(frozen=True, slots=True)
class _Pending:
    """A write sent and not yet recorded: to which actor, its seq, when it was sent."""

    role: Role
    seq: int
    t: float
    started: float
    ref: Any


class PowerLoss(Workload):
    """The flagship's buffer and server written to while their storage loses power: every
    acknowledged write is in the state they restore."""

    BASELINE = True  # the fault-free twin misses restored_after_power_loss and the power loss's order
    FAULT_VERDICTS = ("restored_after_power_loss", "both_answer_again", "stopped_at_power_loss")
    EXTRA = "rl"
    INVARIANTS = ("no_lost_transitions", "no_duplicate_transitions", "ps_version_matches_pushes",
                  "restored_after_power_loss", "both_answer_again", "stopped_at_power_loss")
    Params = PowerLossParams

    def setup(self) -> None:
        import ray

        self.p = self.ctx.params_as(PowerLossParams)
        remote = ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0)
        opts = {"namespace": self.ctx.namespace}
        self.buffer = remote(ReplayBufferActor).options(name=Role.REPLAY.value, **opts).remote(
            self.p.capacity, checkpoint=buffer_config(self.ctx.storage, self.p), seed=self.ctx.seed)
        self.server = remote(ParameterServer).options(name=Role.PARAMS.value, **opts).remote(
            make_qnet, checkpoint=server_config(self.ctx.storage, self.p), optimizer="Adam",
            optimizer_kwargs={"lr": 1e-3}, seed=self.ctx.seed)
        self.shapes = {n: tuple(p.shape) for n, p in make_qnet().named_parameters()}
        self.rng = np.random.default_rng(self.ctx.seed)
        self.writes: list[Write] = []
        self.pending: dict[Role, _Pending] = {}
        self.seqs = dict.fromkeys(Role, 0)
        self.pids = dict(zip(Role, ray.get([self.buffer.pid.remote(), self.server.pid.remote()],
                                           timeout=CALL_TIMEOUT), strict=True))

    def step(self) -> bool:
        """Give each actor its next write once its last one ended, then wait (up to
        ``STEP_WAIT``) for one to end. Apart, not one after the other: the actor restarted first
        answers while the other is still down, as a collector does while its learner restarts."""
        import ray

        if not has_room(self.seqs[Role.REPLAY], self.p.capacity):
            return False  # a fault not reached by then fails the run
        for role in Role:
            if role not in self.pending:
                self.pending[role] = self._send(role)
        ray.wait([p.ref for p in self.pending.values()], num_returns=1, timeout=STEP_WAIT)
        self._collect(drain=False)
        return True

    def _send(self, role: Role) -> _Pending:
        seq, t = self.seqs[role], round(self.ctx.elapsed(), 3)
        self.seqs[role] += 1
        if role is Role.REPLAY:
            ref = self.buffer.add.remote({"tid": tids(seq)}, writer_id="collector", seq=seq)
        else:
            ref = self.server.push.remote(gradient(self.shapes, self.rng), worker_id="learner", seq=seq,
                                          base_version=seq)
        return _Pending(role=role, seq=seq, t=t, started=time.monotonic(), ref=ref)

    def _collect(self, *, drain: bool) -> None:
        """Record each write that ended or ran out of its ``call_timeout`` (``drain``: every one,
        each waited for up to what is left of its bound)."""
        import ray

        refs = [p.ref for p in self.pending.values()]
        ready = {r.hex() for r in ray.wait(refs, num_returns=len(refs), timeout=0)[0]} if refs else set()
        for role, sent in list(self.pending.items()):
            if drain or sent.ref.hex() in ready or time.monotonic() - sent.started >= self.p.call_timeout:
                self.writes.append(self._answer(sent))
                self.ctx.count("writes")
                del self.pending[role]

    def _answer(self, sent: _Pending) -> Write:
        """How one write ended: acknowledged, failed by the actor, or of unknown fate."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        role, seq, t, started = sent.role, sent.seq, sent.t, sent.started
        left = max(0.1, started + self.p.call_timeout - time.monotonic())
        try:
            ray.get(sent.ref, timeout=left)
        except RayTaskError as exc:  # the actor raised: Ray does not retry an application error
            return Write(role=role, seq=seq, t=t, seconds=time.monotonic() - started, ack=Ack.UNKNOWN, raised=True,
                         error=str(exc)[:300])
        except (GetTimeoutError, RayActorError) as exc:
            return Write(role=role, seq=seq, t=t, seconds=time.monotonic() - started, ack=Ack.UNKNOWN, raised=False,
                         error=type(exc).__name__)
        return Write(role=role, seq=seq, t=t, seconds=time.monotonic() - started, ack=Ack.ACKED)

    def probe(self) -> str:
        import ray

        size, version = ray.get([self.buffer.size.remote(), self.server.version.remote()], timeout=5.0)
        return f"buffer holds {size} transitions, parameters at version {version}"

    def invariants(self) -> list[Verdict]:
        import ray

        self._collect(drain=True)  # the writes still in flight when the run ended: their fate
        acked = [tids(w.seq) for w in self.writes if w.role is Role.REPLAY and w.ack is Ack.ACKED]
        acked_ids = np.concatenate(acked) if acked else np.empty(0, np.int64)
        # No column before the first add: the buffer learns its columns from it.
        stored = ray.get(self.buffer.column.remote("tid"), timeout=CALL_TIMEOUT) if acked else acked_ids
        version = ray.get(self.server.version.remote(), timeout=CALL_TIMEOUT)
        timeline = Timeline(*(tuple(self.ctx.injections(kind))
                              for kind in (FaultKind.PAUSE, FaultKind.POWER_LOSS, FaultKind.KILL)))
        power_loss = min(timeline.power_losses, default=None)
        self.ctx.metric("acknowledged_transitions", len(acked_ids))
        verdicts = [no_lost_transitions(acked_ids, stored), no_duplicate_transitions(stored),
                    ps_version_matches_pushes(version, self.writes),
                    restored_after_power_loss(self._restarts(), power_loss=power_loss),
                    both_answer_again(self.writes, since=power_loss, within=self.p.answer_within),
                    stopped_at_power_loss(timeline, self.writes)]
        return judged_by_cut(verdicts, cut_of(self.ctx.windows(FaultKind.POWER_LOSS))) if self.ctx.faults \
            else verdicts

    def _restarts(self) -> list[Restart]:
        import ray

        actors = {Role.REPLAY: self.buffer, Role.PARAMS: self.server}
        found = []
        for role, actor in actors.items():
            pid, stats = ray.get([actor.pid.remote(), actor.checkpoint_stats.remote()], timeout=CALL_TIMEOUT)
            found.append(Restart(role=role, pid_before=self.pids[role], pid_after=pid, restore=stats.restore))
        return found

    def call_bounds(self) -> dict[str, float]:
        return {"step": STEP_WAIT + CALL_TIMEOUT}  # sends, a short wait, answers already there

    def teardown(self) -> None:
        import ray

        for actor in (getattr(self, "buffer", None), getattr(self, "server", None)):
            if actor is not None:
                ray.kill(actor)
