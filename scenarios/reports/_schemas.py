"""The published, versioned JSON Schemas of a run's ``summary.json`` and of each line of its
``journal.jsonl``: what a CI job may gate on.

Both are generated here (the summary's from the fields :func:`summary` writes, the journal's
from its event models) and shipped as files in ``scenarios/reports/schemas/``; a test holds the
files, the generators, every report the suite writes and the reference page to each other.
``schema_version`` changes when a field is removed, renamed or changes meaning; a field added
keeps it.
"""

from __future__ import annotations

import dataclasses
import json
import os
from importlib import resources
from pathlib import Path
from typing import Any

from chaos import FaultKind
from chaos.engine import FaultStatus
from chaos.journal import JOURNAL_SCHEMA_VERSION
from scenarios.model._records import FaultRecord, Probe, RunLabel, RunStatus, Validity

__all__ = ["JOURNAL_SCHEMA_VERSION", "SCHEMA_FILES", "SUMMARY_SCHEMA_VERSION", "journal_schema", "off_schema",
           "reports_markdown", "shipped_schema", "summary_schema"]

SUMMARY_SCHEMA_VERSION = 2  # 2: a run's outcome may be n/a (a twin with nothing else), not deviated
#: The shipped files, by report.
SCHEMA_FILES = {"summary": "summary.schema.json", "journal": "journal.schema.json"}
Schema = dict[str, Any]
_NUMBER, _STRING, _BOOL = {"type": "number"}, {"type": "string"}, {"type": "boolean"}


def _nullable(schema: Schema) -> Schema:
    return {"anyOf": [schema, {"type": "null"}]}


def _object(properties: dict[str, tuple[Schema, str]], *, extra: bool = False) -> Schema:
    """An object of exactly ``properties`` (name: (schema, description)), every one required."""
    return {"type": "object", "additionalProperties": extra, "required": list(properties),
            "properties": {n: {**s, "description": d} for n, (s, d) in properties.items()}}


def _verdict() -> Schema:
    validity = {"enum": [v.value for v in Validity]}
    return _object({
        "name": (_STRING, "The invariant's or check's name."),
        "held": (_BOOL, "True only when `validity` is `held`."),
        "validity": (validity, "`held`, `broken`, `unknown` (evidence missing: never a pass) or `n/a`."),
        "detail": (_STRING, "The evidence, in words."),
        "seen": (_nullable({"type": "integer"}), "How many things of the run it is about (None: checks by itself)."),
        "measured": (_nullable(validity), "For an n/a verdict: what the same measurement found."),
    })


def _record(cls: type, enums: dict[str, list[str]], described: dict[str, str]) -> Schema:
    """A record dataclass's fields as an object schema (types from their defaults' annotations)."""
    types = {"float": _NUMBER, "str": _STRING, "bool": _BOOL, "int": {"type": "integer"},
             "float | None": _nullable(_NUMBER), "int | None": _nullable({"type": "integer"})}
    props = {}
    for f in dataclasses.fields(cls):
        schema = {"enum": enums[f.name]} if f.name in enums else types[str(f.type)]
        props[f.name] = (schema, described.get(f.name, ""))
    return _object(props)


def _run() -> Schema:
    fault = _record(FaultRecord, {"kind": [k.value for k in FaultKind], "status": [s.value for s in FaultStatus]},
                    {"at": "Seconds after time zero it was scheduled.", "start": "When it started, seconds.",
                     "end": "When it was healed, seconds.", "confirmed": "When it took effect (None: never).",
                     "mttr": "Seconds from injection until recovery (None: not measured or never).",
                     "status": "`injected` is the only status of a fault that happened."})
    probe = _record(Probe, {"phase": ["before", "during", "after"]}, {"t": "Seconds into the run."})
    numbers = {"type": "object", "additionalProperties": _NUMBER}
    return _object({
        "label": ({"enum": [v.value for v in RunLabel]}, "The run under faults, or its fault-free twin."),
        "seed": ({"type": "integer"}, "The run's seed."),
        "status": ({"enum": [v.value for v in RunStatus]}, "How it ended; `aborted` carries its one cause in `error`."),
        "outcome": ({"enum": [Validity.HELD.value, Validity.BROKEN.value, Validity.UNKNOWN.value,
                              Validity.NOT_APPLICABLE.value]},
                    "The run's verdicts together; `n/a` for a fault-free twin whose every verdict is n/a "
                    "(it counts for nothing in the scenario's outcome)."),
        "deviated": (_BOOL, "True unless the outcome is `held` (or `n/a`)."),
        "seconds": (_NUMBER, "How long it ran."),
        "error": (_STRING, "Why it aborted (\"\" when it did not)."),
        "metrics": (numbers, "Single figures of the run."),
        "peak_rss_gib": (_NUMBER, "The peak resident memory of the cluster's processes, GiB."),
        "mttr_max_s": (_nullable(_NUMBER), "The longest recovery of a fault, seconds."),
        "verdicts": ({"type": "array", "items": _verdict()}, "The judged verdicts."),
        "faults": ({"type": "array", "items": fault}, "Each scheduled fault as it happened."),
        "unjudged": ({"type": "array", "items": _verdict()}, "Verdicts of invariants the run did not declare."),
        "probed": (_BOOL, "Whether the workload had a steady-state probe."),
        "notes": ({"type": "array", "items": _STRING}, "What was not judged, in words."),
        "probes": ({"type": "array", "items": probe}, "The steady-state probes."),
        "series": ({"type": "object", "additionalProperties": {"type": "array", "items": {
            "type": "array", "items": _NUMBER, "minItems": 2, "maxItems": 2}}}, "Curves: [seconds, value] points."),
        "final_counters": (numbers, "The workload's counters at the end."),
    })


def summary_schema() -> Schema:
    """The JSON Schema (draft 7) of ``summary.json``."""
    machine = _object({"cpus": (_nullable({"type": "integer"}), ""), "memory_gib": (_NUMBER, ""),
                       "python": (_STRING, ""), "platform": (_STRING, ""),
                       "ray": (_STRING, "The Ray release the run used.")})
    body = _object({
        "schema_version": ({"const": SUMMARY_SCHEMA_VERSION}, "This schema's version."),
        "scenario": (_STRING, "The scenario's (or attack's) name."),
        "machine": (machine, "Where it ran."),
        "outcome": ({"enum": [Validity.HELD.value, Validity.BROKEN.value, Validity.UNKNOWN.value]},
                    "What the exit code says: `held` 0, `broken` 1, `unknown` 3."),
        "deviated": (_BOOL, "True unless the outcome is `held`."),
        "runs": ({"type": "array", "minItems": 1, "items": _run()}, "The runs: the fault-free twin first, if any."),
    })
    return {"$schema": "http://json-schema.org/draft-07/schema#", "$id": "urn:raychaos:schema:summary:1",
            "title": f"raychaos summary.json, version {SUMMARY_SCHEMA_VERSION}", **body}


def journal_schema() -> Schema:
    """The JSON Schema (draft 7) of one line of ``journal.jsonl`` (an event, by ``kind``)."""
    from chaos.journal import event_schema

    body: Schema = event_schema()
    definitions = body.pop("$defs", {})
    # An observation holds its fault kind's own facts (each kind's model adds fields to these).
    definitions["Observed"]["additionalProperties"] = True
    return {"$schema": "http://json-schema.org/draft-07/schema#", "$id": "urn:raychaos:schema:journal:1",
            "title": f"raychaos journal.jsonl line, version {JOURNAL_SCHEMA_VERSION}",
            "description": "Each line of a journal is one event; a run's first is its `start`, which carries "
                           "`schema_version`.", **body, "definitions": definitions}


def off_schema(folder: str) -> list[str]:
    """Every ``summary.json`` under ``folder`` that its schema refuses, and every line of a
    ``journal*.jsonl`` there that raychaos reads as an event but the schema refuses (a journal
    the reader refuses, a test's damaged one, is no journal): one line each, file and reason."""
    import glob
    import json

    import jsonschema

    from chaos.errors import JournalCorrupt
    from chaos.journal import read_journal

    found = []
    summary = jsonschema.Draft7Validator(summary_schema())
    for path in sorted(glob.glob(os.path.join(folder, "**", "summary.json"), recursive=True)):
        with open(path, encoding="utf-8") as f:
            found += [f"{path}: {list(e.absolute_path)}: {e.message[:200]}" for e in summary.iter_errors(json.load(f))]
    journal = jsonschema.Draft7Validator(journal_schema())
    for path in sorted(glob.glob(os.path.join(folder, "**", "journal*.jsonl"), recursive=True)):
        try:
            read = len(list(read_journal(path)))
        except (JournalCorrupt, OSError, ValueError):
            continue
        with open(path, encoding="utf-8") as f:
            lines = f.readlines()[:read]
        found += [f"{path}:{n}: {e.message[:200]}" for n, line in enumerate(lines, 1)
                  for e in journal.iter_errors(json.loads(line))]
    return found


def shipped_schema(report: str) -> str:
    """The text of the shipped schema file of ``report`` (``summary`` or ``journal``)."""
    return (resources.files("scenarios") / "reports" / "schemas" / SCHEMA_FILES[report]).read_text(encoding="utf-8")


def write_shipped() -> None:
    """Regenerate the shipped schema files from the model (the stale-file test names the command)."""
    folder = Path(__file__).parent / "schemas"
    for report, made in (("summary", summary_schema()), ("journal", journal_schema())):
        (folder / SCHEMA_FILES[report]).write_text(json.dumps(made, indent=2) + "\n", encoding="utf-8")


def reports_markdown() -> str:
    """The reference page of the reports, generated from the schemas."""
    out = [_REPORTS_INTRO, "## `summary.json`\n", _fields_md(summary_schema()), "### Each of `runs`\n",
           _fields_md(summary_schema()["properties"]["runs"]["items"]), "## `journal.jsonl`\n",
           "Each line is one event, told apart by `kind`:\n"]
    definitions = journal_schema()["definitions"]
    for name in ("StartEvent", "FaultEvent", "RecoverEvent", "EndEvent"):
        out += [f"### `{name}`\n", f"{' '.join((definitions[name].get('description') or '').split())}\n",
                _fields_md(definitions[name])]
    return "\n".join(out)


_REPORTS_INTRO = f"""# Report files

<!-- Generated from scenarios/reports/_schemas.py: .venv/bin/raychaos schema --reports > docs/reference/reports.md -->

`raychaos run`, `attack` and `replay` with `--report DIR` write `summary.json`, `journal.jsonl`,
`junit.xml` and `report.html`. The first two have published JSON Schemas, shipped with the
package (`scenarios/reports/schemas/`) and printed by `raychaos schema --summary` and
`raychaos schema --journal`: gate CI on their fields, and check `schema_version` (now
{SUMMARY_SCHEMA_VERSION} for the summary, {JOURNAL_SCHEMA_VERSION} for the journal's `start` event). A version changes
when a field is removed, renamed or changes meaning; a field added keeps it.

A summary holds its runs, the [fault-free twin](glossary.md#fault-free-twin) first, and each run's
[verdicts](glossary.md#verdict); the glossary also says what a [steady-state](glossary.md#steady-state)
probe and a fault's [MTTR](glossary.md#mttr) are.
"""


def _fields_md(schema: Schema) -> str:
    rows = ["| field | type | description |", "|---|---|---|"]
    for name, prop in schema.get("properties", {}).items():
        rows.append(f"| `{name}` | {_type(prop)} | {(prop.get('description') or '').replace('|', '/')} |")
    return "\n".join(rows) + "\n"


def _type(prop: Schema) -> str:
    if "const" in prop:
        return f"`{prop['const']}`"
    if "enum" in prop:
        return " or ".join(f"`{v}`" for v in prop["enum"])
    if "anyOf" in prop:
        return " or ".join(_type(p) for p in prop["anyOf"])
    if "$ref" in prop:
        return str(prop["$ref"]).rsplit("/", 1)[1]
    kind = prop.get("type", "any")
    return f"array of {_type(prop['items'])}" if kind == "array" and "items" in prop else str(kind)
