"""The example suite (``examples/suite``) with ``pytest -n 0`` and with ``pytest -n 2 --dist
loadfile`` (each xdist worker starts its own clusters), ROUNDS times each, interleaved: wall
time of the whole run, and whether it passed and left nothing running.

    .venv/bin/python benchmarks/xdist_suite.py [ROUNDS]
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import machine, table
from chaos.cluster import ray_processes

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "examples" / "suite"
RUN_TIMEOUT = 900
MODES = {"pytest": [], "pytest -n 2 --dist loadfile": ["-n", "2", "--dist", "loadfile"]}


def run_once(args: list[str]) -> tuple[float, bool, int]:
    """Seconds of one run of the suite in a fresh copy, whether it passed, and how many Ray
    processes it left."""
    with tempfile.TemporaryDirectory(prefix="xdist-suite-") as folder:
        project = Path(folder) / "suite"
        shutil.copytree(SUITE, project, ignore=shutil.ignore_patterns("__pycache__"))
        env = {**os.environ, "PYTHONPATH": str(project / "src")}
        before = {p.pid for p in ray_processes()}
        start = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args], cwd=project,
                              env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT)
        took = time.monotonic() - start
        left = [p for p in ray_processes() if p.pid not in before]
    return took, proc.returncode == 0, len(left)


def main(rounds: int) -> None:
    results: dict[str, list[tuple[float, bool, int]]] = {mode: [] for mode in MODES}
    for i in range(rounds):
        for mode, args in MODES.items():
            results[mode].append(outcome := run_once(args))
            print(f"round {i + 1}/{rounds} {mode}: {outcome[0]:.1f} s, "
                  f"{'passed' if outcome[1] else 'FAILED'}, {outcome[2]} left", flush=True)
    base = statistics.median(t for t, _, _ in results["pytest"])
    rows = [[f"`{mode}`", f"{statistics.median(t for t, _, _ in runs):.1f} s",
             f"{statistics.median(t for t, _, _ in runs) / base:.2f}x", f"{sum(ok for _, ok, _ in runs)} of {rounds}",
             str(sum(left for _, _, left in runs))] for mode, runs in results.items()]
    table(f"the example suite, median of {rounds} runs ({machine()})",
          ["command", "wall time", "vs -n 0", "passed", "processes left"], rows)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)
