"""Standalone reproduction: ``ray.cancel(ref)`` without ``force`` does nothing when the driver
was started with SIGINT ignored.

Ray documents that cancelling a running task without ``force`` raises ``KeyboardInterrupt`` in
it (a SIGINT) and that ``ray.get`` then raises ``TaskCancelledError``. Ray's processes inherit
the driver's SIGINT disposition; a driver started under ``trap "" INT`` — a background job
(``cmd &``), many CI runners, ``nohup`` — starts workers that ignore SIGINT, and the cancel is
lost: the task runs to its end and ``ray.get`` returns its value. With ``force=True`` the worker
is killed and the cancel holds either way. Once, on Ray 2.51 (the first of two runs there), the
task failed instead, with ``TypeError: 'Handlers' object is not callable`` (``signal.SIG_IGN``,
the handler the worker inherited, is a ``signal.Handlers`` member, not a function): such a round
is printed as its outcome and not counted, since the cancel was neither lost nor honoured.

Each round: a task that computes for ``BUSY`` seconds, cancelled ``CANCEL_AFTER`` seconds in.
``--ignore`` ignores SIGINT in this driver before ``ray.init`` (as a background job does);
without it the cancel is expected to hold.

    python findings/cancel_ignored_when_sigint_ignored.py [--ignore] [--force] [rounds]
"""

from __future__ import annotations

import signal
import sys
import time

import ray
from ray.exceptions import TaskCancelledError

BUSY, CANCEL_AFTER = 6.0, 1.0


@ray.remote(max_retries=0)
def busy(seconds: float) -> str:
    end = time.monotonic() + seconds
    while time.monotonic() < end:  # pure Python: a pending SIGINT is seen between bytecodes
        pass
    return "ran to its end"


def one_round(force: bool) -> str:
    ref = busy.remote(BUSY)
    ray.wait([ref], timeout=CANCEL_AFTER)  # let it start running
    ray.cancel(ref, force=force)
    try:
        return ray.get(ref, timeout=BUSY + 30)
    except TaskCancelledError:
        return "cancelled"
    except ray.exceptions.WorkerCrashedError:
        return "cancelled (worker killed)"
    except ray.exceptions.RayTaskError as exc:
        if not isinstance(exc.cause, TypeError):  # only Ray 2.51's (see the docstring): else a crash
            raise
        return f"failed with TypeError: {exc.cause}"


def main() -> None:
    args = sys.argv[1:]
    rounds = int(next((a for a in args if a.isdigit()), "5"))
    if "--ignore" in args:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        print(f"Ray {ray.__version__}; SIGINT {'ignored' if '--ignore' in args else 'default'}; "
              f"force={'--force' in args}")
        outcomes = [one_round("--force" in args) for _ in range(rounds)]
        for i, outcome in enumerate(outcomes):
            print(f"round {i}: {outcome}")
        lost = sum(o == "ran to its end" for o in outcomes)
        print(f"REPRODUCED {lost} of {rounds}: the cancel was lost (the task ran to its end)")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
