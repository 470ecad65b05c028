"""`raychaos explain ID` without Ray: the mistake's and the fix's code side by side with their
figures, and a noisy measurement told apart from a failed lesson (its own exit code)."""

from __future__ import annotations

import ast

import pytest
from click.testing import CliRunner
from rich.console import Console

from scenarios.cli import EXIT_DEVIATED, EXIT_NOISY, main
from scenarios.lessons._catalog import find, lessons
from scenarios.lessons._code import CODE
from scenarios.lessons._console import print_lesson
from scenarios.lessons._model import LessonOutcome, LessonResult, Measure

WINS = Measure("wall time", "s", 1.9, 0.7, margin=0.6)
NOISY = Measure("wall time", "s", 0.9, 0.7, margin=0.6)
LOSES = Measure("updates lost", "of 20", 0, 0)


def test_every_lesson_has_its_mistake_and_fix_as_code_that_parses() -> None:
    assert set(CODE) == {item.id for item in lessons()}
    for lesson_id, code in CODE.items():
        for side in (code.mistake, code.fix):
            ast.parse(side, filename=lesson_id)
        assert code.mistake != code.fix, lesson_id


def test_a_measure_within_its_margin_is_noisy_not_a_failed_lesson() -> None:
    assert WINS.outcome is LessonOutcome.FIX_WINS
    assert NOISY.outcome is LessonOutcome.NOISY
    assert Measure("t", "s", 0.7, 0.9, margin=0.6).outcome is LessonOutcome.NOISY  # the fix a bit worse
    assert Measure("t", "s", 0.7, 1.5, margin=0.6).outcome is LessonOutcome.FIX_LOSES
    assert LOSES.outcome is LessonOutcome.FIX_LOSES  # no margin: a tie is the mistake not showing
    item = find("03")
    assert LessonResult(item, (WINS, NOISY), 1.0).outcome is LessonOutcome.NOISY
    assert LessonResult(item, (NOISY, LOSES), 1.0).outcome is LessonOutcome.FIX_LOSES
    assert LessonResult(item, (), 1.0).outcome is LessonOutcome.FIX_LOSES  # nothing measured wins nothing


def test_the_mistake_and_the_fix_are_shown_side_by_side_with_their_figures() -> None:
    console = Console(record=True, width=160)
    print_lesson(LessonResult(find("03"), (WINS,), 4.2), console=console)
    lines = console.export_text().splitlines()
    mistake, fix = CODE["03-eager-get"].mistake.splitlines()[0], CODE["03-eager-get"].fix.splitlines()[0]
    assert any(mistake in line and fix in line and line.index(mistake) < line.index(fix) for line in lines)
    assert any("wall time: 1.9 s" in line and "wall time: 0.7 s" not in line for line in lines)
    assert any("wall time: 0.7 s" in line for line in lines)
    assert "Outcome: fix wins" in lines


@pytest.mark.parametrize("lesson_id", ["01-global-state", "03-eager-get"])
def test_a_narrow_terminal_stacks_the_mistake_above_the_fix_and_wraps_no_code(lesson_id: str) -> None:
    console = Console(record=True, width=80)
    print_lesson(LessonResult(find(lesson_id), (WINS,), 4.2), console=console)
    text = console.export_text()
    code = CODE[lesson_id]
    for line in (*code.mistake.splitlines(), *code.fix.splitlines()):
        assert line.strip() == "" or line in text, f"{line!r} wrapped or missing"
    assert text.index(code.mistake.splitlines()[0]) < text.index(code.fix.splitlines()[0])


@pytest.mark.parametrize(("measure", "code", "said"), [
    (WINS, 0, "Outcome: fix wins"),
    (NOISY, EXIT_NOISY, "Outcome: too noisy to tell"),
    (LOSES, EXIT_DEVIATED, "Outcome: the fix did not win"),
])
def test_explain_exits_by_the_lessons_outcome(measure: Measure, code: int, said: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import scenarios.lessons._catalog

    monkeypatch.setattr(scenarios.lessons._catalog, "run_lesson",
                        lambda item, address=None: LessonResult(item, (measure,), 1.0))
    result = CliRunner().invoke(main, ["explain", "03"])
    assert result.exit_code == code, result.output
    assert said in result.output


def test_explain_help_documents_the_noisy_exit_code() -> None:
    text = " ".join(CliRunner().invoke(main, ["explain", "--help"]).output.split())
    assert f"{EXIT_NOISY} when the measurement was too noisy to tell" in text
