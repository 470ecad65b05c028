"""Standalone reproduction: ``ray.cancel(ref, force=True)`` right after a ``ray.cancel(ref)``
that landed crashes the driver (a failed ``RAY_CHECK``, the process exits with code 1).

Ray's ``ray.cancel`` reference: a running task cancelled without ``force`` gets a
``KeyboardInterrupt`` and ``ray.get`` raises ``TaskCancelledError``; with ``force=True`` its
worker is killed; cancelling a task that has already finished does nothing. Seen here:
``ray.get`` raises ``TaskCancelledError`` as soon as the non-force cancel lands, before the
task's worker has replied; a force cancel in that window fails the task in its owner, and when
the worker's reply (the task ended by the interrupt) then arrives, the owner's task manager
finds no pending task and aborts the whole driver::

    task_manager.cc:1329: Check failed: it != submissible_tasks_.end()
    Tried to complete task that was not pending <task id>

A test suite that cancels, checks the ``TaskCancelledError``, then force-cancels in a
``finally`` "to be sure" dies mid-run with nothing printed by Python.

Each round runs in its own driver process (the crash ends it): ``ray.init``, then up to
``--tries`` times: a task that waits in short slices (so the interrupt lands) is started, cancelled
without force, its ``ray.get`` must raise ``TaskCancelledError``, and it is force-cancelled at once
(``--no-force``: not, the control); the driver then lives on for ``LINGER`` seconds. A round
reproduces when its driver exits non-zero with the check's message on its stderr.

    python findings/force_cancel_after_cancel_crashes_driver.py [--no-force] [--tries K] [rounds]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

CHECK = "Tried to complete task that was not pending"
LINGER = 1.0  # seconds a driver waits after each try for the reply to arrive (and crash it)
ROUND_BOUND = 180.0


def child(tries: int, force: bool) -> None:
    import ray
    from ray.exceptions import TaskCancelledError

    @ray.remote(max_retries=0, num_cpus=0)
    def waits(started: str) -> int:
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # a background job's workers
            signal.signal(signal.SIGINT, signal.default_int_handler)
        Path(started).touch()
        end = time.monotonic() + 30
        while time.monotonic() < end:  # short waits: the cancel's KeyboardInterrupt lands
            threading.Event().wait(0.05)
        return 1

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    with tempfile.TemporaryDirectory() as folder:
        for attempt in range(tries):
            started = Path(folder, f"started-{attempt}")
            ref = waits.remote(str(started))
            deadline = time.monotonic() + 60
            while not started.exists() and time.monotonic() < deadline:
                threading.Event().wait(0.01)
            ray.cancel(ref)
            try:
                ray.get(ref, timeout=20)
                print(f"try {attempt}: the cancel was lost (the task returned)", flush=True)
            except TaskCancelledError:
                if force:
                    ray.cancel(ref, force=True)
            threading.Event().wait(LINGER)
            print(f"try {attempt}: the driver lives", flush=True)
    ray.shutdown()


def one_round(tries: int, force: bool) -> tuple[bool, str]:
    args = [sys.executable, __file__, "--child", "--tries", str(tries)] + ([] if force else ["--no-force"])
    out = subprocess.run(args, capture_output=True, text=True, timeout=ROUND_BOUND, check=False,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lived = out.stdout.count("the driver lives")
    crashed = out.returncode != 0 and CHECK in out.stderr
    return crashed, f"exit {out.returncode} after {lived} of {tries} tries" + (f": {CHECK}" if crashed else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", type=int, nargs="?", default=3)
    parser.add_argument("--tries", type=int, default=20, help="cancel + force cancel per driver (default 20)")
    parser.add_argument("--no-force", action="store_true", help="the control: no force cancel after the cancel")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.tries, not args.no_force)
        return
    import ray

    print(f"Ray {ray.__version__}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs; "
          f"{'no force cancel (control)' if args.no_force else 'force cancel right after a cancel that landed'}")
    reproduced = 0
    for index in range(args.rounds):
        crashed, line = one_round(args.tries, not args.no_force)
        reproduced += crashed
        print(f"round {index}: {line}", flush=True)
    print(f"REPRODUCED {reproduced} of {args.rounds}")


if __name__ == "__main__":
    main()
