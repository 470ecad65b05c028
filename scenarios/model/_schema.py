"""The scenario file's JSON Schema and its reference page, both generated from the model.

One source: the top-level fields are :data:`scenarios.model._scenario.FIELDS` (what the loader checks),
each fault kind's fields are its dataclass's (``chaos._faults``), each target kind's too
(``chaos._targets``), Ray's RPC failure knob is :class:`chaos.RpcFailure`, and each built-in
workload's ``[params]`` and invariants come from the workload class. ``raychaos schema`` prints
the schema (a TOML editor validates and completes from it); ``raychaos schema --markdown``
prints the page ``docs/reference/scenario-file.md`` holds, and a test fails when they differ.

The schema states types, defaults, bounds and choices; the loader checks more (a memory
fault's fraction under its host cap, ``at`` within the duration, a draw that holds a fault):
a file the schema accepts can still be refused by ``raychaos validate``, never the reverse.
"""

from __future__ import annotations

import dataclasses
import re
import types
from collections.abc import Mapping, Sequence
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from chaos import NodeTarget, RpcFailure
from chaos.engine import TARGET_CLASSES, fault_specs
from scenarios.model._experiment import ABORT_FIELDS, ATTACK_FIELDS, SCOPE_FIELDS
from scenarios.model._load_spec import LoadSpec, RouteSpec, SloSpec
from scenarios.model._probes import PROBE_CLASSES, ProbeKind
from scenarios.model._scenario import ATTACK_KIND, FIELDS, STEADY_STATE_FIELDS, FieldSpec
from scenarios.model._workload import Workload

__all__ = ["REGENERATE", "TARGET_EXAMPLES", "reference_markdown", "scenario_schema"]

#: The command that rewrites the reference page (the staleness test prints it).
REGENERATE = ".venv/bin/raychaos schema --markdown > docs/reference/scenario-file.md"
Schema = dict[str, Any]

#: An example of each target kind, as a fault's ``target`` holds it.
TARGET_EXAMPLES: Mapping[str, Mapping[str, object]] = {
    "actor": {"kind": "actor", "class_name": "EnvWorker", "pick": "all"},
    "task": {"kind": "task", "name": "sample_env"},
    "worker": {"kind": "worker"},
    "node": {"kind": "node", "allow_head": False},
}

#: An example of each probe kind, as an attack file's ``[[probes]]`` holds it.
PROBE_EXAMPLES: Mapping[ProbeKind, Mapping[str, object]] = {
    ProbeKind.COMMAND: {"kind": "command", "command": "curl -fsS http://127.0.0.1:8000/health"},
    ProbeKind.PYTHON: {"kind": "python", "call": "myapp.health:check"},
    ProbeKind.HTTP: {"kind": "http", "url": "http://127.0.0.1:8000/count", "method": "POST", "data": "{}",
                     "status": 200, "body": "count"},
}

#: An attack file's load, objectives and stop conditions, as the reference shows them.
LOAD_EXAMPLE = """[load]
url = "http://127.0.0.1:8000/"
rate = 50
timeout = 2

[[load.routes]]
path = "/count"
method = "POST"
data = "{}"
headers = { "Content-Type" = "application/json" }
weight = 3
body = "count"

[[load.routes]]
path = "/health"

[slo]
availability = 0.99
p99_factor = 3
recover_within = 10

[abort_when]
slo_breach_seconds = 10"""


# -- the schema ------------------------------------------------------------------------------------

def scenario_schema() -> Schema:
    """The JSON Schema (draft 7) of a raychaos file, generated from the model: an attack's file
    when it says ``kind = "attack"``, else a scenario file."""
    definitions: Schema = {**_target_definitions(), **_fault_definitions(), **_probe_definitions()}
    definitions["scenario_file"] = {
        "description": "A workload, a fault schedule, steady-state checks and invariants.",
        "type": "object",
        "properties": {name: _top_level(spec) for name, spec in FIELDS.items()},
        "required": [name for name, spec in FIELDS.items() if spec.required],
        "additionalProperties": False,
        "not": {"required": ["faults", "random"]},
        "allOf": _workload_rules(definitions),
    }
    definitions["attack_file"] = _attack_file(definitions)
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "raychaos scenario or attack file",
        "description": "A scenario (TOML), or an attack on a running program (`kind = \"attack\"`).",
        "type": "object",
        "if": {"properties": {"kind": {"const": ATTACK_KIND}}, "required": ["kind"]},
        "then": {"$ref": "#/definitions/attack_file"},
        "else": {"$ref": "#/definitions/scenario_file"},
        "definitions": definitions,
    }


def _model(model: type[Any], definitions: Schema) -> Schema:
    """A pydantic model's schema, its nested models added to ``definitions``."""
    body: Schema = model.model_json_schema(ref_template="#/definitions/{model}")
    definitions.update(body.pop("$defs", {}))
    body.pop("title", None)
    return body


def _attack_file(definitions: Schema) -> Schema:
    """An attack's file: the schedule's fields a scenario has too, its probes and their pace,
    its load and objectives, scope and stop conditions."""
    special: Schema = {"kind": {"const": ATTACK_KIND},
                       "probes": {"type": "array", "items": {"$ref": "#/definitions/probe"}},
                       "scope": _table(SCOPE_FIELDS), "abort_when": _table(ABORT_FIELDS),
                       "load": _model(LoadSpec, definitions), "slo": _model(SloSpec, definitions)}
    properties = {name: {**_top_level(spec), **special.get(name, {})} for name, spec in ATTACK_FIELDS.items()}
    return {"description": "Faults against a program raychaos did not start, and the probes that judge it.",
            "type": "object", "properties": properties, "required": ["kind"], "additionalProperties": False,
            "not": {"required": ["faults", "random"]}}


def _probe_definitions() -> Schema:
    out: Schema = {}
    for kind, cls in PROBE_CLASSES.items():
        body = _dataclass_schema(cls)
        out[f"probe_{kind}"] = {**body, "properties": {"kind": {"const": kind.value}, **body["properties"]},
                                "required": ["kind", *body["required"]], "description": _doc(cls),
                                "examples": [dict(PROBE_EXAMPLES[kind])]}
    out["probe"] = {"oneOf": [{"$ref": f"#/definitions/probe_{k}"} for k in PROBE_CLASSES]}
    return out


def _top_level(spec: FieldSpec) -> Schema:
    special = {"steady_state": _table(STEADY_STATE_FIELDS),
               "faults": {"type": "array", "items": {"$ref": "#/definitions/scheduled_fault"}},
               "random": _random_table(),
               "rpc_failures": {"type": "array", "items": _dataclass_schema(RpcFailure)},
               "invariants": {"type": "array", "items": {"type": "string"}, "minItems": 1},
               "workload": {"type": "string", "minLength": 1}}
    return {"description": spec.description, **_spec_schema(spec), **special.get(spec.name, {})}


def _spec_schema(spec: FieldSpec) -> Schema:
    out: Schema = {"type": spec.type}
    if spec.minimum is not None:
        out["minimum"] = spec.minimum
    if spec.maximum is not None:
        out["maximum"] = spec.maximum
    if spec.choices:
        out["enum"] = list(spec.choices)
    if spec.default is not None:
        out["default"] = spec.default
    return out


def _table(fields: Mapping[str, FieldSpec]) -> Schema:
    return {"type": "object", "additionalProperties": False,
            "properties": {n: {"description": f.description, **_spec_schema(f)} for n, f in fields.items()}}


def _random_table() -> Schema:
    return {"type": "object", "additionalProperties": False, "required": ["menu"],
            "properties": {"rate": {"type": "number", "exclusiveMinimum": 0, "maximum": 1, "default": 0.1,
                                    "description": "Faults per second (a seeded Poisson process)."},
                           "menu": {"type": "array", "minItems": 1, "items": {"$ref": "#/definitions/fault"},
                                    "description": "The faults to draw from, each a fault table without `at`."}}}


def _fault_definitions() -> Schema:
    out: Schema = {}
    for kind, spec in fault_specs().items():
        body = _dataclass_schema(spec.record)
        body["properties"] = {"kind": {"const": kind}, **body["properties"]}
        body["required"] = ["kind", *body["required"]]
        body["description"] = _doc(spec.record)
        body["examples"] = [{"kind": kind.value, **spec.example}]
        out[f"fault_{kind}"] = body
        at = {"type": "number", "minimum": 0, "description": "Seconds after time zero (before `duration`)."}
        out[f"scheduled_{kind}"] = {**body, "properties": {"at": at, **body["properties"]},
                                    "required": ["at", *body["required"]],
                                    "examples": [{"at": 2, **body["examples"][0]}]}
    out["fault"] = {"oneOf": [{"$ref": f"#/definitions/fault_{k}"} for k in fault_specs()]}
    out["scheduled_fault"] = {"oneOf": [{"$ref": f"#/definitions/scheduled_{k}"} for k in fault_specs()]}
    return out


def _target_definitions() -> Schema:
    out: Schema = {}
    for kind, cls in TARGET_CLASSES.items():
        body = _dataclass_schema(cls)
        out[f"target_{kind}"] = {**body, "properties": {"kind": {"const": kind}, **body["properties"]},
                                 "required": ["kind", *body["required"]], "description": _doc(cls),
                                 "examples": [dict(TARGET_EXAMPLES[kind])]}
    out["target"] = {"oneOf": [{"$ref": f"#/definitions/target_{k}"} for k in TARGET_CLASSES]}
    return out


def _dataclass_schema(cls: type) -> Schema:
    """An object schema of a record's fields: type, default, choices; required if no default."""
    hints = get_type_hints(cls)
    properties: Schema = {}
    required = []
    for f in dataclasses.fields(cls):
        properties[f.name] = _type_schema(hints[f.name])
        default = _default(f)
        if default is dataclasses.MISSING:
            required.append(f.name)
        elif default is not None:
            properties[f.name]["default"] = default
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def _default(f: dataclasses.Field[Any]) -> object:
    if f.default is not dataclasses.MISSING:
        return list(f.default) if isinstance(f.default, tuple) else f.default  # JSON and TOML have arrays
    if f.default_factory is not dataclasses.MISSING:
        value = f.default_factory()
        return {"kind": "node", **dataclasses.asdict(value)} if isinstance(value, NodeTarget) else value
    return dataclasses.MISSING


def _type_schema(tp: Any) -> Schema:
    """A field's annotation as JSON Schema (None left out: TOML has no null, absent is None)."""
    origin, args = get_origin(tp), get_args(tp)
    if origin is Literal:
        return {"type": "string", "enum": list(args)}
    if origin in (Union, types.UnionType):
        kept = [a for a in args if a is not type(None)]
        if all(a in TARGET_CLASSES.values() for a in kept):
            return {"$ref": "#/definitions/target"} if len(kept) > 1 else _type_schema(kept[0])
        return _type_schema(kept[0]) if len(kept) == 1 else {"anyOf": [_type_schema(a) for a in kept]}
    if tp in TARGET_CLASSES.values():
        kind = next(k for k, v in TARGET_CLASSES.items() if v is tp)
        return {"$ref": f"#/definitions/target_{kind}"}
    if origin is dict:
        return {"type": "object", "additionalProperties": _type_schema(args[1])}
    if origin is tuple:  # tuple[X, ...]: a TOML array
        return {"type": "array", "items": _type_schema(args[0])}
    return {"type": _JSON_TYPES[tp]}


_JSON_TYPES: dict[type, str] = {bool: "boolean", int: "integer", float: "number", str: "string"}


def _workloads() -> dict[str, type[Workload]]:
    from scenarios.workloads._registry import builtin_workloads  # the schema is the same everywhere

    return builtin_workloads()


def _workload_rules(definitions: Schema) -> list[Schema]:
    """Per built-in workload: its ``[params]`` and the invariant names it knows."""
    names = list(_workloads())
    rules: list[Schema] = [{"properties": {"workload": {"anyOf": [
        {"enum": names}, {"pattern": r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"}]}}}]
    for name, cls in _workloads().items():
        params = cls.Params.model_json_schema(ref_template="#/definitions/{model}")
        definitions.update(params.pop("$defs", {}))
        params.pop("title", None)
        rules.append({"if": {"properties": {"workload": {"const": name}}, "required": ["workload"]},
                      "then": {"properties": {"params": params,
                                              "invariants": {"items": {"enum": list(cls.INVARIANTS)}}}}})
    return rules


def _doc(obj: object) -> str:
    """The first paragraph of ``obj``'s docstring, on one line, in Markdown."""
    first = (obj.__doc__ or "").strip().split("\n\n")[0]
    text = " ".join(first.split()).replace("``", "`")
    return re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)


# -- the reference page ----------------------------------------------------------------------------

def reference_markdown() -> str:
    """The scenario file's reference page, from the same model as :func:`scenario_schema`."""
    schema = scenario_schema()
    parts = [_INTRO, _fields_section(), _steady_section(), _faults_section(schema), _random_section(),
             _rpc_section(), _targets_section(schema), _workloads_section(), _attack_section(schema)]
    return "\n".join(parts)


_INTRO = f"""# Scenario file reference

<!-- Generated from the scenario model: edit scenarios/model/_scenario.py, a fault kind's module
(chaos._kinds.KIND_MODULES) or scenarios/model/_schema.py, then run: {REGENERATE} -->

This page is generated from the scenario model: every field of a scenario file, with its type,
default and allowed values, and each fault kind and target kind with an example. For a guided
introduction, see [write a scenario file](../how-to/scenario-files.md).

The same model gives a JSON Schema: `raychaos schema > scenario.schema.json`, then point your
TOML editor at it (for taplo / Even Better TOML, a first line `#:schema ./scenario.schema.json`).
`raychaos validate FILE` checks a file in full (what the schema cannot say: a memory fault under
its host cap, `at` within the duration) and prints the schedule it would run, starting nothing.
A fault in a run is [confirmed](glossary.md#confirmed) by its effect; each invariant and the
[steady state](glossary.md#steady-state) give a [verdict](glossary.md#verdict).
"""


def _cell(value: object) -> str:
    if value is None or value is dataclasses.MISSING:
        return "—"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, Mapping):
        return f"`{_inline(value)}`" if value else "`{}`"
    if isinstance(value, (list, tuple)):
        return f"`{_toml_value(value)}`"
    return f"`{value:g}`" if isinstance(value, float) else f"`{value}`"


def _table_md(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _allowed(schema: Schema) -> str:
    if "enum" in schema:
        return ", ".join(_cell(v) for v in schema["enum"])
    lo, hi = schema.get("minimum", schema.get("exclusiveMinimum")), schema.get("maximum")
    if lo is None and hi is None:
        return ""
    left = "(" if "exclusiveMinimum" in schema else "["
    return f"{left}{_num(lo)}, {_num(hi)}]"


def _num(value: object) -> str:
    return "…" if value is None else f"{value:g}" if isinstance(value, (int, float)) else str(value)


def _type_name(schema: Schema) -> str:
    if "$ref" in schema:
        ref = schema["$ref"].rsplit("/", 1)[1]
        if not ref.startswith("target"):
            return "table"
        return "target" if ref == "target" else f"{ref.removeprefix('target_')} target"
    if "anyOf" in schema:
        return " or ".join(_type_name(s) for s in schema["anyOf"] if s.get("type") != "null")
    if schema.get("type") == "array" and "items" in schema:
        return f"array of {_type_name(schema['items'])}"
    return str(schema.get("type", "table"))


def _fields_section() -> str:
    rows = [(f"`{name}`", spec.type + (" (required)" if spec.required else ""),
             "workload's defaults" if name == "invariants" else _cell(spec.default),
             _allowed(_spec_schema(spec)), spec.description) for name, spec in FIELDS.items()]
    return "## Top-level fields\n\n" + _table_md(("field", "type", "default", "allowed", "description"), rows)


def _steady_section() -> str:
    rows = [(f"`{name}`", spec.type, _cell(spec.default), _allowed(_spec_schema(spec)), spec.description)
            for name, spec in STEADY_STATE_FIELDS.items()]
    example = _toml_block("[steady_state]\nduring_min = 0.5\nprobe_every = 1.0")
    return "## `[steady_state]`\n\n" + _table_md(("field", "type", "default", "allowed", "description"),
                                                rows) + "\n" + example


def _record_rows(body: Schema, skip: tuple[str, ...] = ("kind",)) -> list[tuple[str, ...]]:
    required = set(body.get("required", ()))
    return [(f"`{name}`", _type_name(prop), "required" if name in required else _cell(prop.get("default")),
             _allowed(prop)) for name, prop in body["properties"].items() if name not in skip]


def _faults_section(schema: Schema) -> str:
    out = ["## `[[faults]]`: fault kinds\n",
           "Each `[[faults]]` entry is one fault: `at` (seconds after time zero, before `duration`), "
           "`kind`, and that kind's fields. A `[random]` menu holds the same tables without `at`.\n"]
    for kind, spec in fault_specs().items():
        body = schema["definitions"][f"fault_{kind}"]
        out.append(f"### `{kind}`\n\n{body['description']}\n")
        rows = _record_rows(body)
        if rows:
            out.append(_table_md(("field", "type", "default", "allowed"), rows))
        out.append(_toml_block(_entry_toml({"at": 2, "kind": kind.value, **spec.example})))
    return "\n".join(out)


def _random_section() -> str:
    example = ('[random]\nrate = 0.2\nmenu = [\n    { kind = "kill", target = { kind = "task", name = '
               '"sample_env" } },\n    { kind = "pause", seconds = 2, target = { kind = "worker" } },\n]')
    props = _random_table()["properties"]
    rows = [(f"`{n}`", _type_name(p), _cell(p.get("default")) if n != "menu" else "required", _allowed(p),
             p["description"]) for n, p in props.items()]
    return ("## `[random]`\n\nA schedule drawn from the seed (`--seed`): the same seed, the same faults. "
            "Not together with `[[faults]]`.\n\n" + _table_md(("field", "type", "default", "allowed",
                                                                "description"), rows) + "\n" + _toml_block(example))


def _rpc_section() -> str:
    body = _dataclass_schema(RpcFailure)
    example = _entry_toml({"method": "CoreWorkerService.grpc_client.PushTask", "response_percent": 10,
                           "num_failures": 5}, table="rpc_failures")
    return (f"## `[[rpc_failures]]`\n\n{_doc(RpcFailure)} Set on the worker nodes' processes when they "
            "start, for the whole run: it needs `nodes` >= 2.\n\n"
            + _table_md(("field", "type", "default", "allowed"), _record_rows(body, skip=()))
            + "\n" + _toml_block(example))


def _targets_section(schema: Schema) -> str:
    out = ["## Targets\n", "A fault's `target` (or `node`) is an inline table naming what it hits.\n"]
    for kind in TARGET_CLASSES:
        body = schema["definitions"][f"target_{kind}"]
        out.append(f"### `{kind}`\n\n{body['description']}\n")
        rows = _record_rows(body)
        if rows:
            out.append(_table_md(("field", "type", "default", "allowed"), rows))
        fault = "kill_node" if kind == "node" else "kill"
        out.append(_toml_block(_entry_toml({"at": 2, "kind": fault, "target": TARGET_EXAMPLES[kind]})))
    return "\n".join(out)


def _workloads_section() -> str:
    out = ["## Workloads\n", "The built-in workloads a file names in `workload`, each with its "
           "invariants (**bold**: checked when the file leaves `invariants` out) and its `[params]`.\n"]
    for name, cls in _workloads().items():
        defaults = cls.DEFAULT_INVARIANTS if cls.DEFAULT_INVARIANTS is not None else cls.INVARIANTS
        names = ", ".join(f"**`{i}`**" if i in defaults else f"`{i}`" for i in cls.INVARIANTS) or "none"
        extra = f" Needs `raychaos[{cls.EXTRA}]`." if cls.EXTRA else ""
        out.append(f"### `{name}`\n\n{_doc(cls)}{extra}\n\nInvariants: {names}.\n")
        params = cls.Params.model_json_schema()
        rows = [(f"`{n}`", _type_name(p), _cell(p.get("default")), _allowed(p))
                for n, p in params.get("properties", {}).items()]
        if rows:
            out.append(_table_md(("param", "type", "default", "allowed"), rows))
    return "\n".join(out)


def _attack_section(schema: Schema) -> str:
    rows = [(f"`{name}`", spec.type + (" (required)" if spec.required else ""), _cell(spec.default),
             _allowed(_spec_schema(spec)), spec.description) for name, spec in ATTACK_FIELDS.items()]
    out = ["## Attack files\n",
           f'A file that says `kind = "{ATTACK_KIND}"` attacks a program raychaos did not start (`raychaos attack '
           "FILE --address HOST:PORT`, or `raychaos run --job COMMAND FILE`): it holds the faults and the probes that "
           "judge the program, and no workload or cluster shape. Each option of the command line overrides the "
           "file's field of the same meaning (the command line wins).\n",
           _table_md(("field", "type", "default", "allowed", "description"), rows)]
    for name, fields in (("scope", SCOPE_FIELDS), ("abort_when", ABORT_FIELDS)):
        sub = [(f"`{n}`", f.type, _cell(f.default), _allowed(_spec_schema(f)), f.description)
               for n, f in fields.items()]
        out.append(f"### `{name}`\n\n" + _table_md(("field", "type", "default", "allowed", "description"), sub))
    for name, model in (("[load]", LoadSpec), ("[[load.routes]]", RouteSpec), ("[slo]", SloSpec)):
        body = model.model_json_schema()
        cells = [(f"`{n}`", _type_name(p), "required" if n in body.get("required", ()) else _cell(p.get("default")),
                  _allowed(p)) for n, p in body["properties"].items()]
        out.append(f"### `{name}`\n\n{_doc(model)}\n\n" + _table_md(("field", "type", "default", "allowed"), cells))
    out.append(_toml_block(LOAD_EXAMPLE))
    out.append("### `[[probes]]`: probe kinds\n")
    for kind in PROBE_CLASSES:
        body = schema["definitions"][f"probe_{kind}"]
        out.append(f"#### `{kind}`\n\n{body['description']}\n")
        out.append(_table_md(("field", "type", "default", "allowed"), _record_rows(body)))
        out.append(_toml_block(_entry_toml(PROBE_EXAMPLES[kind], table="probes")))
    return "\n".join(out)


def _toml_block(text: str) -> str:
    return f"```toml\n{text}\n```\n"


def _entry_toml(entry: Mapping[str, object], *, table: str = "faults") -> str:
    return "\n".join([f"[[{table}]]", *(f"{k} = {_toml_value(v)}" for k, v in entry.items())])


def _inline(value: Mapping[str, object]) -> str:
    return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, Mapping):
        return _inline(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return str(value)
