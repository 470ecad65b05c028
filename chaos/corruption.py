"""File corruption: a file whose bytes on disk are no longer what was written, as bit rot, a
misdirected write or a lost tail leave them (Jepsen's file-corruption nemesis).

One file under ``path`` matching ``glob`` is chosen (the newest, or one drawn with the fault's
seeded generator), changed in place (a chunk's bits flipped, a chunk zeroed, or its last chunk
cut off), fsynced, and confirmed by reading it back: a chunk that did not change (zeros over
zeros) or that reads back other than written is ineffective, never reported as injected. A
corruption is instant, as a kill is: nothing heals it, and what the program does with the
damaged file is what a run judges (a checkpoint store should pass over it to its last valid
checkpoint).

On another node the change runs as a Ray task pinned there (shipped by value: the node needs
only Ray); on this driver's machine (``node`` None) it runs here, without Ray.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from chaos._byvalue import by_value
from chaos._context import FaultContext, Injection, driver_node, node_of
from chaos._errors import FaultIneffective, InvalidFaultSpec, TargetNotFound
from chaos._kinds import Fault, FaultKind, FaultSpec, Need, number_in, register
from chaos._observed import Observed
from chaos._targets import NodeTarget, RayProcess

__all__ = ["MAX_FILES", "CorruptFile", "Corruption"]

CorruptMode = Literal["flip", "zero", "truncate"]
Which = Literal["newest", "random"]
#: ``path = "$STORAGE"`` in a scenario: the run's checkpoint storage.
_STORAGE = "$STORAGE"
#: The most files a corruption looks through under its path (a bound on the walk).
MAX_FILES = 100_000
#: Where a corruption never goes: the kernel's views and the machine's own files.
_FORBIDDEN = ("/proc", "/sys", "/dev", "/boot", "/etc", "/bin", "/sbin", "/lib", "/usr")
#: Seconds the change may take on another node (a walk of up to MAX_FILES files, one chunk).
_CALL_TIMEOUT = 60.0


@dataclass(frozen=True, slots=True)
class CorruptFile(Fault):
    """Corrupt one file under ``path`` (a directory, or a file) whose path relative to it matches
    ``glob`` (``*`` crosses ``/``): ``mode = "flip"`` inverts every bit of a ``chunk`` of bytes at
    a random offset, ``"zero"`` overwrites that chunk with zeros, ``"truncate"`` cuts the file's
    last ``chunk`` bytes off. ``which`` chooses the file: the most recently modified one, or one
    drawn at random. On ``node`` (None: this driver's machine). Confirmed by reading the bytes
    back; instant, and never healed."""

    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind] = FaultKind.FILE_CORRUPTION
    #: Carried out by a Ray task pinned to the node, or by this driver on its own machine.
    USES_AGENT: ClassVar[bool] = False

    path: str
    glob: str = "*"
    mode: CorruptMode = "flip"
    chunk: int = 64
    which: Which = "newest"
    node: NodeTarget | None = None

    def __post_init__(self) -> None:
        _check_path(self.path)
        if not isinstance(self.glob, str) or not self.glob:
            raise InvalidFaultSpec(f"`glob` must be a path pattern under `path`, e.g. 'ckpt-*/*', got {self.glob!r}",
                                   field="glob")
        if self.mode not in ("flip", "zero", "truncate"):
            raise InvalidFaultSpec(f"unknown `mode` {self.mode!r}; use 'flip' (invert a chunk's bits), 'zero' "
                                   "(overwrite it with zeros) or 'truncate' (cut the file's last chunk off)",
                                   field="mode")
        number_in("chunk", self.chunk, 1, 1 << 20, what="a whole number of bytes", whole=True)
        if self.which not in ("newest", "random"):
            raise InvalidFaultSpec(f"unknown `which` {self.which!r}; use 'newest' (the file modified last) or "
                                   "'random' (one drawn with the fault's seeded generator)", field="which")


def _check_path(path: object) -> None:
    if not isinstance(path, str) or not (path.startswith("/") or path == _STORAGE):
        raise InvalidFaultSpec(f"`path` must be an absolute directory or file (or {_STORAGE!r}, a scenario's "
                               f"checkpoint storage), got {path!r}", field="path")
    parts = [p for p in path.split("/") if p]
    if path != _STORAGE and (len(parts) < 2 or f"/{parts[0]}" in _FORBIDDEN):
        raise InvalidFaultSpec(f"`path` {path!r} is a top-level or system directory: a corruption there would hit "
                               "files no program under test owns; give the folder the program writes, e.g. "
                               "/tmp/run/ckpt", field="path")


@dataclass(frozen=True, slots=True, kw_only=True)
class Corruption:
    """What a corruption did, as read back: the file, the chunk (``offset``, ``length``), the
    file's size before and after, how many bytes now differ from before (a truncation: how many
    are gone), and how many files matched."""

    file: str
    mode: CorruptMode
    offset: int
    length: int
    size_before: int
    size_after: int
    changed: int
    candidates: int

    def describe(self) -> str:
        what = {"flip": "bits of {n} bytes flipped", "zero": "{n} bytes zeroed",
                "truncate": "last {n} bytes cut off"}[self.mode].format(n=self.length)
        return (f"{self.file}: {what} at offset {self.offset} (read back: {self.changed} bytes differ, size "
                f"{self.size_before} -> {self.size_after}; 1 of {self.candidates} matching files)")


def _corrupt_here(root: str, glob: str, mode: str, chunk: int, which: str, seed: int,
                  max_files: int) -> dict[str, Any]:
    """Corrupt one file under ``root`` and read it back; names only builtins and what it imports,
    so that Ray ships it by value. Returns the facts, or ``{"candidates": n}`` when no file of
    at least one byte matched (``"error"``: the walk went past ``max_files``)."""
    import fnmatch
    import os
    import random as random_

    found: list[tuple[int, str]] = []
    walked = [(root, "")] if os.path.isfile(root) else []
    for folder, _, names in ([] if walked else os.walk(root)):
        walked += [(os.path.join(folder, n), os.path.relpath(os.path.join(folder, n), root)) for n in names]
        if len(walked) > max_files:
            return {"candidates": 0, "error": f"more than {max_files} files under {root}"}
    for full, rel in walked:
        st = os.lstat(full)
        if os.path.isfile(full) and not os.path.islink(full) and st.st_size > 0 and \
                fnmatch.fnmatch(rel or os.path.basename(full), glob):
            found.append((st.st_mtime_ns, full))
    if not found:
        return {"candidates": 0}
    rng = random_.Random(seed)
    target = max(found)[1] if which == "newest" else rng.choice(sorted(p for _, p in found))  # by name: seeded
    size = os.path.getsize(target)
    n = min(chunk, size)
    offset = size - n if mode == "truncate" else rng.randrange(0, size - n + 1)
    fd = os.open(target, os.O_RDWR)
    try:
        before = os.pread(fd, n, offset)
        if mode == "truncate":
            os.ftruncate(fd, offset)
        else:
            os.pwrite(fd, bytes(b ^ 0xFF for b in before) if mode == "flip" else bytes(n), offset)
        os.fsync(fd)
    finally:
        os.close(fd)
    with open(target, "rb") as f:  # read back through a new descriptor: what the program will read
        f.seek(offset)
        after = f.read(n)
    size_after = os.path.getsize(target)
    changed = len(before) - len(after) + sum(a != b for a, b in zip(before, after, strict=False))
    expected = b"" if mode == "truncate" else (bytes(b ^ 0xFF for b in before) if mode == "flip" else bytes(n))
    return {"file": target, "offset": offset, "length": n, "size_before": size, "size_after": size_after,
            "changed": changed, "as_written": after == expected, "candidates": len(found)}


def _corrupt_on(node: RayProcess, fault: CorruptFile, seed: int) -> dict[str, Any]:
    """Run the change on ``node``: here, when it is this driver's machine; else as a Ray task
    pinned there."""
    args = (fault.path, fault.glob, fault.mode, fault.chunk, fault.which, seed, MAX_FILES)
    if fault.node is None:
        return _corrupt_here(*args)
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    task: Any = ray.remote(by_value(_corrupt_here, "raychaos.corrupt_file"))
    ref = task.options(num_cpus=0, max_retries=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
        node.node_id, soft=False)).remote(*args)
    return dict(ray.get(ref, timeout=_CALL_TIMEOUT))


def _confirmed(fault: CorruptFile, facts: dict[str, Any]) -> Corruption:
    """The corruption as read back; raises when nothing matched or the bytes did not change."""
    if "file" not in facts:
        raise TargetNotFound(f"no file of at least one byte under {fault.path} matches {fault.glob!r}"
                             + (f" ({facts['error']})" if "error" in facts else ""))
    done = Corruption(file=str(facts["file"]), mode=fault.mode, offset=int(facts["offset"]),
                      length=int(facts["length"]), size_before=int(facts["size_before"]),
                      size_after=int(facts["size_after"]), changed=int(facts["changed"]),
                      candidates=int(facts["candidates"]))
    if done.changed == 0 or not facts["as_written"]:
        why = "it already held those bytes" if done.changed == 0 else "another writer changed it meanwhile"
        raise FaultIneffective(f"{done.describe()}: not corrupted as asked, {why}")
    return done


@contextmanager
def _inject(ctx: FaultContext, fault: CorruptFile, at: float | None, rng: random.Random) -> Iterator[Injection]:
    node = RayProcess(0, driver_node(), "this driver's machine") if fault.node is None \
        else node_of(ctx, fault.node, rng)
    done = _confirmed(fault, _corrupt_on(node, fault, rng.randrange(1 << 62)))
    where = RayProcess(0, node.node_id, f"{done.file} on {node.label}")
    ctx.record("inject", fault, at, where, done.describe(), Observed(bytes=done.changed))
    try:
        yield Injection(fault, (where,), found=done)
    finally:
        ctx.record("heal", fault, at, where, "nothing to heal: the corrupted bytes stay, as a disk's would")


register(FaultSpec(record=CorruptFile, inject=_inject, needs=frozenset({Need.STATE_API}), colour="#6d597a",
                   example={"path": "$STORAGE", "glob": "*/ckpt-*/*", "mode": "flip", "chunk": 64}))
