"""Fault latency: from a schedule's tick to the fault's effect confirmed, per fault kind.

    python benchmarks/fault_latency.py [--quick]

For each kind, ``run_schedule`` injects five faults one second apart on an embedded cluster
of 1 and of 3 nodes; the observer's ``injected`` hook (called once the effect is confirmed)
timestamps each one. The engine warms up before time zero (agents started, State API
connected, the object store's memory mapped), as the scenario runner does. Reported: the first
fault's latency and the worst and median of the others. Node kills run on a 3-node cluster of
their own, eight seconds apart, each killed node replaced once Ray has declared it dead; a
second table shows how long that took (Ray's health check: its wait, not ours; a kill counts
as injected only once it happened). Exit 1 when a kind misses its bound.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, wait
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import psutil
import ray
from _common import console, machine, table

from chaos import (
    ActorTarget,
    Bandwidth,
    Chaos,
    CpuHog,
    DrainNode,
    Fault,
    FillDisk,
    FillObjectStore,
    FlappingLink,
    FreezeNode,
    Kill,
    KillGcs,
    KillNode,
    LimitOpenFiles,
    MemoryPressure,
    PacketLoss,
    Partition,
    Pause,
    Schedule,
    ScheduledFault,
    Starve,
    local_cluster,
)
from chaos.agents import start_agents
from chaos.cluster import capped_filesystem, redis_server
from chaos.engine import FaultOutcome, ScheduleObserver, run_schedule
from chaos.net._lab import NEEDS, network_missing

FIRST_BOUND, REST_BOUND = 0.100, 0.050


class Victim:
    def pid(self) -> int:
        return os.getpid()


class Timer(ScheduleObserver):
    """Records tick → confirmed and tick → settled for each fault; holds each for its seconds."""

    def __init__(self, start: float) -> None:
        self.start = start
        self.latency: dict[int, float] = {}
        self.settled_after: dict[int, float] = {}

    def injected(self, index: int, entry: ScheduledFault, injection: Any) -> None:
        self.latency[index] = time.monotonic() - self.start - entry.at

    def settled(self, outcome: FaultOutcome) -> FaultOutcome:
        self.settled_after[outcome.index] = time.monotonic() - self.start - outcome.entry.at
        return outcome


def kinds(disk: str, nodes: int) -> dict[str, tuple[Callable[[], Fault], float]]:
    """Each kind: how to make one, and the spacing of its ticks (a GCS restart takes ~1.5 s)."""
    victim = ActorTarget(name="victim", namespace="raychaos")
    used = psutil.virtual_memory().percent / 100
    found: dict[str, tuple[Callable[[], Fault], float]] = {
        "kill": (lambda: Kill(victim), 1.0),
        "pause": (lambda: Pause(victim, seconds=0.2), 1.0),
        "limit_open_files": (lambda: LimitOpenFiles(victim, seconds=0.2), 1.0),
        "cpu": (lambda: CpuHog(cores=1, seconds=0.2), 1.0),
        "memory": (lambda: MemoryPressure(fraction=min(0.9, used + 0.04), seconds=0.3,
                                          host_cap=min(0.95, used + 0.08)), 1.5),
        "fill_disk": (lambda: FillDisk(disk, seconds=0.2), 1.0),
        "object_store": (lambda: FillObjectStore(fraction=0.05, seconds=0.2), 1.0),
        "starve": (lambda: Starve(seconds=0.2, cpus=0.5), 1.0),
    }
    if nodes == 1:
        found["kill_gcs"] = (lambda: KillGcs(seconds=0.2), 3.0)
    else:
        found["freeze_node"] = (lambda: FreezeNode(seconds=0.2), 1.0)
        found["drain_node"] = (lambda: DrainNode(deadline_s=60, kill_at_deadline=False), 1.0)
    return found


def measure(address: str, make: Callable[[], Fault], count: int, every: float = 1.0) -> Timer:
    chaos = Chaos(address=address, seed=1)
    schedule = Schedule(tuple(ScheduledFault(1.0 + i * every, make()) for i in range(count)))
    chaos.warm_up(schedule)
    start = time.monotonic()
    observer = Timer(start)
    outcomes = run_schedule(chaos, schedule, start=start, observer=observer)
    failed = [o.describe() for o in outcomes if not o.ok]
    if failed:
        raise SystemExit(f"faults did not happen: {failed}")
    return observer


def row(nodes: int, kind: str, timer: Timer) -> list[str]:
    times = [timer.latency[i] for i in sorted(timer.latency)]
    first, rest = times[0], times[1:]
    ok = first <= FIRST_BOUND and max(rest) <= REST_BOUND
    return [str(nodes), kind, f"{first * 1000:.1f}", f"{max(rest) * 1000:.1f}",
            f"{statistics.median(rest) * 1000:.1f}", "yes" if ok else "NO"]


def run(nodes: int, count: int, disk: str, only: set[str]) -> list[list[str]]:
    rows: list[list[str]] = []
    if only and not only & set(kinds(disk, nodes)):
        return rows  # none of its kinds asked for: no cluster to start
    with contextlib.ExitStack() as stack:
        redis = stack.enter_context(redis_server()) if nodes == 1 else None
        cluster = stack.enter_context(local_cluster(
            nodes=nodes, num_cpus=2, log_to_driver=False, redis_address=redis,
            worker_resources={"worker": 100} if nodes > 1 else None))
        victim = ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0, resources=(
            {"worker": 1} if nodes > 1 else None))(Victim).options(name="victim", namespace="raychaos").remote()
        ray.get(victim.pid.remote(), timeout=60)
        for kind, (make, every) in kinds(disk, nodes).items():  # drain_node last: nodes stay drained
            if only and kind not in only:
                continue
            rows.append(row(nodes, kind, measure(cluster.address, make, count, every)))
            ray.get(victim.pid.remote(), timeout=60)  # back up after kills
        ray.kill(victim)
    return rows


def replace_dead(cluster: Any) -> None:
    """Each worker node Ray has declared dead gives way to a fresh one, its agent started."""
    dead = {n["NodeID"] for n in ray.nodes() if not n.get("Alive")}
    for node in [n for n in cluster.worker_nodes if n.node_id in dead]:
        cluster.remove_node(node, allow_graceful=False)  # only its bookkeeping is left
        cluster.add_node(num_cpus=1, resources={"worker": 100.0})
        cluster.wait_for_nodes(timeout=60)
        start_agents()


def kill_node_rows(count: int) -> tuple[list[str], list[str]]:
    """Node kills on 3 nodes, 8 s apart, each killed node replaced (by this, the main thread:
    a node starts only from there) once Ray has declared it dead; until then it is listed
    ALIVE and could be picked again."""
    with local_cluster(nodes=3, num_cpus=1, log_to_driver=False,
                       worker_resources={"worker": 100}) as cluster, ThreadPoolExecutor(1) as pool:
        running = pool.submit(measure, cluster.address, lambda: KillNode(), count, every=8.0)
        while not wait([running], timeout=0.5).done:
            replace_dead(cluster.cluster)
        timer = running.result()
    noticed = [timer.settled_after[i] for i in sorted(timer.settled_after)]
    return row(3, "kill_node", timer), [
        "3", "kill_node", f"{min(noticed):.2f}", f"{statistics.median(noticed):.2f}",
        f"{max(noticed):.2f}", "health check: 1 s period, 3 misses"]


#: The network faults, on a network cluster of their own (a head and two namespaced workers),
#: each held 0.2 s: far below the health check, so no node is declared dead between them.
NETWORK_KINDS: dict[str, Callable[[], Fault]] = {
    "partition": lambda: Partition(seconds=0.2),
    "partition_head_one_way": lambda: Partition(seconds=0.2, peers="head", direction="outgoing"),
    "packet_loss": lambda: PacketLoss(percent=10, seconds=0.2),
    "bandwidth": lambda: Bandwidth(mbit=20, seconds=0.2),
    "flapping_link": lambda: FlappingLink(period=0.2, seconds=0.2),
}


def network_rows(count: int, only: set[str]) -> list[list[str]]:
    """The network faults on 3 nodes (worker nodes in namespaces), one second apart."""
    rows = []
    with local_cluster(nodes=3, num_cpus=1, log_to_driver=False, network=True) as cluster:
        for kind, make in NETWORK_KINDS.items():
            if not only or kind in only or (kind.startswith("partition") and "partition" in only):
                rows.append(row(3, kind, measure(cluster.address, make, count)))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="3 faults per kind instead of 5")
    parser.add_argument("--kinds", default="", help="only these kinds, comma-separated (all by default)")
    args = parser.parse_args()
    count, only = (3 if args.quick else 5), {k for k in args.kinds.split(",") if k}
    console.print(f"[bold]raychaos fault latency[/] (schedule tick → effect confirmed) on {machine()}")
    rows: list[list[str]] = []
    with capped_filesystem(4) as disk:
        for nodes in (1, 3):
            rows += run(nodes, count, disk, only)
    if not network_missing():  # root and nft/ip/tc: else the table says they were not measured
        rows += network_rows(count, only)
    else:
        console.print(f"network faults not measured: they need {NEEDS}")
    noticed = []
    if not only or "kill_node" in only:
        ours, noticed = kill_node_rows(count)
        rows.append(ours)
    table(f"tick → confirmed, ms (bound: first ≤ {FIRST_BOUND * 1000:.0f}, others ≤ {REST_BOUND * 1000:.0f})",
          ["nodes", "fault", "first", "others: worst", "others: median", "within bound"], rows)
    if noticed:
        table("tick → Ray declared the killed node dead, s", ["nodes", "fault", "fastest",
                                                              "median", "slowest", "Ray's wait"], [noticed])
    if any(r[-1] != "yes" for r in rows):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
