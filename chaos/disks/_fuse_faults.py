"""The faults a fault filesystem serves, switched at run time: latency, a stall, errno rules.

Lives in the FUSE server's process; the test process switches them through the control
socket (:mod:`chaos.disks._fusefs`). Each filesystem operation passes :meth:`FaultState.gate` first:
it waits out a stall (until healed, or the stall's own deadline: the server heals it even when
its driver is gone), sleeps the operation's latency, then raises the first matching errno.
Latency and errno rules may have a deadline too. Every effect is counted, so a fault can be
confirmed by an operation that saw it, and each fault a deadline ended counts as
``expired.<kind>``: a driver still holding it learns that it was not on to the end.
"""

from __future__ import annotations

import errno
import fnmatch
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["DEFAULT_ERROR_OPS", "MAX_FAULT_SECONDS", "MAX_STALL_SECONDS", "OPS", "ErrorRule", "FaultState"]

#: The longest a fault may stay on before the server heals it by itself.
MAX_FAULT_SECONDS = 3600.0
#: The longest a stall may block operations before the server heals it by itself.
MAX_STALL_SECONDS = 600.0

#: The operations faults are aimed at (a directory's fsync counts as ``fsync``; symlink, link
#: and mknod as ``create``; opendir as ``readdir``).
OPS = ("open", "create", "read", "write", "fsync", "rename", "unlink", "mkdir", "rmdir", "truncate",
       "getattr", "readdir")
#: The faults a heal switches off, each by its name.
SWITCHES = ("latency", "stall", "errors")
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
        #: When the latency and the errno rules end by themselves (time.monotonic; absent: never).
        self.deadlines: dict[str, float] = {}

    def gate(self, op: str, *paths: str, writing: bool = False) -> int:
        """Apply the faults to one operation; return an errno to fail it with (0: go on)."""
        self._wait_stall(op, paths)
        with self._cond:
            self._expire()
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

    def _expire(self) -> None:
        """End each fault whose own deadline has passed, counted (called with the lock held)."""
        now = time.monotonic()
        if self.stall is not None and now >= self.stall[1]:
            self.stall = None  # its own deadline: healed here, whoever set it
            self.counts["expired.stall"] += 1
        for kind in [k for k, at in self.deadlines.items() if now >= at]:
            del self.deadlines[kind]
            if kind == "latency" and self.latency:
                self.latency.clear()
                self.counts["expired.latency"] += 1
            elif kind == "errors" and self.errors:
                self.errors.clear()
                self.counts["expired.errors"] += 1

    def _stalls(self, paths: tuple[str, ...]) -> bool:
        return (self.stall is not None and time.monotonic() < self.stall[1]
                and any(fnmatch.fnmatchcase(p, self.stall[0]) for p in paths))

    def _stall_left(self) -> float:
        return 0.0 if self.stall is None else max(0.0, self.stall[1] - time.monotonic())

    def set_latency(self, seconds: Mapping[str, float], *, until: float | None = None) -> None:
        """Delay operations; ``until``: seconds after which every latency ends by itself."""
        with self._cond:
            self._expire()
            self.latency.update(seconds)
            self._until("latency", until)

    def add_error(self, rule: ErrorRule, *, until: float | None = None) -> None:
        """Add an errno rule; ``until``: seconds after which every errno rule ends by itself."""
        with self._cond:
            self._expire()
            self.errors.append(rule)
            self._until("errors", until)

    def _until(self, kind: str, seconds: float | None) -> None:
        if seconds is not None:
            self.deadlines[kind] = time.monotonic() + seconds

    def set_stall(self, glob: str, seconds: float) -> None:
        with self._cond:
            self.stall = (glob, time.monotonic() + seconds)

    def heal(self, kinds: frozenset[str]) -> None:
        """Switch off the faults of ``kinds`` (``latency``, ``stall``, ``errors``); release stalled operations."""
        with self._cond:
            self._expire()  # a deadline passed before this heal still counts as expired
            if "latency" in kinds:
                self.latency.clear()
            if "stall" in kinds:
                self.stall = None
            if "errors" in kinds:
                self.errors.clear()
            for kind in kinds:
                self.deadlines.pop(kind, None)
            self._cond.notify_all()

    def snapshot(self) -> dict[str, object]:
        with self._cond:
            self._expire()
            stall = self.stall[0] if self.stall is not None and self._stall_left() else None
            return {"latency": dict(self.latency), "stall": stall,
                    "errors": [[r.errno, r.glob, sorted(r.ops)] for r in self.errors],
                    "counts": dict(self.counts)}
