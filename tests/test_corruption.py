"""File corruption: the file it says, changed as it says, read back; refused, ineffective or
journaled as it happened; and a checkpoint store that passes over what it corrupted. No Ray:
a corruption on this driver's machine runs here."""

from __future__ import annotations

import os
import random
import warnings
from pathlib import Path

import pytest

from actors import Checkpointable, CheckpointConfig, mutation
from actors.checkpoint import CheckpointWarning
from chaos import Chaos, NodeTarget
from chaos.cluster import ClusterHandle
from chaos.corruption import CorruptFile, Corruption
from chaos.engine import fault_from_dict, fault_specs, fault_to_dict
from chaos.errors import FaultIneffective, InvalidFaultSpec, TargetNotFound


def _files(root: Path, *names: str, size: int = 512) -> list[Path]:
    """``names`` under ``root``, each ``size`` bytes of 0x5a, modified in the order given."""
    paths = []
    for i, name in enumerate(names):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\x5a" * size)
        os.utime(path, ns=(10**18 + i, 10**18 + i))
        paths.append(path)
    return paths


def _inject(fault: CorruptFile, seed: int = 0) -> tuple[Chaos, Corruption]:
    chaos = Chaos(address="")
    with chaos.inject(fault, rng=random.Random(seed)) as injection:
        assert isinstance(injection.found, Corruption)
        return chaos, injection.found


@pytest.mark.parametrize("mode", ["flip", "zero", "truncate"])
def test_the_newest_matching_file_is_changed_as_asked_and_read_back(tmp_path: Path, mode: str) -> None:
    old, new, log = _files(tmp_path, "ckpt-1/state", "ckpt-2/state", "wal.log")  # the log is newest of all
    chaos, done = _inject(CorruptFile(path=str(tmp_path), glob="ckpt-*/*", mode=mode, chunk=100))
    assert (done.file, done.candidates, done.length, done.changed) == (str(new), 2, 100, 100)
    data = new.read_bytes()
    if mode == "truncate":
        assert data == b"\x5a" * 412 and (done.offset, done.size_after) == (412, 412)
    else:
        chunk = data[done.offset:done.offset + 100]
        assert chunk == (b"\xa5" if mode == "flip" else b"\x00") * 100 and len(data) == 512
        assert data.replace(chunk, b"", 1) == b"\x5a" * 412  # nothing else touched
    assert old.read_bytes() == log.read_bytes() == b"\x5a" * 512
    kinds = [(e.kind, e.observed.bytes) for e in chaos.journal.events]
    assert kinds == [("inject", 100), ("heal", None)]  # instant: nothing heals a corruption


def test_a_random_pick_is_the_seeds_and_a_file_path_is_that_file(tmp_path: Path) -> None:
    _files(tmp_path, *(f"f{i}" for i in range(8)))
    picks = {_inject(CorruptFile(path=str(tmp_path), which="random"), seed)[1].file for seed in (1, 1)}
    assert len(picks) == 1  # the same seed, the same file
    assert len({_inject(CorruptFile(path=str(tmp_path), which="random"), seed)[1].file for seed in range(6)}) > 1
    one = tmp_path / "f3"
    assert _inject(CorruptFile(path=str(one), chunk=1 << 20))[1].length == 512  # a chunk is at most the file


def test_nothing_matching_is_refused_and_journaled(tmp_path: Path) -> None:
    _files(tmp_path, "ckpt-1/state", size=0)
    chaos = Chaos(address="")
    with pytest.raises(TargetNotFound, match=r"no file of at least one byte under .* matches 'ckpt-\*/\*'"), \
            chaos.inject(CorruptFile(path=str(tmp_path), glob="ckpt-*/*")):
        pass
    assert [e.kind for e in chaos.journal.events] == ["refuse"]


def test_zeros_over_zeros_are_ineffective_never_injected(tmp_path: Path) -> None:
    (file,) = _files(tmp_path, "state")
    file.write_bytes(bytes(512))
    chaos = Chaos(address="")
    with pytest.raises(FaultIneffective, match="not corrupted as asked, it already held those bytes"), \
            chaos.inject(CorruptFile(path=str(tmp_path), mode="zero")):
        pass
    assert [e.kind for e in chaos.journal.events] == ["ineffective"]


@pytest.mark.parametrize(("fields", "message"), [
    ({"path": "ckpt"}, "`path` must be an absolute directory or file"),
    ({"path": "/"}, "is a top-level or system directory"),
    ({"path": "/etc/ray"}, "is a top-level or system directory"),
    ({"path": "/tmp/x", "mode": "shred"}, "unknown `mode` 'shred'; use 'flip'"),
    ({"path": "/tmp/x", "chunk": 0}, r"`chunk` must be a whole number of bytes in \[1, 1.04858e\+06\], got 0"),
    ({"path": "/tmp/x", "which": "oldest"}, "unknown `which` 'oldest'"),
    ({"path": "/tmp/x", "glob": ""}, "`glob` must be a path pattern"),
])
def test_a_bad_corruption_is_refused_before_anything_is_touched(fields: dict[str, object], message: str) -> None:
    with pytest.raises(InvalidFaultSpec, match=message):
        CorruptFile(**fields)


def test_it_is_a_kind_like_any_other() -> None:
    spec = fault_specs()[CorruptFile.KIND]
    assert spec.record is CorruptFile and spec.example["path"] == "$STORAGE"
    fault = CorruptFile(path="/tmp/run/ckpt", glob="*/state", mode="truncate", chunk=8, which="random")
    assert fault_from_dict(fault_to_dict(fault)) == fault


class _Items(Checkpointable):
    """A list under checkpoints taken on demand, with or without its write-ahead log."""

    def __init__(self, storage: str, *, durability: str, restore: str) -> None:
        self.items: list[int] = []
        self.info = self.enable_checkpointing(CheckpointConfig(
            storage=storage, policy="on_demand", durability=durability, keep=3, fence=False),
            restore=restore)

    def state_dict(self) -> dict[str, list[int]]:
        return {"items": list(self.items)}

    def load_state_dict(self, state: dict[str, list[int]]) -> None:
        self.items = list(state["items"])

    @mutation
    def add(self, x: int) -> None:
        self.items.append(x)


@pytest.mark.parametrize(("durability", "kept"), [("wal", list(range(10))), ("policy", list(range(6)))])
def test_a_restore_passes_over_the_corrupted_checkpoint_to_the_last_valid_one(tmp_path: Path, durability: str,
                                                                            kept: list[int]) -> None:
    first = _Items(str(tmp_path), durability=durability, restore="never")
    for x in range(10):
        first.add(x)
        if x % 3 == 2:
            first.checkpoint()  # checkpoints after 3, 6 and 9 items
    _, done = _inject(CorruptFile(path=str(tmp_path), glob="ckpt-*/*"))
    newest = max(p.name for p in tmp_path.glob("ckpt-*"))
    assert Path(done.file).parent.name == newest
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        again = _Items(str(tmp_path), durability=durability, restore="always")
    skipped = int(newest.removeprefix("ckpt-"))
    assert (again.info.seq, again.info.skipped) == (skipped - 1, (skipped,))
    assert again.items == kept  # the log replays what the skipped checkpoint held; without it, lost
    assert any(issubclass(w.category, CheckpointWarning) and newest in str(w.message) for w in seen)


def test_on_a_node_it_runs_there_as_a_pinned_task(ray_cluster: ClusterHandle, tmp_path: Path) -> None:
    """The shared cluster's one node is this machine: the task's change is read back here too."""
    import ray

    (file,) = _files(tmp_path, "ckpt-1/state")
    head = NodeTarget(node_id=ray.get_runtime_context().get_node_id(), allow_head=True)
    chaos = Chaos(address=ray_cluster.address)
    with chaos.inject(CorruptFile(path=str(tmp_path), chunk=16, node=head), rng=random.Random(0)) as injection:
        assert isinstance(injection.found, Corruption) and injection.found.file == str(file)
        assert injection.processes[0].node_id == head.node_id
    assert file.read_bytes().count(b"\xa5") == 16
