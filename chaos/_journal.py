"""The journal: every injection, heal, refusal and observed recovery as a typed event.

Written as JSON lines (one event per line, flushed as it happens, so a run killed
midway still leaves its journal); read back to report on a run or replay its schedule.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

__all__ = ["Event", "EventKind", "Journal", "read_journal"]

EventKind = Literal["start", "inject", "heal", "refuse", "ineffective", "recover", "observe", "end"]


@dataclass(frozen=True, slots=True)
class Event:
    """One thing that happened in a chaos run.

    Attributes:
        kind: what happened. ``inject``/``heal`` bracket a fault; ``refuse`` is a fault the
            safety checks stopped or whose target was not found; ``ineffective`` a fault
            sent whose effect was not observed; ``recover`` is an observed recovery
            (``seconds`` = MTTR).
        mono: ``time.monotonic()`` (orders events); ``wall``: ``time.time()``.
        at: seconds since the run started, as scheduled (for replay).
        fault: the fault record as a dict (see ``fault_from_dict``).
    """

    kind: EventKind
    mono: float
    wall: float
    at: float | None = None
    fault: dict[str, Any] | None = None
    target: str | None = None
    node: str | None = None
    pid: int | None = None
    outcome: str = ""
    seconds: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Journal:
    """An append-only JSON-lines journal (``path=None``: kept in memory only)."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self.events: list[Event] = []
        self._lock = threading.Lock()
        self._file = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115

    def record(self, kind: EventKind, **fields: Any) -> Event:
        event = Event(kind, time.monotonic(), time.time(), **fields)
        with self._lock:
            self.events.append(event)
            if self._file is not None:
                self._file.write(json.dumps(asdict(event), sort_keys=True) + "\n")
                self._file.flush()
                os.fsync(self._file.fileno())
        return event

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_journal(path: str) -> Iterator[Event]:
    """The events of a journal file; a torn last line (a killed run) is skipped."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            try:
                yield Event(**json.loads(line))
            except (ValueError, TypeError):
                continue
