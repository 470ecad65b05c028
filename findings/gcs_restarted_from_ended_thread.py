"""Standalone reproduction: a GCS restarted from a thread that then ends is killed a second
later, and every task that needs a new worker afterwards is lost.

Ray's GCS fault tolerance (an external Redis, ``RAY_REDIS_ADDRESS``) lets a killed GCS be started
again with its tables. Ray forks the GCS with ``PR_SET_PDEATHSIG(SIGKILL)``
(``ray._private.utils.set_kill_on_parent_death_linux``), and Linux sends that signal when the
forking *thread* exits, not the process. ``Node.start_gcs_server`` called from a short-lived
thread — a timer, a fault's heal, an executor that retires idle threads — starts a GCS that the
kernel SIGKILLs as soon as that thread ends. Ray's documentation does not say where the GCS must
be restarted from.

Each round runs in its own process (once the GCS is gone, Ray ends the driver 60 s later):
Debian's ``redis-server`` on a free port, ``ray.init`` with ``RAY_REDIS_ADDRESS`` set, the GCS
SIGKILLed (``Node.kill_gcs_server``), ``DOWN`` seconds later started again by
``Node.start_gcs_server`` from a thread that ends at once (``--main-thread``: from the main
thread, which lives on: the control). Then a task in a new worker process must return within
``SETTLE`` seconds.

    python findings/gcs_restarted_from_ended_thread.py [--main-thread] [rounds]
"""

from __future__ import annotations

import contextlib
import glob
import os
import signal
import socket
import subprocess
import sys
import threading
import time

DOWN, SETTLE, AFTER = 2.0, 30.0, 3.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # bounded: Redis answers within a second here
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"redis-server on port {port} did not answer within 10 s")


def one_round(from_main_thread: bool) -> str:
    import ray

    @ray.remote(max_retries=3)
    def square(x: int) -> int:
        return x * x

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    node = ray._private.worker._global_node
    ray.get(square.remote(1), timeout=60)
    node.kill_gcs_server()
    time.sleep(DOWN)  # the outage's length
    if from_main_thread:
        node.start_gcs_server()
    else:
        heal = threading.Thread(target=node.start_gcs_server, name="heal")
        heal.start()
        heal.join(timeout=60)
    time.sleep(AFTER)  # the forking thread has ended; give the kernel's signal time to land
    fresh = square.options(runtime_env={"env_vars": {"FINDING_FRESH_WORKER": "1"}})
    try:
        ray.get(fresh.remote(3), timeout=SETTLE)
        return "returned"
    except ray.exceptions.GetTimeoutError:
        return f"lost: no answer within {SETTLE:g} s"
    finally:  # not ray.shutdown(): it waits for a GCS that may be gone
        node.kill_all_processes(check_alive=False, allow_graceful=False)


def kill_session(sid: int) -> None:
    """SIGKILL what is left of a round: every process of its session (Ray's workers included)."""
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[3]) == sid:  # the session id, after state, ppid and pgrp
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(stat.split("/")[2]), signal.SIGKILL)


def main() -> None:
    args = sys.argv[1:]
    if "--one-round" in args:
        print("OUTCOME", one_round("--main-thread" in args), flush=True)
        os._exit(0)  # the GCS may be gone: do not wait for Ray's shutdown
    rounds = int(next((a for a in args if a.isdigit()), "3"))
    import ray

    where = "the main thread" if "--main-thread" in args else "a thread that ends"
    print(f"Ray {ray.__version__}; GCS restarted from {where}")
    lost = 0
    for i in range(rounds):
        redis, address = start_redis()
        try:
            env = {**os.environ, "RAY_REDIS_ADDRESS": address}
            child = subprocess.Popen([sys.executable, __file__, "--one-round", *args], env=env, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
            try:
                stdout, _ = child.communicate(timeout=SETTLE + 120)
            finally:
                kill_session(child.pid)
            outcome = next((line[8:] for line in stdout.splitlines() if line.startswith("OUTCOME ")),
                           f"no outcome (exit {child.returncode})")
        finally:
            redis.kill()
            redis.wait(timeout=10)
        lost += outcome.startswith("lost")
        print(f"round {i}: a task in a new worker after the restart: {outcome}", flush=True)
    print(f"REPRODUCED {lost} of {rounds}: the task needing a new worker was lost")


if __name__ == "__main__":
    main()
