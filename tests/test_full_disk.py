"""A full disk under the checkpoint mechanism: real ENOSPC on a size-capped tmpfs.

Nothing acknowledged may be lost, and a call whose log record could not be written must not
stay applied in memory (the next restart would not replay it, and every later record would
be replayed on a state the actor never had).
"""

from __future__ import annotations

import errno
import os
import warnings
from collections.abc import Iterator

import pytest

from actors import CheckpointedCounter
from actors._checkpoint import _Checkpointer
from actors.checkpoint import CheckpointRetried
from chaos.agents._disk import fill, free_bytes, unfill
from chaos.disks._capped import capped_filesystem
from chaos.errors import CheckpointError, MutationNotLogged, UnsafeTarget


@pytest.fixture
def disk() -> Iterator[str]:
    with capped_filesystem(4) as root:
        yield root


def test_filling_leaves_no_byte_and_healing_gives_it_all_back(disk: str) -> None:
    before = free_bytes(disk)
    filled = fill(disk)
    assert free_bytes(disk) == 0 and filled.bytes > 3 * 2**20
    with pytest.raises(OSError) as full, open(os.path.join(disk, "x"), "wb") as f:
        f.write(b"\0" * 8192)
        f.flush()
    assert full.value.errno == errno.ENOSPC
    os.remove(os.path.join(disk, "x"))
    assert unfill(filled.ballast) == before


def test_a_disk_fault_refuses_the_hosts_disk(tmp_path: object) -> None:
    for path in ("/", "/tmp", str(tmp_path)):
        with pytest.raises(UnsafeTarget, match="never the host's disk"):
            fill(path)


def test_the_capped_filesystem_is_gone_after_its_block(disk: str) -> None:
    with capped_filesystem(1) as inner:
        assert free_bytes(inner) == 2**20
    assert not os.path.exists(inner)
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        assert all(inner not in line for line in mounts)


_PAGE = os.sysconf("SC_PAGE_SIZE")


def _fresh(storage: str, durability: str) -> CheckpointedCounter:
    return CheckpointedCounter(storage, durability=durability, every_n=1000)  # type: ignore[arg-type]


def full_disk_problems(storage: str, disk: str) -> list[str]:
    """Acknowledged adds, a full disk, one more add, space back, one more: what went wrong."""
    counter, acked = _fresh(storage, "wal"), 0
    for k in range(1, 21):
        acked = counter.add(k)
    filled, problems = fill(disk), []
    try:  # the log's last page still has room: the adds that fit in it are acknowledged
        for _ in range(_PAGE):
            acked = counter.add(1000)
        problems.append(f"{_PAGE} adds on a full disk were all acknowledged")
    except MutationNotLogged as exc:
        if not exc.undone:
            problems.append(f"the failed add was not undone: {exc}")
    if counter.get() != acked:
        problems.append(f"memory holds {counter.get()} after the failed add, the log {acked}")
    unfill(filled.ballast)
    acked = counter.add(5)
    restored = CheckpointedCounter(storage, durability="wal", every_n=1000, restore="always")
    if restored.get() != acked or restored.restore_info.torn_bytes:
        problems.append(f"restored {restored.get()} ({restored.restore_info}), acknowledged {acked}")
    return problems


def test_a_wal_append_on_a_full_disk_is_undone_and_nothing_acknowledged_is_lost(disk: str) -> None:
    assert full_disk_problems(f"{disk}/ckpt", disk) == []


def test_an_append_left_applied_on_a_full_disk_is_caught(disk: str, monkeypatch: pytest.MonkeyPatch) -> None:
    def raise_only(self: _Checkpointer, name: str, exc: Exception) -> None:  # planted: no undo
        raise MutationNotLogged(f"{name}: {exc}", undone=True) from exc

    monkeypatch.setattr(_Checkpointer, "_undo", raise_only)
    problems = full_disk_problems(f"{disk}/ckpt", disk)
    assert any("memory holds" in p for p in problems) and any("restored" in p for p in problems), problems


def test_a_checkpoint_on_a_full_disk_waits_for_space_with_the_wal(disk: str) -> None:
    counter = CheckpointedCounter(f"{disk}/ckpt", durability="wal", every_n=3)
    counter.add(1)
    filled = fill(disk)  # the log's page has room for its records, nothing for a checkpoint
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        values = [counter.add(1) for _ in range(4)]
    assert values == [2, 3, 4, 5]
    assert any(issubclass(w.category, CheckpointRetried) for w in caught)
    assert counter._checkpointer().failed_checkpoints >= 1
    assert [p for p in os.listdir(f"{disk}/ckpt") if p.startswith(".tmp-")] == []  # space given back
    unfill(filled.ballast)
    assert counter.add(1) == 6
    restored = CheckpointedCounter(f"{disk}/ckpt", durability="wal", every_n=3, restore="always")
    assert restored.get() == 6


def test_a_checkpoint_on_a_full_disk_fails_the_call_without_the_wal(disk: str) -> None:
    counter = CheckpointedCounter(f"{disk}/ckpt", durability="policy", every_n=2)
    counter.add(1)
    filled = fill(disk)
    with pytest.raises(CheckpointError, match="loses it"):
        counter.add(1)
    unfill(filled.ballast)
    assert counter.add(1) == 3  # the next due checkpoint commits all of it
