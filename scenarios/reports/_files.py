"""Reports of a scenario run: ``summary.json``, ``junit.xml`` and a self-contained ``report.html``.

The journal (``journal.jsonl``) is written while the run happens; these are written after.
The HTML (:mod:`scenarios.reports._html`) has no external assets: a panel per series over one
time axis (the baseline dashed on the same axes), a lane per fault with its MTTR, the runs'
metrics side by side, the verdicts and the steady-state probes.
"""

from __future__ import annotations

import json
import os
import platform
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict
from importlib.metadata import version
from xml.etree import ElementTree as ET

from scenarios.model._records import NO_PROBE_NOTE, VALIDITY_WORDS, RunResult, Validity, Verdict, outcome_of
from scenarios.reports._html import render_html
from scenarios.reports._schemas import SUMMARY_SCHEMA_VERSION

__all__ = ["junit", "summary", "verdict_json", "write_reports"]

def write_reports(results: Sequence[RunResult], report_dir: str) -> dict[str, str]:
    """Write summary.json, junit.xml and report.html into ``report_dir``; return their paths."""
    os.makedirs(report_dir, exist_ok=True)
    paths = {name: os.path.join(report_dir, name) for name in ("summary.json", "junit.xml", "report.html")}
    with open(paths["summary.json"], "w", encoding="utf-8") as f:
        json.dump(summary(results), f, indent=2, sort_keys=True)
    ET.ElementTree(junit(results)).write(paths["junit.xml"], encoding="utf-8", xml_declaration=True)
    with open(paths["report.html"], "w", encoding="utf-8") as f:
        f.write(render_html(results))
    return paths


def summary(results: Sequence[RunResult]) -> dict[str, object]:
    """Everything about the runs as plain JSON (the chaos run last). ``outcome`` is the
    scenario's (``held``, ``broken``, ``unknown``: what the exit code says); ``deviated`` is
    true unless it held."""
    outcome = outcome_of(results)
    return {"schema_version": SUMMARY_SCHEMA_VERSION, "scenario": results[-1].scenario, "machine": _machine(),
            "outcome": outcome.value,
            "deviated": outcome is not Validity.HELD, "runs": [_run_summary(r) for r in results]}


def verdict_json(v: Verdict) -> dict[str, object]:
    """One verdict as JSON: ``held`` is true only when ``validity`` is ``held``."""
    return {"name": v.name, "held": v.held, "validity": v.validity.value, "detail": v.detail, "seen": v.seen,
            "measured": None if v.measured is None else v.measured.value}


def _run_summary(r: RunResult) -> dict[str, object]:
    mttrs = [f.mttr for f in r.faults if f.mttr is not None]
    return {"label": r.label, "seed": r.seed, "status": r.status, "outcome": r.outcome.value, "deviated": r.deviated,
            "seconds": r.seconds, "error": r.error, "metrics": dict(r.metrics),
            "peak_rss_gib": round(r.peak_rss_bytes / 2**30, 3),
            "mttr_max_s": max(mttrs, default=None),
            "verdicts": [verdict_json(v) for v in r.verdicts], "faults": [asdict(f) for f in r.faults],
            "unjudged": [verdict_json(v) for v in r.unjudged],
            "probed": r.probed, "notes": [] if r.probed else [NO_PROBE_NOTE],
            "probes": [asdict(p) for p in r.probes],
            "series": {k: [list(p) for p in v] for k, v in r.series.items()},
            "final_counters": dict(r.samples[-1].counters) if r.samples else {}}


def _machine() -> dict[str, object]:
    import psutil

    return {"cpus": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "python": platform.python_version(), "platform": platform.platform(), "ray": version("ray")}


def junit(results: Sequence[RunResult]) -> ET.Element:
    """One testsuite per run: a testcase for the run, each fault and each verdict. A run that
    did not complete, a fault that did not happen (strict) or a broken verdict is a
    ``failure``; an unknown verdict an ``error`` (it could not be judged: never a pass, never a
    break); an n/a one and an undeclared one are ``skipped`` with the reason."""
    suites = ET.Element("testsuites", name="raychaos")
    for r in results:
        missed = r.missed_faults if r.strict_faults else ()
        counts = Counter(v.validity for v in r.verdicts)
        failures = counts[Validity.BROKEN] + (r.status != "completed") + len(missed)
        skipped = len(r.unjudged) + (not r.probed) + counts[Validity.NOT_APPLICABLE]
        suite = ET.SubElement(suites, "testsuite", name=f"{r.scenario}[{r.label}]",
                              tests=str(len(r.verdicts) + len(r.faults) + 1 + len(r.unjudged) + (not r.probed)),
                              failures=str(failures), errors=str(counts[Validity.UNKNOWN]), skipped=str(skipped),
                              time=f"{r.seconds:.3f}")
        run_case = ET.SubElement(suite, "testcase", classname=r.scenario, name=f"run[{r.label}]")
        if r.status != "completed":
            ET.SubElement(run_case, "failure", message=r.status).text = r.error
        for i, f in enumerate(r.faults):
            case = ET.SubElement(suite, "testcase", classname=r.scenario,
                                 name=f"fault[{i}] {f.kind} at {f.at:g} s")
            if f in missed:
                ET.SubElement(case, "failure", message=f.status).text = f.outcome
            else:
                ET.SubElement(case, "system-out").text = f"{f.status}: {f.outcome}"
        for v in r.verdicts:
            _verdict_case(ET.SubElement(suite, "testcase", classname=r.scenario, name=v.name), v)
        _unchecked(suite, r)
    return suites


#: The JUnit element of each validity (None: the test case passed).
_JUNIT = {Validity.HELD: None, Validity.BROKEN: "failure", Validity.UNKNOWN: "error",
          Validity.NOT_APPLICABLE: "skipped"}


def _verdict_case(case: ET.Element, v: Verdict) -> None:
    element = _JUNIT[v.validity]
    if element is None:
        ET.SubElement(case, "system-out").text = v.detail
        return
    ET.SubElement(case, element, message=f"{VALIDITY_WORDS[v.validity]}: {v.detail}"[:1000]).text = v.detail


def _unchecked(suite: ET.Element, r: RunResult) -> None:
    """What the run did not judge, as skipped test cases: undeclared invariants, a missing probe."""
    for v in r.unjudged:
        case = ET.SubElement(suite, "testcase", classname=r.scenario, name=v.name)
        ET.SubElement(case, "skipped", message="not declared by the scenario: not judged").text = (
            f"{VALIDITY_WORDS[v.validity]}: {v.detail}")
    if not r.probed:
        case = ET.SubElement(suite, "testcase", classname=r.scenario, name="steady state")
        ET.SubElement(case, "skipped", message=NO_PROBE_NOTE)
