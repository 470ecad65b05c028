"""What an injector observed. :class:`Observed` holds the facts any kind may give (the target
process's name, the processes the fault started or stopped, the bytes it held, wrote or
changed); a kind with facts of its own declares a subclass beside its injector and names it in
its :class:`~chaos._kinds.FaultSpec` (``observed=``), and the journal reads an event's
observation back as its kind's type."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Observed"]


class Observed(BaseModel):
    """What an injector observed, each fact its own field (absent when it does not apply)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str | None = None  #: the target process's name: stable across runs, unlike pids
    pids: tuple[int, ...] = ()  #: processes the fault started or stopped
    bytes: int | None = None  #: bytes held (object store), written (disk), cut or changed (files)
