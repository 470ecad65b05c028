"""Fault latency: from a schedule's tick to the fault's effect confirmed, per fault kind.

    python benchmarks/fault_latency.py [--quick]

For each kind, ``run_schedule`` injects five faults one second apart on an embedded cluster
of 1 and of 3 nodes; the observer's ``injected`` hook (called once the effect is confirmed)
timestamps each one. The engine warms up before time zero (agents started, State API
connected), as the scenario runner does. Reported: the first fault's latency and the worst
and median of the others. Kinds whose confirmation waits for Ray itself (a node declared
dead by its health check) are reported in a second table: that wait is Ray's, not ours.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _common import console, machine, table  # noqa: E402

from chaos import (  # noqa: E402
    ActorTarget,
    Chaos,
    CpuHog,
    Fault,
    FillDisk,
    FillObjectStore,
    Kill,
    LimitOpenFiles,
    Pause,
    Schedule,
    ScheduledFault,
    ScheduleObserver,
    Starve,
    capped_filesystem,
    local_cluster,
    run_schedule,
)

FIRST_BOUND, REST_BOUND = 0.100, 0.050


class Victim:
    def pid(self) -> int:
        return os.getpid()


class Timer(ScheduleObserver):
    """Records tick → confirmed for each fault; holds each one for its own seconds."""

    def __init__(self, start: float) -> None:
        self.start, self.latency = start, {}  # type: float, dict[int, float]

    def injected(self, index: int, entry: ScheduledFault, injection: Any) -> None:
        self.latency[index] = time.monotonic() - self.start - entry.at


def kinds(disk: str) -> dict[str, Callable[[], Fault]]:
    victim = ActorTarget(name="victim", namespace="raychaos")
    return {
        "kill": lambda: Kill(victim),
        "pause": lambda: Pause(victim, seconds=0.2),
        "limit_open_files": lambda: LimitOpenFiles(victim, seconds=0.2),
        "cpu": lambda: CpuHog(cores=1, seconds=0.2),
        "fill_disk": lambda: FillDisk(disk, seconds=0.2),
        "object_store": lambda: FillObjectStore(fraction=0.05, seconds=0.2),
        "starve": lambda: Starve(seconds=0.2, cpus=0.5),
    }


def measure(address: str, make: Callable[[], Fault], count: int) -> list[float]:
    chaos = Chaos(address=address, seed=1)
    schedule = Schedule(tuple(ScheduledFault(1.0 + i, make()) for i in range(count)))
    chaos.warm_up(schedule)
    start = time.monotonic()
    timer = Timer(start)
    outcomes = run_schedule(chaos, schedule, start=start, observer=timer)
    failed = [o.describe() for o in outcomes if not o.ok]
    if failed:
        raise SystemExit(f"faults did not happen: {failed}")
    return [timer.latency[i] for i in range(count)]


def row(nodes: int, kind: str, times: list[float]) -> list[str]:
    first, rest = times[0], times[1:]
    ok = first <= FIRST_BOUND and max(rest) <= REST_BOUND
    return [str(nodes), kind, f"{first * 1000:.1f}", f"{max(rest) * 1000:.1f}",
            f"{statistics.median(rest) * 1000:.1f}", "yes" if ok else "NO"]


def run(nodes: int, count: int, disk: str) -> list[list[str]]:
    import ray

    rows = []
    with local_cluster(nodes=nodes, num_cpus=2, log_to_driver=False,
                       worker_resources={"worker": 100} if nodes > 1 else None) as cluster:
        victim = ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0)(Victim).options(
            name="victim", namespace="raychaos").remote()
        ray.get(victim.pid.remote(), timeout=60)
        for kind, make in kinds(disk).items():
            times = measure(cluster.address, make, count)
            rows.append(row(nodes, kind, times))
            ray.get(victim.pid.remote(), timeout=60)  # back up after kills
        ray.kill(victim)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 faults per kind instead of 5")
    count = 3 if parser.parse_args().quick else 5
    console.print(f"[bold]raychaos fault latency[/] (schedule tick → effect confirmed) on {machine()}")
    rows: list[list[str]] = []
    with tempfile.TemporaryDirectory(), capped_filesystem(4) as disk:
        for nodes in (1, 3):
            rows += run(nodes, count, disk)
    table(f"tick → confirmed, ms (bound: first ≤ {FIRST_BOUND * 1000:.0f}, others ≤ {REST_BOUND * 1000:.0f})",
          ["nodes", "fault", "first", "others: worst", "others: median", "within bound"], rows)
    if any(r[-1] != "yes" for r in rows):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
