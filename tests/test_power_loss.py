"""The power-loss sweep: the failpoint sweep's crashes, each followed by a real power loss.

The checkpoint storage sits on a fault filesystem. Each life of the actor runs in a forked
process; an armed failpoint SIGKILLs it, and then the mount drops every write no fsync
covered (of a file for its bytes, of its directory for its name), as a machine crash does —
which a SIGKILL alone never does, since the page cache outlives the process. The next life
restores from what is left. Under ``wal`` (``fsync_every=1``) no acknowledged write may be
lost; under ``policy``, at most the mutations after the last checkpoint; and no committed
checkpoint may be unusable.

Two planted stores show what only a power loss catches: one that writes the manifest (and
commits the folder) before its files are fsynced, one that never fsyncs the directory after
the rename. Both pass the SIGKILL-only sweep.
"""

from __future__ import annotations

import errno
import os
import signal
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from actors import CheckpointConfig
from actors import _failpoints as fp
from actors._wal import WalWriter, read_segment, segment_name
from actors.checkpoint import CheckpointStore
from chaos import History, check_set
from chaos.disks._fusefs import FaultFS, fault_filesystem
from crashcases import (
    EVERY_N,
    MAX_PHASES,
    Case,
    Life,
    all_cases,
    check,
    final_state,
    next_writes,
    pending,
    phase_child,
    record,
    run_life,
)

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse")



@dataclass(frozen=True, slots=True)
class PowerCase:
    """A sweep case whose WAL fsyncs every record (``fsync_every``): the durability promise
    under a power loss is then the same as under a process crash."""

    case: Case
    fsync_every: int = 1

    def config(self, storage: str) -> CheckpointConfig:
        return CheckpointConfig(storage=storage, durability=self.case.durability, every_n=EVERY_N,
                                incremental=self.case.incremental, full_every=3, keep=2,
                                fsync_every=self.fsync_every, fsync_interval=3600.0)

    def label(self) -> str:
        return self.case.label()


# -- planted stores: each passes every SIGKILL test ---------------------------------------------


def _plant_manifest_before_fsync() -> None:
    """The payload files are fsynced only after the folder is committed; the manifest, written
    and fsynced before them, vouches for bytes a power loss can still take."""
    from actors import _store

    def write_bytes(self: Any, path: str, data: bytes) -> Any:
        with self.fs.open(path, "wb") as f:
            f.write(data)
            if path.endswith("/" + _store._MANIFEST):
                _store._fsync(f)
        return _store.FileMeta(len(data), _store._crc32(data))

    real_save = _store.CheckpointStore.save

    def save(self: Any, tree: Any, *, parent: int | None = None) -> Any:
        info = real_save(self, tree, parent=parent)
        for name in os.listdir(info.path):  # the fsync comes, but after the commit
            with open(os.path.join(info.path, name), "rb") as f:
                os.fsync(f.fileno())
        return info

    _store.CheckpointStore._write_bytes = write_bytes  # type: ignore[method-assign]
    _store.CheckpointStore._write_npy = (  # type: ignore[method-assign]
        lambda self, path, array: write_bytes(self, path, _npy_bytes(array)))
    _store.CheckpointStore.save = save  # type: ignore[method-assign]


def _npy_bytes(array: Any) -> bytes:
    import io

    import numpy as np

    out = io.BytesIO()
    np.save(out, array, allow_pickle=False)
    return out.getvalue()


def _plant_no_directory_fsync_after_rename() -> None:
    """The folder is renamed into place and the parent directory never fsynced."""
    from actors import _store

    real = _store._fsync_dir
    _store._fsync_dir = lambda path: None if os.path.basename(path) == "ckpt" else real(path)


PLANTS: dict[str, Callable[[], None]] = {
    "manifest-before-fsync": _plant_manifest_before_fsync,
    "no-directory-fsync-after-rename": _plant_no_directory_fsync_after_rename,
}


def power_child(conn: Any, storage: str, plan_json: str, case: PowerCase, todo: list[tuple[str, int]],
                fresh: bool, plant: str | None) -> None:
    """One life of the actor, in a child process, with ``plant`` applied there only. Its
    trees take the numpy path: loading numba would cost each life a second, and durability
    does not depend on the path."""
    os.environ["RAYCHAOS_TREES"] = "numpy"
    if plant is not None:
        PLANTS[plant]()
    phase_child(conn, storage, plan_json, case, todo, fresh)  # type: ignore[arg-type]


# -- the sweep's driver ------------------------------------------------------------------------


def live(case: PowerCase, storage: str, plan_json: str, todo: list[tuple[str, int]], *, fresh: bool,
         plant: str | None) -> Life:
    """One life in a child process, its reports collected until it exits (bounded)."""
    return run_life(power_child, (storage, plan_json, case, todo, fresh, plant), label=case.label())


def _durable_dir(path: str) -> str:
    """Make ``path`` and fsync its parent: a power loss must not take it."""
    os.mkdir(path)
    fd = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def _fresh_storage(fs: FaultFS) -> str:
    """A case's storage folder on the mount, made durable first, as a user's would be."""
    return _durable_dir(os.path.join(_durable_dir(os.path.join(fs.mount, uuid.uuid4().hex[:12])), "ckpt"))


@dataclass(slots=True)
class Outcome:
    """One case's run: what was acknowledged, what the final restore holds, what went wrong."""

    history: History
    stored: list[tuple[str, int]]
    crashes: int
    problems: list[str]


def run_case(case: PowerCase, fs: FaultFS, evidence: str, *, plant: str | None = None,
             power_loss: bool = True) -> Outcome:
    """Crash at the case's failpoint, drop unsynced data (``power_loss``), restore, check."""
    storage = _fresh_storage(fs)
    plan_json = case.case.plan(evidence).to_json()
    history, restores, crashes = History(), [], 0
    for n in range(MAX_PHASES):
        life = live(case, storage, plan_json, pending(history) + next_writes(history), fresh=n == 0, plant=plant)
        record(life, history, restores)
        if life.finished:
            break
        if life.exitcode != -signal.SIGKILL:
            return Outcome(history, [], crashes, [f"{case.label()}: a life ended with exit code {life.exitcode}, "
                                                  "not a crash"])
        crashes += 1
        if power_loss:
            fs.power_loss()
    else:
        return Outcome(history, [], crashes, [f"{case.label()}: still crashing after {MAX_PHASES} lives"])
    if power_loss:
        fs.power_loss()  # the last checkpoint, committed before "done", must be durable too
    keys, info, warned = final_state(case.config(storage))
    problems = check(case.case, history, keys, [*restores, info], evidence, crashes)
    warnings_seen = [f"{case.label()}: the final restore warned: {w}" for w in warned]
    return Outcome(history, keys, crashes, problems + warnings_seen)


@pytest.fixture(scope="module")
def mounted() -> Iterator[FaultFS]:
    with fault_filesystem() as fs:
        yield fs


def _evidence(tmp_path: Path, n: object = "") -> str:
    return str(tmp_path / f"evidence{n}")  # on the real disk: a firing is counted once, whatever is lost


# -- the store and the log alone: each durable promise, one power loss each -----------------------


def _tree(n: int) -> dict[str, Any]:
    import numpy as np

    return {"n": n, "small": np.arange(4.0) + n, "big": np.full(300_000, n, np.float32)}


def test_a_committed_checkpoint_survives_a_power_loss(mounted: FaultFS) -> None:
    """``save`` returned: the folder's name (its parent fsynced) and its files' names (the
    folder itself fsynced before the rename) are durable."""
    store = CheckpointStore(_fresh_storage(mounted))
    store.save(_tree(1))
    info = store.save(_tree(2))
    mounted.power_loss()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a skipped folder warns: fail on it
        loaded = store.load_latest()
    assert loaded is not None and (loaded.seq, loaded.skipped) == (info.seq, ())
    assert loaded.chain[0]["n"] == 2


def test_records_fsynced_to_a_new_log_segment_survive_a_power_loss(mounted: FaultFS) -> None:
    """A segment's name is durable once it is opened, so its fsynced records are too."""
    path = os.path.join(_fresh_storage(mounted), segment_name(7))
    writer = WalWriter(path, fsync_every=1)
    for i in range(3):
        writer.append(b"record %d" % i)
    mounted.power_loss()
    assert read_segment(path)[0] == [b"record 0", b"record 1", b"record 2"]


def test_a_storage_folder_the_store_creates_survives_a_power_loss(mounted: FaultFS) -> None:
    storage = os.path.join(_fresh_storage(mounted), "made", "by", "the-store")
    info = CheckpointStore(storage).save(_tree(1))
    mounted.power_loss()
    loaded = CheckpointStore(storage).load_latest()
    assert loaded is not None and loaded.seq == info.seq


@pytest.mark.parametrize("glob", ["*.npy", "*/.tmp-*"])
def test_a_failing_fsync_fails_the_save_and_commits_nothing(mounted: FaultFS, glob: str) -> None:
    """An fsync that returns EIO (of a file, or of the folder before its rename) leaves the
    bytes' fate unknown: ``save`` must raise, never return a checkpoint it cannot vouch for."""
    store = CheckpointStore(_fresh_storage(mounted))
    store.save(_tree(1))
    mounted.fail(errno.EIO, glob=glob, ops=["fsync"])
    try:
        with pytest.raises(OSError):
            store.save(_tree(2))
    finally:
        mounted.heal()
    loaded = store.load_latest()
    assert loaded is not None and loaded.seq == 1


#: The fast tier's sample: each phase of a checkpoint and of the log, in both durabilities.
SAMPLED = [Case(fp.CHECKPOINT_MANIFEST, "policy", False, 0), Case(fp.CHECKPOINT_PRUNE, "policy", False, 0),
           Case(fp.MUTATION_APPLIED, "policy", False, 5), Case(fp.CHECKPOINT_FILE, "wal", False, 0),
           Case(fp.CHECKPOINT_RENAMED, "wal", False, 5), Case(fp.CHECKPOINT_PRUNED, "wal", True, 1),
           Case(fp.WAL_WRITTEN, "wal", False, 5), Case(fp.WAL_ROLLED, "wal", True, 0),
           Case(fp.RESTORE_REPLAYED, "wal", False, 0)]


@pytest.mark.parametrize("case", SAMPLED, ids=Case.label)
def test_every_failpoint_recovers_after_a_power_loss(case: Case, mounted: FaultFS, tmp_path: Path) -> None:
    assert run_case(PowerCase(case), mounted, _evidence(tmp_path)).problems == []


@pytest.mark.slow
@pytest.mark.deep  # CI's budget: make test runs the sampled sweep, make slow catches the plants with it
@pytest.mark.parametrize("case", [c for c in all_cases() if c not in SAMPLED], ids=Case.label)
def test_every_failpoint_recovers_after_a_power_loss_full(case: Case, mounted: FaultFS, tmp_path: Path) -> None:
    assert run_case(PowerCase(case), mounted, _evidence(tmp_path)).problems == []


def test_a_batched_wal_loses_at_most_its_window_to_a_power_loss(mounted: FaultFS, tmp_path: Path) -> None:
    """``fsync_every=4``: a power loss takes the acknowledged records after the last fsync (the
    documented window: at most 3), never more; a process crash alone takes none."""
    case = PowerCase(Case(fp.WAL_WRITTEN, "wal", False, skip=6), fsync_every=4)
    outcome = run_case(case, mounted, _evidence(tmp_path))
    window = (case.fsync_every - 1) * outcome.crashes
    assert check_set(outcome.history.ops(), outcome.stored, allowed_loss=window).ok
    assert not check_set(outcome.history.ops(), outcome.stored, allowed_loss=0).ok, "nothing was lost"
    assert run_case(case, mounted, _evidence(tmp_path, 2), power_loss=False).problems == []


# -- the planted stores: caught by a power loss, never by a SIGKILL ---------------------------------


def test_a_manifest_committed_before_its_files_are_fsynced_is_caught(mounted: FaultFS, tmp_path: Path) -> None:
    """Crashed after the commit, before the late fsyncs: the manifest vouches for files a power
    loss emptied, so the committed checkpoint is unusable."""
    case = PowerCase(Case(fp.CHECKPOINT_PRUNE, "wal", False, skip=1))
    plant = "manifest-before-fsync"
    problems = run_case(case, mounted, _evidence(tmp_path), plant=plant).problems
    assert any("restore passed over committed checkpoints" in p for p in problems), problems
    assert run_case(case, mounted, _evidence(tmp_path, 2), plant=plant, power_loss=False).problems == []


def test_a_rename_whose_directory_is_never_fsynced_is_caught(mounted: FaultFS, tmp_path: Path) -> None:
    """The committed checkpoints' names never reach the disk: a power loss takes them, and
    with them more than the policy's window."""
    case = PowerCase(Case(fp.MUTATION_APPLIED, "policy", False, skip=9))
    plant = "no-directory-fsync-after-rename"
    problems = run_case(case, mounted, _evidence(tmp_path), plant=plant).problems
    assert any("lost" in p and "loss allowed: 3" in p for p in problems), problems
    assert run_case(case, mounted, _evidence(tmp_path, 2), plant=plant, power_loss=False).problems == []


#: Where the sampled sweep catches each planted store (measured; a SIGKILL alone catches none).
CAUGHT_BY = {
    "manifest-before-fsync": {"checkpoint.prune.before[skip=0] policy/full",
                              "checkpoint.pruned[skip=1] wal/incremental"},
    "no-directory-fsync-after-rename": {"checkpoint.manifest.written[skip=0] policy/full",
                                        "checkpoint.prune.before[skip=0] policy/full",
                                        "mutation.applied[skip=5] policy/full"},
}


@pytest.mark.slow
@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_the_sampled_sweep_catches_each_planted_store_where_a_sigkill_never_does(
        plant: str, mounted: FaultFS, tmp_path: Path) -> None:
    runs = {(case.label(), lost): run_case(PowerCase(case), mounted, _evidence(tmp_path, f"{i}-{lost}"),
                                           plant=plant, power_loss=lost)
            for i, case in enumerate(SAMPLED) for lost in (True, False)}
    assert {label for (label, lost), out in runs.items() if lost and out.problems} == CAUGHT_BY[plant]
    assert [label for (label, lost), out in runs.items() if not lost and out.problems] == []
