"""The faults a fault filesystem serves, switched at run time: latency, a stall, errno rules.

Lives in the FUSE server's process; the test process switches them through the control
socket (:mod:`chaos._fusefs`). Each filesystem operation passes :meth:`FaultState.gate` first:
it waits out a stall (until healed, or the stall's own deadline: the server heals it even when
its driver is gone), sleeps the operation's latency, then raises the first matching errno.
Every effect is counted, so a fault can be confirmed by an operation that saw it.
"""

from __future__ import annotations

import errno
import fnmatch
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["DEFAULT_ERROR_OPS", "OPS", "ErrorRule", "FaultState"]

#: The operations faults are aimed at (a directory's fsync counts as ``fsync``; symlink, link
#: and mknod as ``create``; opendir as ``readdir``).
OPS = ("open", "create", "read", "write", "fsync", "rename", "unlink", "mkdir", "rmdir", "truncate",
       "getattr", "readdir")
_CHANGING = frozenset({"create", "write", "fsync", "rename", "unlink", "mkdir", "rmdir", "truncate"})
#: Which operations an errno rule hits unless told: what a failing, full or read-only disk fails.
DEFAULT_ERROR_OPS: Mapping[int, frozenset[str]] = {
    errno.EIO: frozenset({"open", "read"}) | _CHANGING,
    errno.ENOSPC: frozenset({"create", "write", "mkdir", "fsync", "truncate"}),
    errno.EROFS: frozenset({"open"}) | _CHANGING,  # open only for writing
}


@dataclass(frozen=True, slots=True)
class ErrorRule:
    """Fail ``ops`` on paths matching ``glob`` (fnmatch, ``*`` crosses ``/``) with ``errno``."""

    errno: int
    glob: str
    ops: frozenset[str]

    def hits(self, op: str, paths: tuple[str, ...], *, writing: bool) -> bool:
        if op not in self.ops or (op == "open" and self.errno == errno.EROFS and not writing):
            return False
        return any(fnmatch.fnmatchcase(p, self.glob) for p in paths)


class FaultState:
    """The faults switched on now, and what each did, shared by the server's threads."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.latency: dict[str, float] = {}
        self.stall: tuple[str, float] | None = None  # (glob, deadline on time.monotonic)
        self.errors: list[ErrorRule] = []
        self.counts: Counter[str] = Counter()

    def gate(self, op: str, *paths: str, writing: bool = False) -> int:
        """Apply the faults to one operation; return an errno to fail it with (0: go on)."""
        self._wait_stall(op, paths)
        with self._cond:
            self.counts[f"op.{op}"] += 1
            delay = self.latency.get(op, 0.0)
            rule = next((r for r in self.errors if r.hits(op, paths, writing=writing)), None)
        if delay:
            self.counts["delayed"] += 1
            time.sleep(delay)  # the injected latency itself
        if rule is not None:
            with self._cond:
                self.counts[f"errno.{rule.errno}"] += 1
            return rule.errno
        return 0

    def _wait_stall(self, op: str, paths: tuple[str, ...]) -> None:
        with self._cond:
            if not self._stalls(paths):
                return
            self.counts["stalled"] += 1
            self._cond.wait_for(lambda: not self._stalls(paths), timeout=self._stall_left())
            if self.stall is not None and time.monotonic() >= self.stall[1]:
                self.stall = None  # its own deadline: healed here, whoever set it

    def _stalls(self, paths: tuple[str, ...]) -> bool:
        return (self.stall is not None and time.monotonic() < self.stall[1]
                and any(fnmatch.fnmatchcase(p, self.stall[0]) for p in paths))

    def _stall_left(self) -> float:
        return 0.0 if self.stall is None else max(0.0, self.stall[1] - time.monotonic())

    def set_latency(self, seconds: Mapping[str, float]) -> None:
        with self._cond:
            self.latency.update(seconds)

    def add_error(self, rule: ErrorRule) -> None:
        with self._cond:
            self.errors.append(rule)

    def set_stall(self, glob: str, seconds: float) -> None:
        with self._cond:
            self.stall = (glob, time.monotonic() + seconds)

    def heal(self, kinds: frozenset[str]) -> None:
        """Switch off the faults of ``kinds`` (``latency``, ``stall``, ``errors``); release stalled operations."""
        with self._cond:
            if "latency" in kinds:
                self.latency.clear()
            if "stall" in kinds:
                self.stall = None
            if "errors" in kinds:
                self.errors.clear()
            self._cond.notify_all()

    def snapshot(self) -> dict[str, object]:
        with self._cond:
            stall = self.stall[0] if self.stall is not None and self._stall_left() else None
            return {"latency": dict(self.latency), "stall": stall,
                    "errors": [[r.errno, r.glob, sorted(r.ops)] for r in self.errors],
                    "counts": dict(self.counts)}
