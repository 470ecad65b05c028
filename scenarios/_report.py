"""Reports of a scenario run: ``summary.json``, ``junit.xml`` and a self-contained ``report.html``.

The journal (``journal.jsonl``) is written while the run happens; these are written after.
The HTML has no external assets: one inline SVG timeline per run (faults as shaded bands over
throughput), the MTTR of each fault, the verdicts and the steady-state probes.
"""

from __future__ import annotations

import html
import json
import os
import platform
from collections.abc import Sequence
from dataclasses import asdict
from xml.etree import ElementTree as ET

from chaos import FaultKind
from scenarios._records import RunResult

__all__ = ["summary", "write_reports"]

#: One colour per fault kind (a test checks every kind has one).
_COLOURS: dict[FaultKind, str] = {
    FaultKind.KILL: "#e4572e", FaultKind.KILL_NODE: "#a4031f", FaultKind.PAUSE: "#f3a712",
    FaultKind.MEMORY: "#5d2e8c", FaultKind.CPU: "#29335c", FaultKind.OBJECT_STORE: "#2e86ab",
    FaultKind.STARVE: "#669bbc", FaultKind.FREEZE_NODE: "#0b6e4f", FaultKind.LIMIT_OPEN_FILES: "#8f2d56",
    FaultKind.FILL_DISK: "#6b4226", FaultKind.DRAIN_NODE: "#3a506b", FaultKind.KILL_GCS: "#c5283d"}


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
    """Everything about the runs as plain JSON (the chaos run last)."""
    return {"scenario": results[-1].scenario, "machine": _machine(),
            "deviated": any(r.deviated for r in results if r.label == "chaos"),
            "runs": [_run_summary(r) for r in results]}


def _run_summary(r: RunResult) -> dict[str, object]:
    mttrs = [f.mttr for f in r.faults if f.mttr is not None]
    return {"label": r.label, "seed": r.seed, "status": r.status, "deviated": r.deviated,
            "seconds": r.seconds, "error": r.error, "metrics": dict(r.metrics),
            "peak_rss_gib": round(r.peak_rss_bytes / 2**30, 3),
            "mttr_max_s": max(mttrs, default=None),
            "verdicts": [asdict(v) for v in r.verdicts], "faults": [asdict(f) for f in r.faults],
            "probes": [asdict(p) for p in r.probes],
            "series": {k: [list(p) for p in v] for k, v in r.series.items()},
            "final_counters": dict(r.samples[-1].counters) if r.samples else {}}


def _machine() -> dict[str, object]:
    import psutil

    return {"cpus": os.cpu_count(), "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
            "python": platform.python_version(), "platform": platform.platform()}


def junit(results: Sequence[RunResult]) -> ET.Element:
    """One testsuite per run: a testcase for the run, each fault and each verdict; a run
    that did not complete, a fault that did not happen (strict) or a broken verdict fails."""
    suites = ET.Element("testsuites", name="raychaos")
    for r in results:
        missed = r.missed_faults if r.strict_faults else ()
        failures = sum(not v.held for v in r.verdicts) + (r.status != "completed") + len(missed)
        suite = ET.SubElement(suites, "testsuite", name=f"{r.scenario}[{r.label}]",
                              tests=str(len(r.verdicts) + len(r.faults) + 1), failures=str(failures),
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
            case = ET.SubElement(suite, "testcase", classname=r.scenario, name=v.name)
            if not v.held:
                ET.SubElement(case, "failure", message=v.detail).text = v.detail
            else:
                ET.SubElement(case, "system-out").text = v.detail
    return suites


# -- HTML ----------------------------------------------------------------------------------

_CSS = """body{font:14px system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px}table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}.held{color:#137333;font-weight:600}
.broken{color:#b3261e;font-weight:600}.legend span{display:inline-block;margin-right:14px}
.swatch{display:inline-block;width:12px;height:12px;margin-right:4px;vertical-align:middle}
svg text{font:11px system-ui,sans-serif}"""


def render_html(results: Sequence[RunResult]) -> str:
    chaos = results[-1]
    verdict = "DEVIATED" if chaos.deviated else "ALL INVARIANTS HELD"
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>raychaos: {_e(chaos.scenario)}</title>",
             f"<style>{_CSS}</style></head><body>",
             f"<h1>raychaos — {_e(chaos.scenario)}</h1>",
             f"<p id='overall' class='{'broken' if chaos.deviated else 'held'}'>{verdict}</p>",
             _comparison(results) if len(results) > 1 else ""]
    for r in results:
        parts += [f"<h2>Run: {_e(r.label)} (seed {r.seed}, {r.status}, {r.seconds:.1f} s)</h2>",
                  _timeline(r), _legend(r), _faults_table(r), _verdicts_table(r), _probes_table(r)]
    parts.append("</body></html>")
    return "\n".join(p for p in parts if p)


def _e(text: object) -> str:
    return html.escape(str(text))


def _comparison(results: Sequence[RunResult]) -> str:
    rows = ["<h2>Side by side</h2><table id='comparison'><tr><th>run</th><th>time</th>"
            "<th>peak memory</th><th>faults</th><th>metrics</th></tr>"]
    for r in results:
        metrics = ", ".join(f"{k} {v:g}" for k, v in sorted(r.metrics.items()))
        rows.append(f"<tr><td>{_e(r.label)}</td><td>{r.seconds:.1f} s</td>"
                    f"<td>{r.peak_rss_bytes / 2**30:.2f} GiB</td><td>{len(r.faults)}</td><td>{_e(metrics)}</td></tr>")
    return "".join(rows) + "</table>"


def _throughput(r: RunResult, *, window: int = 4) -> list[tuple[float, float]]:
    """Per-second rate of the workload's main counter over a sliding window of samples
    (work arrives in chunks: a per-sample rate would only show the chunks)."""
    names = sorted({k for s in r.samples for k in s.counters})
    if not names:
        return []
    name = "transitions" if "transitions" in names else names[-1]
    points = []
    for a, b in zip(r.samples, r.samples[window:]):
        if b.t > a.t:
            points.append((b.t, (b.counters.get(name, 0) - a.counters.get(name, 0)) / (b.t - a.t)))
    return points


def _timeline(r: RunResult, width: int = 1000, height: int = 220) -> str:
    end = max([r.seconds, *(f.end for f in r.faults)], default=1.0) or 1.0
    pad, plot_h = 40, height - 40
    def x(t: float) -> float:  # the time axis' scale
        return pad + (width - pad - 10) * t / end
    out = [f"<svg class='timeline' data-run='{_e(r.label)}' width='{width}' height='{height}' "
           f"xmlns='http://www.w3.org/2000/svg'><rect x='{pad}' y='0' width='{width - pad - 10}' "
           f"height='{plot_h}' fill='#fafafa' stroke='#ddd'/>"]
    for f in r.faults:
        w = max(3.0, x(max(f.end, f.start + (f.mttr or 0))) - x(f.start))
        out.append(f"<rect class='fault-band' x='{x(f.start):.1f}' y='0' width='{w:.1f}' height='{plot_h}' "
                   f"fill='{_COLOURS.get(f.kind, '#888')}' fill-opacity='0.25'><title>{_e(f.kind)} "
                   f"{_e(f.target)} at {f.start:.1f} s: {_e(f.outcome)}</title></rect>")
    out.append(_polyline(_throughput(r), x, plot_h, "#1a73e8", "throughput"))
    for name, series in r.series.items():
        out.append(_polyline(list(series), x, plot_h, "#137333", name))
    for t in range(0, int(end) + 1, max(1, int(end) // 10)):
        out.append(f"<text x='{x(t):.1f}' y='{height - 22}'>{t}s</text>")
    out.append(f"<text x='{pad}' y='{height - 6}'>blue: throughput per s · green: "
               f"{_e(', '.join(r.series) or 'no series')} · bands: faults until recovered</text></svg>")
    return "".join(out)


def _polyline(points: list[tuple[float, float]], x: object, plot_h: int, colour: str, name: str) -> str:
    if not points:
        return ""
    top = max(v for _, v in points) or 1.0
    coords = " ".join(f"{x(t):.1f},{plot_h - 4 - (plot_h - 12) * v / top:.1f}" for t, v in points)  # type: ignore[operator]
    last_t, last_v = points[-1]
    return (f"<polyline class='series' data-name='{_e(name)}' points='{coords}' fill='none' "
            f"stroke='{colour}' stroke-width='1.5'><title>{_e(name)} (max {top:.1f})</title></polyline>"
            f"<text x='{x(last_t) - 150:.1f}' y='{plot_h - 8 - (plot_h - 12) * last_v / top:.1f}' "  # type: ignore[operator]
            f"fill='{colour}'>{_e(name)}: {last_v:.0f} (max {top:.0f})</text>")


def _legend(r: RunResult) -> str:
    kinds = sorted({f.kind for f in r.faults})
    spans = "".join(f"<span><i class='swatch' style='background:{_COLOURS.get(k, '#888')}'></i>{_e(k)}</span>"
                    for k in kinds)
    return f"<p class='legend'>{spans}</p>" if spans else ""


def _faults_table(r: RunResult) -> str:
    if not r.faults:
        return "<p>No faults scheduled in this run.</p>"
    rows = "".join(f"<tr><td>{f.start:.1f} s</td><td>{_e(f.kind)}</td><td>{_e(f.target)}</td>"
                   f"<td class='{'held' if f.status == 'injected' else 'broken'}'>{_e(f.status)}</td>"
                   f"<td>{'—' if f.mttr is None else f'{f.mttr:.2f} s'}</td><td>{_e(f.outcome)}</td></tr>"
                   for f in r.faults)
    return ("<table class='faults'><tr><th>started</th><th>fault</th><th>target</th><th>status</th>"
            f"<th>MTTR</th><th>outcome</th></tr>{rows}</table>")


def _verdicts_table(r: RunResult) -> str:
    rows = "".join(f"<tr class='verdict'><td>{_e(v.name)}</td><td class='{'held' if v.held else 'broken'}'>"
                   f"{'held' if v.held else 'BROKEN'}</td><td>{_e(v.detail)}</td></tr>" for v in r.verdicts)
    error = f"<p class='broken'>{_e(r.error)}</p>" if r.error else ""
    return f"{error}<table class='verdicts'><tr><th>invariant</th><th>verdict</th><th>evidence</th></tr>{rows}</table>"


def _probes_table(r: RunResult) -> str:
    counts: dict[str, tuple[int, int]] = {}
    for p in r.probes:
        ok, total = counts.get(p.phase, (0, 0))
        counts[p.phase] = (ok + p.ok, total + 1)
    cells = "".join(f"<tr><td>{_e(phase)}</td><td>{ok} of {total} held</td></tr>"
                    for phase, (ok, total) in counts.items())
    return f"<table class='steady-state'><tr><th>steady state</th><th>probes</th></tr>{cells}</table>"
