"""The failpoint sweep's cases and its checker, shared by the in-process and the Ray sweep.

A case crashes a :class:`ReplayBufferActor` at one failpoint (``skip`` passes first), in one
durability and checkpoint kind, while two writers add rows keyed ``(writer, seq)``. A point
reached only while a restarted actor restores is preceded by a first crash placed where the
log holds records to replay (``mutation.applied`` with ``FIRST_SKIP``).
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from actors import CheckpointConfig, ReplayBufferActor, RestoreInfo
from actors import _failpoints as fp
from actors.checkpoint import FAILPOINTS, ActorFailpoint
from chaos import History, check_set
from chaos.failpoints import FailAction, Failpoint, FailpointPlan, firings
from chaos.history import OpStatus

EVERY_N = 4
WRITERS = ("a", "b")
WRITES = 14  # per writer: 28 mutations, 7 checkpoints
CAPACITY = 256
#: The first crash for restart-time points: after 7 mutations, 3 of them in the log only.
FIRST_SKIP = 2 * EVERY_N - 1
_BY_NAME = {p.name: p for p in FAILPOINTS}


@dataclass(frozen=True, slots=True)
class Case:
    """One crash: where, after how many passes, in which durability and checkpoint kind."""

    point: str
    durability: str
    incremental: bool
    skip: int

    @property
    def info(self) -> ActorFailpoint:
        return _BY_NAME[self.point]

    def label(self) -> str:
        kind = "incremental" if self.incremental else "full"
        return f"{self.point}[skip={self.skip}] {self.durability}/{kind}"

    def plan(self, evidence_dir: str) -> FailpointPlan:
        points = [Failpoint(name=self.point, action=FailAction.CRASH, skip=self.skip)]
        if self.info.on_restart:
            points.append(Failpoint(name=fp.MUTATION_APPLIED, skip=FIRST_SKIP))
        return FailpointPlan(tuple(points), evidence_dir)

    def config(self, storage: str) -> CheckpointConfig:
        return CheckpointConfig(storage=storage, durability=self.durability, every_n=EVERY_N,
                                incremental=self.incremental, full_every=3, keep=2)


def max_skip(point: str) -> int:
    """The largest ``skip`` a run of the sweep's size reaches for sure, per point."""
    if point == fp.CHECKPOINT_PRUNED:
        return 1  # keep=2: the first deletions come with the fourth checkpoint
    if point == fp.RESTORE_REPLAYED:
        return EVERY_N - 2  # FIRST_SKIP leaves EVERY_N - 1 records to replay
    if point == fp.RESTORE_LOADED:
        return 0
    return 5


def all_cases(skips: Iterable[int] | None = None) -> Iterator[Case]:
    """Every point × durability × kind (where the point is on a path), at ``skips`` (clipped
    to :func:`max_skip`; default: the first and last reached pass)."""
    for point, incremental in itertools.product(FAILPOINTS, (False, True)):
        top = max_skip(point.name)
        for durability in sorted(point.durabilities):
            for skip in sorted({min(s, top) for s in (skips if skips is not None else (0, top))}):
                yield Case(point.name, durability, incremental, skip)


def row(writer: str, seq: int) -> dict[str, np.ndarray]:
    return {"w": np.array([WRITERS.index(writer)], np.int64), "s": np.array([seq], np.int64)}


def stored_keys(columns: tuple[np.ndarray, np.ndarray]) -> list[tuple[str, int]]:
    writers, seqs = columns
    return [(WRITERS[int(w)], int(s)) for w, s in zip(writers, seqs)]


def check(case: Case, history: History, stored: Sequence[tuple[str, int]],
          restores: Sequence[RestoreInfo], evidence_dir: str, crashes: int) -> list[str]:
    """Everything wrong with one case's outcome, in words that name the case (empty: it held)."""
    problems = []
    fired = {f.name for f in firings(evidence_dir)}
    if case.point not in fired:
        problems.append(f"failpoint {case.point} was never reached (skip={case.skip})")
    if crashes < 1:
        problems.append("no process crashed")
    allowed = 0 if case.durability == "wal" else (EVERY_N - 1) * crashes
    verdict = check_set(history.ops(), stored, allowed_loss=allowed)
    if not verdict.ok:
        problems.append(f"history: {verdict.explain()}")
    for info in restores:
        if info.skipped:
            problems.append(f"restore passed over committed checkpoints {list(info.skipped)} "
                            f"(restored {info.seq}): a process crash must never leave one unusable")
        if info.torn_bytes and case.point != fp.WAL_TORN:
            problems.append(f"restore dropped {info.torn_bytes} torn log bytes after a process crash")
    return [f"{case.label()}: {p}" for p in problems]


def pending(history: History) -> list[tuple[str, int]]:
    """Writes invoked and not completed: what Ray's retry would deliver again, in order."""
    return [op.key for op in history.ops() if op.status is OpStatus.PENDING]  # type: ignore[misc]


def next_writes(history: History) -> list[tuple[str, int]]:
    """The writes not yet invoked, interleaving the writers."""
    sent = {op.key for op in history.ops()}
    return [(w, s) for s in range(WRITES) for w in WRITERS if (w, s) not in sent]


def tmp_paths(root: Any) -> tuple[str, str]:
    return os.path.join(str(root), "ckpt"), os.path.join(str(root), "evidence")


# -- the in-process sweep: each run of the actor in its own forked process ------------------

#: A phase's bound: a run of the sweep's size takes well under a second here.
PHASE_TIMEOUT = 60.0
MAX_PHASES = 4


def save_renaming_first(store: Any, tree: Any, *, parent: int | None = None) -> Any:
    """A planted bug: ``CheckpointStore.save`` that commits the folder (renames it into place)
    before writing its files and manifest, with the same failpoints."""
    import time

    from actors._store import _MANIFEST, FORMAT_VERSION, Manifest, _fsync_dir
    from actors.checkpoint import CheckpointInfo
    from chaos import failpoint

    seq = store.next_seq()
    final = store.folder(seq)
    store.fs.makedirs(final, exist_ok=True)
    failpoint(fp.CHECKPOINT_RENAMED)
    files = store._write_payload(final, tree)
    manifest = Manifest(FORMAT_VERSION, seq, parent, time.time(), files)
    failpoint(fp.CHECKPOINT_BEFORE_MANIFEST)
    store._write_bytes(f"{final}/{_MANIFEST}", manifest.to_json())
    failpoint(fp.CHECKPOINT_MANIFEST)
    _fsync_dir(store.root)
    failpoint(fp.CHECKPOINT_PRUNE)
    store.prune()
    return CheckpointInfo(seq, final, sum(m.size for m in files.values()), 0.0, parent)


def phase_child(conn: Any, storage: str, plan_json: str, case: Case, todo: list[tuple[str, int]],
                fresh: bool, broken: bool = False) -> None:
    """One life of the actor (in a child process): start or restore, then write ``todo``,
    reporting each invocation and acknowledgement; an armed failpoint may SIGKILL it.
    ``broken`` plants :func:`save_renaming_first` (in this process only)."""
    from actors import ReplayBufferActor
    from actors.checkpoint import CheckpointStore
    from chaos.failpoints import arm

    if broken:
        CheckpointStore.save = save_renaming_first  # type: ignore[method-assign]
    arm(FailpointPlan.from_json(plan_json))
    actor = ReplayBufferActor(CAPACITY, checkpoint=case.config(storage),
                              restore="never" if fresh else "always", seed=0)
    if not fresh:
        conn.send(("restored", actor.restore_info))
    for writer, seq in todo:
        conn.send(("invoke", (writer, seq)))
        actor.add(row(writer, seq), writer_id=writer, seq=seq)
        conn.send(("ok", (writer, seq)))
    actor.checkpoint()  # so the final restore loses nothing: every loss is a crash's
    conn.send(("done", None))


# -- the sweeps' driver: one life of the actor in a child process ---------------------------------

CTX = multiprocessing.get_context("forkserver")
CTX.set_forkserver_preload(["numpy", "actors", "crashcases"])


@dataclass(slots=True)
class Life:
    """What one life of the actor reported before it ended, and how it ended."""

    messages: list[tuple[str, Any]] = field(default_factory=list)
    exitcode: int | None = None

    @property
    def finished(self) -> bool:
        return self.exitcode == 0 and bool(self.messages) and self.messages[-1][0] == "done"


def run_life(target: Callable[..., None], args: tuple[Any, ...], *, label: str) -> Life:
    """Run ``target(conn, *args)`` in a child process, collecting its reports until it exits
    (bounded by PHASE_TIMEOUT)."""
    parent, child = CTX.Pipe(duplex=False)
    proc = CTX.Process(target=target, args=(child, *args))
    proc.start()
    child.close()
    life, deadline = Life(), time.monotonic() + PHASE_TIMEOUT
    try:
        while time.monotonic() < deadline and parent.poll(max(0.0, deadline - time.monotonic())):
            life.messages.append(parent.recv())
    except EOFError:
        pass  # the child exited (or was killed): everything it sent has been read
    proc.join(max(0.0, deadline - time.monotonic()))
    if proc.exitcode is None:
        proc.kill()
        proc.join(5)
        pytest.fail(f"{label}: a life of the actor ran past {PHASE_TIMEOUT} s")
    life.exitcode = proc.exitcode
    return life


def record(life: Life, history: History, restores: list[RestoreInfo]) -> None:
    known = {op.key for op in history.ops()}
    for kind, value in life.messages:
        if kind == "invoke" and value not in known:
            history.invoke(value, value[0])
        elif kind == "ok":
            history.complete(value, OpStatus.OK)
        elif kind == "restored":
            restores.append(value)


def final_state(config: CheckpointConfig) -> tuple[list[tuple[str, int]], RestoreInfo, list[str]]:
    """Restore once more, in this process and unarmed: what is stored, and any warning."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        actor = ReplayBufferActor(CAPACITY, checkpoint=config, restore="always", seed=0)
    keys = stored_keys((actor.column("w"), actor.column("s"))) if actor.size() else []
    return keys, actor.restore_info, [str(w.message) for w in caught]
