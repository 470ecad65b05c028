"""Terminal output of the lessons: the list, and one lesson's mistake and fix side by side.

A lesson's words (title, mistake, fix, why, notes) are printed literally, never as console
markup: ``ray.get(refs[0])`` or ``raychaos[rl]`` would otherwise lose their brackets.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text

from scenarios.lessons._catalog import Lesson, LessonResult
from scenarios.lessons._code import CODE
from scenarios.lessons._model import LessonOutcome

__all__ = ["print_lesson", "print_lessons"]


def print_lessons(items: Sequence[Lesson], *, console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title="raychaos explain ID — the chapter's pitfalls and the failure modes, mistake and fix "
                        "measured")
    for col in ("id", "section", "pitfall"):
        table.add_column(col)
    for item in items:
        table.add_row(Text(item.id), Text(item.section), Text(item.title))
    console.print(table)


def print_lesson(result: LessonResult, *, console: Console | None = None) -> None:
    """One lesson: the mistake's code and the fix's side by side, each under its measured
    figure, the figures' table, the outcome (the fix wins, too noisy to tell, or not), why."""
    console = console or Console()
    item = result.lesson
    console.print(f"[bold]{escape(item.id)}[/] — {escape(item.title)} ({escape(item.source)})")
    console.print(_side_by_side(result, width=console.width))
    console.print(_figures(result))
    for note in result.notes:
        console.print(f"  {note}", markup=False)
    console.print(Text(f"Outcome: {result.outcome}", style=_STYLE[result.outcome]))
    if result.outcome is LessonOutcome.NOISY:
        console.print("  the figures lie within their margin of each other: noise cannot tell the mistake "
                      "from the fix here (a loaded machine does that); run it again when the machine is quieter",
                      markup=False)
    console.print(f"[italic]Why:[/] {escape(item.why)}")
    console.print(f"From {item.source}; ran in {result.seconds:.1f} s on this machine.", markup=False)


_STYLE = {LessonOutcome.FIX_WINS: "bold green", LessonOutcome.NOISY: "bold yellow",
          LessonOutcome.FIX_LOSES: "bold red"}


def _side_by_side(result: LessonResult, *, width: int) -> Table:
    """Two highlighted panels, mistake left and fix right, each under its first figure as
    measured; stacked, mistake above the fix, when the terminal is too narrow for both side by
    side without wrapping a line of code (wrapped code reads as different code)."""
    code = CODE[result.lesson.id]
    first = result.measures[0] if result.measures else None
    panels = []
    for side, source, style in (("mistake", code.mistake, "red"), ("fix", code.fix, "green")):
        figure = "" if first is None else f"{first.what}: {_fmt(getattr(first, side))} {first.unit}"
        panels.append(Panel(Syntax(source, "python", theme="ansi_dark", word_wrap=True, background_color="default"),
                            title=Text(side, style=style), title_align="left",
                            subtitle=Text(figure), subtitle_align="left", border_style=style))
    side_by_side = 2 * (_widest_line(code.mistake, code.fix) + PANEL_EDGES) + 1 <= width
    grid = Table.grid(expand=True, padding=(0, 1))
    for _ in panels if side_by_side else panels[:1]:
        grid.add_column(ratio=1)
    for row in [panels] if side_by_side else [[panel] for panel in panels]:
        grid.add_row(*row)
    return grid


#: A panel's border and padding, left and right.
PANEL_EDGES = 4


def _widest_line(*sources: str) -> int:
    return max(len(line) for source in sources for line in source.splitlines())


def _figures(result: LessonResult) -> Table:
    item = result.lesson
    table = Table()
    for col in ("measured", f"mistake: {item.mistake}", f"fix: {item.fix}", "outcome"):
        table.add_column(Text(col))
    for m in result.measures:
        # The margin is shown: a fix better by less is "too noisy to tell", which would puzzle without it.
        unit = f"{m.unit}; the fix must win by {_fmt(m.margin)}" if m.margin else m.unit
        table.add_row(Text(f"{m.what} ({unit})"), _fmt(m.mistake), _fmt(m.fix),
                      Text(str(m.outcome), style=_STYLE[m.outcome]))
    return table


def _fmt(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.3g}"
