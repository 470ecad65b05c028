"""The journal of a chaos run: one JSON line per event (start, each fault's inject and heal,
each recovery, end), written as it happens and read back with :func:`read_journal`."""

from chaos._journal import (
    JOURNAL_SCHEMA_VERSION,
    EndEvent,
    FaultEvent,
    Journal,
    JournalEvent,
    Observed,
    PlannedFault,
    RecoverEvent,
    StartEvent,
    VerdictEntry,
    event_schema,
    read_journal,
)
from chaos._json import JsonValue

__all__ = [
    "JOURNAL_SCHEMA_VERSION",
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
    "event_schema",
    "read_journal",
]
