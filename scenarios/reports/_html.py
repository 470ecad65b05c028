"""The self-contained ``report.html``: panels over one time axis, a lane per fault, tables.

Laid out as Jepsen's timelines are: every series in a panel of its own (a y axis with its
unit, the time axis below), the fault-free baseline drawn dashed on the same axes as the
chaos run, and under them one lane per fault, a bar from its injection to its heal and then
to its recovery, its MTTR written beside it. No external assets: inline SVG and CSS.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from chaos import FaultKind
from chaos.engine import FaultStatus, fault_specs
from scenarios.model._records import (
    NO_PROBE_NOTE,
    OUTCOME_WORDS,
    VALIDITY_WORDS,
    FaultRecord,
    RunLabel,
    RunResult,
    Validity,
    outcome_of,
    seconds_text,
)

__all__ = ["render_html"]

WIDTH = 1040
LEFT, RIGHT = 190, 24  # the left margin holds the y axes' labels and the lanes' names
PANEL_H, LANE_H = 170, 24
_TOP, _BOTTOM = 26, 34  # a panel's title above, its time axis below

#: Ray's RPC failure knob is no scheduled fault (no spec of its own): its colour is here.
RPC_COLOUR = "#4f5d75"


def colour_of(kind: FaultKind) -> str:
    """The colour a kind of fault is drawn in (its spec's; a test checks each is its own)."""
    spec = fault_specs().get(kind)
    return RPC_COLOUR if kind is FaultKind.RPC_FAILURE or spec is None else spec.colour


_RUN_STYLE = {RunLabel.CHAOS: ("#1a73e8", ""), RunLabel.BASELINE: ("#7a7a7a", "6 4")}

_CSS = """body{font:14px system-ui,sans-serif;margin:24px;color:#222;max-width:1100px}
h1{font-size:22px}h2{font-size:18px;margin-top:28px}table{border-collapse:collapse;margin:8px 0}
td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}td.num{text-align:right;font-variant-numeric:tabular-nums}
.held{color:#137333;font-weight:600}.broken{color:#b3261e;font-weight:600}
.unknown{color:#a15c00;font-weight:600}.na{color:#777}
svg{display:block;margin:4px 0 10px}svg text{font:11px system-ui,sans-serif;fill:#333}
svg .panel-title{font-size:13px;font-weight:600}svg .axis line,svg .axis path{stroke:#888}
svg .grid{stroke:#eee}svg .lane-name{font-size:11px}"""


@dataclass(frozen=True, slots=True)
class Series:
    """One panel's data: its name, unit, and a line per run (by the run's label)."""

    name: str
    unit: str
    lines: Mapping[RunLabel, tuple[tuple[float, float], ...]]


def render_html(results: Sequence[RunResult]) -> str:
    """The whole page: verdict, metrics side by side, panels, fault lanes, then each run's tables."""
    chaos = results[-1]
    span = _span(results)
    outcome = outcome_of(results)
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>raychaos: {_e(chaos.scenario)}</title>",
             f"<style>{_CSS}</style></head><body><h1>raychaos — {_e(chaos.scenario)}</h1>",
             f"<p id='overall' class='{_CLASS[outcome]}'>{OUTCOME_WORDS[outcome]}</p>",
             _metrics_table(results), "<h2>Timeline</h2>",
             *(_panel(s, span, chaos.faults) for s in series_of(results)), _lanes(chaos.faults, span)]
    for r in results:
        parts += [f"<h2>Run: {_e(r.label)} (seed {r.seed}, {r.status}, {r.seconds:.1f} s)</h2>",
                  _faults_table(r), _verdicts_table(r), _probes_table(r)]
    parts.append("</body></html>")
    return "\n".join(p for p in parts if p)


def _e(text: object) -> str:
    return html.escape(str(text))


# -- data ------------------------------------------------------------------------------------


def series_of(results: Sequence[RunResult]) -> list[Series]:
    """A panel per counter (as a rate per second) and per series the workload recorded, each
    with a line per run that has it."""
    counters = sorted({k for r in results for s in r.samples for k in s.counters})
    names = sorted({k for r in results for k in r.series})
    out = [Series(c, "per s", {r.label: rate(r, c) for r in results if any(c in s.counters for s in r.samples)})
           for c in counters]
    out += [Series(n, "value", {r.label: tuple(r.series[n]) for r in results if n in r.series}) for n in names]
    return [s for s in out if any(s.lines.values())]


def rate(r: RunResult, counter: str, *, window: int = 4) -> tuple[tuple[float, float], ...]:
    """Per-second rate of ``counter`` over a sliding window of samples (work arrives in
    chunks: a per-sample rate would only show the chunks)."""
    points = []
    for a, b in zip(r.samples, r.samples[window:]):
        if b.t > a.t:
            points.append((b.t, (b.counters.get(counter, 0) - a.counters.get(counter, 0)) / (b.t - a.t)))
    return tuple(points)


def _span(results: Sequence[RunResult]) -> float:
    """The shared time axis' end: the longest run, or the last fault's recovery."""
    ends = [r.seconds for r in results] + [f.start + (f.mttr or 0) for r in results for f in r.faults]
    ends += [f.end for r in results for f in r.faults]
    return max([1.0, *ends])


def _x(t: float, span: float) -> float:
    return LEFT + (WIDTH - LEFT - RIGHT) * t / span


def nice_step(span: float, ticks: int = 8) -> float:
    """A round tick step (1, 2 or 5 times a power of ten) giving about ``ticks`` ticks."""
    raw = span / ticks
    power = 10 ** math.floor(math.log10(raw)) if raw > 0 else 1.0
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def fmt(value: float) -> str:
    """A figure for an axis or a table: rounded to what a reader compares."""
    if abs(value) >= 10_000:
        return f"{value / 1000:,.0f}k"
    if abs(value) >= 100 or float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:.2f}" if abs(value) < 10 else f"{value:.1f}"


# -- panels ----------------------------------------------------------------------------------


def _panel(series: Series, span: float, faults: Sequence[FaultRecord]) -> str:
    values = [v for line in series.lines.values() for _, v in line]
    step = nice_step((max(values, default=1.0) - min(0.0, *values)) or 1.0, 4)
    bottom = math.floor(min(0.0, *values) / step) * step
    top = max(bottom + step, math.ceil(max(values, default=1.0) / step) * step)
    plot = PANEL_H - _TOP - _BOTTOM

    def y(v: float) -> float:
        return _TOP + plot - plot * (v - bottom) / ((top - bottom) or 1.0)

    out = [f"<svg class='panel' data-series='{_e(series.name)}' width='{WIDTH}' height='{PANEL_H}' "
           f"xmlns='http://www.w3.org/2000/svg'>",
           f"<text class='panel-title' x='{LEFT}' y='16'>{_e(series.name)} ({_e(series.unit)})</text>",
           _y_axis(bottom, top, step, y, series.unit), _x_axis(span, _TOP + plot),
           *(_fault_mark(f, span, plot) for f in faults if f.status is FaultStatus.INJECTED)]
    for label, line in series.lines.items():
        colour, dash = _RUN_STYLE.get(label, ("#444", ""))
        coords = " ".join(f"{_x(t, span):.1f},{y(v):.1f}" for t, v in line)
        out.append(f"<polyline class='series' data-run='{_e(label)}' points='{coords}' fill='none' "
                   f"stroke='{colour}' stroke-width='1.6' stroke-dasharray='{dash}'>"
                   f"<title>{_e(label)}: {_e(series.name)}</title></polyline>")
    out.append(_run_legend(series))
    return "".join(out) + "</svg>"


def _fault_mark(f: FaultRecord, span: float, plot: float) -> str:
    """A thin line at the fault's injection, in its kind's colour: the dip and its cause in one view."""
    x = _x(f.start, span)
    return (f"<line class='fault-mark' x1='{x:.1f}' x2='{x:.1f}' y1='{_TOP}' y2='{_TOP + plot}' "
            f"stroke='{colour_of(f.kind)}' stroke-width='1' stroke-dasharray='2 3'/>")


def _y_axis(bottom: float, top: float, step: float, scale: Callable[[float], float], unit: str) -> str:
    ticks = [bottom + i * step for i in range(round((top - bottom) / step) + 1)]
    marks = "".join(f"<line class='grid' x1='{LEFT}' x2='{WIDTH - RIGHT}' y1='{scale(v):.1f}' "
                    f"y2='{scale(v):.1f}'/><text x='{LEFT - 6}' y='{scale(v) + 4:.1f}' "
                    f"text-anchor='end'>{fmt(v)}</text>" for v in ticks)
    middle = (scale(bottom) + scale(top)) / 2
    return (f"<g class='axis y-axis'><line x1='{LEFT}' x2='{LEFT}' y1='{_TOP}' y2='{PANEL_H - _BOTTOM}'/>{marks}"
            f"<text class='axis-label' x='{LEFT - 52}' y='{middle:.1f}' text-anchor='middle' "
            f"transform='rotate(-90 {LEFT - 52} {middle:.1f})'>{_e(unit)}</text></g>")


def _x_axis(span: float, at: float) -> str:
    step = nice_step(span)
    ticks = [i * step for i in range(int(span / step) + 1)]
    marks = "".join(f"<line x1='{_x(t, span):.1f}' x2='{_x(t, span):.1f}' y1='{at}' y2='{at + 4}'/>"
                    f"<text x='{_x(t, span):.1f}' y='{at + 16}' text-anchor='middle'>{fmt(t)}</text>"
                    for t in ticks)
    return (f"<g class='axis x-axis'><line x1='{LEFT}' x2='{WIDTH - RIGHT}' y1='{at}' y2='{at}'/>{marks}"
            f"<text class='axis-label' x='{WIDTH - RIGHT}' y='{at + 30}' text-anchor='end'>"
            "seconds since the run's start</text></g>")


def _run_legend(series: Series) -> str:
    items = []
    for i, label in enumerate(series.lines):
        colour, dash = _RUN_STYLE.get(label, ("#444", ""))
        x = WIDTH - RIGHT - 210 + i * 105
        items.append(f"<line x1='{x}' x2='{x + 26}' y1='11' y2='11' stroke='{colour}' stroke-width='2' "
                     f"stroke-dasharray='{dash}'/><text x='{x + 31}' y='15'>{_e(label)}</text>")
    return f"<g class='legend'>{''.join(items)}</g>"


# -- fault lanes -----------------------------------------------------------------------------


def _lanes(faults: Sequence[FaultRecord], span: float) -> str:
    if not faults:
        return "<p>No faults scheduled in this run.</p>"
    height = _TOP + LANE_H * len(faults) + _BOTTOM
    out = [f"<svg class='fault-lanes' width='{WIDTH}' height='{height}' xmlns='http://www.w3.org/2000/svg'>",
           f"<text class='panel-title' x='{LEFT}' y='16'>faults (a lane each: injected → healed → recovered)</text>"]
    out += [_lane(i, f, span, _TOP + LANE_H * i) for i, f in enumerate(faults)]
    out.append(_x_axis(span, _TOP + LANE_H * len(faults) + 4))
    return "".join(out) + "</svg>"


def _lane(i: int, f: FaultRecord, span: float, top: float) -> str:
    colour = colour_of(f.kind)
    name = f"{f.kind.value} {f.target}"[:30]
    if f.status is not FaultStatus.INJECTED:  # it never happened: an outlined mark, in red words
        body = (f"<rect x='{_x(f.at, span):.1f}' y='{top + 4}' width='6' height='{LANE_H - 8}' fill='none' "
                f"stroke='#b3261e'/><text x='{_x(f.at, span) + 10:.1f}' y='{top + 16}' class='broken'>"
                f"{_e(f.status.value)}</text>")
    else:
        body = _bars(f, span, top, colour)
    return (f"<g class='lane' data-fault='{i}' data-kind='{_e(f.kind.value)}'>"
            f"<text class='lane-name' x='{LEFT - 6}' y='{top + 16}' text-anchor='end'>{_e(name)}</text>"
            f"<line class='grid' x1='{LEFT}' x2='{WIDTH - RIGHT}' y1='{top + LANE_H}' y2='{top + LANE_H}'/>"
            f"{body}<title>{_e(f.kind.value)} {_e(f.target)} at {f.start:.2f} s: {_e(f.outcome)}</title></g>")


def _bars(f: FaultRecord, span: float, top: float, colour: str) -> str:
    x0, x1 = _x(f.start, span), max(_x(f.end, span), _x(f.start, span) + 3)
    out = (f"<rect class='active' x='{x0:.1f}' y='{top + 4}' width='{x1 - x0:.1f}' height='{LANE_H - 8}' "
           f"fill='{colour}'/>")
    if f.mttr is None:
        return out + f"<text x='{x1 + 6:.1f}' y='{top + 16}' class='broken'>not recovered</text>"
    x2 = max(_x(f.start + f.mttr, span), x1)
    return (out + f"<rect class='recovering' x='{x1:.1f}' y='{top + 8}' width='{x2 - x1:.1f}' "
            f"height='{LANE_H - 16}' fill='{colour}' fill-opacity='0.35'/>"
            f"<text class='mttr' x='{x2 + 6:.1f}' y='{top + 16}'>MTTR {f.mttr:.2f} s</text>")


# -- tables ----------------------------------------------------------------------------------


def _metrics_table(results: Sequence[RunResult]) -> str:
    """The runs side by side: time, memory, faults, then every metric, rounded, with units."""
    rows: list[tuple[str, list[str]]] = [
        ("run time (s)", [fmt(r.seconds) for r in results]),
        ("peak memory (GiB)", [f"{r.peak_rss_bytes / 2**30:.2f}" for r in results]),
        ("faults injected", [str(sum(f.status is FaultStatus.INJECTED for f in r.faults)) for r in results])]
    for name in sorted({k for r in results for k in r.metrics}):
        label, scale = _metric_label(name)
        rows.append((label, [fmt(r.metrics[name] * scale) if name in r.metrics else "—" for r in results]))
    head = "".join(f"<th>{_e(r.label)}</th>" for r in results)
    body = "".join(f"<tr><td>{_e(label)}</td>{''.join(f'<td class=num>{v}</td>' for v in values)}</tr>"
                   for label, values in rows)
    return f"<h2>Runs side by side</h2><table id='comparison'><tr><th>metric</th>{head}</tr>{body}</table>"


def _metric_label(name: str) -> tuple[str, float]:
    """A metric's name for people, with its unit (from its suffix), and the scale to it."""
    for suffix, unit, scale in (("_s", "s", 1.0), ("_gib", "GiB", 1.0), ("_bytes", "MiB", 2.0**-20)):
        if name.endswith(suffix):
            return f"{name.removesuffix(suffix).replace('_', ' ')} ({unit})", scale
    return name.replace("_", " "), 1.0


def _faults_table(r: RunResult) -> str:
    if not r.faults:
        return "<p>No faults scheduled in this run.</p>"
    rows = "".join(f"<tr><td class=num>{f.start:.1f} s</td><td class=num>{seconds_text(f.confirmed)}</td>"
                   f"<td>{_e(f.kind.value)}</td><td>{_e(f.target)}</td>"
                   f"<td class='{'held' if f.status is FaultStatus.INJECTED else 'broken'}'>{_e(f.status.value)}</td>"
                   f"<td class=num>{seconds_text(f.mttr)}</td><td>{_e(f.outcome)}</td></tr>"
                   for f in r.faults)
    return ("<table class='faults'><tr><th>started</th><th>confirmed</th><th>fault</th><th>target</th><th>status</th>"
            f"<th>MTTR</th><th>outcome</th></tr>{rows}</table>")


#: Each validity's CSS class.
_CLASS = {Validity.HELD: "held", Validity.BROKEN: "broken", Validity.UNKNOWN: "unknown",
          Validity.NOT_APPLICABLE: "na"}


def _verdicts_table(r: RunResult) -> str:
    rows = "".join(f"<tr class='verdict'><td>{_e(v.name)}</td><td class='{_CLASS[v.validity]}'>"
                   f"{VALIDITY_WORDS[v.validity]}</td><td>{_e(v.detail)}</td></tr>" for v in r.verdicts)
    rows += "".join(f"<tr class='unjudged'><td>{_e(v.name)}</td><td>not judged ({VALIDITY_WORDS[v.validity]})"
                    f"</td><td>not declared by the scenario: {_e(v.detail)}</td></tr>" for v in r.unjudged)
    error = f"<p class='broken'>{_e(r.error)}</p>" if r.error else ""
    return f"{error}<table class='verdicts'><tr><th>invariant</th><th>verdict</th><th>evidence</th></tr>{rows}</table>"


def _probes_table(r: RunResult) -> str:
    if not r.probed:
        return f"<p class='no-probe'>{_e(NO_PROBE_NOTE)}</p>"
    counts: dict[str, tuple[int, int]] = {}
    for p in r.probes:
        ok, total = counts.get(p.phase, (0, 0))
        counts[p.phase] = (ok + p.ok, total + 1)
    cells = "".join(f"<tr><td>{_e(phase)}</td><td>{ok} of {total} held</td></tr>"
                    for phase, (ok, total) in counts.items())
    return f"<table class='steady-state'><tr><th>steady state</th><th>probes</th></tr>{cells}</table>"
