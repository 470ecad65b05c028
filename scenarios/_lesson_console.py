"""Terminal output of the lessons: the list, and one lesson's figures side by side.

A lesson's words (title, mistake, fix, why, notes) are printed literally, never as console
markup: ``ray.get(refs[0])`` or ``raychaos[rl]`` would otherwise lose their brackets.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from scenarios._lessons import Lesson, LessonResult

__all__ = ["print_lesson", "print_lessons"]


def print_lessons(items: Sequence[Lesson], *, console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title="raychaos explain ID — the chapter's pitfalls, mistake and fix measured")
    for col in ("id", "§", "pitfall"):
        table.add_column(col)
    for item in items:
        table.add_row(Text(item.id), Text(item.section), Text(item.title))
    console.print(table)


def print_lesson(result: LessonResult, *, console: Console | None = None) -> None:
    console = console or Console()
    item = result.lesson
    console.print(f"[bold]{escape(item.id)}[/] — {escape(item.title)} (chapter §{escape(item.section)})")
    table = Table()
    for col in ("measured", f"mistake: {item.mistake}", f"fix: {item.fix}", "better"):
        table.add_column(Text(col))
    for m in result.measures:
        verdict = "[green]fix[/]" if m.favours_fix else "[bold red]mistake?[/]"
        # The margin is shown: a fix better by less reads "mistake?", which would puzzle without it.
        unit = f"{m.unit}; the fix must win by {_fmt(m.margin)}" if m.margin else m.unit
        table.add_row(Text(f"{m.what} ({unit})"), _fmt(m.mistake), _fmt(m.fix), verdict)
    console.print(table)
    for note in result.notes:
        console.print(f"  {note}", markup=False)
    console.print(f"[italic]Why:[/] {escape(item.why)}")
    console.print(f"Chapter section {item.section}; ran in {result.seconds:.1f} s on this machine.")


def _fmt(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.3g}"
