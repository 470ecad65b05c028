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

from chaos._checker import Verdict
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
            self._ops[key] = Op(key=key, client=client, invoked=self._clock(), completed=None, status=OpStatus.PENDING)

    def complete(self, key: Hashable, status: OpStatus) -> None:
        with self._lock:
            op = self._ops[key]
            self._ops[key] = Op(key=key, client=op.client, invoked=op.invoked, completed=self._clock(), status=status)

    def ops(self) -> list[Op]:
        with self._lock:
            return sorted(self._ops.values(), key=lambda op: op.invoked)

    def count(self, status: OpStatus) -> int:
        with self._lock:
            return sum(op.status is status for op in self._ops.values())


@dataclass(frozen=True, slots=True)
class SetVerdict:
    """The set checker's findings (its evidence). ``ok`` is False when anything broke the rules;
    :meth:`verdict` says it as the one verdict type."""

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

    def verdict(self, name: str, *, detail: str = "") -> Verdict:
        """This check as a verdict named ``name`` over the acknowledged writes: held when nothing
        broke the rules, broken when something did, unknown when nothing was acknowledged (a
        history with nothing to keep checks nothing). ``detail`` goes before the findings."""
        return Verdict.over(name, self.acknowledged, held=self.ok, detail=f"{detail}{self.explain()}")

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


#: A writer that records nothing (no call submitted, no reply) for this many per-call
#: timeouts is stuck: between two records it makes one submit or one bounded await.
STALL_TIMEOUTS = 2


def drive_writers(submit: Callable[[str, int], Any], history: History, *, writers: Sequence[str],
                  writes: int, window: int = 4, timeout: float = 60.0,
                  stop: threading.Event | None = None,
                  deadline: float | None = None) -> dict[str, BaseException]:
    """Run one thread per writer, each keeping ``window`` calls in flight: ``submit(writer,
    seq)`` returns a Ray ObjectRef; each is recorded when invoked and when its reply arrives.

    A call that raises is recorded ``info`` (it may have been applied) and ends its writer:
    the error is returned under the writer's name. Every wait is bounded, whatever ``writes``:
    each reply is awaited at most ``timeout`` seconds, a writer that records nothing for
    ``STALL_TIMEOUTS × timeout`` (a ``submit`` that blocks) is stuck, and the run as a whole
    may take ``deadline`` seconds when one is given. Each is a :class:`HangError` naming the
    writes still pending, and the other writers are stopped; a stuck thread is left behind
    (a daemon: Python cannot end it). ``stop`` ends the writers early, without an error.

    Raises:
        InvalidConfig: ``timeout`` or ``deadline`` not a positive number of seconds.
    """
    _validate_seconds("timeout", timeout)
    if deadline is not None:
        _validate_seconds("deadline", deadline)
    run = _Run(submit, history, writes, window, timeout, stop)
    threads = {w: threading.Thread(target=_writer, name=f"writer-{w}", daemon=True, args=(run, w))
               for w in writers}
    started = run.clock()
    for writer, thread in threads.items():
        run.beat(writer)
        thread.start()
    hung = _watch(run, threads, None if deadline is None else started + deadline)
    with run.lock:
        return {**run.errors, **hung}


def _validate_seconds(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise InvalidConfig(f"drive_writers `{name}` must be a positive number of seconds, got {value!r}")


class _Run:
    """What the writers of one :func:`drive_writers` share: their arguments, the errors they
    end with, when each last recorded something, and ``halt``, set once the run is over."""

    def __init__(self, submit: Callable[[str, int], Any], history: History, writes: int, window: int,
                 timeout: float, stop: threading.Event | None) -> None:
        self.submit, self.history, self.writes, self.window = submit, history, writes, window
        self.timeout, self.stop = timeout, stop
        self.stall = STALL_TIMEOUTS * timeout
        self.clock = time.monotonic
        self.lock = threading.Lock()
        self.errors: dict[str, BaseException] = {}
        self.beats: dict[str, float] = {}
        self.halt = threading.Event()

    def stopped(self) -> bool:
        return self.halt.is_set() or (self.stop is not None and self.stop.is_set())

    def beat(self, writer: str) -> None:
        with self.lock:
            self.beats[writer] = self.clock()

    def last_beat(self, writer: str) -> float:
        with self.lock:
            return self.beats[writer]

    def fail(self, writer: str, exc: BaseException) -> None:
        with self.lock:  # a hung writer's late error lands after the caller's copy: unread
            self.errors[writer] = exc

    def pending(self, writer: str) -> list[Hashable]:
        return [op.key for op in self.history.ops() if op.client == writer and op.status is OpStatus.PENDING]


def _watch(run: _Run, threads: dict[str, threading.Thread], deadline_at: float | None) -> dict[str, HangError]:
    """Wait for every writer, each for as long as it keeps recording; the hung ones, by name."""
    hung: dict[str, HangError] = {}
    while waiting := [w for w, t in threads.items() if t.is_alive() and w not in hung]:
        now = run.clock()
        for writer in waiting:
            why = _overdue(run, writer, now, deadline_at)
            if why:
                hung[writer] = HangError(f"writer {writer!r} {why}; its writes pending: "
                                         f"{run.pending(writer)!r}")
                run.halt.set()  # the others stop submitting and finish what is in flight
        waiting = [w for w in waiting if w not in hung]
        if waiting:  # wake when the first of them would be overdue, unless it ends before
            wake = min(run.last_beat(w) + run.stall for w in waiting)
            wake = wake if deadline_at is None else min(wake, deadline_at)
            threads[waiting[0]].join(max(0.0, wake - now))
    return hung


def _overdue(run: _Run, writer: str, now: float, deadline_at: float | None) -> str:
    """Why ``writer`` is past its bound at ``now``, and the fix ("" while it is within it)."""
    silent = now - run.last_beat(writer)
    if silent >= run.stall:
        return (f"recorded nothing for {silent:.1f} s, past {STALL_TIMEOUTS} × the per-call timeout "
                f"{run.timeout} s: its submit blocks (make it return a reference at once) or its "
                "wait ignores the timeout")
    if deadline_at is not None and now >= deadline_at:
        return ("was still writing at the run's deadline: give a later `deadline`, fewer `writes`, "
                "or end the run with `stop`")
    return ""


def _writer(run: _Run, writer: str) -> None:
    in_flight: collections.deque[tuple[Hashable, Any]] = collections.deque()
    seq = 0
    try:
        while seq < run.writes or in_flight:
            while seq < run.writes and len(in_flight) < run.window and not run.stopped():
                run.history.invoke((writer, seq), writer)
                run.beat(writer)
                in_flight.append(((writer, seq), run.submit(writer, seq)))
                seq += 1
            if not in_flight:
                return
            key, ref = in_flight.popleft()
            _await(key, ref, run.history, run.timeout)
            run.beat(writer)
    except BaseException as exc:  # noqa: BLE001 - reported to the caller, with the rest `info`
        run.fail(writer, exc)
        for key, _ in in_flight:
            run.history.complete(key, OpStatus.INFO)


def _await(key: Hashable, ref: Any, history: History, timeout: float) -> None:
    import ray

    try:
        ray.get(ref, timeout=timeout)
    except ray.exceptions.GetTimeoutError as exc:
        history.complete(key, OpStatus.INFO)
        raise HangError(f"write {key!r} got no reply within {timeout} s") from exc
    except BaseException:
        history.complete(key, OpStatus.INFO)
        raise
    history.complete(key, OpStatus.OK)
