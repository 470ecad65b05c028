"""Batches on Ray's wire as bytes.

Ray serialises ``bytes``, ``str``, numbers and lists natively (msgpack); every numpy array
costs it a pickle and its out-of-band buffer of its own. A learner's batch (256 rows, seven
arrays) cost a call 0.8 ms more than a no-op's 1.2 ms here; as one ``bytes`` nothing that
could be measured (benchmarks/repro_round_trip_work.py). Nothing here unpickles: the layout
is names, dtype strings and shapes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from chaos._errors import InvalidConfig

__all__ = ["PackedBatch", "pack_array", "pack_batch", "unpack_array", "unpack_batch"]

#: Each column's name, numpy dtype string and shape, then all columns' bytes back to back.
#: (Ray's msgpack hands tuples back as lists: both are accepted.)
PackedBatch = tuple[Sequence[tuple[str, str, Sequence[int]]], bytes]


def pack_batch(batch: Mapping[str, np.ndarray]) -> PackedBatch:
    """The columns as one layout and one ``bytes`` (C order)."""
    arrays = {name: np.ascontiguousarray(column) for name, column in batch.items()}
    layout = tuple((name, a.dtype.str, tuple(a.shape)) for name, a in arrays.items())
    return layout, b"".join(a.tobytes() for a in arrays.values())


def unpack_batch(packed: PackedBatch) -> dict[str, np.ndarray]:
    """The columns again, as read-only views of the one ``bytes`` (as ``ray.get`` gives
    arrays): no copy.

    Raises:
        InvalidConfig: the layout does not account for the bytes exactly.
    """
    layout, blob = packed
    columns = [(name, np.dtype(dtype), tuple(shape)) for name, dtype, shape in layout]
    counts = [int(np.prod(shape, dtype=np.int64)) for _, _, shape in columns]
    needed = sum(count * dtype.itemsize for count, (_, dtype, _) in zip(counts, columns))
    if needed != len(blob):
        raise InvalidConfig(f"a packed batch of {len(blob)} bytes has a layout for {needed}: "
                            "its layout and bytes must come from one pack_batch call")
    out, offset = {}, 0
    for count, (name, dtype, shape) in zip(counts, columns):
        out[name] = np.frombuffer(blob, dtype=dtype, count=count, offset=offset).reshape(shape)
        offset += count * dtype.itemsize
    return out


def pack_array(values: np.ndarray | Sequence[float] | None, dtype: type[np.generic]) -> bytes | None:
    """A 1-D array as ``bytes`` of ``dtype`` (None stays None)."""
    return None if values is None else np.ascontiguousarray(values, dtype=dtype).ravel().tobytes()


def unpack_array(data: bytes | None, dtype: type[np.generic], *, what: str) -> np.ndarray | None:
    """``bytes`` from :func:`pack_array` as a 1-D array (None stays None).

    Raises:
        InvalidConfig: the length is not a whole number of ``dtype`` items.
    """
    if data is None:
        return None
    size = np.dtype(dtype).itemsize
    if not isinstance(data, bytes) or len(data) % size:
        length = len(data) if isinstance(data, bytes) else type(data).__name__
        raise InvalidConfig(f"`{what}` must be bytes of {np.dtype(dtype).name} ({size} bytes each), "
                            f"got {length}: use ReplayClient, which packs them")
    return np.frombuffer(data, dtype=dtype)
