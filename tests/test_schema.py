"""The scenario file's JSON Schema and reference page: generated from the model, every built-in
valid against the schema, the committed page never stale. Nothing here starts Ray."""

from __future__ import annotations

import json
import tempfile
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
from scenarios.model._experiment import ATTACK_FIELDS
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
    assert set(printed["definitions"]["scenario_file"]["properties"]) == set(FIELDS)
    assert set(printed["definitions"]["attack_file"]["properties"]) == set(ATTACK_FIELDS)


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


#: Every raychaos file the project ships: the built-ins, and the examples' scenario and attack files.
SHIPPED = sorted([*(ROOT / "scenarios" / "builtin").glob("*.toml"), *(ROOT / "scenarios" / "templates").glob("*.toml"),
                  *(p for p in (ROOT / "examples").rglob("*.toml") if p.name != "pyproject.toml")])


@pytest.mark.parametrize("path", SHIPPED, ids=[str(p.relative_to(ROOT)) for p in SHIPPED])
def test_every_shipped_file_passes_the_editors_schema_and_raychaos_validate(path: Path) -> None:
    """What an editor pointed at `raychaos schema` checks, and what `raychaos validate` does."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in _validator().iter_errors(data)]
    assert not errors, errors
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 0, result.output
    assert f"{path}: valid" in result.output


def test_show_prints_the_attack_template_that_validates() -> None:
    result = CliRunner().invoke(main, ["show", "attack"])
    assert result.exit_code == 0
    assert result.output == (ROOT / "scenarios" / "templates" / "attack.toml").read_text(encoding="utf-8")


BROKEN_ATTACK = """kind = "attack"
duration = 5
probe_every = 0
[[probes]]
kind = "http"
url = "localhost:8000"
header = 1
[[probes]]
kind = "pyton"
[[faults]]
at = 1
kind = "kill"
target = { kind = "actor", name = "x" }
"""


def test_a_broken_attack_file_fails_both_one_line_per_problem(tmp_path: Path) -> None:
    path = tmp_path / "attack.toml"
    path.write_text(BROKEN_ATTACK, encoding="utf-8")
    where = {tuple(e.absolute_path) for e in _validator().iter_errors(tomllib.loads(BROKEN_ATTACK))}
    assert {("probe_every",), ("probes", 0), ("probes", 1)} <= where, where
    result = CliRunner().invoke(main, ["validate", str(path)])
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 4, result.output
    assert [line.split(": ")[1].split(" = ")[0] for line in lines] == [
        "probes[0].header", "probes[0].url", "probes[1].kind", "probe_every"], lines
    # Without its kind, the same faults are no scenario: the fix is named.
    path.write_text("duration = 5\n[[faults]]" + BROKEN_ATTACK.split("[[faults]]")[1], encoding="utf-8")
    result = CliRunner().invoke(main, ["validate", str(path)])
    assert result.exit_code == 2 and 'says kind = "attack" instead' in result.output, result.output


def test_the_shipped_report_schemas_are_the_generated_ones_and_the_page_follows() -> None:
    from scenarios.reports._schemas import SCHEMA_FILES, journal_schema, reports_markdown, summary_schema

    for report, made in (("summary", summary_schema()), ("journal", journal_schema())):
        path = ROOT / "scenarios" / "reports" / "schemas" / SCHEMA_FILES[report]
        assert json.loads(path.read_text(encoding="utf-8")) == made, (
            f"{path} is stale: .venv/bin/python -c 'from scenarios.reports._schemas import write_shipped; "
            "write_shipped()'")
        jsonschema.Draft7Validator.check_schema(made)
        printed = CliRunner().invoke(main, ["schema", f"--{report}"])
        assert printed.exit_code == 0 and json.loads(printed.output) == made
    page = ROOT / "docs" / "reference" / "reports.md"
    assert page.read_text(encoding="utf-8") == reports_markdown(), (
        f"{page} is stale: .venv/bin/raychaos schema --reports > docs/reference/reports.md")


def test_a_report_off_its_schema_is_named_and_a_damaged_journal_is_left_to_its_reader() -> None:
    """The session's own check (conftest.py): every report a test writes is held to the schemas.
    Written outside the session's temporary folder: that check would find this planted one too."""
    from chaos.journal import Journal, StartEvent
    from scenarios.reports._schemas import off_schema

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        with Journal(str(root / "journal.jsonl")) as journal:
            journal.record(StartEvent(seed=3))
        (root / "summary.json").write_text(json.dumps({"schema_version": 2, "scenario": "x"}), encoding="utf-8")
        (root / "bad").mkdir()
        (root / "bad" / "journal.jsonl").write_text('{"kind": "start", "zap": 1}\n{}\n', encoding="utf-8")
        found = off_schema(folder)
        events = [json.loads(line) for line in (root / "journal.jsonl").read_text().splitlines()]
    assert found and all("summary.json: []: " in line and "is a required property" in line for line in found), found
    assert {line.rsplit("'", 2)[1] for line in found} == {"machine", "outcome", "deviated", "runs"}
    assert events[0]["schema_version"] == 1
