"""The first chaos test's "make it fail", measured: the quickstart's test file run as a student
runs it (``pytest test_my_actor.py``, each run in a fresh folder, so Hypothesis starts from no
saved example), with its deposit a plain ``@mutation`` (the mistake) and with
``@mutation(idempotent=True)`` (the fix), RUNS times each, interleaved.

    .venv/bin/python benchmarks/make_it_fail.py [RUNS]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import machine, table

ROOT = Path(__file__).resolve().parent.parent
QUICKSTART = ROOT / "examples" / "quickstart" / "test_my_actor.py"
FIXED, MISTAKE = "@mutation(idempotent=True)", "@mutation"
#: A run of the two tests takes about a minute; one that takes ten has hung.
RUN_TIMEOUT = 600


def run_once(decorator: str) -> tuple[bool, float, str]:
    """One ``pytest test_my_actor.py`` with the deposit under ``decorator``: whether it passed,
    its seconds, and the failing tests' ids."""
    text = QUICKSTART.read_text(encoding="utf-8")
    assert text.count(FIXED) == 1, "the quickstart's deposit is no longer @mutation(idempotent=True)"
    with tempfile.TemporaryDirectory(prefix="make-it-fail-") as folder:
        Path(folder, "test_my_actor.py").write_text(text.replace(FIXED, decorator), encoding="utf-8")
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_my_actor.py"],
                              cwd=folder, capture_output=True, text=True, timeout=RUN_TIMEOUT)
        took = time.monotonic() - start
    failed = sorted({line.split(" ")[1].split("::")[-1] for line in proc.stdout.splitlines()
                     if line.startswith("FAILED ")})
    return proc.returncode == 0, took, ", ".join(failed)


def main(runs: int) -> None:
    results: dict[str, list[tuple[bool, float, str]]] = {MISTAKE: [], FIXED: []}
    for i in range(runs):
        for decorator in (MISTAKE, FIXED):
            results[decorator].append(outcome := run_once(decorator))
            print(f"run {i + 1}/{runs} {decorator}: {'passed' if outcome[0] else 'FAILED ' + outcome[2]} "
                  f"in {outcome[1]:.0f} s", flush=True)
    rows = []
    for decorator, outcomes in results.items():
        failing = [o for o in outcomes if not o[0]]
        which = sorted({t for o in failing for t in o[2].split(", ") if t})
        rows.append([f"`{decorator}`", f"{len(failing)} of {runs}", ", ".join(which) or "-",
                     f"{sum(o[1] for o in outcomes) / runs:.0f} s"])
    table(f"make it fail: the quickstart's test file, {runs} runs each ({machine()})",
          ["deposit", "runs that failed", "failing tests", "mean run"], rows)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)
