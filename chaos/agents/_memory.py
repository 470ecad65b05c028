"""The memory fault's allocation task, its progress reports, and what its heal observed.

The task runs on the target node and reports, after each block, how many bytes it holds
*resident* (its RSS growth, not what it asked for) in a small JSON file in that node's temp
directory; the chaos agent on the same node reads it, so the engine can confirm the
pressure is real before it calls the fault injected.
"""

from __future__ import annotations

import json
import mmap
import os
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, fields
from enum import StrEnum
from typing import Any

__all__ = ["MemoryOutcome", "MemoryProgress", "MemoryResult", "allocate", "outcome_of", "progress_path",
           "read_progress"]

STEP = 64 * 2**20
CALL_TIMEOUT = 30.0


class MemoryOutcome(StrEnum):
    """How a memory fault ended, as its heal observed it (decided on by invariants)."""

    OOM_KILLED = "oom_killed"  #: Ray's memory monitor killed the allocation (OutOfMemoryError)
    HELD = "held"  #: it held its memory to its deadline without an OOM kill
    STOPPED_AT_HEAL = "stopped_at_heal"  #: still holding when the heal cancelled it
    CRASHED = "crashed"  #: its worker died some other way


@dataclass(frozen=True, slots=True)
class MemoryProgress:
    """The allocation's last report: bytes resident, the host's used share, whether the host
    was already past the target (nothing to allocate), and its pace: blocks made resident,
    seconds from its start to the last one, and the longest one block took to map."""

    resident: int
    host_used: float
    cannot: bool
    blocks: int = 0
    seconds: float = 0.0
    slowest: float = 0.0

    def holding(self) -> bool:
        """Memory is resident by this report: a block made resident and RSS grown (the first
        report, written before any block, holds nothing)."""
        return self.blocks > 0 and self.resident > 0

    def pace(self) -> str:
        """For people: a pressure that never crossed the threshold says whether its pages came
        slowly (a slow block) or its loop was starved (quick blocks, seconds apart)."""
        if not self.blocks:
            return "no block made resident"
        return (f"{self.blocks} blocks of {STEP // 2**20} MiB in {self.seconds:.1f} s, "
                f"the slowest {self.slowest:.2f} s")


@dataclass(frozen=True, slots=True)
class MemoryResult:
    """How a memory fault's allocation ended, as its heal observed it."""

    outcome: MemoryOutcome
    peak_bytes: int
    note: str  #: for people: the journal's outcome


def progress_path() -> str:
    """A fresh progress file name (resolved on the node: each node has its own temp dir)."""
    return os.path.join(tempfile.gettempdir(), f"raychaos-memory-{uuid.uuid4().hex}.json")


def _report(path: str, progress: MemoryProgress) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(asdict(progress), f)
    os.replace(tmp, path)  # atomic: the agent never reads half a report


def read_progress(path: str, *, remove: bool = False) -> MemoryProgress | None:
    """The last report at ``path`` (JSON, never pickle), or None before the first one (or
    one that is not a report)."""
    try:
        with open(path, encoding="utf-8") as f:
            progress = _parse(json.load(f))
    except (FileNotFoundError, ValueError):
        progress = None
    if remove:
        for name in (path, f"{path}.tmp"):
            try:
                os.remove(name)
            except FileNotFoundError:
                pass
    return progress


def _parse(data: object) -> MemoryProgress | None:
    if not isinstance(data, dict) or set(data) != {f.name for f in fields(MemoryProgress)}:
        return None
    counts, reals = (data["resident"], data["blocks"]), (data["host_used"], data["seconds"], data["slowest"])
    if all(type(v) is int for v in counts) and all(type(v) in (int, float) for v in reals) \
            and isinstance(data["cannot"], bool):
        return MemoryProgress(**{**data, **{k: float(data[k]) for k in ("host_used", "seconds", "slowest")}})
    return None


def allocate(fraction: float, host_cap: float, seconds: float, path: str) -> int:
    """Grow resident memory in 64 MiB steps toward ``fraction`` of the host, never past the
    cap, for ``seconds``; report each step at ``path``. Returns the bytes held at the end."""
    import psutil

    me, vm = psutil.Process(), psutil.virtual_memory()
    base, target, start = me.memory_info().rss, min(fraction, host_cap) * vm.total, time.monotonic()
    blocks: list[mmap.mmap] = []
    slowest = 0.0
    if (vm.total - vm.available) + STEP > target:
        _report(path, MemoryProgress(0, (vm.total - vm.available) / vm.total, cannot=True))
        return 0
    _report(path, MemoryProgress(0, (vm.total - vm.available) / vm.total, cannot=False))  # the start's proof
    while time.monotonic() < start + seconds:
        used = psutil.virtual_memory()
        if (used.total - used.available) + STEP <= target:
            began = time.monotonic()
            blocks.append(_resident_block())
            slowest = max(slowest, time.monotonic() - began)
            _report(path, MemoryProgress(resident=max(0, me.memory_info().rss - base),
                                         host_used=1 - used.available / used.total, cannot=False, blocks=len(blocks),
                                         seconds=time.monotonic() - start, slowest=slowest))
        else:
            time.sleep(0.05)  # at the target: hold until the deadline (or Ray kills us)
    return sum(len(b) for b in blocks)


def _resident_block() -> mmap.mmap:
    """One anonymous block of STEP bytes, every page resident. MAP_POPULATE: the kernel faults
    every page in up front, about 6x faster than touching them from Python, so the pressure
    builds within a short fault's seconds."""
    block = mmap.mmap(-1, STEP, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | getattr(mmap, "MAP_POPULATE", 0))
    block[::4096] = b"\x01" * (STEP // 4096)  # resident even without MAP_POPULATE
    return block


def outcome_of(ref: Any, progress: MemoryProgress | None) -> MemoryResult:
    """What the allocation task ended in: a :class:`MemoryOutcome`, its peak resident bytes
    and a sentence for people (the journal's outcome)."""
    import ray
    from ray.exceptions import OutOfMemoryError, RayError, TaskCancelledError

    peak = progress.resident if progress else 0
    try:
        peak = max(peak, int(ray.get(ref, timeout=CALL_TIMEOUT)))
        kind, said = MemoryOutcome.HELD, "held without an OOM kill"
    except OutOfMemoryError:
        kind, said = MemoryOutcome.OOM_KILLED, "Ray's memory monitor killed the allocating task"
    except TaskCancelledError:
        kind, said = MemoryOutcome.STOPPED_AT_HEAL, "allocation stopped at heal"
    except RayError as exc:
        kind, said = MemoryOutcome.CRASHED, f"the allocating task failed: {type(exc).__name__}"
    if progress and progress.cannot:
        said = f"nothing allocated: the host already used {progress.host_used:.0%}, past the target"
    pace = f"; {progress.pace()}" if progress and not progress.cannot else ""
    return MemoryResult(kind, peak, f"{said} (peak {peak / 2**30:.2f} GiB resident{pace})")
