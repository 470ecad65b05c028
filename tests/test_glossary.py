"""The glossary's terms are linked where each page first uses them.

A term is a heading of ``docs/reference/glossary.md``; its forms (plural, spelling) are below. A
use is a match in prose: not in a heading, a code block, a code span or a link's address. The
first use on a page must be a link to the term's entry. A verdict's values (held, broken,
unknown, n/a) are defined inside the *Verdict* entry rather than as terms of their own: they are
everyday words ("resources held", "a broken link") that a page uses in both senses.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GLOSSARY = ROOT / "docs" / "reference" / "glossary.md"
#: Each term's forms, by its heading in the glossary (lower case).
FORMS = {
    "verdict": r"verdicts?",
    "inconclusive": r"inconclusive",
    "fault-free twin": r"fault-free twins?|twins?",
    "baseline": r"baselines?",
    "steady state": r"steady[- ]states?",
    "confirmed": r"confirmed",
    "landed": r"landed",
    "mttr": r"mttrs?",
    "plant": r"plant(?:s|ed)?",
}
#: Pages without prose of their own: the changelog (a record), the API pages (docstrings).
SKIPPED = {"glossary.md", "changelog.md", "api-chaos.md", "api-actors.md", "api-scenarios.md"}
LINK = re.compile(r"\[([^\]]*)\]\(([^)]*)\)")
CODE_SPAN = re.compile(r"`[^`]*`")
IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)")  # an image's alt text describes a picture: no link there
FENCE = re.compile(r"^\s*(`{3,}|~{3,})")


@dataclass(frozen=True)
class Use:
    line: int
    word: str
    link: str | None  # the address of the link the word is the text of, if any


def prose(text: str) -> Iterator[tuple[int, str]]:
    """Each line of prose, numbered, its code spans and images blanked (columns kept). A ``<details>`` block
    is raw HTML (its text is no Markdown, so a link there would show as brackets): not prose."""
    fence: str | None = None
    details = False
    for number, line in enumerate(text.splitlines(), 1):
        details = (details or line.startswith("<details>")) and "</details>" not in line
        if details or line.startswith("<details>"):
            continue
        if m := FENCE.match(line):
            fence = None if fence and m.group(1).startswith(fence) else (fence or m.group(1))
            continue
        if fence or line.lstrip().startswith(("#", "<!--")):
            continue
        blank = CODE_SPAN.sub(lambda c: " " * len(c.group()), line)
        yield number, IMAGE.sub(lambda c: " " * len(c.group()), blank)


def _use_in(line: str, form: str, number: int) -> Use | None:
    links = list(LINK.finditer(line))
    for m in re.finditer(rf"(?<![\w/-])(?:{form})(?![\w/-])", line, re.IGNORECASE):
        if any(link.start(2) <= m.start() < link.end(2) for link in links):
            continue  # inside an address
        text_of = next((link.group(2) for link in links if link.start(1) <= m.start() < link.end(1)), None)
        return Use(line=number, word=m.group(), link=text_of)
    return None


def first_uses(text: str) -> dict[str, Use]:
    uses: dict[str, Use] = {}
    for number, line in prose(text):
        for term, form in FORMS.items():
            if term not in uses and (use := _use_in(line, form, number)):
                uses[term] = use
    return uses


def anchor(term: str) -> str:
    return "glossary.md#" + re.sub(r"[^\w-]", "", term.replace(" ", "-"))


def unlinked(text: str) -> list[str]:
    return [f"line {u.line}: {u.word!r} (link it to {anchor(term)})" for term, u in first_uses(text).items()
            if not (u.link and u.link.endswith(anchor(term)))]


def pages() -> list[Path]:
    return sorted(p for p in (ROOT / "docs").rglob("*.md") if p.name not in SKIPPED)


def test_the_glossarys_terms_are_the_ones_checked() -> None:
    headings = re.findall(r"^## (.+)$", GLOSSARY.read_text(encoding="utf-8"), re.MULTILINE)
    assert sorted(h.lower() for h in headings) == sorted(FORMS)


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT / "docs")))
def test_each_term_is_linked_where_the_page_first_uses_it(page: Path) -> None:
    assert unlinked(page.read_text(encoding="utf-8")) == []


def test_the_check_sees_an_unlinked_first_use_and_nothing_else() -> None:
    page = ("# Verdicts\n\nA `verdict` in code.\n\n```text\nverdict\n```\n"
            "See [the verdict](../reference/glossary.md#verdict); a plain verdict later, a "
            "[MTTR link](other.md) and a [page](glossary.md#plant-stuff).\n")
    assert unlinked(page) == ["line 8: 'MTTR' (link it to glossary.md#mttr)"]
    folded = ("<details><summary>Why?</summary>\nA plant, unlinked: raw HTML.\n</details>\n\n"
              "A [plant](glossary.md#plant).\n")
    assert unlinked(folded) == [] and first_uses(folded)["plant"].line == 5
    assert first_uses(page)["verdict"].line == 8
    assert "plant" not in first_uses(page)  # a word inside an address is no use
