"""Standalone reproduction: a driver whose GCS died before the driver's error-listener thread
first read from it cannot ``ray.shutdown()``; the call blocks until Ray ends the process
(exit 1) ``gcs_rpc_server_reconnect_timeout_s`` (60 s) after the GCS's loss.

``ray.init`` starts a thread, ``ray_listen_error_messages``, whose first act is a read from the
GCS's key-value store (the autoscaler's last error) with no deadline. ``ray.shutdown`` joins
that thread. When the GCS is gone before the read was answered, the read waits for the GCS to
come back, the join waits for the read, and 60 s after the loss Ray's GCS client ends the
process from a background thread ("Failed to connect to GCS within 60 seconds"). A test
harness that kills the GCS right after ``ray.init`` on a loaded machine (where the thread is
scheduled late) and then shuts down to start a fresh cluster loses its whole process.

Each round runs in its own driver process: the listener thread's first read is held until the
GCS has been SIGKILLed (``Node.kill_gcs_server``), standing in for a thread the machine
scheduled late (``--control``: the read is let through first, and the GCS killed after it),
then ``ray.shutdown()`` is called. A round reproduces when the driver exits non-zero without
``ray.shutdown`` having returned.

    python findings/shutdown_blocked_when_gcs_gone.py [--control] [rounds]
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

LISTENER = "ray_listen_error_messages"  # Ray's name for the thread
ROUND_BOUND = 150.0
RETURNED = "ray.shutdown() returned"


def hold_first_read(release: threading.Event, through: threading.Event) -> None:
    """Hold the listener thread's reads until ``release``; ``through`` is set once one ended."""
    import ray._private.worker as worker

    read = worker._internal_kv_get

    def held(*args: object, **kwargs: object) -> object:
        if threading.current_thread().name != LISTENER:
            return read(*args, **kwargs)
        release.wait(timeout=30)
        try:
            return read(*args, **kwargs)
        finally:
            through.set()

    worker._internal_kv_get = held


def child(control: bool) -> None:
    import ray

    release, through = threading.Event(), threading.Event()
    hold_first_read(release, through)
    ray.init(address="local", num_cpus=1, include_dashboard=False, log_to_driver=False)
    if control:
        release.set()
        through.wait(timeout=30)
    ray._private.worker._global_node.kill_gcs_server()
    killed = time.monotonic()
    release.set()
    print("GCS killed; ray.shutdown() ...", flush=True)
    ray.shutdown()
    print(f"{RETURNED} {time.monotonic() - killed:.1f} s after the kill", flush=True)


def kill_session(sid: int) -> None:
    """SIGKILL what is left of a round: every process of its session (Ray's agents outlive it)."""
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[3]) == sid:  # the session id, after state, ppid and pgrp
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(stat.split("/")[2]), signal.SIGKILL)


def run_child(control: bool) -> tuple[int, str, str, float]:
    """One driver in its own session; its exit code, stdout, stderr and how long it took."""
    args = [sys.executable, __file__, "--child"] + (["--control"] if control else [])
    start = time.monotonic()
    # Files, not pipes: Ray's own processes inherit the driver's output and outlive it.
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(args, stdout=out, stderr=err, text=True, start_new_session=True)
        try:
            child.wait(timeout=ROUND_BOUND)
        finally:
            kill_session(child.pid)
            child.wait(timeout=10)
        out.seek(0)
        err.seek(0)
        return child.returncode, out.read(), err.read(), time.monotonic() - start


def one_round(control: bool) -> tuple[bool, str]:
    code, out, err, took = run_child(control)
    if RETURNED in out:
        return False, f"exit {code}: {out.strip().splitlines()[-1]}"
    ended = "Failed to connect to GCS within" in err
    return code != 0, (f"exit {code} after {took:.0f} s, ray.shutdown() never returned"
                       + ("; Ray: 'Failed to connect to GCS within 60 seconds'" if ended else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", type=int, nargs="?", default=2)
    parser.add_argument("--control", action="store_true",
                        help="the control: the GCS is killed after the listener's first read")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.control)
        return
    import ray

    print(f"Ray {ray.__version__}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs; "
          f"{'GCS killed after the first read (control)' if args.control else 'GCS killed before the first read'}")
    reproduced = 0
    for index in range(args.rounds):
        blocked, line = one_round(args.control)
        reproduced += blocked
        print(f"round {index}: {line}", flush=True)
    print(f"REPRODUCED {reproduced} of {args.rounds}")


if __name__ == "__main__":
    main()
