"""Standalone reproduction: when the GCS stays gone, Ray ends the driver, a plain process with
no exception to catch, ``gcs_rpc_server_reconnect_timeout_s`` later (60 s by default).

Ray's GCS fault tolerance lets a killed GCS be started again from an external Redis while
running tasks and actors go on. A GCS that is not started again (nobody restarts it outside
KubeRay; one that exited on its own after its Redis connection dropped, or was killed by the
kernel because the thread that forked it ended) takes the driver with it: the driver's core
worker exits the process from a background thread, so the driver's own code, even blocked in a
``ray.get`` with a timeout, never sees an exception and no ``finally`` of it runs. Ray's GCS
fault tolerance page says running tasks and actors stay alive while the GCS recovers; its KubeRay
page says that without fault tolerance the head dies ``RAY_gcs_rpc_server_reconnect_timeout_s``
after the GCS. Neither says the driver's process is ended from within, with nothing to catch.

Each round runs in its own process: Debian's ``redis-server`` on a free port, ``ray.init`` with
``RAY_REDIS_ADDRESS`` set, a task run, the GCS SIGKILLed (``Node.kill_gcs_server``) and left
down (``--restart``: started again ``DOWN`` seconds later from the main thread: the control).
The driver then runs a small task every second, each ``ray.get`` with a timeout, for the
reconnect timeout plus ``MARGIN`` seconds. The script prints how the driver ended (its exit code,
how long after the kill, whether its code saw an exception) and how many of the session's
core-worker logs say the GCS was unavailable for too long.

    flock /tmp/raychaos-ray.lock .venv/bin/python findings/driver_ended_when_gcs_gone.py \\
        [--restart] [--reconnect-timeout S] [rounds]
"""

from __future__ import annotations

import contextlib
import glob
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

DOWN, MARGIN = 2.0, 20.0
GONE = ("GCS has been unavailable for more than", "Failed to connect to GCS within")


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


def one_round(restart: bool, reconnect: float) -> None:
    """The driver: prints SESSION, KILLED, then OUTCOME only if its own code ever gets to."""
    import ray

    @ray.remote(num_cpus=0.25)
    def square(x: int) -> int:
        return x * x

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    node = ray._private.worker._global_node
    ray.get(square.remote(1), timeout=60)
    print("SESSION", node.get_session_dir_path(), flush=True)
    node.kill_gcs_server()
    print("KILLED", time.time(), flush=True)  # wall clock: the parent compares it with its own
    if restart:
        time.sleep(DOWN)  # the outage's length
        node.start_gcs_server()  # from the main thread, which lives on
    end, answered = time.monotonic() + reconnect + MARGIN, 0
    try:
        while time.monotonic() < end:
            with contextlib.suppress(ray.exceptions.GetTimeoutError):
                answered += ray.get(square.remote(3), timeout=5) == 9
            time.sleep(1.0)  # the probe's pace
    except BaseException as exc:  # noqa: BLE001 - what the driver's code saw is the finding
        print("OUTCOME", f"the driver's code saw {type(exc).__name__}: {str(exc)[:160]}", flush=True)
        return
    print("OUTCOME", f"the driver's code ran on: {answered} tasks answered", flush=True)


def gone_logs(session: str) -> str:
    """How many of the session's core-worker and driver logs say the GCS was gone too long."""
    paths = glob.glob(f"{session}/logs/python-core-*.log")
    said = 0
    for path in paths:
        with open(path, errors="replace") as f:
            text = f.read()
        said += any(words in text for words in GONE)
    return f"{said} of {len(paths)} core-worker logs say the GCS was unavailable too long"


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


def run_round(args: list[str], reconnect: float) -> tuple[bool, str]:
    """One driver in its own session; returns whether Ray ended it, and what was seen."""
    redis, address = start_redis()
    env = {**os.environ, "RAY_REDIS_ADDRESS": address, "RAY_gcs_rpc_server_reconnect_timeout_s": f"{reconnect:g}"}
    # A file, not a pipe: Ray's own processes inherit the driver's stdout and outlive it.
    with tempfile.TemporaryFile("w+") as out:
        child = subprocess.Popen([sys.executable, __file__, "--one-round", *args], env=env, text=True,
                                 stdout=out, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            child.wait(timeout=reconnect + MARGIN + 120)
            exited = time.time()
        finally:
            kill_session(child.pid)
            redis.kill()
            redis.wait(timeout=10)
        out.seek(0)
        said = {line.split(" ", 1)[0]: line.strip().partition(" ")[2] for line in out}
    after = exited - float(said["KILLED"]) if "KILLED" in said else float("nan")
    ended = "OUTCOME" not in said
    seen = said.get("OUTCOME", "the driver's code saw no exception: its process ended")
    logs = gone_logs(said["SESSION"]) if "SESSION" in said else "no session"
    return ended, f"exit {child.returncode} {after:.1f} s after the kill; {seen}; {logs}"


def main() -> None:
    args = sys.argv[1:]
    reconnect = float(args[args.index("--reconnect-timeout") + 1]) if "--reconnect-timeout" in args else 60.0
    if "--one-round" in args:
        one_round("--restart" in args, reconnect)
        os._exit(0)  # past the outcome: do not wait for Ray's shutdown of a GCS that may be gone
    rounds = int(next((a for i, a in enumerate(args) if a.isdigit() and args[i - 1] != "--reconnect-timeout"), "2"))
    import ray

    what = f"started again after {DOWN:g} s" if "--restart" in args else "left down"
    print(f"Ray {ray.__version__}; the GCS killed and {what}; gcs_rpc_server_reconnect_timeout_s={reconnect:g}")
    ended = 0
    for i in range(rounds):
        was_ended, outcome = run_round(args, reconnect)
        ended += was_ended
        print(f"round {i}: {'ended by Ray' if was_ended else 'ran on'}: {outcome}", flush=True)
    print(f"REPRODUCED {ended} of {rounds}: Ray ended the driver, its code saw no exception")


if __name__ == "__main__":
    main()
