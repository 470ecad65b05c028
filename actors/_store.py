"""Crash-safe checkpoint folders at any fsspec URL.

Commit protocol: write every file of a new checkpoint into a temporary folder, fsync
each, write ``manifest.json`` last (sha256 and size of each file, format version,
sequence number), fsync it, then rename the folder to ``ckpt-<seq>`` (atomic on a
POSIX filesystem) and fsync the parent. A reader trusts a folder only when its
manifest parses and every file matches it; anything else is skipped with a
:class:`CheckpointWarning` and the previous good checkpoint is used.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
import warnings
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import fsspec
import numpy as np

from actors import _codec
from chaos._errors import CheckpointError, CheckpointFormatError, StorageUnreachable

__all__ = ["FORMAT_VERSION", "CheckpointInfo", "CheckpointStore", "CheckpointWarning"]

FORMAT_VERSION = 1
_PREFIX = "ckpt-"
_TMP_PREFIX = ".tmp-"
_MANIFEST = "manifest.json"
_STATE = "state.json"
_TENSORS = "tensors.safetensors"
_WORKERS = min(4, os.cpu_count() or 1)


class CheckpointWarning(UserWarning):
    """A checkpoint folder or log record was unusable and was skipped."""


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    """One committed checkpoint: sequence number, folder, bytes, cost, and parent if a delta."""

    seq: int
    path: str
    nbytes: int
    seconds: float
    parent: int | None = None


def _sha256_file(fs: Any, path: str) -> str:
    h = hashlib.sha256()
    with fs.open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def _fsync(f: Any) -> None:
    f.flush()
    try:
        os.fsync(f.fileno())
    except (AttributeError, OSError, ValueError):
        pass  # not a local file (memory://, object stores): the backend decides durability


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return  # not a local directory
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _seq_of(name: str) -> int | None:
    digits = name[len(_PREFIX) :]
    return int(digits) if name.startswith(_PREFIX) and digits.isdigit() else None


class CheckpointStore:
    """The checkpoint folders of one actor under one storage URL.

    Args:
        url: an fsspec URL or a local directory; created if missing.
        keep: how many of the newest checkpoint folders to keep.

    Raises:
        StorageUnreachable: the URL's filesystem is unknown or the folder cannot be written.
    """

    def __init__(self, url: str, *, keep: int = 3) -> None:
        self.url = url
        self.keep = keep
        self.fs, self.root = _open_fs(url)
        self.is_local = "file" in _protocols(self.fs)

    # -- writing ---------------------------------------------------------------------------

    def save(self, tree: Mapping[str, Any], *, parent: int | None = None) -> CheckpointInfo:
        """Commit ``tree`` as the next checkpoint and prune all but the newest ``keep``.

        Args:
            parent: for an incremental checkpoint, the checkpoint it is a delta of. A
                delta is only restored on top of its whole chain back to a full one.
        """
        start = time.perf_counter()
        seq = self.next_seq()
        tmp = f"{self.root}/{_TMP_PREFIX}{_PREFIX}{seq:010d}-{uuid.uuid4().hex[:8]}"
        self.fs.makedirs(tmp, exist_ok=True)
        files = self._write_payload(tmp, tree)
        manifest = {"format": FORMAT_VERSION, "seq": seq, "parent": parent, "created": time.time(),
                    "files": files}
        self._write_bytes(f"{tmp}/{_MANIFEST}", json.dumps(manifest, indent=1).encode())
        final = self.folder(seq)
        self.fs.mv(tmp, final, recursive=True)
        _fsync_dir(self.root)
        self.prune()
        nbytes = sum(meta["size"] for meta in files.values())
        return CheckpointInfo(seq, final, nbytes, time.perf_counter() - start, parent)

    def _write_payload(self, folder: str, tree: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        arrays: list[np.ndarray] = []
        tensors: dict[str, np.ndarray] = {}

        def on_array(_: str, array: np.ndarray, is_tensor: bool) -> dict[str, Any]:
            if is_tensor:
                tensors[f"t{len(tensors)}"] = array
                return {"$tensor": f"t{len(tensors) - 1}"}
            arrays.append(array)
            return {"$array": f"a{len(arrays) - 1}.npy"}

        skeleton = _codec.flatten(tree, on_array)
        files = {_STATE: self._write_bytes(f"{folder}/{_STATE}", json.dumps(skeleton).encode())}
        if tensors:
            files[_TENSORS] = self._write_tensors(f"{folder}/{_TENSORS}", tensors)
        # Hashing and writing release the GIL: the arrays are written in parallel.
        names = [f"a{i}.npy" for i in range(len(arrays))]
        with ThreadPoolExecutor(_WORKERS) as pool:
            metas = pool.map(self._write_npy, [f"{folder}/{n}" for n in names], arrays)
            files.update(zip(names, metas))
        return files

    def _write_bytes(self, path: str, data: bytes) -> dict[str, Any]:
        with self.fs.open(path, "wb") as f:
            f.write(data)
            _fsync(f)
        return {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}

    def _write_npy(self, path: str, array: np.ndarray) -> dict[str, Any]:
        h = _HashingWriter(self.fs.open(path, "wb"))
        with h:
            np.save(h, array, allow_pickle=False)
            _fsync(h.raw)
        return {"sha256": h.hash.hexdigest(), "size": h.size}

    def _write_tensors(self, path: str, tensors: dict[str, np.ndarray]) -> dict[str, Any]:
        from safetensors.numpy import save

        return self._write_bytes(path, save(tensors))

    # -- reading ---------------------------------------------------------------------------

    def folder(self, seq: int) -> str:
        return f"{self.root}/{_PREFIX}{seq:010d}"

    def seqs(self) -> list[int]:
        """Sequence numbers of every committed folder (valid or not), oldest first."""
        names = (p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(self.root, detail=False))
        return sorted(s for s in map(_seq_of, names) if s is not None)

    def next_seq(self) -> int:
        seqs = self.seqs()
        return seqs[-1] + 1 if seqs else 1

    def load_latest(self) -> tuple[int, list[Any]] | None:
        """Return ``(seq, chain)`` of the newest checkpoint that restores, or None when none does.

        ``chain`` is a full state tree followed by the deltas to apply on it in order
        (just the full tree when the checkpoint is not incremental).

        Raises:
            CheckpointFormatError: the newest readable folder has a newer format version.
        """
        for seq in reversed(self.seqs()):
            chain = self._chain(seq)
            if chain is not None:
                return seq, chain
        return None

    def _chain(self, seq: int) -> list[Any] | None:
        loaded = self.load(seq)
        if loaded is None:
            return None
        manifest, tree = loaded
        if manifest.get("parent") is None:
            return [tree]
        below = self._chain(int(manifest["parent"]))
        return None if below is None else [*below, tree]

    def load(self, seq: int) -> tuple[dict[str, Any], Any] | None:
        """Manifest and tree of checkpoint ``seq``, or None (with a warning) when it is not valid."""
        folder = self.folder(seq)
        try:
            manifest = self._read_manifest(folder, seq)
            self._verify(folder, manifest["files"])
            return manifest, self._read_payload(folder)
        except CheckpointFormatError:
            raise
        except Exception as exc:  # noqa: BLE001 - any unreadable folder is skipped, never trusted
            warnings.warn(f"skipping checkpoint {folder}: {exc}", CheckpointWarning, stacklevel=2)
            return None

    def _parent(self, seq: int) -> int | None:
        try:
            with self.fs.open(f"{self.folder(seq)}/{_MANIFEST}", "rb") as f:
                parent = json.loads(f.read()).get("parent")
        except (OSError, ValueError):
            return None
        return None if parent is None else int(parent)

    def _read_manifest(self, folder: str, seq: int) -> dict[str, Any]:
        with self.fs.open(f"{folder}/{_MANIFEST}", "rb") as f:
            manifest = json.loads(f.read())
        version = manifest.get("format")
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise CheckpointFormatError(
                f"checkpoint {folder} has format version {version!r}, but this raychaos reads "
                f"up to {FORMAT_VERSION}. Upgrade raychaos, or point the actor at another storage URL."
            )
        if manifest.get("seq") != seq:
            raise CheckpointError(f"manifest seq {manifest.get('seq')!r} does not match folder {seq}")
        return manifest

    def _verify(self, folder: str, files: Mapping[str, Mapping[str, Any]]) -> None:
        with ThreadPoolExecutor(_WORKERS) as pool:
            list(pool.map(self._verify_file, [f"{folder}/{n}" for n in files], files.values()))

    def _verify_file(self, path: str, meta: Mapping[str, Any]) -> None:
        name = path.rsplit("/", 1)[-1]
        size = self.fs.size(path)
        if size != meta["size"]:
            raise CheckpointError(f"{name} has {size} bytes, manifest says {meta['size']}")
        if _sha256_file(self.fs, path) != meta["sha256"]:
            raise CheckpointError(f"{name} does not match its sha256 in the manifest")

    def _read_payload(self, folder: str) -> Any:
        with self.fs.open(f"{folder}/{_STATE}", "rb") as f:
            skeleton = json.loads(f.read())
        tensors: dict[str, np.ndarray] = {}
        if self.fs.exists(f"{folder}/{_TENSORS}"):
            from safetensors.numpy import load

            with self.fs.open(f"{folder}/{_TENSORS}", "rb") as f:
                tensors = load(f.read())

        def load_array(ref: Mapping[str, Any]) -> np.ndarray:
            if "$tensor" in ref:
                return tensors[ref["$tensor"]]
            with self.fs.open(f"{folder}/{ref['$array']}", "rb") as f:
                return np.load(f, allow_pickle=False)

        return _codec.unflatten(skeleton, load_array)

    # -- housekeeping ----------------------------------------------------------------------

    def prune(self) -> None:
        """Delete all but the newest ``keep`` checkpoints (and the chains they need), and stale
        temporary folders."""
        seqs = self.seqs()
        needed: set[int] = set()
        for seq in seqs[-self.keep:]:
            node: int | None = seq
            while node is not None and node not in needed:
                needed.add(node)
                node = self._parent(node)
        for seq in seqs:
            if seq not in needed:
                self.fs.rm(self.folder(seq), recursive=True)
        for path in self.fs.ls(self.root, detail=False):
            if path.rstrip("/").rsplit("/", 1)[-1].startswith(_TMP_PREFIX):
                self.fs.rm(path, recursive=True)


class _HashingWriter:
    """A write-only file wrapper that hashes and counts what passes through it."""

    def __init__(self, raw: Any) -> None:
        self.raw, self.hash, self.size = raw, hashlib.sha256(), 0

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        self.hash.update(view)
        self.size += view.nbytes
        return self.raw.write(view)

    def __enter__(self) -> _HashingWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.raw.close()


def _protocols(fs: Any) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)


def _open_fs(url: str) -> tuple[Any, str]:
    try:
        fs, root = fsspec.core.url_to_fs(url)
        fs.makedirs(root, exist_ok=True)
        probe = f"{root}/{_TMP_PREFIX}probe-{uuid.uuid4().hex[:8]}"
        with fs.open(probe, "wb") as f:
            f.write(b"ok")
        fs.rm(probe)
    except (ImportError, ValueError, OSError) as exc:
        raise StorageUnreachable(
            f"checkpoint storage {url!r} cannot be written: {exc}. Give a writable local "
            "directory or an fsspec URL whose filesystem package is installed."
        ) from exc
    return fs, root.rstrip("/") or "/"
