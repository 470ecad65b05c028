"""The course (docs/course/): its pages in order, and each page's runs with its claims held to
what the runs report.

A page's claims are the rows of the table after its ``<!-- course-claims -->`` mark: ``fault N``
(its kind and status), ``verdict NAME`` (its value), ``metric NAME`` (a number, or "at least
N"), ``outcome``, all read from the run's ``summary.json``; and ``lesson N`` ("mistake M, fix
F": the lesson's first figure on each side, rounded). Each page's ``raychaos run`` commands run
as the student types them, in a folder of their own; its lessons run on the session's cluster.
"""

from __future__ import annotations

import itertools
import json
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from chaos.cluster import ClusterHandle

ROOT = Path(__file__).resolve().parent.parent
COURSE = ROOT / "docs" / "course"
PAGES = ["01-worker-dies.md", "02-actor-dies.md", "03-object-lost.md", "04-node-dies.md",
         "05-gcs-restarts.md", "06-call-hangs.md", "07-idempotence.md"]
RAYCHAOS = Path(sys.executable).parent / "raychaos"
ROW = re.compile(r"^\|\s*`(?P<what>[^`]+)`\s*\|\s*(?P<says>.+?)\s*\|$")


@dataclass(frozen=True)
class Claim:
    what: str  # "fault 0", "verdict NAME", "metric NAME", "outcome", "lesson 21"
    says: str  # as the page prints it, code spans unquoted


def claims(page: str) -> list[Claim]:
    lines = page.split("<!-- course-claims -->", 1)[1].strip().splitlines()
    found = []
    for line in lines[2:]:  # after the header and its rule, until the table ends
        if not line.startswith("|"):
            break
        m = ROW.match(line.strip())
        assert m, f"a claims row the course cannot read: {line!r}"
        found.append(Claim(what=m["what"], says=m["says"].replace("`", "")))
    return found


def _number(says: str) -> tuple[str, float]:
    m = re.fullmatch(r"(at least )?([\d.]+)", says)
    assert m, f"a metric's claim is a number or 'at least N', not {says!r}"
    return ("min" if m[1] else "eq"), float(m[2])


def check(claim: Claim, summary: dict[str, Any]) -> str | None:
    """What is wrong with the claim against this summary (its last run), or None."""
    run, (kind, _, name) = summary["runs"][-1], claim.what.partition(" ")
    if kind == "outcome":
        seen: object = summary["outcome"]
    elif kind == "fault":
        fault = run["faults"][int(name)] if int(name) < len(run["faults"]) else {}
        seen = f"{fault.get('kind')}, {fault.get('status')}"
    elif kind == "verdict":
        seen = next((v["validity"] for v in run["verdicts"] if v["name"] == name), "absent")
    elif kind == "metric":
        op, want = _number(claim.says)
        value = run["metrics"].get(name)
        ok = value is not None and (value >= want if op == "min" else value == want)
        return None if ok else f"{claim.what}: the page says {claim.says}, the run {value}"
    else:
        raise AssertionError(f"a claim the course cannot check: {claim.what!r}")
    return None if seen == claim.says else f"{claim.what}: the page says {claim.says!r}, the run {seen!r}"


def runs(page: str) -> list[list[str]]:
    """The page's ``raychaos run`` commands, from its bash blocks."""
    blocks = re.findall(r"```bash\n(.*?)```", page, re.DOTALL)
    return [shlex.split(line)[1:] for block in blocks for line in block.splitlines()
            if line.startswith("raychaos run ")]


def test_the_course_pages_are_in_order_and_each_leads_to_the_next() -> None:
    assert sorted(p.name for p in COURSE.glob("[0-9]*.md")) == PAGES
    index = (COURSE / "index.md").read_text(encoding="utf-8")
    assert index.index("raychaos demo") < index.index(PAGES[0])  # the first command
    assert [index.index(p) for p in PAGES] == sorted(index.index(p) for p in PAGES)
    for page, following in itertools.pairwise(PAGES):
        text = (COURSE / page).read_text(encoding="utf-8")
        assert text.count("<details>") >= 2 and f"]({following})" in text.split("## Next")[1], page
    for page in PAGES:
        text = (COURSE / page).read_text(encoding="utf-8")
        page_claims = claims(text)
        assert page_claims, f"{page}: no claims to check"
        # A claim about a report needs a run that writes one.
        assert runs(text) or all(c.what.startswith("lesson ") for c in page_claims), page


def test_a_claim_the_report_contradicts_is_named() -> None:
    summary = {"outcome": "held", "runs": [{"faults": [{"kind": "kill", "status": "injected"}],
                                            "verdicts": [{"name": "results_correct", "validity": "held"}],
                                            "metrics": {"ray task retries": 2.0}}]}
    right = [Claim("fault 0", "kill, injected"), Claim("verdict results_correct", "held"),
             Claim("metric ray task retries", "at least 1"), Claim("outcome", "held")]
    assert [check(c, summary) for c in right] == [None] * 4
    wrong = [Claim("fault 0", "kill, ineffective"), Claim("fault 1", "kill, injected"),
             Claim("verdict no_error_visible", "held"), Claim("metric ray task retries", "at least 3"),
             Claim("metric ray nodes dead", "1"), Claim("outcome", "broken")]
    assert all(check(c, summary) for c in wrong)
    page = ("x\n<!-- course-claims -->\n| in the report | it says |\n|---|---|\n"
            "| `fault 0` | `kill`, `injected` |\n\nmore")
    assert claims(page) == [Claim("fault 0", "kill, injected")]
    with pytest.raises(AssertionError, match="cannot read"):
        claims(page.replace("| `fault 0` |", "| fault 0 |"))  # a row without its code span is no claim


def _lesson_claims(page_claims: list[Claim], address: str) -> list[str]:
    from scenarios.lessons._catalog import find, run_lesson

    wrong = []
    for claim in (c for c in page_claims if c.what.startswith("lesson ")):
        first = run_lesson(find(claim.what.split()[1]), address=address).measures[0]
        seen = f"mistake {round(first.mistake)}, fix {round(first.fix)}"
        if seen != claim.says:
            wrong.append(f"{claim.what}: the page says {claim.says!r}, the lesson {seen!r}")
    return wrong


def _run_claims(page_claims: list[Claim], command: list[str], where: Path) -> list[str]:
    out = subprocess.run([str(RAYCHAOS), *command], cwd=where, capture_output=True, text=True, timeout=300,
                         check=False)
    report = where / command[command.index("--report") + 1] / "summary.json"
    assert report.exists(), out.stdout[-3000:] + out.stderr[-3000:]
    summary = json.loads(report.read_text(encoding="utf-8"))
    return [w for c in page_claims if not c.what.startswith("lesson ") if (w := check(c, summary))]


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_a_course_pages_runs_report_what_it_says(page: str, ray_cluster: ClusterHandle, tmp_path: Path) -> None:
    text = (COURSE / page).read_text(encoding="utf-8")
    page_claims = claims(text)
    wrong = _lesson_claims(page_claims, ray_cluster.address)
    for command in runs(text):
        wrong += _run_claims(page_claims, command, tmp_path)
    assert wrong == []
