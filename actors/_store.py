"""Crash-safe checkpoint folders at any fsspec URL.

Commit protocol: write every file of a new checkpoint into a temporary folder, fsync
each, write ``manifest.json`` last (CRC-32 and size of each file, format version,
sequence number), fsync it and the folder (the files' names), then rename the folder to
``ckpt-<seq>`` (atomic on a POSIX filesystem) and fsync the parent. A reader trusts a folder only when its
manifest parses and every file matches it; anything else is skipped with a
:class:`CheckpointWarning` and the previous good checkpoint is used.

Each file is read once — a local one is mapped copy-on-write, with no read copy — checked
against the manifest, and only then parsed; an array is a view of those bytes. The checksum
guards against torn and corrupted files, not against an attacker (who could rewrite the
manifest too): that is why nothing read is ever unpickled. Format 1 checkpoints (sha256)
still load.
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import io
import json
import mmap
import os
import time
import uuid
import warnings
import zlib
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import fsspec
import numpy as np

from actors import _codec
from actors import _failpoints as fp
from actors._codec import StateTree
from chaos._errors import CheckpointError, CheckpointFormatError, StorageUnreachable
from chaos._failpoint import failpoint

__all__ = [
    "FORMAT_VERSION",
    "CheckpointInfo",
    "CheckpointRetried",
    "CheckpointStore",
    "CheckpointWarning",
    "CommittedNotSynced",
    "FileMeta",
    "LoadedCheckpoint",
    "Manifest",
]

FORMAT_VERSION = 2  # 2: CRC-32 per file (1: sha256)
_PREFIX = "ckpt-"
_TMP_PREFIX = ".tmp-"
_MANIFEST = "manifest.json"
_STATE = "state.json"
_TENSORS = "tensors.safetensors"
# Arrays up to this size share one file: an incremental checkpoint is mostly small arrays,
# and one fsync per file would dominate its cost.
_SMALL = "arrays.safetensors"
_SMALL_BYTES = 1 << 20
_WORKERS = min(4, os.cpu_count() or 1)
# Writers mostly wait for fsync: more of them than cores keeps the disk's queue full
# (2^20 transitions, 89 MiB, here: 0.075 s with 2 writers, 0.065 s with 8).
_WRITERS = 8


class CheckpointWarning(UserWarning):
    """A checkpoint folder or log record was unusable and was skipped."""


class CheckpointRetried(CheckpointWarning):
    """A checkpoint after a mutation failed (a full disk, say); the write-ahead log holds the
    call, and the checkpoint is tried again after the next mutation."""


class CommittedNotSynced(OSError):
    """The checkpoint folder was renamed into place (committed: a restart restores it) but
    what follows failed (the directory's fsync, the prune): a power loss may still drop it.
    ``info`` is the committed checkpoint's; the caller must treat it as the newest."""

    def __init__(self, info: CheckpointInfo, cause: Exception) -> None:
        super().__init__(getattr(cause, "errno", None), f"checkpoint {info.path} committed, but {cause}")
        self.info = info


@dataclass(frozen=True, slots=True)
class CheckpointInfo:
    """One committed checkpoint: sequence number, folder, bytes, cost, and parent if a delta."""

    seq: int
    path: str
    nbytes: int
    seconds: float
    parent: int | None = None


@dataclass(frozen=True, slots=True)
class LoadedCheckpoint:
    """What :meth:`CheckpointStore.load_latest` found.

    ``chain`` is a full state tree followed by the deltas to apply on it in order (just the
    full tree when the checkpoint is not incremental); ``skipped`` are the newer committed
    checkpoints passed over because they (or a folder of their chain) did not restore.
    """

    seq: int
    chain: list[Any]
    skipped: tuple[int, ...] = ()


def _crc32(*chunks: Any) -> str:
    crc = 0
    for chunk in chunks:
        crc = zlib.crc32(chunk, crc)  # releases the GIL on large buffers
    return f"{crc:08x}"


@dataclass(frozen=True, slots=True)
class FileMeta:
    """One file of a checkpoint: its size and checksum (crc32; sha256 in format 1)."""

    size: int
    crc32: str | None = None
    sha256: str | None = None

    def matches(self, data: np.ndarray) -> bool:
        if self.crc32 is not None:
            return _crc32(data) == self.crc32
        return hashlib.sha256(data.data).hexdigest() == self.sha256  # format 1

    def to_json(self) -> dict[str, object]:
        return {k: v for k, v in (("size", self.size), ("crc32", self.crc32), ("sha256", self.sha256))
                if v is not None}


@dataclass(frozen=True, slots=True)
class Manifest:
    """A checkpoint folder's manifest: written last, so a folder without a valid one never
    restores. ``parent``: the checkpoint an incremental one is a delta of (None: full)."""

    format: int
    seq: int
    parent: int | None
    created: float
    files: Mapping[str, FileMeta]

    def to_json(self) -> bytes:
        return json.dumps({"format": self.format, "seq": self.seq, "parent": self.parent, "created": self.created,
                           "files": {n: m.to_json() for n, m in self.files.items()}}, indent=1).encode()

    @staticmethod
    def parse(raw: bytes, *, folder: str) -> Manifest:
        """The manifest in ``raw``, checked: its format first (a newer one is never guessed at).

        Raises:
            CheckpointFormatError: a newer format version, or not a manifest at all.
            CheckpointError: a field of the wrong type.
        """
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise CheckpointFormatError(f"checkpoint {folder}'s manifest is {type(data).__name__}, not an object; "
                                        "the checkpoint is damaged: point the actor at another storage URL")
        version = data.get("format")
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise CheckpointFormatError(
                f"checkpoint {folder} has format version {version!r}, but this raychaos reads "
                f"up to {FORMAT_VERSION}. Upgrade raychaos, or point the actor at another storage URL.")
        return _manifest_fields(data, version, folder)


def _manifest_fields(data: Mapping[str, Any], version: int, folder: str) -> Manifest:
    seq, parent, files = data.get("seq"), data.get("parent"), data.get("files")
    if not isinstance(seq, int) or not (parent is None or isinstance(parent, int)) or not isinstance(files, dict):
        raise CheckpointError(f"checkpoint {folder}'s manifest has seq {seq!r}, parent {parent!r} and files of "
                              f"type {type(files).__name__}: not a manifest this raychaos wrote")
    try:
        metas = {str(n): FileMeta(int(m["size"]), m.get("crc32"), m.get("sha256")) for n, m in files.items()}
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise CheckpointError(f"checkpoint {folder}'s manifest lists a file without a size ({exc})") from None
    return Manifest(format=version, seq=seq, parent=parent, created=float(data.get("created", 0.0)), files=metas)


def _packable(array: np.ndarray) -> bool:
    """Small, and of a dtype safetensors stores (bool, integers, floats; native order)."""
    dtype = array.dtype
    return (array.nbytes <= _SMALL_BYTES and dtype.kind in "biuf" and dtype.isnative
            and dtype.itemsize in (1, 2, 4, 8) and dtype.fields is None)


def _npy_header(array: np.ndarray) -> bytes:
    out = io.BytesIO()
    header = np.lib.format.header_data_from_array_1_0(array)
    try:
        np.lib.format.write_array_header_1_0(out, header)
    except ValueError:  # a header over 64 KiB: only for absurdly many fields
        np.lib.format.write_array_header_2_0(out, header)
    return out.getvalue()


def _parse_npy(data: np.ndarray, name: str) -> np.ndarray:
    """The array in a verified .npy buffer, as a writable view of it; never unpickles."""
    stream = io.BytesIO(data.data[: min(len(data), 1 << 17)])
    major, _ = np.lib.format.read_magic(stream)
    read = np.lib.format.read_array_header_1_0 if major == 1 else np.lib.format.read_array_header_2_0
    shape, fortran, dtype = read(stream)
    if dtype.hasobject:
        raise CheckpointError(f"{name} holds Python objects (dtype {dtype}); refusing to unpickle it")
    count = int(np.prod(shape, dtype=np.int64))
    flat = np.frombuffer(data, dtype=dtype, count=count, offset=stream.tell())
    return flat.reshape(shape, order="F" if fortran else "C")


def _fsync(f: Any) -> None:
    f.flush()
    try:
        fd = f.fileno()
    except (AttributeError, ValueError):  # io.UnsupportedOperation is a ValueError too
        return  # not a local file (memory://, object stores): the backend decides durability
    os.fsync(fd)  # a failing fsync (EIO) fails the save: what it wrote may not be on the disk


def _fsync_dir(path: str) -> None:
    if not os.path.isdir(path):
        return  # not a local directory (memory://, object stores)
    fd = os.open(path, os.O_RDONLY)
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

    def save(self, tree: StateTree, *, parent: int | None = None) -> CheckpointInfo:
        """Commit ``tree`` as the next checkpoint and prune all but the newest ``keep``.

        Args:
            parent: for an incremental checkpoint, the checkpoint it is a delta of. A
                delta is only restored on top of its whole chain back to a full one.
        """
        start = time.perf_counter()
        seq = self.next_seq()
        tmp = f"{self.root}/{_TMP_PREFIX}{_PREFIX}{seq:010d}-{uuid.uuid4().hex[:8]}"
        self.fs.makedirs(tmp, exist_ok=True)
        try:
            files = self._write_tmp(tmp, seq, tree, parent)
        except OSError:
            # A full disk (or a vanished mount): the half-written folder must not keep
            # holding the space the next attempt needs. Nothing was committed.
            self.fs.rm(tmp, recursive=True)
            raise
        _fsync_dir(tmp)  # the files' names, not only their bytes, before the folder is committed
        final = self.folder(seq)
        self.fs.mv(tmp, final, recursive=True)
        info = CheckpointInfo(seq=seq, path=final, nbytes=sum(meta.size for meta in files.values()), seconds=0.0,
                              parent=parent)
        try:
            failpoint(fp.CHECKPOINT_RENAMED)
            _fsync_dir(self.root)
            failpoint(fp.CHECKPOINT_PRUNE)
            self.prune()
        except Exception as exc:  # after the rename: committed all the same, and the caller must know it
            raise CommittedNotSynced(info, exc) from exc
        return dataclasses.replace(info, seconds=time.perf_counter() - start)

    def _write_tmp(self, tmp: str, seq: int, tree: StateTree, parent: int | None) -> dict[str, FileMeta]:
        files = self._write_payload(tmp, tree)
        manifest = Manifest(format=FORMAT_VERSION, seq=seq, parent=parent, created=time.time(), files=files)
        failpoint(fp.CHECKPOINT_BEFORE_MANIFEST)
        self._write_bytes(f"{tmp}/{_MANIFEST}", manifest.to_json())
        failpoint(fp.CHECKPOINT_MANIFEST)
        return files

    def _write_payload(self, folder: str, tree: StateTree) -> dict[str, FileMeta]:
        arrays: list[np.ndarray] = []
        tensors: dict[str, np.ndarray] = {}
        small: dict[str, np.ndarray] = {}

        def on_array(_: str, array: np.ndarray, is_tensor: bool) -> dict[str, Any]:
            if is_tensor:
                tensors[f"t{len(tensors)}"] = array
                return _codec.ArrayRef(f"t{len(tensors) - 1}", tensor=True).to_json()
            if _packable(array):
                small[f"s{len(small)}"] = np.ascontiguousarray(array)
                return _codec.ArrayRef(f"{_SMALL}#s{len(small) - 1}").to_json()
            arrays.append(array)
            return _codec.ArrayRef(f"a{len(arrays) - 1}.npy").to_json()

        skeleton = _codec.flatten(tree, on_array)
        files = {_STATE: self._write_bytes(f"{folder}/{_STATE}", json.dumps(skeleton).encode())}
        failpoint(fp.CHECKPOINT_FILE)
        for name, group in ((_TENSORS, tensors), (_SMALL, small)):
            if group:
                files[name] = self._write_safetensors(f"{folder}/{name}", group)
                failpoint(fp.CHECKPOINT_FILE)
        # Hashing, writing and fsync release the GIL: the arrays are written in parallel,
        # the largest first so that no writer is left with a big one at the end.
        order = sorted(range(len(arrays)), key=lambda i: -arrays[i].nbytes)
        with ThreadPoolExecutor(_WRITERS) as pool:
            metas = pool.map(lambda i: self._write_npy(f"{folder}/a{i}.npy", arrays[i]), order)
            files.update((f"a{i}.npy", meta) for i, meta in zip(order, metas))
        return files

    def _write_bytes(self, path: str, data: bytes) -> FileMeta:
        with self.fs.open(path, "wb") as f:
            f.write(data)
            _fsync(f)
        return FileMeta(len(data), _crc32(data))

    def _write_npy(self, path: str, array: np.ndarray) -> FileMeta:
        """The .npy format, written as header + the array's own bytes (no copy, one pass).
        Object arrays never get here: the codec refuses them."""
        array = np.ascontiguousarray(array)
        header, body = _npy_header(array), array.reshape(-1).view(np.uint8)
        with self.fs.open(path, "wb") as f:
            f.write(header)
            f.write(body.data)
            _fsync(f)
        failpoint(fp.CHECKPOINT_FILE)
        return FileMeta(len(header) + body.nbytes, _crc32(header, body))

    def _write_safetensors(self, path: str, arrays: dict[str, np.ndarray]) -> FileMeta:
        from safetensors.numpy import save

        return self._write_bytes(path, save(arrays))

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

    def load_latest(self, *, skip_unreadable: bool = False) -> LoadedCheckpoint | None:
        """The newest checkpoint that restores, or None when none does.

        Args:
            skip_unreadable: pass over a folder the storage cannot read, as over a damaged one
                (for a caller whose log restores what it held).

        Raises:
            CheckpointFormatError: the newest readable folder has a newer format version.
            StorageUnreachable: a folder could not be read (an I/O error, not damage): skipping
                it would restore an older state, or none, and bury the newer ones.
        """
        skipped: list[int] = []
        for seq in reversed(self.seqs()):
            chain = self._chain(seq, skip_unreadable)
            if chain is not None:
                return LoadedCheckpoint(seq, chain, tuple(skipped))
            skipped.append(seq)
        return None

    def _chain(self, seq: int, skip_unreadable: bool = False) -> list[Any] | None:
        loaded = self.load(seq, skip_unreadable=skip_unreadable)
        if loaded is None:
            return None
        manifest, tree = loaded
        if manifest.parent is None:
            return [tree]
        below = self._chain(manifest.parent, skip_unreadable)
        return None if below is None else [*below, tree]

    def load(self, seq: int, *, skip_unreadable: bool = False) -> tuple[Manifest, StateTree] | None:
        """Manifest and tree of checkpoint ``seq``, or None (with a warning) when it is not valid
        (or, with ``skip_unreadable``, cannot be read)."""
        folder = self.folder(seq)
        try:
            manifest = self._read_manifest(folder, seq)
            return manifest, self._read_payload(folder, manifest.files)
        except CheckpointFormatError:
            raise
        except OSError as exc:
            if not skip_unreadable:
                _raise_if_unreadable(exc, folder)
            warnings.warn(f"skipping checkpoint {folder}: {exc}", CheckpointWarning, stacklevel=2)
            return None
        except Exception as exc:  # noqa: BLE001 - any damaged folder is skipped, never trusted
            warnings.warn(f"skipping checkpoint {folder}: {exc}", CheckpointWarning, stacklevel=2)
            return None

    def _parent(self, seq: int) -> int | None:
        """The checkpoint ``seq`` is a delta of (None: a full one, or an unreadable folder, which
        prune may drop). A newer format is never guessed at: it raises, as it does on load."""
        try:
            return self._read_manifest(self.folder(seq), seq).parent
        except CheckpointFormatError:
            raise
        except OSError as exc:
            _raise_if_unreadable(exc, self.folder(seq))
            return None
        except (ValueError, CheckpointError):
            return None

    def _read_manifest(self, folder: str, seq: int) -> Manifest:
        with self.fs.open(f"{folder}/{_MANIFEST}", "rb") as f:
            manifest = Manifest.parse(f.read(), folder=folder)
        if manifest.seq != seq:
            raise CheckpointError(f"manifest seq {manifest.seq!r} does not match folder {seq}")
        return manifest

    def _read_checked(self, folder: str, name: str, files: Mapping[str, FileMeta]) -> np.ndarray:
        """The bytes of ``name``, read once, matching its size and checksum in the manifest."""
        meta = files.get(name)
        if meta is None:
            raise CheckpointError(f"{name} is not in the manifest")
        path, size = f"{folder}/{name}", meta.size
        data = _map_local(path, size) if self.is_local else self._read_remote(path, size)
        if data is None:
            raise CheckpointError(f"{name} has another size than the manifest's {size} bytes")
        if not meta.matches(data):
            raise CheckpointError(f"{name} does not match its checksum in the manifest")
        return data

    def _read_remote(self, path: str, size: int) -> np.ndarray | None:
        data = bytearray(size)
        with self.fs.open(path, "rb") as f:
            if _read_into(f, data) != size or f.read(1):
                return None
        return np.frombuffer(data, dtype=np.uint8)

    def _read_safetensors(self, folder: str, name: str, files: Mapping[str, FileMeta]) -> dict[str, np.ndarray]:
        from safetensors.numpy import load

        return load(self._read_checked(folder, name, files).tobytes()) if name in files else {}

    def _read_payload(self, folder: str, files: Mapping[str, FileMeta]) -> StateTree:
        skeleton = json.loads(self._read_checked(folder, _STATE, files).tobytes())
        tensors, small = (self._read_safetensors(folder, name, files) for name in (_TENSORS, _SMALL))
        names = [n for n in files if n.endswith(".npy")]
        # Reading and checksumming release the GIL: the arrays are read in parallel.
        with ThreadPoolExecutor(_WORKERS) as pool:
            arrays = dict(zip(names, pool.map(
                lambda n: _parse_npy(self._read_checked(folder, n, files), n), names)))

        def load_array(ref: _codec.ArrayRef) -> np.ndarray:
            name = str(ref.key)
            if ref.tensor:
                if name not in tensors:
                    raise CheckpointError(f"tensor {name} is not in {_TENSORS}")
                return tensors[name]
            file, _, key = name.partition("#")
            if file == _SMALL and key in small:
                return small[key]
            if name not in arrays:
                raise CheckpointError(f"{name} is not in the manifest")
            return arrays[name]

        tree: StateTree = _codec.unflatten(skeleton, load_array)
        return tree

    # -- housekeeping ----------------------------------------------------------------------

    def prune(self) -> None:
        """Delete all but the newest ``keep`` checkpoints (and the chains they need), and stale
        temporary folders."""
        seqs = self.seqs()
        needed: set[int] = set()
        try:
            for seq in seqs[-self.keep:]:
                node: int | None = seq
                while node is not None and node not in needed:
                    needed.add(node)
                    node = self._parent(node)
        except StorageUnreachable:
            return  # a kept delta's parent unknown: delete nothing now, prune at the next save
        for seq in seqs:
            if seq not in needed:
                self.fs.rm(self.folder(seq), recursive=True)
                failpoint(fp.CHECKPOINT_PRUNED)
        for path in self.fs.ls(self.root, detail=False):
            if path.rstrip("/").rsplit("/", 1)[-1].startswith(_TMP_PREFIX):
                self.fs.rm(path, recursive=True)


#: What a folder that is not there (or half there) raises: damage, skipped. Any other OSError
#: (EIO, EACCES, a timeout) says the storage did not answer, not that the folder is bad.
_ABSENT = (errno.ENOENT, errno.ENOTDIR)


def _raise_if_unreadable(exc: OSError, folder: str) -> None:
    if exc.errno is not None and exc.errno not in _ABSENT:
        raise StorageUnreachable(
            f"checkpoint {folder} could not be read ({exc}): an I/O error, not damage, so the restore "
            "stops here rather than restore an older state or none (and bury the newer one at the "
            "next checkpoint). Fix the storage; the actor restores once it reads again") from exc


def _map_local(path: str, size: int) -> np.ndarray | None:
    """A local file as private copy-on-write memory: no read copy, pages come straight from
    the page cache as they are touched (the checksum touches them all, once). Checkpoint
    files are never rewritten in place, and an unlinked (pruned) file stays mapped."""
    with open(path, "rb") as f:
        if os.fstat(f.fileno()).st_size != size:
            return None
        if size == 0:
            return np.empty(0, dtype=np.uint8)
        mapped = mmap.mmap(f.fileno(), size, flags=mmap.MAP_PRIVATE,
                           prot=mmap.PROT_READ | mmap.PROT_WRITE)
    return np.frombuffer(mapped, dtype=np.uint8)


def _read_into(f: Any, data: bytearray) -> int:
    """Fill ``data`` from ``f`` (readinto when the file has it: no intermediate copy)."""
    view, got = memoryview(data), 0
    readinto = getattr(f, "readinto", None)
    while got < len(data):
        if readinto is not None:
            n = readinto(view[got:])
        else:
            chunk = f.read(len(data) - got)
            n = len(chunk)
            view[got:got + n] = chunk
        if not n:
            break
        got += n
    return got


def _protocols(fs: Any) -> tuple[str, ...]:
    protocol = fs.protocol
    return (protocol,) if isinstance(protocol, str) else tuple(protocol)


def _missing_dirs(root: str) -> list[str]:
    """The local folders ``makedirs(root)`` will create, outermost first."""
    missing, path = [], os.path.abspath(root)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        missing.append(path)
        path = os.path.dirname(path)
    return missing[::-1]


def _open_fs(url: str) -> tuple[Any, str]:
    try:
        fs, root = fsspec.core.url_to_fs(url)
        created = _missing_dirs(root) if "file" in _protocols(fs) else []
        fs.makedirs(root, exist_ok=True)
        for folder in created:  # each new folder's name is durable only once its parent is fsynced
            _fsync_dir(os.path.dirname(folder))
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
