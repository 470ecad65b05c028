"""Jepsen-style histories of writes, and the set checker over them.

Clients record each call's invocation and completion (:class:`History`); after the run the
checker (:func:`check_set`) compares the history with what the system stores:

- every acknowledged write is stored (else **lost**), unless the caller allows a loss;
- no write is stored twice (**duplicated**);
- nothing is stored that no client ever sent (**unexpected**);
- a write whose outcome is unknown (the call failed or timed out: Jepsen's ``info``) may be
  stored or not.

A key is whatever names one write uniquely, e.g. ``(writer_id, seq)``.
"""

from __future__ import annotations

import collections
import enum
import threading
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from chaos._errors import HangError, InvalidConfig

__all__ = ["History", "Op", "OpStatus", "SetVerdict", "check_set", "drive_writers"]


class OpStatus(enum.Enum):
    """How a call ended, as the client saw it."""

    PENDING = "pending"  # invoked, not completed (yet)
    OK = "ok"  # acknowledged: it must be stored
    FAIL = "fail"  # refused for sure: it must not be stored
    INFO = "info"  # unknown (an error that may come after the write): either way


@dataclass(frozen=True, slots=True)
class Op:
    """One call: its key, who made it, when it was invoked and completed, how it ended."""

    key: Hashable
    client: str
    invoked: float
    completed: float | None
    status: OpStatus


class History:
    """A thread-safe record of calls, for several concurrent clients."""

    def __init__(self) -> None:
        self._ops: dict[Hashable, Op] = {}
        self._lock = threading.Lock()
        self._clock = time.monotonic

    def invoke(self, key: Hashable, client: str) -> None:
        with self._lock:
            if key in self._ops:
                raise InvalidConfig(f"write {key!r} was invoked twice; give every write its own key")
            self._ops[key] = Op(key, client, self._clock(), None, OpStatus.PENDING)

    def complete(self, key: Hashable, status: OpStatus) -> None:
        with self._lock:
            op = self._ops[key]
            self._ops[key] = Op(key, op.client, op.invoked, self._clock(), status)

    def ops(self) -> list[Op]:
        with self._lock:
            return sorted(self._ops.values(), key=lambda op: op.invoked)

    def count(self, status: OpStatus) -> int:
        with self._lock:
            return sum(op.status is status for op in self._ops.values())


@dataclass(frozen=True, slots=True)
class SetVerdict:
    """The set checker's findings. ``ok`` is False when anything broke the rules."""

    acknowledged: int
    stored: int
    indeterminate: int
    lost: tuple[Hashable, ...]
    duplicated: tuple[Hashable, ...]
    unexpected: tuple[Hashable, ...]
    allowed_loss: int

    @property
    def ok(self) -> bool:
        return len(self.lost) <= self.allowed_loss and not self.duplicated and not self.unexpected

    def explain(self) -> str:
        parts = [(f"{self.acknowledged} acknowledged, {self.stored} stored, "
                  f"{self.indeterminate} indeterminate")]
        for name, keys in (("lost", self.lost), ("duplicated", self.duplicated),
                           ("unexpected", self.unexpected)):
            if keys:
                parts.append(f"{len(keys)} {name} (first: {', '.join(map(repr, keys[:5]))})")
        if self.allowed_loss:
            parts.append(f"loss allowed: {self.allowed_loss}")
        return "; ".join(parts)


def check_set(history: Iterable[Op], stored: Iterable[Hashable], *, allowed_loss: int = 0) -> SetVerdict:
    """Check ``stored`` (every key the system holds, repeats included) against the history.

    Args:
        allowed_loss: acknowledged writes that may be missing (a durability policy's window).
    """
    ops = {op.key: op for op in history}
    counts = Counter(stored)
    acked = [key for key, op in ops.items() if op.status is OpStatus.OK]
    refused = {key for key, op in ops.items() if op.status is OpStatus.FAIL}
    return SetVerdict(
        acknowledged=len(acked),
        stored=sum(counts.values()),
        indeterminate=sum(op.status in (OpStatus.INFO, OpStatus.PENDING) for op in ops.values()),
        lost=tuple(key for key in acked if counts[key] == 0),
        duplicated=tuple(key for key, n in counts.items() if n > 1),
        unexpected=tuple(key for key in counts if key not in ops or key in refused),
        allowed_loss=allowed_loss,
    )


def drive_writers(submit: Callable[[str, int], Any], history: History, *, writers: Sequence[str],
                  writes: int, window: int = 4, timeout: float = 60.0,
                  stop: threading.Event | None = None) -> dict[str, BaseException]:
    """Run one thread per writer, each keeping ``window`` calls in flight: ``submit(writer,
    seq)`` returns a Ray ObjectRef; each is recorded when invoked and when its reply arrives.

    A call that raises is recorded ``info`` (it may have been applied) and ends its writer:
    the error is returned under the writer's name. Each reply is awaited at most ``timeout``
    seconds (a :class:`HangError` then). ``stop`` ends the writers early.
    """
    errors: dict[str, BaseException] = {}
    threads = [threading.Thread(target=_writer, name=f"writer-{w}", daemon=True,
                                args=(submit, history, w, writes, window, timeout, stop, errors))
               for w in writers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout * (writes + 1))  # each reply has its own bound; this one is a backstop
        if thread.is_alive():
            errors.setdefault(thread.name, HangError(f"{thread.name} did not finish"))
    return errors


def _writer(submit: Callable[[str, int], Any], history: History, writer: str, writes: int,
            window: int, timeout: float, stop: threading.Event | None,
            errors: dict[str, BaseException]) -> None:
    import ray

    in_flight: collections.deque[tuple[Hashable, Any]] = collections.deque()
    seq = 0
    try:
        while seq < writes or in_flight:
            while seq < writes and len(in_flight) < window and not (stop and stop.is_set()):
                history.invoke((writer, seq), writer)
                in_flight.append(((writer, seq), submit(writer, seq)))
                seq += 1
            if not in_flight:
                return
            key, ref = in_flight.popleft()
            _await(ray, key, ref, history, timeout)
    except BaseException as exc:  # noqa: BLE001 - reported to the caller, with the rest `info`
        errors[writer] = exc
        for key, _ in in_flight:
            history.complete(key, OpStatus.INFO)


def _await(ray: Any, key: Hashable, ref: Any, history: History, timeout: float) -> None:
    try:
        ray.get(ref, timeout=timeout)
    except ray.exceptions.GetTimeoutError as exc:
        history.complete(key, OpStatus.INFO)
        raise HangError(f"write {key!r} got no reply within {timeout} s") from exc
    except BaseException:
        history.complete(key, OpStatus.INFO)
        raise
    history.complete(key, OpStatus.OK)
