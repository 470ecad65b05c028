"""`raychaos compare A B`: two runs of one scenario side by side from their summary.json, and B's
regressions beyond the tolerances: a verdict held in A only, a fault injected in A only, an MTTR,
run time, availability or latency past its bound. No Ray: summaries as the reports write them."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from click.testing import CliRunner

from scenarios.cli import main
from scenarios.reports._compare import Tolerances, compare
from scenarios.reports._schemas import SUMMARY_SCHEMA_VERSION, summary_schema


def _run(*, mttrs: tuple[float, float] = (0.5, 0.6), seconds: float = 20.0, validity: str = "held",
         availability: float = 0.995, p99_ms: float = 40.0, restarts: float = 2.0) -> dict[str, Any]:
    faults = [{"at": 5.0 + 4 * i, "start": 5.0 + 4 * i, "end": 5.1 + 4 * i, "kind": "kill", "target": "actor app/w",
               "outcome": "recovered", "mttr": m, "status": "injected", "confirmed": 5.05 + 4 * i, "index": i}
              for i, m in enumerate(mttrs)]
    verdict = {"name": "slo_availability", "held": validity == "held", "validity": validity, "detail": "...",
               "seen": 100, "measured": None}
    return {"label": "chaos", "seed": 0, "status": "completed", "outcome": validity if validity != "n/a" else "held",
            "deviated": validity != "held", "seconds": seconds, "error": "",
            "metrics": {"slo availability min": availability, "slo p99 max ms": p99_ms, "load requests": 400.0,
                        "ray actor restarts": restarts, "ray nodes dead": 0.0},
            "peak_rss_gib": 1.0, "mttr_max_s": max(mttrs), "verdicts": [verdict], "faults": faults, "unjudged": [],
            "probed": True, "notes": [], "probes": [], "series": {}, "final_counters": {}}


def _summary(*, ray: str = "2.60.0", **run: Any) -> dict[str, Any]:
    r = _run(**run)
    return {"schema_version": SUMMARY_SCHEMA_VERSION, "scenario": "staging", "outcome": r["outcome"],
            "deviated": r["deviated"],
            "machine": {"cpus": 2, "memory_gib": 24.0, "python": "3.11.7", "platform": "Linux", "ray": ray},
            "runs": [r]}


def test_the_summaries_compared_here_are_of_the_published_schema() -> None:
    jsonschema.Draft7Validator(summary_schema()).validate(_summary())


def test_the_same_run_twice_regresses_on_nothing() -> None:
    found = compare(_summary(), _summary())
    assert found.regressions == [] and {r.what for r in found.rows} >= {
        "outcome", "verdict slo_availability", "fault 0 (kill) MTTR s", "fault 1 (kill) MTTR s", "run seconds",
        "slo availability min", "slo p99 max ms", "load requests"}


@pytest.mark.parametrize(("b", "what"), [
    ({"validity": "broken"}, "verdict slo_availability"),
    ({"validity": "unknown"}, "verdict slo_availability"),
    ({"mttrs": (0.5, 1.2)}, "fault 1 (kill) MTTR s"),  # 2x A's
    ({"seconds": 40.0}, "run seconds"),
    ({"availability": 0.97}, "slo availability min"),  # 2.5 points lower
    ({"p99_ms": 90.0}, "slo p99 max ms"),
])
def test_each_regression_is_named(b: dict[str, Any], what: str) -> None:
    regressed = {r.what for r in compare(_summary(), _summary(**b)).regressions}
    assert what in regressed, regressed


def test_the_releases_and_rays_own_events_are_shown_side_by_side_not_judged() -> None:
    found = compare(_summary(ray="2.50.1"), _summary(ray="2.60.0", restarts=5.0))
    rows = {r.what: r for r in found.rows}
    assert (rows["ray"].a, rows["ray"].b) == ("2.50.1", "2.60.0")
    assert (rows["ray actor restarts"].a, rows["ray actor restarts"].b) == ("2", "5")
    assert found.regressions == []


def test_within_the_tolerances_is_no_regression_and_the_tolerances_are_the_users() -> None:
    near = _summary(mttrs=(0.6, 0.7), seconds=25.0, availability=0.99, p99_ms=50.0)
    assert compare(_summary(), near).regressions == []
    strict = Tolerances(mttr_ratio=1.1, seconds_ratio=1.1, availability_drop=0.001, latency_ratio=1.1)
    assert len(compare(_summary(), near, strict).regressions) == 5


def test_a_fault_that_happened_in_a_only_regresses() -> None:
    b = _summary()
    b["runs"][0]["faults"][1] = {**b["runs"][0]["faults"][1], "status": "not_found", "mttr": None}
    (row,) = compare(_summary(), b).regressions
    assert row.what == "fault 1 (kill) status" and row.why == "injected in A only"


def test_the_command_line_exits_1_on_a_regression_2_on_a_mismatch(tmp_path: Path) -> None:
    for name, summary in (("a", _summary()), ("b", _summary(p99_ms=200.0))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    same = CliRunner().invoke(main, ["compare", str(tmp_path / "a"), str(tmp_path / "a")])
    assert same.exit_code == 0 and "0 regression(s)" in same.output, same.output
    worse = CliRunner().invoke(main, ["compare", str(tmp_path / "a"), str(tmp_path / "b" / "summary.json")])
    assert worse.exit_code == 1 and "REGRESSED: 5.00x A, past 1.5x" in worse.output, worse.output
    other = copy.deepcopy(_summary())
    other["scenario"] = "elsewhere"
    (tmp_path / "c.json").write_text(json.dumps(other), encoding="utf-8")
    mismatch = CliRunner().invoke(main, ["compare", str(tmp_path / "a"), str(tmp_path / "c.json")])
    assert mismatch.exit_code == 2 and "compare two runs of the same scenario" in mismatch.output
    old = {**_summary(), "schema_version": 0}
    (tmp_path / "old.json").write_text(json.dumps(old), encoding="utf-8")
    refused = CliRunner().invoke(main, ["compare", str(tmp_path / "old.json"), str(tmp_path / "a")])
    assert refused.exit_code == 2 and "schema_version = 0" in refused.output
