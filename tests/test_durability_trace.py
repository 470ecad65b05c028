"""What a power loss could keep: the order of writes, fsyncs, renames and deletions.

A process crash keeps the page cache, so the failpoint sweep cannot tell a missing fsync.
A machine crash keeps only what was fsynced (and a rename only once its directory was). These
tests record the checkpoint store's and the WAL's file-system calls, in order, and check the
trace against that rule, as ALICE and Jepsen's LazyFS do: at every point of the trace, what
a power loss would leave must still restore.
"""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from actors._wal import WalWriter, read_segment
from actors.checkpoint import CheckpointStore, CheckpointWarning
from conftest import open_under


class Trace:
    """The file-system calls of one block, in order: ("write"|"fsync"|"rename"|"delete", path)."""

    def __init__(self) -> None:
        self.ops: list[tuple[str, str]] = []
        self.synced_size: dict[str, int] = {}  # path → its size when last fsynced

    def index(self, kind: str, path: str, *, after: int = -1) -> int:
        return next((i for i, op in enumerate(self.ops) if i > after and op == (kind, path)), -1)


@pytest.fixture
def trace(monkeypatch: pytest.MonkeyPatch) -> Iterator[Trace]:
    record = Trace()
    real = {name: getattr(os, name) for name in ("fsync", "write", "rename", "remove", "unlink", "rmdir")}

    def by_fd(kind: str) -> Any:
        def call(fd: int, *args: Any) -> Any:
            path = os.readlink(f"/proc/self/fd/{fd}")
            record.ops.append((kind, path))
            if kind == "fsync":
                record.synced_size[path] = os.fstat(fd).st_size
            return real[kind](fd, *args)
        return call

    def rename(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        record.ops.append(("rename", f"{src} -> {dst}"))
        real["rename"](src, dst, *args, **kwargs)

    def deleting(name: str) -> Any:
        def call(path: Any, *args: Any, **kwargs: Any) -> None:
            record.ops.append(("delete", str(path)))
            real[name](path, *args, **kwargs)
        return call

    monkeypatch.setattr(os, "fsync", by_fd("fsync"))
    monkeypatch.setattr(os, "write", by_fd("write"))
    monkeypatch.setattr(os, "rename", rename)
    for name in ("remove", "unlink", "rmdir"):
        monkeypatch.setattr(os, name, deleting(name))
    monkeypatch.setattr(shutil, "rmtree", _rmtree_with(record))
    yield record


def _rmtree_with(record: Trace) -> Any:
    real = shutil.rmtree

    def rmtree(path: Any, *args: Any, **kwargs: Any) -> None:
        record.ops.append(("delete", str(path)))
        real(path, *args, **kwargs)
    return rmtree


def tree(n: int) -> dict[str, Any]:
    return {"n": n, "small": np.arange(4.0) + n, "big": np.full(300_000, n, np.float32)}


def test_a_checkpoint_is_durable_before_its_rename_and_its_rename_before_any_prune(
        tmp_path: Path, trace: Trace) -> None:
    store = CheckpointStore(str(tmp_path), keep=1)
    store.save(tree(1))
    trace.ops.clear()
    info = store.save(tree(2))  # also prunes checkpoint 1
    (rename_at,) = [i for i, (kind, _) in enumerate(trace.ops) if kind == "rename"]
    tmp = trace.ops[rename_at][1].split(" -> ")[0]
    for name in sorted(os.listdir(info.path)):  # every file, the manifest included
        synced = trace.index("fsync", f"{tmp}/{name}")
        assert 0 <= synced < rename_at, f"{name} is not fsynced before the folder is renamed"
        assert trace.synced_size[f"{tmp}/{name}"] == os.path.getsize(f"{info.path}/{name}"), \
            f"{name} was written to after its fsync"
    dir_synced = trace.index("fsync", str(tmp_path), after=rename_at)
    assert dir_synced > rename_at, "the parent directory is not fsynced after the rename"
    deletes = [i for i, (kind, _) in enumerate(trace.ops) if kind == "delete"]
    assert deletes and min(deletes) > dir_synced, "a checkpoint is pruned before the new one is durable"


def test_the_manifest_is_written_after_every_file_is_fsynced(tmp_path: Path, trace: Trace) -> None:
    """A manifest that could be durable while a file it vouches for is not would let a torn
    file pass as committed after a power loss, were the rename ever made first."""
    store = CheckpointStore(str(tmp_path))
    trace.ops.clear()
    info = store.save(tree(1))
    manifest_synced = next(i for i, (kind, path) in enumerate(trace.ops)
                           if kind == "fsync" and path.endswith("/manifest.json"))
    payload_synced = [i for i, (kind, path) in enumerate(trace.ops)
                      if kind == "fsync" and not path.endswith("/manifest.json")
                      and os.path.basename(os.path.dirname(path)).startswith(".tmp-")]  # files in it
    assert len(payload_synced) == len(os.listdir(info.path)) - 1
    assert max(payload_synced) < manifest_synced


@pytest.mark.parametrize("every", [1, 3, 8])
def test_the_wal_never_holds_more_unsynced_records_than_fsync_every(
        tmp_path: Path, trace: Trace, every: int) -> None:
    path = str(tmp_path / "wal-0000000000.log")
    writer = WalWriter(path, fsync_every=every, fsync_interval=3600.0)
    for i in range(20):
        writer.append(b"record %d" % i)
        unsynced = 0
        for kind, target in trace.ops:
            if target == path:
                unsynced = unsynced + 1 if kind == "write" else 0
        assert unsynced < every or (every == 1 and unsynced == 0), (i, unsynced)
    # ... and no more fsyncs than that bound needs: one per `every` records
    assert trace.ops.count(("fsync", path)) == 20 // every
    writer.close()
    assert trace.ops[-1] == ("fsync", path), "close() leaves records unsynced"


def test_the_wal_syncs_once_its_interval_has_passed(tmp_path: Path, trace: Trace) -> None:
    now = [0.0]
    path = str(tmp_path / "wal-0000000000.log")
    writer = WalWriter(path, fsync_every=1000, fsync_interval=1.0, clock=lambda: now[0])
    writer.append(b"a")
    assert ("fsync", path) not in trace.ops
    now[0] = 1.0
    writer.append(b"b")
    assert trace.ops[-1] == ("fsync", path)
    now[0] = 1.5  # half an interval since that sync
    writer.append(b"c")
    assert trace.ops.count(("fsync", path)) == 1


def test_a_closed_log_holds_no_descriptor_and_is_a_plain_file(tmp_path: Path) -> None:
    path = tmp_path / "wal-0000000000.log"
    writer = WalWriter(str(path))
    writer.append(b"x")
    assert open_under(tmp_path) == [str(path.resolve())]  # what the check below would see leaked
    writer.close()
    writer.close()  # idempotent
    assert open_under(tmp_path) == []
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644 & ~umask


def test_records_frame_any_payload_and_a_corrupt_one_ends_the_segment(tmp_path: Path) -> None:
    path = str(tmp_path / "wal-0000000000.log")
    writer = WalWriter(path)
    for payload in (b"", b"one", b"", b"three", b""):
        writer.append(payload)
    writer.close()
    assert read_segment(path) == ([b"", b"one", b"", b"three", b""], os.path.getsize(path))
    data = bytearray(Path(path).read_bytes())
    data[8 + 8] ^= 0xFF  # the second record's payload, its length intact
    Path(path).write_bytes(bytes(data))
    with pytest.warns(CheckpointWarning, match="at byte 8 "):
        assert read_segment(path) == ([b""], 8)
