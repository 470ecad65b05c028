"""Replay fidelity: a run that breaks an invariant, replayed N times, breaks the same one.

``python benchmarks/replay_fidelity.py [--replays 20] [--seed 3]`` (from the repository root)
runs a scenario over a deliberately broken workload (a replay buffer whose checkpoint forgets
its write cursor, so acknowledged transitions vanish only when a kill lands after a
checkpoint) with a *random* schedule drawn from the seed, then re-runs its journal with
``raychaos replay`` N times, each on a fresh embedded cluster, and counts the replays that
broke exactly the same invariants. Prints a table; exits 1 if fewer than 95% did.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
RAYCHAOS = str(Path(sys.executable).parent / "raychaos")
SCENARIO = """
name = "forgetful-crash-loop"
description = "A replay buffer that forgets its cursor in checkpoints, killed at random."
workload = "benchmarks.broken_workloads:ForgetfulCrashLoop"
duration = 8
invariants = ["no_lost_transitions"]

[params]
max_restarts = -1

[steady_state]
before = false
after = false

[random]
rate = 0.4
menu = [{ kind = "kill", target = { kind = "actor", name = "replay", namespace = "raychaos" } }]
"""


def broken(report: Path) -> tuple[str, ...]:
    runs = json.loads((report / "summary.json").read_text())["runs"]
    return tuple(sorted(v["name"] for v in runs[-1]["verdicts"] if not v["held"]))


def fault_outcomes(report: Path) -> list[tuple[float, str]]:
    """Each scheduled fault's time and how it went (injected, not_found, ...)."""
    runs = json.loads((report / "summary.json").read_text())["runs"]
    return [(f["at"], f["status"]) for f in runs[-1]["faults"]]


def _differences(original: list[tuple[float, str]], replayed: list[tuple[float, str]]) -> str:
    if len(original) != len(replayed):
        return f"{len(original)} faults in the original, {len(replayed)} in the replay"
    return "; ".join(f"at {a[0]:g} s: {a[1]} → {b[1]}" for a, b in zip(original, replayed) if a != b)


def raychaos(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RAYCHAOS, *args], cwd=ROOT, capture_output=True, text=True, timeout=600)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replays", type=int, default=20)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="raychaos-fidelity-") as tmp:
        scenario = Path(tmp) / "forgetful.toml"
        scenario.write_text(SCENARIO)
        first = raychaos("run", str(scenario), "--seed", str(args.seed), "--report", f"{tmp}/original")
        wanted = broken(Path(tmp) / "original")
        if first.returncode != 1 or not wanted:
            print(f"the original run did not break an invariant (exit {first.returncode}):\n"
                  f"{first.stdout[-2000:]}{first.stderr[-2000:]}", file=sys.stderr)
            return 1
        same, alike, seconds = 0, 0, []
        faults = fault_outcomes(Path(tmp) / "original")
        for i in range(args.replays):
            start = time.monotonic()
            raychaos("replay", f"{tmp}/original/journal.jsonl", "--report", f"{tmp}/replay{i}")
            seconds.append(time.monotonic() - start)
            same += broken(Path(tmp) / f"replay{i}") == wanted
            replayed = fault_outcomes(Path(tmp) / f"replay{i}")
            alike += replayed == faults
            if replayed != faults:  # say how, so a difference is evidence, not a count
                print(f"replay {i}: faults went otherwise: {_differences(faults, replayed)}")
    table = Table(title=f"Replay fidelity (seed {args.seed}, random schedule, broken: {', '.join(wanted)})")
    for col in ("replays", "broke the same invariants", "share", "every fault went alike",
                "s per replay (median)"):
        table.add_column(col)
    table.add_row(str(args.replays), str(same), f"{same / args.replays:.0%}", str(alike),
                  f"{sorted(seconds)[len(seconds) // 2]:.1f}")
    Console().print(table)
    return 0 if same >= 0.95 * args.replays else 1


if __name__ == "__main__":
    sys.exit(main())
