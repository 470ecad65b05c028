"""``raychaos compare A B``: two runs of the same scenario or attack side by side (a Ray upgrade,
a new release of the program), read from their published ``summary.json``, and whether B
regressed beyond stated tolerances.

What is compared is typed, never prose: the Ray release of each, each verdict's validity, each
fault's status and MTTR (by schedule index), the run's seconds, and the metrics both runs
recorded, Ray's own events among them (actor restarts, nodes declared dead, task retries: shown
side by side, not judged, since more of them under the same faults can be either release's
right answer). A verdict that held
in A and did not in B is a regression whatever the tolerances; the figures regress past theirs.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from chaos.errors import InvalidConfig
from scenarios.reports._schemas import SUMMARY_SCHEMA_VERSION

__all__ = ["JUDGED_METRICS", "Better", "Comparison", "Row", "Tolerances", "compare", "lines", "read_summary"]


class Better(StrEnum):
    """Which way a figure improves."""

    LOWER = "lower"
    HIGHER = "higher"


#: The metrics compare judges, and which way each improves; others are shown, not judged.
JUDGED_METRICS: Mapping[str, Better] = {
    "slo availability min": Better.HIGHER,
    "slo p99 max ms": Better.LOWER,
    "slo recovery max s": Better.LOWER,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class Tolerances:
    """How much worse B may be than A before it regresses."""

    mttr_ratio: float = 1.5  #: a fault's MTTR in B at most this times A's
    seconds_ratio: float = 1.5  #: the run's seconds in B at most this times A's
    availability_drop: float = 0.01  #: an availability in B at most this much below A's
    latency_ratio: float = 1.5  #: a latency or recovery figure in B at most this times A's


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """One compared figure: its value in A and in B, and whether B regressed on it."""

    what: str
    a: str
    b: str
    regressed: bool = False
    why: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    scenario: str
    rows: tuple[Row, ...]

    @property
    def regressions(self) -> list[Row]:
        return [r for r in self.rows if r.regressed]


def read_summary(path: str) -> dict[str, Any]:
    """A report's ``summary.json`` (``path`` the file or its report folder).

    Raises:
        InvalidConfig: no such file, not JSON, or not of this schema's version.
    """
    file = os.path.join(path, "summary.json") if os.path.isdir(path) else path
    try:
        with open(file, encoding="utf-8") as f:
            data: dict[str, Any] = json.load(f)
    except (OSError, ValueError) as exc:
        raise InvalidConfig(f"{file!r}: {exc}; give a report folder (--report DIR) or its summary.json") from exc
    version = data.get("schema_version") if isinstance(data, dict) else None
    if version != SUMMARY_SCHEMA_VERSION:
        raise InvalidConfig(f"{file!r}: schema_version = {version!r}, this raychaos reads "
                            f"{SUMMARY_SCHEMA_VERSION}; compare reports of the same raychaos release")
    return data


def _chaos_run(summary: Mapping[str, Any]) -> Mapping[str, Any]:
    return next(r for r in reversed(summary["runs"]) if r["label"] == "chaos")


def compare(a: Mapping[str, Any], b: Mapping[str, Any], tolerances: Tolerances = Tolerances()) -> Comparison:
    """B's run under faults against A's.

    Raises:
        InvalidConfig: the two are runs of different scenarios.
    """
    if a["scenario"] != b["scenario"]:
        raise InvalidConfig(f"A ran {a['scenario']!r} and B {b['scenario']!r}: compare two runs of the same "
                            "scenario or attack file")
    ra, rb = _chaos_run(a), _chaos_run(b)
    rows = [_release(a, b), _outcome(a, b), *_verdicts(ra, rb), *_faults(ra, rb, tolerances),
            _ratio("run seconds", ra["seconds"], rb["seconds"], tolerances.seconds_ratio),
            *_metrics(ra["metrics"], rb["metrics"], tolerances)]
    return Comparison(scenario=str(a["scenario"]), rows=tuple(rows))


def _release(a: Mapping[str, Any], b: Mapping[str, Any]) -> Row:
    return Row(what="ray", a=str(a["machine"].get("ray", "-")), b=str(b["machine"].get("ray", "-")))


def _outcome(a: Mapping[str, Any], b: Mapping[str, Any]) -> Row:
    worse = a["outcome"] == "held" and b["outcome"] != "held"
    return Row(what="outcome", a=a["outcome"], b=b["outcome"], regressed=worse, why="held in A only" if worse else "")


def _verdicts(ra: Mapping[str, Any], rb: Mapping[str, Any]) -> list[Row]:
    va = {v["name"]: v["validity"] for v in ra["verdicts"]}
    vb = {v["name"]: v["validity"] for v in rb["verdicts"]}
    rows = []
    for name in [*va, *(n for n in vb if n not in va)]:
        got_a, got_b = va.get(name, "absent"), vb.get(name, "absent")
        worse = got_a == "held" and got_b != "held"
        rows.append(Row(what=f"verdict {name}", a=got_a, b=got_b, regressed=worse,
                        why="held in A, not in B" if worse else ""))
    return rows


def _faults(ra: Mapping[str, Any], rb: Mapping[str, Any], t: Tolerances) -> list[Row]:
    fa = {f["index"]: f for f in ra["faults"] if f.get("index") is not None}
    fb = {f["index"]: f for f in rb["faults"] if f.get("index") is not None}
    rows = []
    for index in sorted(set(fa) | set(fb)):
        a, b = fa.get(index), fb.get(index)
        label = f"fault {index} ({(a or b or {}).get('kind', '?')})"
        if a is None or b is None or a["status"] != b["status"]:
            worse = a is not None and a["status"] == "injected" and (b is None or b["status"] != "injected")
            rows.append(Row(what=f"{label} status", a=a["status"] if a else "absent", b=b["status"] if b else "absent",
                            regressed=worse, why="injected in A only" if worse else ""))
            continue
        rows.append(_ratio(f"{label} MTTR s", a["mttr"], b["mttr"], t.mttr_ratio))
    return rows


def _ratio(what: str, a: float | None, b: float | None, most: float) -> Row:
    """B at most ``most`` times A (a figure that came in A and not in B regressed)."""
    if a is None or b is None:
        return Row(what=what, a=_num(a), b=_num(b), regressed=a is not None and b is None,
                   why="measured in A only" if a is not None and b is None else "")
    worse = b > a * most and b - a > 1e-3  # a millisecond is noise at any ratio
    return Row(what=what, a=_num(a), b=_num(b), regressed=worse,
               why=f"{b / a:.2f}x A, past {most:g}x" if worse and a > 0 else ("" if not worse else "A was 0"))


def _metrics(ma: Mapping[str, float], mb: Mapping[str, float], t: Tolerances) -> list[Row]:
    rows = []
    for name in sorted(set(ma) | set(mb)):
        better = JUDGED_METRICS.get(name)
        a, b = ma.get(name), mb.get(name)
        if better is Better.HIGHER and a is not None and b is not None:
            worse = a - b > t.availability_drop
            rows.append(Row(what=name, a=_num(a), b=_num(b), regressed=worse,
                            why=f"{a - b:.3g} lower, past {t.availability_drop:g}" if worse else ""))
        elif better is Better.LOWER:
            rows.append(_ratio(name, a, b, t.latency_ratio))
        else:
            rows.append(Row(what=name, a=_num(a), b=_num(b)))
    return rows


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if math.isfinite(value) else str(value)


def lines(found: Comparison, *, names: Sequence[str] = ("A", "B")) -> list[str]:
    width = max((len(r.what) for r in found.rows), default=10)
    out = [f"{found.scenario}: {names[0]} against {names[1]}",
           f"  {'':<{width}}  {'A':>12}  {'B':>12}"]
    out += [f"  {r.what:<{width}}  {r.a:>12}  {r.b:>12}" + (f"  REGRESSED: {r.why}" if r.regressed else "")
            for r in found.rows]
    out.append(f"  {len(found.regressions)} regression(s)")
    return out
