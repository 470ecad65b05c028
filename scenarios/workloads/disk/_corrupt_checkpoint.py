"""The ``corrupt-checkpoint`` workload: the flagship's replay buffer, under ``wal`` durability,
whose newest checkpoint is corrupted on disk while it is stopped, and which is then killed.

The driver adds chunks of transitions (unique ids, keyed ``writer_id``/``seq``) one after the
other and records how each ended. The scenario's schedule stops the buffer (SIGSTOP: it commits
no checkpoint meanwhile), corrupts the newest checkpoint it committed (a
:class:`chaos.corruption.CorruptFile`, confirmed by reading the bytes back), and SIGKILLs it. Ray
restarts it; its restore must find the corrupted checkpoint unreadable, pass over it to the one
before, and replay its write-ahead log from there.

Verdicts: the restore passed over exactly the corrupted checkpoint and resumed the one before it
(``resumed_from_last_valid``; unknown when no corruption of a checkpoint was confirmed, the buffer
was not restarted after it, or a newer checkpoint superseded it); every acknowledged transition
is in the restored buffer (``no_lost_transitions``), none twice (``no_duplicate_transitions``).
Under ``durability = "policy"`` the log is missing: what the skipped checkpoint held beyond the
older one is lost, and ``no_lost_transitions`` says so.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import Field

from actors import CheckpointConfig, ReplayBufferActor
from actors._checkpoint import RestoreInfo
from chaos import FaultKind
from chaos.corruption import Corruption
from scenarios.model._records import Verdict
from scenarios.model._workload import CALL_TIMEOUT, Params, Workload
from scenarios.workloads._kit import Ack
from scenarios.workloads.disk._power_loss import CHUNK, has_room, no_duplicate_transitions, no_lost_transitions, tids

__all__ = ["CorruptCheckpoint", "CorruptCheckpointParams", "checkpoint_seq",
           "resumed_from_last_valid"]

#: A checkpoint's folder, as the store names it: ``ckpt-<seq>``.
_FOLDER = re.compile(r"(?:^|/)ckpt-(\d+)/[^/]+$")


class CorruptCheckpointParams(Params):
    """``corrupt-checkpoint``'s ``[params]``."""

    #: A checkpoint every this many adds: several are committed before the corruption.
    every_n: int = 20
    #: ``"policy"`` plants a buffer without its log, which loses what the skipped checkpoint held.
    durability: Literal["policy", "wal"] = "wal"
    #: Seconds an add may wait for its answer (it spans the stop, the kill and the restart).
    call_timeout: float = 20.0
    #: Transitions the buffer holds. Adds stop (and the run ends) before one would overwrite an
    #: acknowledged transition: a FIFO eviction is no loss, and would read as one.
    capacity: int = Field(default=1_000_000, ge=CHUNK)


def checkpoint_seq(file: str) -> int | None:
    """The checkpoint a file of the store belongs to (None: a file of no checkpoint folder)."""
    found = _FOLDER.search(file)
    return int(found.group(1)) if found else None


def resumed_from_last_valid(corruption: Corruption | None, restore: RestoreInfo | None) -> Verdict:
    """The restart passed over the corrupted checkpoint, and only it, and restored the one before.
    ``restore`` None: the buffer runs in the process it started in (no restart read the corruption)."""
    name = "resumed_from_last_valid"
    seq = checkpoint_seq(corruption.file) if corruption is not None else None
    if corruption is None or seq is None:
        return Verdict.unknown(name, "no corruption of a checkpoint's file was confirmed" if corruption is None
                               else f"the corrupted file {corruption.file} is in no checkpoint folder")
    if restore is None:
        return Verdict.unknown(name, f"checkpoint {seq} was corrupted but the buffer never restarted to read it")
    if restore.seq > seq:
        return Verdict.unknown(name, f"checkpoint {restore.seq}, newer than the corrupted {seq}, was committed "
                                     "before the restart: the restore never had to pass over the corruption")
    return Verdict.over(name, 1, held=restore.seq == seq - 1 and restore.skipped == (seq,),
                        detail=f"checkpoint {seq} corrupted ({corruption.describe()}); the restart restored "
                               f"checkpoint {restore.seq}, passed over {list(restore.skipped) or 'none'}, "
                               f"replayed {restore.replayed} log records")


@dataclass(frozen=True, slots=True)
class _Add:
    """One keyed add as the driver saw it end."""

    seq: int
    ack: Ack


class CorruptCheckpoint(Workload):
    """The flagship's buffer, its newest checkpoint corrupted while stopped, then killed: the
    restart resumes the last valid checkpoint and its log, losing nothing acknowledged."""

    FAULT_VERDICTS = ("resumed_from_last_valid",)
    INVARIANTS = ("resumed_from_last_valid", "no_lost_transitions", "no_duplicate_transitions")
    HAS_PROBE = True
    Params = CorruptCheckpointParams

    def setup(self) -> None:
        import ray

        self.p = self.ctx.params_as(CorruptCheckpointParams)
        config = CheckpointConfig(storage=f"{self.ctx.storage}/replay", durability=self.p.durability,
                                  every_n=self.p.every_n, keep=3, fsync_every=1)
        self.buffer = ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0)(ReplayBufferActor).options(
            name="replay", namespace=self.ctx.namespace).remote(self.p.capacity, checkpoint=config, seed=self.ctx.seed)
        self.pid = ray.get(self.buffer.pid.remote(), timeout=CALL_TIMEOUT)
        self.adds: list[_Add] = []

    def step(self) -> bool:
        """One add, waited for up to ``call_timeout`` (across the stop, the kill and the restart);
        False once the next add would not fit (a fault not reached by then fails the run)."""
        import ray
        from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

        seq = len(self.adds)
        if not has_room(seq, self.p.capacity):
            return False
        ref = self.buffer.add.remote({"tid": tids(seq)}, writer_id="collector", seq=seq)
        try:
            ray.get(ref, timeout=self.p.call_timeout)
            self.adds.append(_Add(seq, Ack.ACKED))
        except (GetTimeoutError, RayActorError, RayTaskError):
            self.adds.append(_Add(seq, Ack.UNKNOWN))
        self.ctx.count("adds")
        return True

    def probe(self) -> str:
        import ray

        return f"buffer holds {ray.get(self.buffer.size.remote(), timeout=5.0)} transitions"

    def invariants(self) -> list[Verdict]:
        import ray

        acked = [tids(a.seq) for a in self.adds if a.ack is Ack.ACKED]
        acked_ids = np.concatenate(acked) if acked else np.empty(0, np.int64)
        stored = ray.get(self.buffer.column.remote("tid"), timeout=CALL_TIMEOUT) if acked else acked_ids
        pid, stats = ray.get([self.buffer.pid.remote(), self.buffer.checkpoint_stats.remote()],
                             timeout=CALL_TIMEOUT)
        self.ctx.metric("acknowledged_transitions", len(acked_ids))
        return [resumed_from_last_valid(self._corruption(), stats.restore if pid != self.pid else None),
                no_lost_transitions(acked_ids, stored), no_duplicate_transitions(stored)]

    def _corruption(self) -> Corruption | None:
        """The first corruption the run confirmed, as its injector read it back."""
        for window in self.ctx.windows(FaultKind.FILE_CORRUPTION):
            found = window.injection.found if window.injection is not None else None
            if isinstance(found, Corruption):
                return found
        return None

    def call_bounds(self) -> dict[str, float]:
        return {"step": self.p.call_timeout + 1.0}

    def teardown(self) -> None:
        import ray

        if getattr(self, "buffer", None) is not None:
            ray.kill(self.buffer)
