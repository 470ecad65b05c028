"""A write-ahead log of acknowledged mutations, one segment per checkpoint.

Segment ``wal-<seq>.log`` holds the mutations made after checkpoint ``seq`` (``0``: after
the initial state) and before checkpoint ``seq + 1``. A record is framed as
``length (u32) | crc32 (u32) | payload``; each record is one ``write`` to the file, so it
is in the page cache — safe from a process kill — before the mutating call returns.
``fsync`` is batched (every ``fsync_every`` records or ``fsync_interval`` seconds), which
bounds what a whole-machine crash can lose. A torn or corrupt record ends the segment:
it and anything after it are dropped with a :class:`CheckpointWarning`.
"""

from __future__ import annotations

import os
import struct
import time
import warnings
import zlib
from collections.abc import Callable, Iterator

from actors import _failpoints as fp
from actors._store import CheckpointWarning, _fsync_dir
from chaos._failpoint import failpoint, is_armed

_FRAME = struct.Struct("<II")
_PREFIX, _SUFFIX = "wal-", ".log"


def segment_name(seq: int) -> str:
    return f"{_PREFIX}{seq:010d}{_SUFFIX}"


def segment_seqs(root: str) -> list[int]:
    """Sequence numbers of the log segments under ``root``, oldest first."""
    seqs = []
    for name in os.listdir(root):
        digits = name[len(_PREFIX) : -len(_SUFFIX)]
        if name.startswith(_PREFIX) and name.endswith(_SUFFIX) and digits.isdigit():
            seqs.append(int(digits))
    return sorted(seqs)


def read_segment(path: str) -> tuple[list[bytes], int]:
    """Return the intact records of a segment and the byte length they span."""
    with open(path, "rb") as f:
        data = f.read()
    records, offset = [], 0
    for payload, end in _frames(data):
        records.append(payload)
        offset = end
    if offset != len(data):
        warnings.warn(
            f"dropping a torn or corrupt record at byte {offset} of {path} "
            f"({len(data) - offset} bytes); records before it are kept",
            CheckpointWarning,
            stacklevel=2,
        )
    return records, offset


def _frames(data: bytes) -> Iterator[tuple[bytes, int]]:
    offset = 0
    while offset + _FRAME.size <= len(data):
        length, crc = _FRAME.unpack_from(data, offset)
        start, end = offset + _FRAME.size, offset + _FRAME.size + length
        if end > len(data) or zlib.crc32(data[start:end]) != crc:
            return
        yield data[start:end], end
        offset = end


class WalWriter:
    """Appends framed records to one segment, with batched fsync.

    Args:
        path: the segment file; created if missing, truncated to ``valid_length`` if given.
        fsync_every: fsync after this many records at the latest.
        fsync_interval: fsync when this many seconds have passed since the last one.
        clock: monotonic time source, injectable for tests.
    """

    def __init__(
        self,
        path: str,
        *,
        valid_length: int | None = None,
        fsync_every: int = 32,
        fsync_interval: float = 0.05,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        # The segment's name is durable only once its directory is fsynced: without this, a
        # power loss could take the name, and with it every record fsynced into the file.
        _fsync_dir(os.path.dirname(path) or ".")
        if valid_length is not None:
            os.ftruncate(self._fd, valid_length)
        self._size = os.fstat(self._fd).st_size  # where the next record starts
        self._every, self._interval, self._clock = fsync_every, fsync_interval, clock
        self._pending, self._last_sync = 0, clock()

    def append(self, payload: bytes) -> None:
        """Append one record, whole or not at all: a write that fails (``ENOSPC``, ``EIO``)
        is cut off the file again before the error propagates, so a later record never
        follows a torn one (a reader stops at the first torn record)."""
        failpoint(fp.WAL_BEFORE)
        frame = _FRAME.pack(len(payload), zlib.crc32(payload)) + payload
        whole = len(frame)
        try:
            if is_armed(fp.WAL_TORN):  # a record torn by a crash: half of it reaches the file
                self._write(frame[: len(frame) // 2])
                failpoint(fp.WAL_TORN)
                frame = frame[len(frame) // 2 :]
            self._write(frame)
        except OSError:
            os.ftruncate(self._fd, self._size)  # frees space: works on a full disk
            raise
        self._size += whole
        failpoint(fp.WAL_WRITTEN)
        self._pending += 1
        if self._pending >= self._every or self._clock() - self._last_sync >= self._interval:
            self.sync()

    def _write(self, data: bytes) -> None:
        written = os.write(self._fd, data)
        if written != len(data):  # a short write would leave a torn record mid-log
            raise OSError(f"short write to {self.path}: {written} of {len(data)} bytes")

    def sync(self) -> None:
        os.fsync(self._fd)
        self._pending, self._last_sync = 0, self._clock()

    def close(self) -> None:
        if self._fd >= 0:
            self.sync()
            os.close(self._fd)
            self._fd = -1
