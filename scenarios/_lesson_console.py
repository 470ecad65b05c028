"""Terminal output of the lessons: the list, and one lesson's figures side by side."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table

from scenarios._lessons import Lesson, LessonResult

__all__ = ["print_lesson", "print_lessons"]


def print_lessons(items: Sequence[Lesson], *, console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title="raychaos explain ID — the chapter's pitfalls, mistake and fix measured")
    for col in ("id", "§", "pitfall"):
        table.add_column(col)
    for item in items:
        table.add_row(item.id, item.section, item.title)
    console.print(table)


def print_lesson(result: LessonResult, *, console: Console | None = None) -> None:
    console = console or Console()
    item = result.lesson
    console.print(f"[bold]{item.id}[/] — {item.title} (chapter §{item.section})")
    table = Table()
    for col in ("measured", f"mistake: {item.mistake}", f"fix: {item.fix}", "better"):
        table.add_column(col)
    for m in result.measures:
        verdict = "[green]fix[/]" if m.favours_fix else "[bold red]mistake?[/]"
        # The margin is shown: a fix better by less reads "mistake?", which would puzzle without it.
        unit = f"{m.unit}; the fix must win by {_fmt(m.margin)}" if m.margin else m.unit
        table.add_row(f"{m.what} ({unit})", _fmt(m.mistake), _fmt(m.fix), verdict)
    console.print(table)
    for note in result.notes:
        console.print(f"  {note}")
    console.print(f"[italic]Why:[/] {item.why}")
    console.print(f"Chapter section {item.section}; ran in {result.seconds:.1f} s on this machine.")


def _fmt(value: float) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.3g}"
