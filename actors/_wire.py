"""A learner's step on Ray's wire as one ``bytes`` each way.

Ray serialises every argument of a call on its own, and every one costs: a call with one
argument took 0.3 ms longer than a call with none here, and ``(256, indices, priorities,
beta=None)`` 0.6 ms longer; a ``(layout, bytes)`` tuple returned 0.2 ms more than ``bytes``
alone; numpy arrays cost a pickle each, a 25 KB batch as seven arrays 0.8 ms more than as
``bytes`` (``benchmarks/repro_round_trip_work.py``). So a request is one ``bytes`` and so is
a batch. Nothing here unpickles: a batch's layout is JSON (names, dtype strings, shapes).

A request: batch size (int64), beta (float64, NaN for the buffer's default), the number of
priorities to set (int64, -1 for none), then the indices (int64) and priorities (float64).
A batch: the layout's length (uint32), the layout, then the columns back to back (C order).
"""

from __future__ import annotations

import functools
import json
import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from chaos._errors import InvalidConfig

__all__ = ["Request", "check_pair", "pack_batch", "pack_request", "unpack_batch", "unpack_request"]

_REQUEST = struct.Struct("<qdq")
_LAYOUT_LENGTH = struct.Struct("<I")


@dataclass(frozen=True, slots=True)
class Request:
    """What a packed request asks: draw ``batch_size`` (with ``beta``, None: the buffer's),
    after setting ``priorities`` at ``indices`` (both None: nothing to set)."""

    batch_size: int
    indices: np.ndarray | None
    priorities: np.ndarray | None
    beta: float | None


def pack_request(batch_size: int, indices: np.ndarray | None, priorities: np.ndarray | None,
                 beta: float | None) -> bytes:
    """One ``bytes`` for :func:`unpack_request`; ``indices`` and ``priorities`` both or neither.

    Raises:
        InvalidConfig: only one of ``indices`` and ``priorities``, or lengths that differ.
    """
    check_pair(indices, priorities)
    if indices is None or priorities is None:
        return _header(batch_size, beta, -1)
    idx = np.ascontiguousarray(indices, dtype=np.int64).ravel()
    prios = np.ascontiguousarray(priorities, dtype=np.float64).ravel()
    if len(idx) != len(prios):
        raise InvalidConfig(f"got {len(idx)} indices and {len(prios)} priorities; give one each")
    return _header(batch_size, beta, len(idx)) + idx.tobytes() + prios.tobytes()


def check_pair(indices: object, priorities: object) -> None:
    """A learner's step sets the previous batch's priorities or none: both or neither.

    Raises:
        InvalidConfig: only one of the two given.
    """
    if (indices is None) != (priorities is None):
        raise InvalidConfig("sample_and_update needs both `indices` and `priorities` (the previous "
                            "batch's), or neither for the first batch")


def _header(batch_size: int, beta: float | None, n: int) -> bytes:
    # NaN stands for "the buffer's beta" on the wire, so a NaN of the caller's is refused here.
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or not (
            beta is None or (isinstance(beta, (int, float)) and not isinstance(beta, bool) and beta == beta)):
        raise InvalidConfig(f"sample_and_update({batch_size!r}, beta={beta!r}): give a whole batch size "
                            "and a beta in [0, 1] (or None for the buffer's)")
    return _REQUEST.pack(int(batch_size), math.nan if beta is None else float(beta), n)


def unpack_request(data: bytes) -> Request:
    """The request :func:`pack_request` made (its arrays are read-only views of ``data``).

    Raises:
        InvalidConfig: not ``bytes``, or a length its header does not account for.
    """
    if not isinstance(data, bytes) or len(data) < _REQUEST.size:
        got = f"{len(data)} bytes" if isinstance(data, bytes) else type(data).__name__
        raise InvalidConfig(f"a packed request must be bytes of at least {_REQUEST.size}, got {got}: "
                            "use ReplayClient, which packs them")
    batch_size, beta, n = _REQUEST.unpack_from(data)
    if len(data) != _REQUEST.size + 16 * max(n, 0):
        raise InvalidConfig(f"a packed request of {len(data)} bytes says it holds {n} priorities "
                            f"({_REQUEST.size + 16 * max(n, 0)} bytes): use ReplayClient, which packs them")
    beta_or_default = None if math.isnan(beta) else beta
    if n < 0:
        return Request(batch_size=batch_size, indices=None, priorities=None, beta=beta_or_default)
    indices = np.frombuffer(data, dtype=np.int64, count=n, offset=_REQUEST.size)
    priorities = np.frombuffer(data, dtype=np.float64, count=n, offset=_REQUEST.size + 8 * n)
    return Request(batch_size=batch_size, indices=indices, priorities=priorities, beta=beta_or_default)


def pack_batch(batch: Mapping[str, np.ndarray]) -> bytes:
    """The columns as one ``bytes``: their layout, then their data (C order)."""
    arrays = [(name, np.ascontiguousarray(column)) for name, column in batch.items()]
    return b"".join([_layout(tuple((name, a.dtype.str, a.shape) for name, a in arrays)),
                     *(a.tobytes() for _, a in arrays)])


@functools.lru_cache(maxsize=64)
def _layout(columns: tuple[tuple[str, str, tuple[int, ...]], ...]) -> bytes:
    """A layout's length and JSON: a learner asks for the same one every step, and encoding it
    cost a quarter of packing the batch."""
    layout = json.dumps([[name, dtype, list(shape)] for name, dtype, shape in columns]).encode()
    return _LAYOUT_LENGTH.pack(len(layout)) + layout


def unpack_batch(data: bytes) -> dict[str, np.ndarray]:
    """The columns again, as read-only views of ``data`` (as ``ray.get`` gives arrays): no copy.

    Raises:
        InvalidConfig: the layout does not account for the bytes exactly.
    """
    if not isinstance(data, bytes) or len(data) < _LAYOUT_LENGTH.size:
        got = f"{len(data)} bytes" if isinstance(data, bytes) else type(data).__name__
        raise InvalidConfig(f"a packed batch must be bytes from pack_batch, got {got}")
    (length,) = _LAYOUT_LENGTH.unpack_from(data)
    start = _LAYOUT_LENGTH.size + length
    try:
        columns, size = _parsed(data[_LAYOUT_LENGTH.size:start])
    except (ValueError, TypeError) as exc:  # not JSON, or not [[name, dtype, shape], ...]
        raise InvalidConfig(f"a packed batch's layout does not read as [[name, dtype, shape], ...] "
                            f"({exc}): its bytes must come from one pack_batch call") from exc
    if start + size != len(data):
        raise InvalidConfig(f"a packed batch of {len(data)} bytes has a layout for {start + size}: "
                            "its layout and data must come from one pack_batch call")
    out, offset = {}, start
    for name, dtype, shape, count in columns:
        out[name] = np.ndarray(shape, dtype, buffer=data, offset=offset)  # one call, read-only as bytes are
        offset += count * dtype.itemsize
    return out


@functools.lru_cache(maxsize=64)
def _parsed(layout: bytes) -> tuple[tuple[tuple[str, np.dtype, tuple[int, ...], int], ...], int]:
    """Each column's name, dtype, shape and item count, and the bytes they take together."""
    columns = tuple((name, np.dtype(dtype), tuple(shape), int(np.prod(shape, dtype=np.int64)))
                    for name, dtype, shape in json.loads(layout))
    return columns, sum(count * dtype.itemsize for _, dtype, _, count in columns)
