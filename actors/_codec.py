"""Encoding of state trees to files and bytes, with nothing that unpickles.

A *state tree* is a nested ``Mapping[str, ...]`` whose leaves are numpy arrays, torch
tensors, numpy scalars, or JSON values (None, bool, int, float, str, and lists of them).
Arrays travel as raw buffers described by dtype and shape; everything else is JSON.
Object arrays are refused: they would need pickle to come back.
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from chaos._errors import CheckpointError, InvalidConfig

__all__ = ["ArrayRef", "StateTree", "decode", "digest", "encode", "flatten", "unflatten"]

#: A state tree: what ``state_dict()`` returns and ``load_state_dict()`` takes. A nested
#: mapping whose leaves are numpy arrays, torch tensors, numpy scalars or JSON values: the
#: user's own state (torch's ``state_dict`` convention), kept apart from the toolkit's facts,
#: which are records.
StateTree = Mapping[str, Any]

_ARRAY = "$array"
_TENSOR = "$tensor"
_HEADER = struct.Struct("<I")


@dataclass(frozen=True, slots=True)
class ArrayRef:
    """Where a flattened tree's array leaf went: the key its writer chose, whether it was a
    torch tensor, and (for the record codec, whose buffers follow the header) dtype and shape.
    Its JSON form is the codec's alone (``{"$array": key}`` / ``{"$tensor": key}``)."""

    key: str | int
    tensor: bool = False
    dtype: str | None = None
    shape: tuple[int, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {_TENSOR if self.tensor else _ARRAY: self.key}
        if self.dtype is not None:
            out |= {"dtype": self.dtype, "shape": list(self.shape or ())}
        return out

    @staticmethod
    def from_json(node: Mapping[str, Any]) -> ArrayRef | None:
        """The reference ``node`` is, or None when it is an ordinary mapping."""
        tensor = _TENSOR in node
        if not tensor and _ARRAY not in node:
            return None
        shape = node.get("shape")
        return ArrayRef(key=node[_TENSOR if tensor else _ARRAY], tensor=tensor, dtype=node.get("dtype"),
                        shape=None if shape is None else tuple(shape))


def _is_tensor(value: object) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "numpy")


def _tensor_to_numpy(tensor: Any) -> np.ndarray:
    array: np.ndarray = tensor.detach().cpu().contiguous().numpy()
    return array


def _numpy_to_tensor(array: np.ndarray) -> Any:
    import torch

    return torch.from_numpy(np.array(array, copy=True))


def _check_array(array: np.ndarray, where: str) -> np.ndarray:
    if array.dtype.hasobject:
        raise InvalidConfig(
            f"state leaf {where!r} is an object array ({array.dtype}); it could only be "
            "restored by unpickling. Store numeric arrays or JSON values instead."
        )
    return np.ascontiguousarray(array)


def flatten(
    tree: Mapping[str, Any], on_array: Callable[[str, np.ndarray, bool], Any], where: str = ""
) -> dict[str, Any]:
    """Return ``tree`` as JSON, each array leaf replaced by ``on_array(path, array, is_tensor)``."""
    if not isinstance(tree, Mapping):
        raise InvalidConfig(f"state_dict() must return a mapping, got {type(tree).__name__}")
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if not isinstance(key, str):
            raise InvalidConfig(f"state keys must be str; got {key!r} under {where or 'the root'!r}")
        out[key] = _flatten_value(value, on_array, f"{where}/{key}")
    return out


def _flatten_value(value: Any, on_array: Callable[[str, np.ndarray, bool], Any], where: str) -> Any:
    if isinstance(value, Mapping):
        return flatten(value, on_array, where)
    if _is_tensor(value):
        return on_array(where, _check_array(_tensor_to_numpy(value), where), True)
    if isinstance(value, np.ndarray):
        return on_array(where, _check_array(value, where), False)
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_flatten_value(v, on_array, f"{where}[{i}]") for i, v in enumerate(value)]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise InvalidConfig(
        f"state leaf {where!r} has type {type(value).__name__}; use a numpy array, a torch "
        "tensor or a JSON value (None, bool, int, float, str, list, dict)"
    )


def unflatten(tree: Any, load_array: Callable[[ArrayRef], np.ndarray]) -> Any:
    """Inverse of :func:`flatten`: JSON back to a state tree, arrays fetched by ``load_array``."""
    if isinstance(tree, dict):
        ref = ArrayRef.from_json(tree)
        if ref is not None:
            array = load_array(ref)
            return _numpy_to_tensor(array) if ref.tensor else array
        return {k: unflatten(v, load_array) for k, v in tree.items()}
    if isinstance(tree, list):
        return [unflatten(v, load_array) for v in tree]
    return tree


def _ref(index: int, array: np.ndarray, is_tensor: bool) -> dict[str, Any]:
    return ArrayRef(key=index, tensor=is_tensor, dtype=array.dtype.str, shape=tuple(array.shape)).to_json()


def encode(tree: Mapping[str, Any]) -> bytes:
    """Encode a state tree as one byte string: a JSON header, then the raw array buffers."""
    buffers: list[np.ndarray] = []

    def on_array(_: str, array: np.ndarray, is_tensor: bool) -> dict[str, Any]:
        buffers.append(array)
        return _ref(len(buffers) - 1, array, is_tensor)

    header = json.dumps(flatten(tree, on_array), separators=(",", ":")).encode()
    out = io.BytesIO()
    out.write(_HEADER.pack(len(header)))
    out.write(header)
    for array in buffers:
        out.write(array.tobytes())
    return out.getvalue()


def decode(data: bytes) -> Any:
    """Inverse of :func:`encode`; raises :class:`CheckpointError` on a malformed payload."""
    try:
        (size,) = _HEADER.unpack_from(data, 0)
        header = json.loads(data[_HEADER.size : _HEADER.size + size])
    except (struct.error, ValueError) as exc:
        raise CheckpointError(f"malformed record header: {exc}") from exc
    offset = _HEADER.size + size

    def load_array(ref: ArrayRef) -> np.ndarray:
        nonlocal offset
        if ref.dtype is None or ref.shape is None:
            raise CheckpointError(f"malformed record header: array {ref.key!r} has no dtype or shape")
        dtype, shape = np.dtype(ref.dtype), ref.shape
        count = int(np.prod(shape, dtype=np.int64))
        array = np.frombuffer(data, dtype=dtype, count=count, offset=offset).reshape(shape)
        offset += array.nbytes
        return array.copy()

    return unflatten(header, load_array)


def digest(tree: Mapping[str, Any]) -> str:
    """A stable sha256 of a state tree's logical content (key order does not matter)."""
    arrays: dict[str, str] = {}

    def on_array(path: str, array: np.ndarray, _: bool) -> str:
        payload = hashlib.sha256(array.reshape(-1).view(np.uint8).data).hexdigest()
        arrays[path] = f"{array.dtype.str}:{array.shape}:{payload}"
        return "array"

    skeleton = json.dumps(flatten(tree, on_array), sort_keys=True)
    return hashlib.sha256((skeleton + json.dumps(arrays, sort_keys=True)).encode()).hexdigest()
