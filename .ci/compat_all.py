"""`make compat-all`: the compatibility subset on each Ray minor release asked for, one after
another, each as `make compat RAY=2.5x` runs it; a table of outcomes and times at the end.

    python3 .ci/compat_all.py 2.50 2.51 ... 2.60

Each release's outcome is read from its run: pytest's last line (passed, failed, errors) and
make's exit status; a run that printed no pytest summary is "unknown", never "passed". The
table is also written to `.compat/compat-all.json` (the figures the docs quote come from it).
Exits 1 when any release did not pass.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from compat_requirements import minor_or_exit

ROOT = Path(__file__).resolve().parents[1]
SUMMARY = re.compile(r"^=+ (?P<text>.*\d+ (passed|failed|error).*) in (?P<secs>[\d.]+)s")


@dataclass(frozen=True)
class Outcome:
    ray: str
    installed: str
    status: str  # "passed", "failed" or "unknown" (no pytest summary: the run never got there)
    summary: str
    seconds: float  # the whole `make compat`, the venv's set-up included
    test_seconds: float


def counts(summary: str) -> dict[str, int]:
    return {word: int(n) for n, word in re.findall(r"(\d+) (\w+)", summary)}


def judge(ray: str, log: str, returncode: int, seconds: float) -> Outcome:
    found = [m for line in log.splitlines() if (m := SUMMARY.match(line))]
    installed = re.search(r"^Ray (\S+) \(compat\)$", log, re.MULTILINE)
    if not found:
        return Outcome(ray=ray, installed=installed.group(1) if installed else "?", status="unknown",
                       summary="no pytest summary", seconds=seconds, test_seconds=0.0)
    last = found[-1]
    if installed is None or not installed.group(1).startswith(f"{ray}."):
        return Outcome(ray=ray, installed=installed.group(1) if installed else "?", status="unknown",
                       summary=f"{last['text']} (on another Ray than {ray})", seconds=seconds,
                       test_seconds=float(last["secs"]))
    tally = counts(last["text"])
    clean = returncode == 0 and not tally.get("failed") and not tally.get("error") and not tally.get("errors")
    return Outcome(ray=ray, installed=installed.group(1) if installed else "?",
                   status="passed" if clean and tally.get("passed") else "failed",
                   summary=last["text"], seconds=seconds, test_seconds=float(last["secs"]))


def run_one(ray: str) -> Outcome:
    log_path = ROOT / ".compat" / f"ray-{ray}.log"
    log_path.parent.mkdir(exist_ok=True)
    start = time.monotonic()
    with log_path.open("w", encoding="utf-8") as log:
        done = subprocess.run(["make", "--no-print-directory", "compat", f"RAY={ray}"], cwd=ROOT,
                              stdout=log, stderr=subprocess.STDOUT, check=False)
    outcome = judge(ray, log_path.read_text(encoding="utf-8", errors="replace"), done.returncode,
                    time.monotonic() - start)
    print(f"Ray {ray}: {outcome.status} ({outcome.summary}) in {outcome.seconds:.0f} s; log {log_path}",
          flush=True)
    return outcome


def table(outcomes: list[Outcome]) -> str:
    rows = ["| Ray | installed | outcome | tests | `make compat` | of which tests |",
            "|---|---|---|---|---:|---:|"]
    rows += [f"| {o.ray} | {o.installed} | {o.status} | {o.summary} | {o.seconds:.0f} s | {o.test_seconds:.0f} s |"
             for o in outcomes]
    return "\n".join(rows)


def main() -> None:
    minors = [minor_or_exit(arg) for arg in sys.argv[1:]]
    if not minors:
        sys.exit("give the minor releases to run, e.g. 2.50 2.60")
    outcomes = [run_one(minor) for minor in minors]
    (ROOT / ".compat" / "compat-all.json").write_text(
        json.dumps([asdict(o) for o in outcomes], indent=2) + "\n", encoding="utf-8")
    print(table(outcomes))
    sys.exit(0 if all(o.status == "passed" for o in outcomes) else 1)


if __name__ == "__main__":
    main()
