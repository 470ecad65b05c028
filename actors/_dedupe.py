"""Exactly-once over at-least-once: which ``seq`` of each writer has been applied.

With ``max_task_retries=-1`` Ray delivers an actor call at least once: when the actor dies
after applying a call and before its reply arrives, the call is delivered again to the
restarted actor. A mutation that carries ``(writer_id, seq)`` is applied once: the table
below, checkpointed with the actor's state, recognises the second delivery.

Ray does **not** keep a caller's order when it retries ("the task execution order is not
guaranteed when task retries occur"; the failpoint sweep saw seq 5 run before 3 and 4 after
a restart). So the table is not a high-water mark, which would take a late 3 for a repeat
and drop an acknowledged write: it keeps a floor below which every seq was applied, and
the seqs applied above it, up to :data:`REORDER_WINDOW` of them.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from dataclasses import dataclass, field
from typing import TypedDict

from actors._codec import StateTree
from chaos._errors import InvalidConfig

#: The keyword arguments an idempotent call carries (``@mutation(idempotent=True)``).
CALL_KEYS = ("writer_id", "seq")

#: How far out of order a writer's calls may arrive. A gap older than this many later
#: applied seqs (a call its writer gave up on) is closed: that seq then counts as a repeat.
REORDER_WINDOW = 1024


_NONE = -1  # the floor of a writer with nothing applied


def _key(writer_id: str | None, seq: int | None) -> tuple[str, int] | None:
    """``(writer, seq)`` of an idempotent call, None for a call without ids."""
    if (writer_id is None) != (seq is None):
        raise InvalidConfig(
            f"give both writer_id and seq for an idempotent call, or neither; got "
            f"writer_id={writer_id!r}, seq={seq!r}")
    if writer_id is None:
        return None
    if isinstance(seq, bool) or int(seq) < 0:  # type: ignore[arg-type]
        raise InvalidConfig(f"seq must be a whole number >= 0 (a writer counts 0, 1, 2, ...), got {seq!r}")
    return str(writer_id), int(seq)  # type: ignore[arg-type]


class WriterSeqs:
    """The seqs applied per writer, and how many repeats were dropped.

    A writer numbers its calls 0, 1, 2, …; they may arrive in any order (Ray's retries
    reorder them), each is applied once.
    """

    def __init__(self) -> None:
        self.floor: dict[str, int] = {}  # every seq <= floor applied; -1: none
        self.above: dict[str, set[int]] = {}  # applied seqs above the floor
        self.duplicates = 0

    def is_repeat(self, writer_id: str | None, seq: int | None) -> bool:
        """Whether this call was applied before (counted); ``False`` for a call without ids."""
        key = _key(writer_id, seq)
        if key is None:
            return False
        writer, seq = key
        if seq > self.floor.get(writer, _NONE) and seq not in self.above.get(writer, ()):
            return False
        self.duplicates += 1
        return True

    def applied(self, writer_id: str | None, seq: int | None) -> None:
        """Record a call as applied; call it only once the mutation has succeeded."""
        key = _key(writer_id, seq)
        if key is None:
            return
        writer, seq = key
        above = self.above.setdefault(writer, set())
        above.add(seq)
        floor = self.floor.get(writer, _NONE)
        while len(above) > REORDER_WINDOW:  # the oldest gap is given up on
            floor = min(above)
            above.discard(floor)
        while floor + 1 in above:
            floor += 1
            above.discard(floor)
        self.floor[writer] = floor

    def last_of(self, writer_id: str) -> int:
        """The highest ``seq`` applied for ``writer_id`` (-1 when none)."""
        writer = str(writer_id)
        return max(self.above.get(writer) or (), default=self.floor.get(writer, _NONE))

    def writers(self) -> int:
        return len(self.floor)

    def state_dict(self) -> StateTree:
        return {"last_seq": dict(self.floor), "duplicates": self.duplicates,
                "above": {w: sorted(seqs) for w, seqs in self.above.items() if seqs}}

    def load_state_dict(self, state: StateTree) -> None:
        self.floor = {str(k): int(v) for k, v in state["last_seq"].items()}
        self.above = {str(k): {int(s) for s in v} for k, v in state.get("above", {}).items()}
        self.duplicates = int(state["duplicates"])


class CallKey(TypedDict):
    """The keyword arguments of one idempotent call, as :meth:`Writer.next` gives them."""

    writer_id: str
    seq: int


@dataclass(slots=True)
class Writer:
    """One caller of idempotent mutations: an id, and its calls numbered 0, 1, 2, …

    ``writer.next()`` gives the keyword arguments of the next call, to pass as they are::

        me = actors.Writer("driver")
        ray.get(ledger.deposit.remote(5, **me.next()))  # writer_id="driver", seq=0

    A call retried by hand (after a timeout, say) must keep its seq: take ``next()`` once,
    before the loop that retries. Thread-safe; two writers must not share an id (the default
    id is unique).
    """

    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    _counter: itertools.count[int] = field(default_factory=itertools.count, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def next(self) -> CallKey:
        """``{"writer_id": id, "seq": n}`` for this writer's next call."""
        with self._lock:
            return {"writer_id": self.id, "seq": next(self._counter)}
