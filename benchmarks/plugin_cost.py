"""What the raychaos pytest plugin costs a suite that never uses it: a foreign test file (one
plain test, one Hypothesis test) run by pytest with the plugin loaded and with ``-p no:raychaos``,
ROUNDS times each, interleaved; the median wall time of each and their difference. Also the
plugin module's own import time (``python -X importtime``), with pytest already imported.

    .venv/bin/python benchmarks/plugin_cost.py [ROUNDS]
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import machine, table

FOREIGN = '''
from hypothesis import given, strategies as st

def test_plain():
    assert 1 + 1 == 2

@given(st.integers())
def test_given(x):
    assert x == x
'''
#: The budget the plugin's cost is held to.
BUDGET = 0.2


def run_pytest(folder: str, *args: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=folder,
                   check=True, capture_output=True, timeout=120)
    return time.perf_counter() - start


def import_seconds() -> float:
    """The plugin module's cumulative import time, pytest imported first."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import pytest; import chaos.pytest_plugin"],
                         capture_output=True, text=True, check=True, timeout=60).stderr
    line = next(line for line in out.splitlines() if re.search(r"\|\s+chaos\.pytest_plugin$", line))
    return int(line.split("|")[1]) / 1e6


def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="plugin-cost-") as folder:
        Path(folder, "test_foreign.py").write_text(FOREIGN, encoding="utf-8")
        run_pytest(folder)  # warm the page cache and bytecode
        loaded, without = [], []
        for _ in range(rounds):
            loaded.append(run_pytest(folder))
            without.append(run_pytest(folder, "-p", "no:raychaos"))
    imports = statistics.median(import_seconds() for _ in range(5))
    cost = statistics.median(loaded) - statistics.median(without)
    table(f"the plugin in a foreign pytest run, median of {rounds} ({machine()})",
          ["run", "wall time"],
          [["`pytest` (plugin loaded)", f"{statistics.median(loaded):.3f} s"],
           ["`pytest -p no:raychaos`", f"{statistics.median(without):.3f} s"],
           ["the plugin's cost", f"{cost:+.3f} s (budget {BUDGET} s)"],
           ["`import chaos.pytest_plugin` (pytest loaded)", f"{imports:.3f} s"]])


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 15)
