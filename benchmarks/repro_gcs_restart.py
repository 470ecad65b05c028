"""Standalone reproduction: after a GCS restart on Redis, does every process stay connected?

An embedded single-node cluster with GCS fault tolerance (Debian's redis-server), its GCS
SIGKILLed and, ``DOWN`` seconds later, started again on the same port (Ray's own
``Node.start_gcs_server``, as Ray's GCS fault-tolerance tests do). The driver then keeps
running a small task every few seconds for ``WATCH`` seconds and reports, for each process of
the session, whether its logs say "GCS has been unavailable for more than 60 seconds" (Ray's
core worker exits on it) and whether its task-event flushes stayed unanswered. With
``--load``, two busy processes run throughout and tasks are submitted during the outage, as in
a loaded ``gcs-restart`` scenario (where it was seen: 1 run in 10, the machine busy).

    .venv/bin/python benchmarks/repro_gcs_restart.py [--load] [rounds]
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ray

from chaos import local_cluster
from chaos._cluster import head_of
from chaos.cluster import redis_server

DOWN, WATCH, EVERY = 3.0, 80.0, 5.0
FATAL = "GCS has been unavailable for more than 60 seconds"
UNANSWERED = "hasn't replied to the previous flush events call"


@ray.remote(num_cpus=0.25)
def square(x: int) -> int:
    return x * x


def watch(since: float) -> list[str]:
    """A task every EVERY seconds; what happened to each."""
    lines = []
    while (elapsed := time.monotonic() - since) < WATCH:
        try:
            ok = ray.get(square.remote(3), timeout=30) == 9
            lines.append(f"  +{elapsed:5.1f} s: task {'ok' if ok else 'WRONG'}")
        except Exception as exc:  # noqa: BLE001 - reported
            lines.append(f"  +{elapsed:5.1f} s: {type(exc).__name__}: {str(exc)[:100]}")
        threading.Event().wait(EVERY)  # the probe's pace
    return lines


def log_findings(session: str) -> dict[str, int]:
    counts = {"processes": 0, "fatal": 0, "unanswered flushes": 0}
    for path in glob.glob(f"{session}/logs/python-core-*.log"):
        with open(path, errors="replace") as f:
            text = f.read()
        counts["processes"] += 1
        counts["fatal"] += FATAL in text
        counts["unanswered flushes"] += UNANSWERED in text
    return counts


def one_round(load: bool) -> None:
    with redis_server() as redis, local_cluster(nodes=1, num_cpus=2, redis_address=redis,
                                                log_to_driver=False) as cluster:
        ray.get(square.remote(1), timeout=60)
        session = ray._private.worker._global_node.get_session_dir_path()
        head = head_of(cluster.address)
        head.kill_gcs()
        outage = [square.remote(i) for i in range(200)] if load else []
        threading.Event().wait(DOWN)  # the outage
        pid, took = head.restart_gcs(cluster.address)
        print(f"{len(ray.wait(outage, num_returns=len(outage), timeout=30)[0])} of {len(outage)} "
              "tasks submitted during the outage returned")
        print(f"GCS restarted as pid {pid}, answered after {took:.2f} s")
        restarted = time.monotonic()
        try:
            print("\n".join(watch(restarted)))
        finally:
            print(f"logs of the session's core workers and driver: {log_findings(session)}")


BUSY = "import time\nend = time.monotonic() + 3600\nwhile time.monotonic() < end:\n    pass\n"


def main() -> None:
    load = "--load" in sys.argv
    rounds = int(next((a for a in sys.argv[1:] if a.isdigit()), "1"))
    hogs = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(2 if load else 0)]
    try:
        for i in range(rounds):
            print(f"round {i}", flush=True)
            one_round(load)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait(timeout=10)


if __name__ == "__main__":
    main()
