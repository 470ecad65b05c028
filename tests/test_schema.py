"""The scenario file's JSON Schema and reference page: generated from the model, every built-in
valid against the schema, the committed page never stale. Nothing here starts Ray."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner

from chaos._kinds import FaultKind, fault_specs
from chaos._targets import _KINDS as TARGET_CLASSES
from chaos._targets import target_from_dict
from chaos.engine import fault_from_dict
from scenarios import ScenarioError, builtin_names
from scenarios.cli import main
from scenarios.model._scenario import FIELDS, _validate
from scenarios.model._schema import REGENERATE, TARGET_EXAMPLES, reference_markdown, scenario_schema

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "scenario-file.md"


def _validator() -> jsonschema.Draft7Validator:
    return jsonschema.Draft7Validator(scenario_schema())


def _builtin(name: str) -> dict[str, object]:
    return tomllib.loads((ROOT / "scenarios" / "builtin" / f"{name}.toml").read_text(encoding="utf-8"))


def test_raychaos_schema_prints_a_json_schema() -> None:
    result = CliRunner().invoke(main, ["schema"])
    assert result.exit_code == 0
    printed = json.loads(result.output)
    jsonschema.Draft7Validator.check_schema(printed)
    assert printed == scenario_schema()
    assert set(printed["properties"]) == set(FIELDS)


@pytest.mark.parametrize("name", builtin_names())
def test_every_builtin_validates_against_the_schema(name: str) -> None:
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in _validator().iter_errors(_builtin(name))]
    assert not errors, errors


@pytest.mark.parametrize(("change", "where"), [
    ({"bogus": 1}, []),
    ({"duration": "10"}, ["duration"]),
    ({"nodes": 9}, ["nodes"]),
    ({"heal": "sometimes"}, ["heal"]),
    ({"faults": [{"at": 2, "kind": "explode"}]}, ["faults", 0]),
    ({"faults": [{"at": 2, "kind": "kill", "target": {"kind": "actor", "nmae": "x"}}]}, ["faults", 0]),
    ({"random": {"rate": 0.1, "menu": [{"kind": "cpu", "cores": 1, "seconds": 1}]}}, []),
    ({"params": {"width": "4"}}, ["params", "width"]),
    ({"invariants": ["results_correct", "no_such_invariant"]}, ["invariants", 1]),
])
def test_the_schema_refuses_what_the_loader_refuses(change: dict[str, object], where: list[object]) -> None:
    data = {**_builtin("straggler"), **change}
    errors = list(_validator().iter_errors(data))
    assert errors and any(list(e.absolute_path)[:len(where)] == where for e in errors), errors
    with pytest.raises(ScenarioError):
        _validate("test", data, 0, None)


def test_each_fault_and_target_kind_has_an_example_the_loader_accepts() -> None:
    assert set(fault_specs()) == set(FaultKind) - {FaultKind.RPC_FAILURE}  # a knob, not a scheduled fault
    assert set(TARGET_EXAMPLES) == set(TARGET_CLASSES)
    for kind, spec in fault_specs().items():
        assert type(fault_from_dict({"kind": kind.value, **spec.example})) is spec.record
    for fields in TARGET_EXAMPLES.values():
        target_from_dict(dict(fields))
    defs = scenario_schema()["definitions"]
    for kind in fault_specs():
        for example in defs[f"scheduled_{kind}"]["examples"]:
            assert not list(_validator().iter_errors({**_builtin("straggler"), "faults": [example]})), kind


def test_the_reference_page_is_generated_from_the_model() -> None:
    committed = PAGE.read_text(encoding="utf-8")
    assert committed == reference_markdown(), (
        f"{PAGE.relative_to(ROOT)} is stale: the scenario model changed since it was generated; "
        f"regenerate it with: {REGENERATE}")
