"""The journal: every injection, heal, refusal and observed recovery as a typed event.

Written as JSON lines (one event per line, flushed and fsynced as it happens, so a run
killed midway still leaves its journal); read back to report on a run or replay its
schedule. Events are a union discriminated by ``kind`` (pydantic validates every line read),
and each carries its own fields: a run's ``start`` its schedule and seed, a fault's events
the fault record and what was observed, a run's ``end`` its verdicts.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PlainSerializer,
    PlainValidator,
    SerializeAsAny,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
)

from chaos._checker import Validity, Verdict
from chaos._errors import ChaosError
from chaos._faults import Fault, FaultStatus, fault_from_dict, fault_to_dict
from chaos._json import JsonValue
from chaos._kinds import fault_specs
from chaos._observed import Observed

__all__ = ["JOURNAL_SCHEMA_VERSION", "EndEvent", "FaultEvent", "Journal", "JournalCorrupt", "JournalEvent", "Observed",
           "PlannedFault", "RecoverEvent", "StartEvent", "VerdictEntry", "dump_event", "event_schema", "read_journal"]


#: The version of the journal's published schema; it changes when a field is removed, renamed or
#: changes meaning (a field added keeps it).
JOURNAL_SCHEMA_VERSION = 1


class JournalCorrupt(ChaosError, ValueError):
    """A journal line other than a torn last one is not an event: the file was damaged or
    written by something else. Nothing is skipped silently."""


def _fault(value: object) -> Fault:
    if isinstance(value, dict):
        try:
            return fault_from_dict(value)
        except TypeError as exc:  # a missing or unknown field of the fault's record
            raise ValueError(f"not a fault: {exc}") from None
    if isinstance(value, Fault):  # a fault record already
        return value
    raise ValueError(f"not a fault: {value!r}")


#: A fault record in an event: written with :func:`fault_to_dict`, read back validated.
FaultField = Annotated[Fault, PlainValidator(_fault), PlainSerializer(fault_to_dict, return_type=dict)]


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PlannedFault(_Record):
    """One entry of the schedule a run planned (its ``at`` seconds after time zero)."""

    at: float
    fault: FaultField


class VerdictEntry(_Record):
    """An invariant's verdict as the run's ``end`` journals it: ``validity`` says what it
    found (``held`` is true only when it held: an unknown or n/a verdict did not)."""

    name: str
    held: bool
    detail: str
    validity: Validity | None = None  #: absent in journals written before it existed

    @classmethod
    def of(cls, verdict: Verdict) -> VerdictEntry:
        """The journal's line of ``verdict`` (the one verdict type, serialised)."""
        return cls(name=verdict.name, held=verdict.held, detail=verdict.detail, validity=verdict.validity)


class _Event(_Record):
    mono: float = Field(default_factory=time.monotonic)  #: orders events
    wall: float = Field(default_factory=time.time)


class StartEvent(_Event):
    """Time zero of a run: its schedule (faults that never happen included) and seed; from
    ``raychaos run`` also the scenario, its source and the run's label, from the pytest
    marker the test's node id."""

    kind: Literal["start"] = "start"
    #: The version of the journal's published schema (``raychaos schema --journal``).
    schema_version: int = JOURNAL_SCHEMA_VERSION
    seed: int = 0
    schedule: tuple[PlannedFault, ...] = ()
    scenario: str | None = None
    source: str | None = None
    run: Literal["chaos", "baseline"] | None = None
    heal: str | None = None
    duration: float | None = None
    test: str | None = None


class FaultEvent(_Event):
    """A fault's step: ``inject``/``heal`` bracket it; ``refuse`` is one the safety checks
    stopped or whose target was not found; ``ineffective`` one sent whose effect was not
    observed. ``at``: seconds after time zero, as scheduled (for replay)."""

    kind: Literal["inject", "heal", "refuse", "ineffective"]
    fault: FaultField
    at: float | None = None
    target: str | None = None
    node: str | None = None
    pid: int | None = None
    outcome: str = ""
    observed: SerializeAsAny[Observed] = Field(default_factory=Observed, validate_default=True)

    @field_validator("observed", mode="before")
    @classmethod
    def _of_its_kind(cls, value: object, info: ValidationInfo) -> object:
        """The observation as its fault kind's own type, so that a line reads back as it was written."""
        fault = info.data.get("fault")
        spec = fault_specs().get(fault.KIND) if isinstance(fault, Fault) else None
        model = spec.observed if spec is not None else Observed
        if isinstance(value, Observed) and type(value) not in (model, Observed):
            raise ValueError(f"a {fault.KIND if fault else 'fault'} event's observation is {model.__name__}, "
                             f"not {type(value).__name__}")
        # A plain Observed (nothing of the kind's own seen) becomes the kind's type, as it reads back.
        if isinstance(value, Observed):
            return model.model_validate(value.model_dump())
        if isinstance(value, dict):  # older journals list every kind's facts, an absent one null or empty
            value = {k: v for k, v in value.items() if k in model.model_fields or v not in (None, {}, [])}
        return model.model_validate(value)


class RecoverEvent(_Event):
    """An observed recovery: ``seconds`` from the fault's injection (MTTR), None if it did not."""

    kind: Literal["recover"] = "recover"
    fault: FaultField | None = None
    at: float | None = None
    target: str | None = None
    node: str | None = None
    pid: int | None = None
    outcome: str = ""
    seconds: float | None = None


class EndEvent(_Event):
    """The run's end: its status (``completed``, ``interrupted``, ``aborted``, or the marker's
    ``completed``/``deviated``), each scheduled fault's status, and the verdicts."""

    kind: Literal["end"] = "end"
    outcome: str
    seconds: float | None = None
    faults: tuple[FaultStatus, ...] = ()
    verdicts: tuple[VerdictEntry, ...] = ()


JournalEvent = Annotated[StartEvent | FaultEvent | RecoverEvent | EndEvent, Field(discriminator="kind")]
_EVENT: TypeAdapter[JournalEvent] = TypeAdapter(JournalEvent)


def event_schema() -> dict[str, JsonValue]:
    """The JSON Schema of one journal line (an event of any kind), its models under ``$defs``."""
    schema: dict[str, JsonValue] = _EVENT.json_schema(mode="serialization", ref_template="#/definitions/{model}")
    return schema


def dump_event(event: JournalEvent) -> str:
    """One event as its journal line (JSON as ``json.dumps`` spaces it, without the newline)."""
    return json.dumps(_EVENT.dump_python(event, mode="json"))


class Journal:
    """An append-only JSON-lines journal (``path=None``: kept in memory only)."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self.events: list[JournalEvent] = []
        self._lock = threading.Lock()
        self._file = open(path, "a", encoding="utf-8") if path else None  # noqa: SIM115

    def record(self, event: JournalEvent) -> JournalEvent:
        """Append ``event`` (written and fsynced before this returns, when on disk)."""
        with self._lock:
            self.events.append(event)
            if self._file is not None:
                self._file.write(dump_event(event) + "\n")
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


def read_journal(path: str) -> Iterator[JournalEvent]:
    """The events of a journal file, each validated. A last line cut short (no newline: the
    run was killed while writing it) is dropped; any other line that is not an event raises.

    Raises:
        JournalCorrupt: the line's number, what is wrong, and the fix.
    """
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    for number, line in enumerate(lines, start=1):
        try:
            yield _EVENT.validate_json(line)
        except ValidationError as exc:
            if number == len(lines) and not line.endswith("\n"):
                return  # torn: the run died mid-write
            raise JournalCorrupt(_corrupt(path, number, exc)) from None


def _corrupt(path: str, number: int, exc: ValidationError) -> str:
    first: Any = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "the line"
    return (f"{path}:{number} is not a journal event ({where}: {first['msg']}); the file is damaged or "
            "was not written by raychaos: replay another run's journal.jsonl")
