"""The checkpoint mechanism in-process: commit protocol, corruption fallback, WAL, bad input."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import pickle
import re
import time
import warnings
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from actors import Checkpointable, CheckpointConfig, WriterSeqs, mutation
from actors._checkpoint import CHOOSE_RESTORE, StorageNotFresh
from actors.checkpoint import FORMAT_VERSION, CheckpointStore, CheckpointWarning
from chaos.errors import CheckpointError, CheckpointFormatError, InvalidConfig, StorageUnreachable
from conftest import open_under


class Box(Checkpointable):
    """A small in-process actor body with an array, a tensor and a scalar."""

    def __init__(self, storage: str, *, restore: str = "never", clock: Any = None, **cfg: Any):
        self.n, self.arr, self.t = 0, np.zeros(3), torch.zeros(2)
        extra = {"clock": clock} if clock else {}
        self.info = self.enable_checkpointing(CheckpointConfig(storage=storage, **cfg),
                                              restore=restore, **extra)

    def state_dict(self) -> dict[str, Any]:
        return {"n": self.n, "nested": {"arr": self.arr, "t": self.t}}

    def load_state_dict(self, state: Any) -> None:
        self.n, self.arr, self.t = state["n"], state["nested"]["arr"], state["nested"]["t"]

    @mutation
    def add(self, k: int, v: np.ndarray | None = None) -> int:
        self.n += k
        if v is not None:
            self.arr = self.arr + v
            self.t = self.t + 1
        return self.n


def folders(storage: str) -> list[str]:
    return sorted(p for p in os.listdir(storage) if p.startswith("ckpt-"))


def reopen(storage: str, **cfg: Any) -> Box:
    return Box(storage, restore="always", **cfg)


def test_fresh_start_commits_the_initial_state(storage: str) -> None:
    box = Box(storage)
    assert folders(storage) == ["ckpt-0000000001"]
    manifest = json.loads(Path(storage, "ckpt-0000000001", "manifest.json").read_text())
    assert manifest["format"] == FORMAT_VERSION and manifest["seq"] == 1
    # Small arrays share one file (one fsync); tensors have theirs.
    assert set(manifest["files"]) == {"state.json", "arrays.safetensors", "tensors.safetensors"}
    assert box.info.restored is False


def test_policy_mode_restores_exactly_the_last_checkpoint(storage: str) -> None:
    box = Box(storage, every_n=3)
    for _ in range(7):
        box.add(1, v=np.ones(3))
    restored = reopen(storage, every_n=3)
    assert restored.n == 6  # checkpoints at 3 and 6 adds; the 7th is the unsaved suffix
    assert np.array_equal(restored.arr, np.full(3, 6.0))
    assert torch.equal(restored.t, torch.full((2,), 6.0))


def test_wal_mode_restores_every_acknowledged_mutation(storage: str) -> None:
    box = Box(storage, every_n=3, durability="wal")
    for _ in range(7):
        box.add(2, v=np.arange(3.0))
    restored = reopen(storage, every_n=3, durability="wal")
    assert restored.digest() == box.digest()
    assert restored.info.replayed == 1


class DoubleBox(Box):
    """An override of a mutation that calls super(): logged once, replayed once."""

    @mutation
    def add(self, k: int, v: np.ndarray | None = None) -> int:
        return super().add(2 * k, v)


def test_an_overriding_mutation_is_logged_and_replayed_once(storage: str) -> None:
    box = DoubleBox(storage, every_n=100, durability="wal")
    for _ in range(3):
        box.add(1)
    assert box.n == 6
    restored = DoubleBox(storage, restore="always", every_n=100, durability="wal")
    assert restored.n == 6 and restored.info.replayed == 3


def test_a_logged_call_the_class_no_longer_marks_is_refused_with_the_fix(storage: str) -> None:
    class Renamed(Box):
        add = None  # type: ignore[assignment]

    box = Box(storage, every_n=100, durability="wal")
    box.add(1)
    with pytest.raises(CheckpointError, match="the log holds a call to 'add', which Renamed does not mark "
                                              "with @mutation; decorate it"):
        Renamed(storage, restore="always", every_n=100, durability="wal")


def test_keep_prunes_old_folders_and_their_logs(storage: str) -> None:
    box = Box(storage, every_n=1, keep=2, durability="wal")
    for _ in range(5):
        box.add(1)
    assert folders(storage) == ["ckpt-0000000005", "ckpt-0000000006"]
    assert sorted(p for p in os.listdir(storage) if p.startswith("wal-")) == [
        "wal-0000000005.log", "wal-0000000006.log"]


def test_every_seconds_policy_uses_the_injected_clock(storage: str) -> None:
    now = [0.0]
    box = Box(storage, policy="every_seconds", every_seconds=10.0, clock=lambda: now[0])
    box.add(1)
    assert box.checkpoint_stats().checkpoints == 1
    now[0] = 10.0
    box.add(1)
    assert box.checkpoint_stats().checkpoints == 2
    now[0] = 15.0  # 5 s since the last checkpoint: not yet
    box.add(1)
    assert box.checkpoint_stats().checkpoints == 2
    now[0] = 20.0
    box.add(1)
    assert box.checkpoint_stats().checkpoints == 3


def test_on_demand_policy_checkpoints_only_when_asked(storage: str) -> None:
    box = Box(storage, policy="on_demand")
    for _ in range(50):
        box.add(1)
    assert len(folders(storage)) == 1
    assert box.checkpoint().seq == 2
    assert reopen(storage, policy="on_demand").n == 50


# -- corruption: each falls back to the previous good checkpoint with a warning ---------------


def two_checkpoints(storage: str) -> Path:
    """Checkpoint 2 holds n=3, checkpoint 3 holds n=6; return checkpoint 3's folder."""
    box = Box(storage, every_n=3, keep=5)
    for _ in range(6):
        box.add(1, v=np.ones(3))
    return Path(storage, "ckpt-0000000003")


def assert_falls_back_to_previous(storage: str) -> None:
    with pytest.warns(CheckpointWarning, match="skipping checkpoint .*ckpt-0000000003"):
        restored = reopen(storage, every_n=3, keep=5)
    assert restored.n == 3
    assert (restored.info.seq, restored.info.skipped) == (2, (3,))  # the fallback, as a fact


@pytest.mark.parametrize("name", ["arrays.safetensors", "tensors.safetensors", "state.json"])
def test_truncated_file_falls_back(storage: str, name: str) -> None:
    path = two_checkpoints(storage) / name
    path.write_bytes(path.read_bytes()[:-5])
    assert_falls_back_to_previous(storage)


@pytest.mark.parametrize("name", ["arrays.safetensors", "tensors.safetensors", "state.json"])
def test_flipped_byte_falls_back(storage: str, name: str) -> None:
    path = two_checkpoints(storage) / name
    data = bytearray(path.read_bytes())
    data[-2] ^= 0xFF
    path.write_bytes(bytes(data))
    assert_falls_back_to_previous(storage)


def test_a_large_array_has_its_own_file_read_back_as_a_writable_view(tmp_path: Path) -> None:
    store = CheckpointStore(str(tmp_path / "big"))
    big = np.arange(300_000, dtype=np.float64)  # 2.4 MB: over the shared file's limit
    info = store.save({"big": big, "small": np.ones(3, dtype=np.float32)})
    assert sorted(os.listdir(info.path)) == ["a0.npy", "arrays.safetensors", "manifest.json",
                                              "state.json"]
    (tree,) = store.load_latest().chain  # type: ignore[union-attr]
    assert np.array_equal(tree["big"], big) and tree["big"].flags.writeable
    tree["big"][0] = -1.0  # copy-on-write: the file keeps its bytes
    (again,) = store.load_latest().chain  # type: ignore[union-attr]
    assert again["big"][0] == 0.0
    path = Path(info.path, "a0.npy")
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.warns(CheckpointWarning, match="a0.npy does not match its checksum"):
        assert store.load_latest() is None


def test_the_manifest_holds_each_files_standard_crc32_and_size(tmp_path: Path) -> None:
    """Format 2 is documented as CRC-32 and size per file: another tool can check a folder."""
    store = CheckpointStore(str(tmp_path))
    before = time.perf_counter()
    info = store.save({"big": np.arange(300_000.0), "small": np.ones(3, np.float16), "n": 1})
    elapsed = time.perf_counter() - before
    manifest = json.loads(Path(info.path, "manifest.json").read_text())
    for name, meta in manifest["files"].items():
        data = Path(info.path, name).read_bytes()
        assert meta == {"crc32": f"{zlib.crc32(data):08x}", "size": len(data)}, name
    assert info.nbytes == sum(meta["size"] for meta in manifest["files"].values())
    assert 0 <= info.seconds <= elapsed  # the commit's own duration, within the call's


def test_arrays_up_to_one_mib_of_any_safetensors_dtype_share_one_file(tmp_path: Path) -> None:
    store = CheckpointStore(str(tmp_path))
    tree = {"exact": np.zeros(1 << 17, np.float64), "half": np.ones(3, np.float16),
            "byte": np.ones(3, np.uint8)}  # 1 MiB exactly; 2- and 1-byte items
    info = store.save(tree)
    assert sorted(os.listdir(info.path)) == ["arrays.safetensors", "manifest.json", "state.json"]


def test_checkpoints_leave_no_file_descriptor_open(tmp_path: Path) -> None:
    store = CheckpointStore(str(tmp_path), keep=1)
    store.save({"n": 0, "a": np.ones(3)})
    before = open_under(tmp_path)
    for n in range(1, 4):
        store.save({"n": n, "a": np.ones(3)})
    assert open_under(tmp_path) == before == []


def test_missing_manifest_falls_back(storage: str) -> None:
    (two_checkpoints(storage) / "manifest.json").unlink()
    assert_falls_back_to_previous(storage)


def test_half_written_folder_falls_back(storage: str) -> None:
    folder = two_checkpoints(storage)
    (folder / "tensors.safetensors").unlink()  # died before the rest of the files landed
    assert_falls_back_to_previous(storage)


def test_temporary_folder_of_an_interrupted_save_is_ignored_and_cleaned(storage: str) -> None:
    two_checkpoints(storage)
    tmp = Path(storage, ".tmp-ckpt-0000000004-deadbeef")
    tmp.mkdir()
    (tmp / "state.json").write_text("{")
    restored = reopen(storage, every_n=3, keep=5)
    assert restored.n == 6
    restored.checkpoint()
    assert not tmp.exists()


def test_torn_wal_tail_is_dropped_and_the_rest_replayed(storage: str) -> None:
    box = Box(storage, every_n=100, durability="wal")
    for _ in range(4):
        box.add(1)
    log = Path(storage, "wal-0000000001.log")
    log.write_bytes(log.read_bytes()[:-3])  # the 4th record was torn by the crash
    with pytest.warns(CheckpointWarning, match="dropping a torn or corrupt record"):
        restored = reopen(storage, every_n=100, durability="wal")
    assert restored.n == 3
    assert restored.checkpoint_stats().last_seq == 1  # a torn tail needs no new checkpoint
    restored.add(10)  # appends after the last intact record, not after the torn bytes
    assert reopen(storage, every_n=100, durability="wal").n == 13


def test_wal_replays_across_a_corrupt_checkpoint(storage: str) -> None:
    box = Box(storage, every_n=3, keep=5, durability="wal")
    for _ in range(7):
        box.add(1)
    (Path(storage, "ckpt-0000000003") / "manifest.json").unlink()
    with pytest.warns(CheckpointWarning):
        restored = reopen(storage, every_n=3, keep=5, durability="wal")
    assert restored.n == 7  # checkpoint 2 plus the logs of checkpoints 2 and 3


def test_a_tear_mid_lineage_stops_the_replay_there_and_checkpoints(storage: str) -> None:
    """A torn segment with a newer one after it (a machine crash lost its tail): replaying
    the newer one on top of the hole would build a state that never existed."""
    box = Box(storage, every_n=3, keep=5, durability="wal")
    for _ in range(8):
        box.add(1)  # checkpoints 2 (n=3) and 3 (n=6); segment 2 holds 3 records, segment 3 two
    (Path(storage, "ckpt-0000000003") / "manifest.json").unlink()
    log = Path(storage, "wal-0000000002.log")
    log.write_bytes(log.read_bytes()[:-3])  # segment 2's last record torn
    with pytest.warns(CheckpointWarning):
        restored = reopen(storage, every_n=3, keep=5, durability="wal")
    assert (restored.n, restored.info.replayed, restored.info.skipped) == (5, 2, (3,))
    assert restored.info.torn_bytes > 0 and restored.checkpoint_stats().last_seq == 4


@pytest.mark.parametrize("durability", ["policy", "wal"])
def test_restore_info_says_what_the_restore_did(storage: str, durability: str) -> None:
    box = Box(storage, every_n=3, durability=durability)
    for _ in range(4):
        box.add(1)
    before = time.perf_counter()
    restored = reopen(storage, every_n=3, durability=durability)
    elapsed = time.perf_counter() - before
    info = restored.info
    assert (info.restored, info.seq, info.skipped, info.torn_bytes) == (True, 2, (), 0)
    assert info.replayed == (1 if durability == "wal" else 0)
    assert box.checkpoint_stats().wal_records == (4 if durability == "wal" else 0)
    assert 0 <= info.seconds <= elapsed


def test_every_n_counts_each_mutation_once(storage: str) -> None:
    box = Box(storage, every_n=3)
    for expected_since in (1, 2):
        box.add(1)
        assert box.checkpoint_stats().mutations_since_checkpoint == expected_since
    box.add(1)
    assert (box.checkpoint_stats().checkpoints, box.checkpoint_stats().mutations_since_checkpoint) == (2, 0)


class Marked(Box):
    """Counts ``mark_checkpointed``: an actor's own delta tracking relies on it."""

    def __init__(self, storage: str, **cfg: Any) -> None:
        self.marks = 0
        super().__init__(storage, **cfg)

    def mark_checkpointed(self) -> None:
        self.marks += 1


def test_a_restore_and_each_checkpoint_mark_the_state_clean(storage: str) -> None:
    box = Marked(storage, every_n=2)  # the fresh start's checkpoint: one mark
    box.add(1)
    box.add(1)
    assert box.marks == 2
    assert Marked(storage, restore="always", every_n=2).marks == 1


def test_auto_restore_starts_fresh_on_empty_storage(storage: str) -> None:
    """``restore="auto"`` outside a restart, on storage with nothing in it: a first start."""
    box = Box(storage, restore="auto", every_n=1)
    assert box.n == 0 and not box.info.restored and folders(storage) == ["ckpt-0000000001"]


def test_auto_restore_refuses_a_first_start_over_old_checkpoints(storage: str) -> None:
    """Starting fresh there would commit the initial state as the newest checkpoint and bury
    what the storage holds; nothing is written, and the error names both explicit choices."""
    box = Box(storage, every_n=1)
    box.add(5)
    before = folders(storage)
    with pytest.raises(StorageNotFresh, match=re.escape(CHOOSE_RESTORE)):
        Box(storage, restore="auto", every_n=1)
    assert folders(storage) == before
    assert reopen(storage).n == 5  # still the newest
    assert Box(storage, restore="never", every_n=1).n == 0  # starting fresh, asked in words


def test_wal_checkpoints_leave_no_file_descriptor_open(storage: str) -> None:
    box = Box(storage, every_n=2, durability="wal")
    box.add(1)
    before = len(open_under(storage))
    for _ in range(8):
        box.add(1)  # four checkpoints, four log segments opened
    assert len(open_under(storage)) == before, open_under(storage)


def test_foreign_files_in_the_storage_are_neither_checkpoints_nor_logs(storage: str) -> None:
    box = Box(storage, every_n=2, durability="wal")
    for _ in range(3):
        box.add(1)
    for name in ("backup12", "ckpt-latest", "wal-notes.log", "x0000000001.log", "wal-0000000009.txt"):
        Path(storage, name).write_bytes(b"not ours")
    restored = reopen(storage, every_n=2, durability="wal")
    assert (restored.n, restored.info.seq, restored.info.skipped) == (3, 2, ())


class Boom:
    """A payload that would leave a marker file if it were ever unpickled."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> Any:
        return (open, (self.marker, "w"))


def test_planted_pickle_payload_is_never_executed(storage: str, tmp_path: Path) -> None:
    folder = two_checkpoints(storage)
    marker = tmp_path / "PWNED"
    payload = np.array([Boom(str(marker))], dtype=object)
    with open(folder / "a0.npy", "wb") as f:
        np.save(f, payload, allow_pickle=True)
    (folder / "evil.pkl").write_bytes(pickle.dumps(Boom(str(marker))))
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"]["a0.npy"] = {  # the attacker also forged the manifest
        "sha256": __import__("hashlib").sha256((folder / "a0.npy").read_bytes()).hexdigest(),
        "size": (folder / "a0.npy").stat().st_size,
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert_falls_back_to_previous(storage)
    assert not marker.exists()


def test_newer_format_version_is_refused_before_anything_is_written(storage: str) -> None:
    folder = two_checkpoints(storage)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["format"] = FORMAT_VERSION + 1
    (folder / "manifest.json").write_text(json.dumps(manifest))
    before = sorted(os.listdir(storage))
    with pytest.raises(CheckpointFormatError,
                       match=f"format version {FORMAT_VERSION + 1}, but this raychaos reads up to {FORMAT_VERSION}"):
        reopen(storage, every_n=3, keep=5)
    assert sorted(os.listdir(storage)) == before


def test_a_manifest_that_is_not_an_object_is_a_format_error(storage: str) -> None:
    folder = two_checkpoints(storage)
    (folder / "manifest.json").write_text("[1, 2]")
    with pytest.raises(CheckpointFormatError, match="manifest is list, not an object"):
        reopen(storage, every_n=3, keep=5)


def test_a_manifest_with_a_mistyped_field_is_skipped_for_the_previous_checkpoint(storage: str) -> None:
    folder = two_checkpoints(storage)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["parent"] = "one"  # a parent must be a checkpoint's number: never guessed at
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert_falls_back_to_previous(storage)


# -- bad input: a typed error naming what, the value and the fix; nothing written ------------


@pytest.mark.parametrize(
    ("cfg", "message"),
    [
        ({"policy": "evry_n"}, "unknown checkpoint policy 'evry_n'; use one of 'every_n'"),
        ({"durability": "fast"}, "unknown durability 'fast'; use one of 'policy', 'wal'"),
        ({"every_n": 0}, "`every_n` must be a whole number >= 1, got 0"),
        ({"every_seconds": -1.0}, "`every_seconds` must be a positive number, got -1.0"),
        ({"keep": 0}, "`keep` must be a whole number >= 1, got 0"),
        ({"fsync_interval": -0.5}, "`fsync_interval` must be a non-negative number, got -0.5"),
    ],
)
def test_bad_config_is_refused(storage: str, cfg: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidConfig, match=message):
        CheckpointConfig(storage=storage, **cfg)
    assert not os.path.exists(storage)


def test_bad_config_is_also_a_value_error(storage: str) -> None:
    with pytest.raises(ValueError):
        CheckpointConfig(storage=storage, keep=-3)


def test_unreachable_storage_is_refused(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(StorageUnreachable, match=r"cannot be written.*Give a writable local"):
        CheckpointStore(str(blocker / "ckpt"))
    with pytest.raises(StorageUnreachable, match="nosuchproto://bucket"):
        CheckpointStore("nosuchproto://bucket/ckpt")


def test_wal_needs_a_filesystem() -> None:
    with pytest.raises(InvalidConfig, match="WAL durability needs a POSIX filesystem"):
        Box("memory://raychaos-test/wal", durability="wal")


class Dribble:
    """A remote file without ``readinto`` that returns at most 3 bytes a read."""

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def read(self, n: int) -> bytes:
        chunk = self.data[self.pos : self.pos + min(n, 3)]
        self.pos += len(chunk)
        return chunk


def test_a_file_without_readinto_is_read_in_pieces() -> None:
    from actors._store import _read_into

    data = bytearray(10)
    assert _read_into(Dribble(b"0123456789"), data) == 10 and data == b"0123456789"
    assert _read_into(Dribble(b"0123"), bytearray(10)) == 4  # short: the caller refuses it


def test_policy_mode_works_on_any_fsspec_filesystem() -> None:
    box = Box("memory://raychaos-test/policy", every_n=2)
    box.add(5)
    box.add(5)
    assert reopen("memory://raychaos-test/policy", every_n=2).n == 10


@pytest.mark.parametrize("change", [b"", b"extra"], ids=["truncated", "extended"])
def test_a_remote_file_of_another_size_falls_back(change: bytes) -> None:
    """The non-local read path checks sizes too: a short or long file is never trusted."""
    import fsspec

    url = f"memory://raychaos-test/size-{len(change)}"
    box = Box(url, every_n=2, keep=5)
    for _ in range(4):
        box.add(1)
    fs = fsspec.filesystem("memory")
    path = f"/raychaos-test/size-{len(change)}/ckpt-0000000003/state.json"
    data = fs.cat_file(path)
    fs.pipe_file(path, data + change if change else data[:-1])
    with pytest.warns(CheckpointWarning, match="state.json has another size"):
        restored = reopen(url, every_n=2, keep=5)
    assert (restored.n, restored.info.skipped) == (2, (3,))


def test_unknown_restore_mode_is_refused(storage: str) -> None:
    with pytest.raises(InvalidConfig, match="unknown restore mode 'sometimes'"):
        Box(storage, restore="sometimes")
    assert not os.path.exists(storage)


def test_state_that_needs_pickle_is_refused(storage: str) -> None:
    box = Box(storage)
    box.arr = np.array([object()], dtype=object)
    with pytest.raises(InvalidConfig, match="object array"):
        box.checkpoint()
    assert folders(storage) == ["ckpt-0000000001"]


def test_digest_is_stable_and_order_independent() -> None:
    from actors._codec import digest

    a = {"x": np.arange(3), "y": {"z": 1, "w": "s"}}
    b = {"y": {"w": "s", "z": 1}, "x": np.arange(3)}
    assert digest(a) == digest(b)
    assert digest(a) != digest({**a, "x": np.arange(3) + 1})


def test_a_format_1_checkpoint_with_sha256_still_restores(storage: str) -> None:
    import hashlib

    folder = two_checkpoints(storage)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["format"] = 1
    manifest["files"] = {name: {"sha256": hashlib.sha256((folder / name).read_bytes()).hexdigest(),
                                "size": meta["size"]} for name, meta in manifest["files"].items()}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    assert reopen(storage, every_n=3, keep=5).n == 6  # checkpoint 3, not the fallback


# -- exactly-once over at-least-once: the writer table ----------------------------------------


def test_writer_seqs_drop_a_repeat_but_not_a_call_whose_apply_failed() -> None:
    seqs = WriterSeqs()
    assert not seqs.is_repeat("w", 0)
    # The mutation raised: nothing is recorded, so Ray's redelivery applies it.
    assert not seqs.is_repeat("w", 0)
    seqs.applied("w", 0)
    assert seqs.is_repeat("w", 0) and seqs.is_repeat("w", 0)
    assert not seqs.is_repeat("other", 0) and not seqs.is_repeat("w", 1)
    assert not seqs.is_repeat(None, None)  # a call without ids is never a repeat
    assert seqs.duplicates == 2


def test_writer_seqs_travel_with_the_checkpointed_state() -> None:
    seqs = WriterSeqs()
    for seq in (0, 1, 4):
        seqs.applied("w", seq)
    assert seqs.is_repeat("w", 1) and seqs.last_of("w") == 4
    restored = WriterSeqs()
    restored.load_state_dict(json.loads(json.dumps(seqs.state_dict())))
    assert restored.is_repeat("w", 4) and restored.is_repeat("w", 0)
    assert not restored.is_repeat("w", 2) and not restored.is_repeat("w", 5)
    assert restored.duplicates == 3


def test_writer_seqs_take_retries_in_any_order() -> None:
    """Ray reorders retried calls: 5 may run before 3 and 4; neither of those is a repeat."""
    seqs = WriterSeqs()
    for seq in (0, 1, 2, 5):
        seqs.applied("w", seq)
    assert not seqs.is_repeat("w", 4) and not seqs.is_repeat("w", 3)
    seqs.applied("w", 4)
    seqs.applied("w", 3)
    assert all(seqs.is_repeat("w", s) for s in range(6)) and not seqs.is_repeat("w", 6)
    assert seqs.state_dict()["above"] == {} and seqs.state_dict()["last_seq"] == {"w": 5}


def test_writer_seqs_give_up_a_gap_older_than_the_window() -> None:
    from actors._dedupe import REORDER_WINDOW

    seqs = WriterSeqs()
    for seq in range(1, REORDER_WINDOW + 1):  # seq 0 never arrives
        seqs.applied("w", seq)
    assert not seqs.is_repeat("w", 0)  # REORDER_WINDOW seqs past it: still awaited
    seqs.applied("w", REORDER_WINDOW + 1)
    assert seqs.state_dict()["last_seq"] == {"w": REORDER_WINDOW + 1}
    assert seqs.is_repeat("w", 0)  # one more: given up


def test_writer_seqs_refuse_a_negative_seq_and_know_no_writer() -> None:
    seqs = WriterSeqs()
    for bad in (-1, True):
        with pytest.raises(InvalidConfig, match="seq must be a whole number >= 0"):
            seqs.is_repeat("w", bad)
    assert seqs.last_of("nobody") == -1 and seqs.writers() == 0


@pytest.mark.parametrize("ids", [{"writer_id": "w"}, {"seq": 3}])
def test_writer_seqs_refuse_half_an_id(ids: dict[str, Any]) -> None:
    seqs = WriterSeqs()
    with pytest.raises(InvalidConfig, match=r"give both writer_id and seq for an idempotent call, or neither; got"):
        seqs.is_repeat(ids.get("writer_id"), ids.get("seq"))
    assert seqs.state_dict() == {"last_seq": {}, "duplicates": 0, "above": {}}


def test_a_log_record_round_trips_as_a_typed_call_and_a_foreign_one_is_refused() -> None:
    from actors._checkpoint import LoggedCall
    from actors._codec import encode

    call = LoggedCall("add", (np.arange(3), 2), {"writer_id": "w", "seq": 4})
    back = LoggedCall.decode(call.encode())
    assert back.method == "add" and back.args[1] == 2 and back.kwargs == {"writer_id": "w", "seq": 4}
    np.testing.assert_array_equal(back.args[0], np.arange(3))
    with pytest.raises(CheckpointError, match="holds method 5, args of type list and kwargs of type dict"):
        LoggedCall.decode(encode({"m": 5, "a": [], "k": {}}))
    with pytest.raises(CheckpointError, match="holds method None"):
        LoggedCall.decode(encode({"x": 1}))


@pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse")
def test_a_prune_that_cannot_read_a_kept_delta_deletes_nothing() -> None:
    """EIO on the newest delta's manifest: its parent is unknown, not absent. Skipping it as
    damage deleted the full checkpoint the delta needs; the prune now waits for a readable disk."""
    from chaos.disks import fault_filesystem

    with fault_filesystem() as fs:
        store = CheckpointStore(os.path.join(fs.mount, "ckpt"), keep=1)
        store.save({"n": np.arange(3)})
        store.save({"n": np.arange(1)}, parent=1)
        fs.fail(errno.EIO, glob="*ckpt-0000000002/manifest.json")
        store.prune()
        assert store.seqs() == [1, 2]
        with pytest.raises(StorageUnreachable, match="an I/O error, not damage"):
            store.load_latest()
        fs.heal()
        store.prune()
        assert store.seqs() == [1, 2]  # the delta needs its parent: both kept, now known
        assert store.load_latest() is not None


@pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse")
def test_a_checkpoint_that_fails_after_its_rename_still_rolls_the_log(tmp_path: Path) -> None:
    """The folder is committed once renamed: a restart restores it and replays the log from it.
    An error after the rename (the directory's fsync, the prune) must not leave the log in the
    segment before it, where an add acknowledged later (while the next checkpoint fails on a
    failing disk) would be skipped by that restore."""
    from actors import CheckpointedCounter
    from actors.checkpoint import CheckpointRetried
    from chaos.disks import fault_filesystem
    from chaos.failpoints import FailAction, Failpoint, FailpointPlan, armed

    with fault_filesystem() as fs:
        storage = os.path.join(fs.mount, "ckpt")
        counter = CheckpointedCounter(storage, durability="wal", every_n=5, restore="never")
        for seq in range(4):
            counter.add(writer_id="w", seq=seq)
        plan = FailpointPlan((Failpoint(name="checkpoint.prune.before", action=FailAction.ERROR),),
                             evidence_dir=str(tmp_path / "evidence"))
        with armed(plan), pytest.warns(CheckpointRetried, match="committed, but"):
            counter.add(writer_id="w", seq=4)  # its checkpoint is renamed into place, then fails
        fs.fail(errno.EIO, glob="*tmp-ckpt*")  # the next checkpoint fails before its commit
        with pytest.warns(CheckpointRetried, match="Input/output error"):
            for seq in range(5, 10):  # acknowledged: in the log, not in a checkpoint
                counter.add(writer_id="w", seq=seq)
        fs.heal()
        restored = CheckpointedCounter(storage, durability="wal", every_n=5, restore="always")
        assert restored.applied_seqs("w") == list(range(10))


@pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse")
@pytest.mark.parametrize("case", ["wal", "policy", "wal without the older log"])
def test_an_unreadable_newest_checkpoint_is_passed_over_only_where_the_log_restores_it(case: str) -> None:
    """EIO on the newest folder alone (a bad sector): under the WAL the older checkpoint and the
    log after it hold everything, and the restore goes on (warned); under policy durability, or
    with the older checkpoint's log gone, the older one would lose what the newest held, and the
    restore stops."""
    from actors import CheckpointedCounter
    from actors._wal import segment_name

    durability = case.split()[0]
    with fault_filesystem_mount() as (fs, storage):
        counter = CheckpointedCounter(storage, durability=durability, every_n=5,  # type: ignore[arg-type]
                                      restore="never")
        for seq in range(12):
            counter.add(writer_id="w", seq=seq)
        newest = CheckpointStore(storage).seqs()[-1]
        if "without" in case:
            os.remove(os.path.join(storage, segment_name(newest - 1)))
        fs.fail(errno.EIO, glob=f"*ckpt-{newest:010d}*")
        if case != "wal":
            with pytest.raises(StorageUnreachable, match="an I/O error, not damage"), warnings.catch_warnings():
                warnings.simplefilter("ignore", CheckpointWarning)  # the folder skipped on the way
                CheckpointedCounter(storage, durability=durability, every_n=5, restore="always")  # type: ignore[arg-type]
            return
        with pytest.warns(CheckpointWarning) as warned:  # the folder skipped, and why the restore goes on
            restored = CheckpointedCounter(storage, durability=durability, every_n=5, restore="always")
        assert any(f"restoring checkpoint {newest - 1} and the log after it" in str(w.message) for w in warned)
        assert restored.applied_seqs("w") == list(range(12)) and restored.restore_info.skipped == (newest,)


@contextlib.contextmanager
def fault_filesystem_mount() -> Iterator[tuple[Any, str]]:
    from chaos.disks import fault_filesystem

    with fault_filesystem() as fs:
        yield fs, os.path.join(fs.mount, "ckpt")
