"""Standalone reproduction: is a task submitted as the GCS comes back ever lost?

Found: yes, when the GCS was restarted from a thread that then ends. Ray forks the GCS with
``PR_SET_PDEATHSIG(SIGKILL)`` (``ray._private.utils.set_kill_on_parent_death_linux``), and Linux
sends that signal when the forking *thread* exits: the restarted GCS dies a second later, any
task that needs a new worker never runs, and 60 s on Ray ends every process. ``--raw`` restarts
the GCS with Ray's ``Node.start_gcs_server`` from a thread that ends (what chaos did until the
fix); without it the restart goes through ``chaos``, which forks from one long-lived thread.

An embedded single-node cluster with GCS fault tolerance (Debian's redis-server), its GCS
SIGKILLed and, ``DOWN`` seconds later, started again on the same port (Ray's own
``Node.start_gcs_server``, as Ray's GCS fault-tolerance tests do). A thread submits a small
task with ``max_retries=3`` every ``PACE`` seconds from before the kill until ``AFTER``
seconds after the restart began, as the ``gcs-restart`` scenario does. Each task then gets
``SETTLE`` seconds to return. For each that did not, it prints when it was submitted
relative to the restart and what Ray's State API says of it. With ``--actor``, each step also
calls a detached actor (``max_restarts=-1``) and waits for its answer first, as the scenario's
WAL counter does.

    .venv/bin/python benchmarks/repro_gcs_restart_lost_task.py [--actor] [--raw] [rounds]
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import ray

from chaos import local_cluster
from chaos._cluster import head_of
from chaos.cluster import redis_server
from scenarios.workloads._surface import _task_state

DOWN, PACE, AFTER, SETTLE = 3.0, 0.02, 2.0, 30.0


@ray.remote(num_cpus=0.25, max_retries=3)
def square(x: int) -> int:
    return x * x


@ray.remote(num_cpus=0, max_restarts=-1, max_task_retries=-1)
class Counter:
    def __init__(self) -> None:
        self.n = 0

    def add(self) -> int:
        self.n += 1
        return self.n


@dataclass(frozen=True)
class Sent:
    i: int
    at: float  #: monotonic time of submission
    ref: Any


def submit_until(stop: threading.Event, sent: list[Sent], counter: Any) -> None:
    i = 0
    while not stop.is_set():
        if counter is not None:
            try:
                ray.get(counter.add.remote(), timeout=5)
            except Exception:  # noqa: BLE001 - the actor's answer only paces the loop, as in the scenario
                pass
        sent.append(Sent(i, time.monotonic(), square.remote(i)))
        i += 1
        stop.wait(PACE)  # the submission pace, not a synchronisation


def lost(sent: list[Sent]) -> list[Sent]:
    ready, _ = ray.wait([s.ref for s in sent], num_returns=len(sent), timeout=SETTLE)
    done = set(ready)
    return [s for s in sent if s.ref not in done]


def state_of(address: str, ref: Any) -> str:
    if not _gcs_alive():
        return "the GCS process is gone"
    return _task_state(address, ref)


def restart_from_a_thread(head: Any, address: str, *, raw: bool) -> tuple[int, float]:
    """Restart the GCS from a thread that ends once it answers, as a fault's heal does."""
    from chaos import wait_until
    from chaos._cluster import GCS_RESTART_TIMEOUT, _gcs_answers

    result: list[tuple[int, float]] = []

    def restart() -> None:
        if not raw:
            result.append(head.restart_gcs(address))
            return
        start = time.monotonic()
        head.node.start_gcs_server()
        wait_until(lambda: _gcs_answers(address), timeout=GCS_RESTART_TIMEOUT, interval=0.1, what="the GCS")
        result.append((head.gcs_pid(), time.monotonic() - start))

    thread = threading.Thread(target=restart, name="heal")
    thread.start()
    thread.join(timeout=GCS_RESTART_TIMEOUT + 10)
    return result[0]


def _gcs_alive() -> bool:
    import psutil

    return any(p.info["name"] == "gcs_server" and p.info["status"] != psutil.STATUS_ZOMBIE
               for p in psutil.process_iter(["name", "status"]))


def one_round(actor: bool, raw: bool) -> int:
    with redis_server() as redis, local_cluster(nodes=1, num_cpus=2, redis_address=redis,
                                                log_to_driver=False) as cluster:
        ray.get(square.remote(1), timeout=60)
        counter = Counter.options(name="counter", lifetime="detached").remote() if actor else None
        head, stop, sent = head_of(cluster.address), threading.Event(), []
        thread = threading.Thread(target=submit_until, args=(stop, sent, counter))
        thread.start()
        try:
            threading.Event().wait(1.0)  # tasks before the kill
            killed = time.monotonic()
            head.kill_gcs()
            threading.Event().wait(DOWN)  # the outage
            restart = time.monotonic()
            pid, took = restart_from_a_thread(head, cluster.address, raw=raw)
            threading.Event().wait(AFTER)
        finally:
            stop.set()
            thread.join(timeout=10)
        # One more in a new worker process, which must register with the GCS.
        fresh = square.options(runtime_env={"env_vars": {"REPRO_FRESH_WORKER": "1"}})
        sent.append(Sent(-1, time.monotonic(), fresh.remote(-1)))
        missing = lost(sent)
        print(f"{len(sent)} tasks; GCS killed at {killed - restart:+.2f} s, restarted as pid {pid} "
              f"(0 s), answering after {took:.2f} s; {len(missing)} did not return within {SETTLE:g} s")
        for s in missing:
            where = "in a new worker" if s.i < 0 else f"{s.i}"
            print(f"  task {where} submitted at {s.at - restart:+.3f} s: {state_of(cluster.address, s.ref)}")
        if counter is not None:
            ray.kill(counter)  # detached: it would outlive the round
        return len(missing)


def main() -> None:
    rounds = int(next((a for a in sys.argv[1:] if a.isdigit()), "1"))
    total = sum(one_round("--actor" in sys.argv, "--raw" in sys.argv) for _ in range(rounds))
    print(f"{total} tasks lost in {rounds} rounds")


if __name__ == "__main__":
    main()
