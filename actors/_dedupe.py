"""Exactly-once over at-least-once: the last ``seq`` applied per writer.

With ``max_task_retries=-1`` Ray delivers an actor call at least once: when the actor dies
after applying a call and before its reply arrives, the call is delivered again to the
restarted actor. A mutation that carries ``(writer_id, seq)`` is applied once: the table
below, checkpointed with the actor's state, recognises the second delivery.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chaos._errors import InvalidConfig


class WriterSeqs:
    """The highest ``seq`` applied per writer, and how many repeats were dropped.

    Each writer's ``seq`` must increase in the order it submits (Ray keeps one caller's
    calls to an actor in order), so "not above the last one applied" means "a repeat".
    """

    def __init__(self) -> None:
        self.last: dict[str, int] = {}
        self.duplicates = 0

    def is_repeat(self, writer_id: str | None, seq: int | None) -> bool:
        """Whether this call was applied before (counted); ``False`` for a call without ids."""
        if (writer_id is None) != (seq is None):
            raise InvalidConfig(
                f"give both writer_id and seq for an idempotent call, or neither; got "
                f"writer_id={writer_id!r}, seq={seq!r}")
        if writer_id is None or seq is None or int(seq) > self.last_of(writer_id):
            return False
        self.duplicates += 1
        return True

    def applied(self, writer_id: str | None, seq: int | None) -> None:
        """Record a call as applied; call it only once the mutation has succeeded."""
        if writer_id is not None and seq is not None:
            self.last[str(writer_id)] = int(seq)

    def last_of(self, writer_id: str) -> int:
        """The highest ``seq`` applied for ``writer_id`` (-1 when none)."""
        return self.last.get(str(writer_id), -1)

    def state_dict(self) -> dict[str, Any]:
        return {"last_seq": dict(self.last), "duplicates": self.duplicates}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.last = {str(k): int(v) for k, v in state["last_seq"].items()}
        self.duplicates = int(state["duplicates"])
