"""The journal of a chaos run: one JSON line per event (start, each fault's inject and heal,
each recovery, end), written as it happens and read back with :func:`read_journal`."""

from chaos._journal import (
    EndEvent,
    FaultEvent,
    Journal,
    JournalEvent,
    Observed,
    PlannedFault,
    RecoverEvent,
    StartEvent,
    VerdictEntry,
    read_journal,
)
from chaos._json import JsonValue

__all__ = [
    "EndEvent",
    "FaultEvent",
    "Journal",
    "JournalEvent",
    "JsonValue",
    "Observed",
    "PlannedFault",
    "RecoverEvent",
    "StartEvent",
    "VerdictEntry",
    "read_journal",
]
