"""Hunt for Ray bugs: generated programs under faults, for a given time, on hunt clusters of
its own side by side (each with a driver process); prints its progress as it goes (to standard
error: a bar, the time left, programs a minute, each fault kind's landed count), then the
failure classes found and the feature/fault table.

    python benchmarks/hunt.py --minutes 30 [--clusters 2]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter, defaultdict

from scenarios.hunt import ProgramVerdict
from scenarios.hunt._fleet import SIDE_BY_SIDE, HunterFailed, SideBySide
from scenarios.hunt._stats import Progress, fault_labels, features

#: Seconds between progress lines when standard error is not a terminal (a log, CI).
PROGRESS_EVERY = 30.0


class Reporter:
    """The progress line: redrawn after each program on a terminal, else every PROGRESS_EVERY s."""

    def __init__(self, minutes: float) -> None:
        self.started, self.total, self.last = time.monotonic(), minutes * 60, float("-inf")
        self.live = sys.stderr.isatty()

    def program_done(self, ran: int, classes: int, stats: Counter[str]) -> None:
        now = time.monotonic()
        if not self.live and now - self.last < PROGRESS_EVERY:
            return
        self.last = now
        line = Progress(elapsed=now - self.started, total=self.total, ran=ran, classes=classes, stats=stats).line()
        print(f"\r{line}\033[K" if self.live else line, end="" if self.live else "\n", file=sys.stderr, flush=True)


#: Seconds spent in each phase of the programs' runs, summed over the hunt.
SPENT: defaultdict[str, float] = defaultdict(float)
#: Seconds spent landing (or missing) each kind of fault, and how many there were.
LANDING: defaultdict[str, float] = defaultdict(float)
LANDING_COUNT: Counter[str] = Counter()
#: Why the hunt stopped early (a hunter crashed or was stuck), if it did.
FAILED: list[str] = []


def hunt(minutes: float, clusters: int) -> tuple[Counter[str], dict[str, ProgramVerdict], int]:
    """Run generated programs until ``minutes`` pass on ``clusters`` hunt clusters side by side
    (``scenarios.hunt._fleet``: each a head, one removable node where node removals land, one
    node whose processes fail RPCs, one whose processes delay them, and a GCS on a Redis of its
    own, where GCS restarts land); returns the label counts, the first verdict of each failure
    class and how many programs ran."""
    stats: Counter[str] = Counter()
    classes: dict[str, ProgramVerdict] = {}
    ran = 0
    try:
        with SideBySide(clusters, minutes=minutes) as side:
            reporter = Reporter(minutes)
            for verdict in side.verdicts():
                ran += 1
                record(verdict, stats, classes)
                reporter.program_done(ran, len(classes), stats)
    except HunterFailed as exc:  # what the hunt found so far is printed all the same, then it fails
        FAILED.append(str(exc))
    return stats, classes, ran


def record(verdict: ProgramVerdict, stats: Counter[str], classes: dict[str, ProgramVerdict]) -> None:
    """Count one program's features, faults, phases, landings and failures."""
    for phase, seconds in verdict.phases:
        SPENT[phase.value] += seconds
    for kind, seconds in verdict.landing:
        LANDING[kind.value] += seconds
        LANDING_COUNT[kind.value] += 1
    for label in features(verdict.program) | fault_labels(verdict):
        stats[label] += 1
    for failure in verdict.failures:
        classes.setdefault(failure.signature.label(), verdict)
        stats[f"failure: {failure.signature.label()}"] += 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--clusters", type=int, default=SIDE_BY_SIDE,
                        help=f"hunt clusters side by side, each with a driver process (default {SIDE_BY_SIDE})")
    args = parser.parse_args()
    if args.minutes <= 0 or args.clusters < 1:
        parser.error(f"--minutes must be > 0 and --clusters >= 1, got {args.minutes} and {args.clusters}")
    started = time.monotonic()
    stats, classes, ran = hunt(args.minutes, args.clusters)
    new = [label for label, verdict in classes.items() if any(f.signature.label() == label for f in verdict.new)]
    silent = [label for label, verdict in classes.items()
              if any(f.signature.label() == label for f in verdict.undocumented)]
    print(f"\n{ran} programs in {(time.monotonic() - started) / 60:.1f} min; {len(classes)} failure classes, "
          f"{len(new)} not known, {len(silent)} undocumented (outcomes Ray's docs are silent on); the rest "
          "reproduce under findings/")
    print("\n| feature or fault | programs |\n|---|---|")
    for label, count in sorted(stats.items()):
        if not label.startswith("failure: "):
            print(f"| {label} | {count} |")
    total = sum(SPENT.values())
    print("\n| phase of a program's run | seconds | share |\n|---|---:|---:|")
    for phase, seconds in sorted(SPENT.items(), key=lambda kv: -kv[1]):
        print(f"| {phase} | {seconds:.0f} | {seconds / total:.0%} |")
    print("\n| fault kind | landings tried | seconds landing them | each (mean) |\n|---|---:|---:|---:|")
    for kind, seconds in sorted(LANDING.items(), key=lambda kv: -kv[1]):
        print(f"| {kind} | {LANDING_COUNT[kind]} | {seconds:.0f} | {seconds / LANDING_COUNT[kind]:.2f} |")
    print("\nfailure classes (first program of each, replayable):")
    for label, verdict in classes.items():
        known = "" if label in new else ", undocumented" if label in silent else ", known"
        print(f"\n## {label}  ({stats['failure: ' + label]} steps{known})\n{verdict.report()}")
    if FAILED:
        raise SystemExit(f"\nthe hunt stopped early: {FAILED[0]}")


if __name__ == "__main__":
    main()
