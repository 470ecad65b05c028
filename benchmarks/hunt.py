"""Hunt for Ray bugs: generated programs under faults, for a given time, on a cluster of its
own; prints its progress as it goes (to standard error: a bar, the time left, programs a minute,
each fault kind's landed count), then the failure classes found and the feature/fault table.

    python benchmarks/hunt.py --minutes 30
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

from hypothesis import HealthCheck, event, given, settings, target

from chaos.cluster import local_cluster, redis_server
from scenarios.hunt import Program, ProgramVerdict, programs, run_program
from scenarios.hunt._rpc import add_rpc_node, add_slow_node
from scenarios.hunt._run import HUNT_NODE, NODE_BOUND, REPLACEMENT_STORE
from scenarios.hunt._stats import Progress, fault_labels, features

#: The hunt's object store (MiB): small, so object-store pressure fills it past capacity (and
#: frees it) in 1.1 s. It spills to Ray's default directory, under the cluster's temp dir.
STORE_MB = 96
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
SPENT: Counter[str] = Counter()
#: Seconds spent landing (or missing) each kind of fault, and how many there were.
LANDING: Counter[str] = Counter()
LANDING_COUNT: Counter[str] = Counter()


def hunt(minutes: float) -> tuple[Counter[str], dict[str, ProgramVerdict], int]:
    """Run generated programs until ``minutes`` pass, on a head, one removable node (where
    node removals land), one node whose processes fail RPCs (where RPC failures land) and one
    whose processes delay them (where RPC delays land), whose
    GCS keeps its tables on a Redis of its own (where GCS restarts land); returns the label
    counts, the first verdict of each failure class and how many programs ran."""
    stats: Counter[str] = Counter()
    classes: dict[str, ProgramVerdict] = {}
    ran = 0
    end = time.monotonic() + minutes * 60
    reporter = Reporter(minutes)
    with redis_server() as redis, local_cluster(nodes=2, object_store_mb=STORE_MB, redis_address=redis,
                                                worker_resources={HUNT_NODE: 100.0}, log_to_driver=False) as cluster:
        add_rpc_node(cluster.cluster, object_store_bytes=REPLACEMENT_STORE, bound=NODE_BOUND)
        add_slow_node(cluster.cluster, object_store_bytes=REPLACEMENT_STORE, bound=NODE_BOUND)

        @settings(max_examples=25, deadline=None, database=None, suppress_health_check=list(HealthCheck))
        @given(program=programs(gcs_restart=True, rpc_failures=True, rpc_delay=True))
        def one(program: Program) -> None:
            nonlocal ran
            if time.monotonic() > end:
                return
            verdict = run_program(program, address=cluster.address, cluster=cluster.cluster, gcs_restart=True,
                                  rpc_failures=True, rpc_delay=True)
            ran += 1
            SPENT.update({phase.value: seconds for phase, seconds in verdict.phases})
            for kind, seconds in verdict.landing:
                LANDING[kind.value] += seconds
                LANDING_COUNT[kind.value] += 1
            for label in sorted(features(program) | fault_labels(verdict)):
                event(label)
                stats[label] += 1
            target(verdict.slowest, label="slowest get (s)")
            for failure in verdict.failures:
                classes.setdefault(failure.signature.label(), verdict)
                stats[f"failure: {failure.signature.label()}"] += 1
            reporter.program_done(ran, len(classes), stats)

        while time.monotonic() < end:
            one()
    return stats, classes, ran


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0)
    args = parser.parse_args()
    started = time.monotonic()
    stats, classes, ran = hunt(args.minutes)
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
    for phase, seconds in SPENT.most_common():
        print(f"| {phase} | {seconds:.0f} | {seconds / total:.0%} |")
    print("\n| fault kind | landings tried | seconds landing them | each (mean) |\n|---|---:|---:|---:|")
    for kind, seconds in LANDING.most_common():
        print(f"| {kind} | {LANDING_COUNT[kind]} | {seconds:.0f} | {seconds / LANDING_COUNT[kind]:.2f} |")
    print("\nfailure classes (first program of each, replayable):")
    for label, verdict in classes.items():
        known = "" if label in new else ", undocumented" if label in silent else ", known"
        print(f"\n## {label}  ({stats['failure: ' + label]} steps{known})\n{verdict.report()}")


if __name__ == "__main__":
    main()
