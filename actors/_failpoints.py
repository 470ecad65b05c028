"""The failpoints in the checkpoint mechanism, and what recovery guarantees at each.

Arm them with :class:`chaos.failpoints.FailpointPlan` (``runtime_env=chaos.failpoints.failpoint_env(plan)`` for an
actor); the failpoint sweep (``tests/test_failpoint_sweep.py``) crashes at every one.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FAILPOINTS", "ActorFailpoint"]

CHECKPOINT_FILE = "checkpoint.file.written"
CHECKPOINT_BEFORE_MANIFEST = "checkpoint.manifest.before"
CHECKPOINT_MANIFEST = "checkpoint.manifest.written"
CHECKPOINT_RENAMED = "checkpoint.renamed"
CHECKPOINT_PRUNE = "checkpoint.prune.before"
CHECKPOINT_PRUNED = "checkpoint.pruned"
WAL_BEFORE = "wal.append.before"
WAL_TORN = "wal.append.torn"
WAL_WRITTEN = "wal.append.written"
WAL_ROLL = "wal.roll.before"
WAL_ROLLED = "wal.roll.opened"
RESTORE_LOADED = "restore.loaded"
RESTORE_REPLAYED = "restore.replayed"
MUTATION_APPLIED = "mutation.applied"

_BOTH = frozenset({"policy", "wal"})
_WAL = frozenset({"wal"})
_NO_LOSS = "no acknowledged mutation lost (wal); at most the policy's window lost (policy)"


@dataclass(frozen=True, slots=True)
class ActorFailpoint:
    """A failpoint of :class:`actors.Checkpointable`: where it is and what recovery promises.

    ``durabilities`` are those in which the point is on a path at all (the WAL's only with
    ``"wal"``); ``on_restart`` points are reached only while a restarted actor restores.
    """

    name: str
    where: str
    guarantee: str
    durabilities: frozenset[str] = _BOTH
    on_restart: bool = False


FAILPOINTS: tuple[ActorFailpoint, ...] = (
    ActorFailpoint(CHECKPOINT_FILE, "a checkpoint file written and fsynced (each file)",
                   f"the half-written folder is never read; the previous checkpoint restores; {_NO_LOSS}"),
    ActorFailpoint(CHECKPOINT_BEFORE_MANIFEST, "every file written, manifest not yet",
                   f"as above: no manifest, no checkpoint; {_NO_LOSS}"),
    ActorFailpoint(CHECKPOINT_MANIFEST, "manifest written and fsynced, folder not renamed",
                   f"the temporary folder is ignored and pruned later; {_NO_LOSS}"),
    ActorFailpoint(CHECKPOINT_RENAMED, "folder renamed, parent directory not yet fsynced",
                   "the new checkpoint restores (a process crash keeps the rename); "
                   "its WAL segment starts empty"),
    ActorFailpoint(CHECKPOINT_PRUNE, "checkpoint committed, old ones not yet pruned",
                   "the new checkpoint restores; extra old folders are pruned next time"),
    ActorFailpoint(CHECKPOINT_PRUNED, "one old checkpoint folder deleted (each)",
                   "the newest checkpoint and its delta chain are intact and restore"),
    ActorFailpoint(name=WAL_BEFORE, where="mutation applied in memory, record not yet written",
                   guarantee="the call was not acknowledged: Ray's retry applies it once", durabilities=_WAL),
    ActorFailpoint(name=WAL_TORN, where="half of the record's frame written",
                   guarantee="the torn record is dropped with a warning, the segment truncated to it; "
                   "Ray's retry applies the call once", durabilities=_WAL),
    ActorFailpoint(name=WAL_WRITTEN, where="record written (page cache), not yet fsynced, no reply",
                   guarantee="replay applies it; Ray's retry is recognised by (writer_id, seq): "
                   "applied once", durabilities=_WAL),
    ActorFailpoint(name=WAL_ROLL, where="checkpoint committed, new log segment not yet opened",
                   guarantee="the checkpoint restores; the old segment is older than it and not replayed",
                   durabilities=_WAL),
    ActorFailpoint(name=WAL_ROLLED, where="new segment opened, old segments not yet pruned",
                   guarantee="as above; old segments are pruned at the next checkpoint", durabilities=_WAL),
    ActorFailpoint(RESTORE_LOADED, "restart: checkpoint loaded, log not yet replayed",
                   "the next restart restores the same checkpoint and log again", on_restart=True),
    ActorFailpoint(name=RESTORE_REPLAYED, where="restart: one log record replayed (each)",
                   guarantee="replay has no side effects on disk: the next restart replays it all again",
                   durabilities=_WAL, on_restart=True),
    ActorFailpoint(MUTATION_APPLIED, "mutation applied, not yet logged or counted",
                   f"the call was not acknowledged: Ray's retry applies it once; {_NO_LOSS}"),
)
