"""The mutation tool counts a mutant as caught only when a test failed: a run past the bound
and a broken collection are reported as what they are (real pytest runs on tiny suites)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks import mutants

SUITES = {
    "passes": "def test_ok():\n    assert True\n",
    "fails": "def test_bad():\n    assert 1 == 2\n",
    "hangs": "import threading\ndef test_hang():\n    threading.Event().wait(30)\n",
    "breaks": "import no_such_module_anywhere\ndef test_ok():\n    pass\n",
}


@pytest.mark.slow  # make test's budget: 14 s of suites run in subprocesses
@pytest.mark.parametrize(("suite", "outcome"), [
    ("passes", mutants.Outcome.SURVIVED), ("fails", mutants.Outcome.CAUGHT),
    ("hangs", mutants.Outcome.TIMED_OUT), ("breaks", mutants.Outcome.BROKEN)])
def test_each_kind_of_run_gets_its_own_outcome(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                suite: str, outcome: mutants.Outcome) -> None:
    (tmp_path / "test_it.py").write_text(SUITES[suite])
    monkeypatch.setattr(mutants, "TEST_TIMEOUT", 1)
    got, by, _ = mutants._run_tests(tmp_path, ["test_it.py"])
    assert got is outcome, by
    result = mutants.Result(mutants.Mutant("f", 1, "g", "w", ""), got, 0.0, by)
    assert result.caught is (outcome is mutants.Outcome.CAUGHT)


def test_only_caught_mutants_score() -> None:
    results = [mutants.Result(mutants.Mutant("f", i, "g", "w", ""), o, 0.0, "")
               for i, o in enumerate(mutants.Outcome)]
    assert mutants._row("f", results) == ["f", "4", "1", "1", "1", "1", "25.0%"]
