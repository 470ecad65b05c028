"""The power loss against a reference model, by Hypothesis: random creates, appends, overwrites,
truncations, fsyncs of files and of folders, renames (within a folder) and unlinks on plain
files through the mount; afterwards the tree must be what the rule keeps — each folder's names
as of its last fsync, each file's bytes as of its last fsync."""

from __future__ import annotations

import os
import random
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chaos.disks import FaultFS, fault_filesystem

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse")

DIRS, NAMES = ("d1", "d2"), ("a", "b")


@dataclass
class Inode:
    data: bytes = b""
    synced: bytes = b""


@dataclass
class Reference:
    """Per folder, its names now and as of its last fsync; per file, its bytes now and synced."""

    now: dict[str, dict[str, Inode]] = field(default_factory=lambda: {d: {} for d in DIRS})
    durable: dict[str, dict[str, Inode]] = field(default_factory=lambda: {d: {} for d in DIRS})

    def view(self, entries: dict[str, dict[str, Inode]], *, synced: bool) -> dict[str, bytes]:
        return {f"{d}/{n}": (i.synced if synced else i.data) for d in DIRS for n, i in entries[d].items()}


Op = tuple[str, str, str, str, bytes]
#: Fsyncs weigh double, and most ops go to one folder: the interesting histories (bytes synced,
#: the name synced, then changed again) need several ops on the same file.
KINDS = ("create", "append", "overwrite", "truncate", "fsync", "fsync", "fsyncdir", "fsyncdir", "rename", "unlink")


def history(rng: random.Random) -> list[Op]:
    """Up to 30 ops, drawn from a seed: Hypothesis varies the seed (its own list strategies,
    shrinking toward short lists of tiny payloads, rarely reached these histories)."""
    return [(rng.choice(KINDS), rng.choice(("d1", "d1", "d1", "d2")), rng.choice(NAMES), rng.choice(NAMES),
             rng.randbytes(rng.randint(1, 6000))) for _ in range(rng.randint(0, 30))]


def apply(ref: Reference, root: str, op: Op) -> None:
    """Do ``op`` on the mount and on the reference (ops on missing files are skipped)."""
    kind, d, name, other, data = op
    files, path = ref.now[d], f"{root}/{d}/{name}"
    if kind == "fsyncdir":
        _fsync(f"{root}/{d}")
        ref.durable[d] = dict(files)
    elif kind == "create" and name not in files:
        open(path, "xb").close()
        files[name] = Inode()
    elif name not in files:
        return
    elif kind in ("append", "overwrite", "truncate"):
        _change(files[name], path, kind, data)
    elif kind == "fsync":
        fd = os.open(path, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
        files[name].synced = files[name].data
    elif kind == "rename" and other != name:
        os.rename(path, f"{root}/{d}/{other}")
        files[other] = files.pop(name)
    elif kind == "unlink":
        os.unlink(path)
        del files[name]


def _change(inode: Inode, path: str, kind: str, data: bytes) -> None:
    if kind == "append":
        with open(path, "ab") as f:
            f.write(data)
        inode.data += data
    elif kind == "overwrite":
        with open(path, "r+b") as f:
            f.write(data)
        inode.data = data + inode.data[len(data):]
    else:
        os.truncate(path, len(data) % 5000)
        size = len(data) % 5000
        inode.data = inode.data[:size] + b"\0" * max(0, size - len(inode.data))


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(fd)
    os.close(fd)


def tree(root: str) -> dict[str, bytes]:
    found = {}
    for d in DIRS:
        for name in os.listdir(f"{root}/{d}"):
            with open(f"{root}/{d}/{name}", "rb") as f:
                found[f"{d}/{name}"] = f.read()
    return found


@pytest.fixture(scope="module")
def mounted() -> Iterator[FaultFS]:
    with fault_filesystem() as fs:
        yield fs


def fresh_root(fs: FaultFS) -> str:
    root = f"{fs.mount}/{uuid.uuid4().hex[:10]}"
    os.mkdir(root)
    for d in DIRS:
        os.mkdir(f"{root}/{d}")
    _fsync(root)
    _fsync(fs.mount)
    return root


@settings(max_examples=150, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_a_power_loss_keeps_exactly_what_fsyncs_covered(mounted: FaultFS, seed: int) -> None:
    root, ref, ops = fresh_root(mounted), Reference(), history(random.Random(seed))
    for op in ops:
        apply(ref, root, op)
    assert tree(root) == ref.view(ref.now, synced=False)
    mounted.power_loss()
    assert tree(root) == ref.view(ref.durable, synced=True)
