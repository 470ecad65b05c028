"""The HTML report in headless Chromium: a panel per series with both axes and its unit, the
baseline on the chaos run's axes, one lane per fault with its MTTR, a readable metrics table.

Built from synthetic runs (no Ray): the shape of the page is what is tested here; the
flagship's own report is checked the same way in the slow tier."""

from __future__ import annotations

import os
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

from chaos import FaultKind
from chaos.engine import FaultStatus
from scenarios import RunResult, Verdict
from scenarios.model._records import RunLabel, RunStatus
from scenarios.reports._html import _RUN_STYLE, colour_of, fmt, nice_step, render_html
from scenarios.runner import FaultRecord, Probe, Sample

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]


class Elements(HTMLParser):
    """Every element of a dumped DOM as (tag, attributes), and the text of each <text>."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str]]] = []
        self.texts: list[str] = []
        self._in_text = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, {k: v or "" for k, v in attrs}))
        self._in_text = tag == "text"

    def handle_data(self, data: str) -> None:
        if self._in_text:
            self.texts.append(data)
            self._in_text = False

    def with_class(self, name: str) -> list[dict[str, str]]:
        return [a for _, a in self.found if name in a.get("class", "").split()]


def run(label: str, *, faults: tuple[FaultRecord, ...] = (), slower: float = 1.0) -> RunResult:
    samples = tuple(Sample(t / 2, {"transitions": 100 * t * t / slower, "gradient_steps": 8 * t}, 2**30)
                    for t in range(41))
    series = {"eval_return": tuple((float(t), 10.0 * t / slower) for t in range(2, 20, 3))}
    return RunResult(scenario="synthetic", label=label, seed=0, status=RunStatus.COMPLETED, seconds=20.0,
                     verdicts=(Verdict.of("no_loss", True, "0 lost"),),
                     probes=(Probe("after", 20.0, True, "ok"),), samples=samples, faults=faults,
                     metrics={"solved_at_s": 14.8726, "best_return": 219.83, "peak_bytes": 3 * 2**20}, series=series)


FAULTS = (  # two overlap in time: each keeps its own lane
    FaultRecord(at=3.0, start=3.0, end=3.1, kind=FaultKind.KILL, target="actor EnvWorker", outcome="recovered",
                mttr=0.72, confirmed=3.01),
    FaultRecord(at=3.5, start=3.5, end=6.5, kind=FaultKind.PAUSE, target="actor EnvWorker", outcome="recovered",
                mttr=3.4),
    FaultRecord(at=9.0, start=9.0, end=12.0, kind=FaultKind.MEMORY, target="node abc", outcome="held", mttr=None,
                confirmed=11.35),
    FaultRecord(at=15.0, start=15.0, end=15.0, kind=FaultKind.KILL, target="actor Gone", outcome="not found",
                mttr=None, status=FaultStatus.NOT_FOUND),
)


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Elements]:
    assert os.path.exists(CHROMIUM), "install Debian's chromium (make browser) for the report test"
    folder = tmp_path_factory.mktemp("report")
    path = folder / "report.html"
    path.write_text(render_html([run("baseline"), run("chaos", faults=FAULTS, slower=1.5)]), encoding="utf-8")
    dom = subprocess.run([CHROMIUM, *FLAGS, "--dump-dom", path.as_uri()], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    parsed = Elements()
    parsed.feed(dom)
    return path, parsed


def test_a_panel_per_series_each_with_both_axes_and_its_unit(page: tuple[Path, Elements]) -> None:
    _, dom = page
    panels = dom.with_class("panel")
    assert [p["data-series"] for p in panels] == ["gradient_steps", "transitions", "eval_return"]
    assert len(dom.with_class("x-axis")) == len(panels) + 1  # the lanes share the time axis
    assert len(dom.with_class("y-axis")) == len(panels)
    assert {"gradient_steps (per s)", "transitions (per s)", "eval_return (value)"} <= set(dom.texts)
    assert dom.texts.count("seconds since the run's start") == len(panels) + 1


def test_the_baseline_is_drawn_on_the_same_axes_as_the_chaos_run(page: tuple[Path, Elements]) -> None:
    _, dom = page
    lines = [(s["data-run"], s["stroke-dasharray"]) for s in dom.with_class("series")]
    assert lines.count(("chaos", "")) == 3 and lines.count(("baseline", "6 4")) == 3


def test_one_lane_per_fault_with_its_mttr_or_why_not(page: tuple[Path, Elements]) -> None:
    _, dom = page
    lanes = dom.with_class("lane")
    assert [(lane["data-fault"], lane["data-kind"]) for lane in lanes] == [
        ("0", "kill"), ("1", "pause"), ("2", "memory"), ("3", "kill")]
    assert {"MTTR 0.72 s", "MTTR 3.40 s", "not recovered", "not_found"} <= set(dom.texts)
    assert len(dom.with_class("recovering")) == 2 and len(dom.with_class("active")) == 3


def test_the_faults_table_says_when_each_took_effect(page: tuple[Path, Elements]) -> None:
    # Started at 9.0 s, confirmed at 11.35 s: a late fault shows as late.
    html = page[0].read_text(encoding="utf-8")
    assert "<th>started</th><th>confirmed</th>" in html
    assert "<td class=num>9.0 s</td><td class=num>11.35 s</td><td>memory</td>" in html
    assert "<td class=num>3.5 s</td><td class=num>—</td><td>pause</td>" in html  # not known: a dash


def test_metrics_are_rounded_with_units(page: tuple[Path, Elements]) -> None:
    text = page[0].read_text()
    assert "solved at (s)" in text and ">14.9<" in text and "14.8726" not in text
    assert "peak (MiB)" in text and "best return" in text and "220" in text


def test_the_screenshot_paints_panels_and_lanes(page: tuple[Path, Elements], tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    subprocess.run([CHROMIUM, *FLAGS, f"--screenshot={shot}", "--window-size=1120,1400", page[0].as_uri()],
                   capture_output=True, timeout=60, check=True)
    assert_painted(shot, kinds={FaultKind.KILL, FaultKind.PAUSE, FaultKind.MEMORY}, panels=3)


def painted(png: Path, colour: str, *, within: int = 8) -> int:
    """Pixels in `colour` (every channel within `within` of it): one series' or one fault kind's own ink."""
    import numpy as np
    from PIL import Image

    rgb = np.asarray(Image.open(png).convert("RGB"), dtype=int)
    want = np.array([int(colour[i:i + 2], 16) for i in (1, 3, 5)])
    return int((np.abs(rgb - want).max(axis=2) <= within).sum())


def assert_painted(png: Path, *, kinds: set[FaultKind], panels: int) -> None:
    """Each injected fault kind's bars, and the chaos run's line in every panel, painted in their own colours.

    Colour by colour, so the check does not move with the data: a floor on all coloured pixels did
    (CI's flagship report painted 18,898 against a floor of 20,000, every element drawn: a shorter run,
    narrower bars). The smallest bar is 3 x 16 px (a kill's instant); a line crosses most of a panel."""
    bars = {kind.value: painted(png, colour_of(kind)) for kind in kinds}
    assert min(bars.values(), default=30) >= 30, f"a fault kind's bars were not painted: {bars}"
    line = painted(png, _RUN_STYLE[RunLabel.CHAOS][0])
    assert line >= 200 * panels, f"the chaos run's lines: {line} px in its colour over {panels} panels"


def test_every_fault_kind_has_its_own_colour() -> None:
    assert len({colour_of(kind) for kind in FaultKind}) == len(FaultKind)


@pytest.mark.parametrize(("span", "step"), [(20.0, 5.0), (7.0, 1.0), (130.0, 20.0), (0.5, 0.1)])
def test_time_ticks_are_round(span: float, step: float) -> None:
    assert nice_step(span) == pytest.approx(step)


@pytest.mark.parametrize(("value", "text"), [(14.8726, "14.9"), (3.14159, "3.14"), (219.83, "220"),
                                             (48_213.0, "48k"), (4.0, "4")])
def test_figures_are_rounded_for_reading(value: float, text: str) -> None:
    assert fmt(value) == text
