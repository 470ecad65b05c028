"""Standalone reproduction: Ray 2.60 does not keep a caller's order when it retries actor calls.

One caller submits calls 0..N-1 to an actor with ``max_restarts`` and ``max_task_retries=-1``;
the actor SIGKILLs itself while running call ``CRASH_AT`` in its first life. Every call is
then delivered (at least once), but the restarted actor runs the retried ones in another
order than they were submitted. Ray documents this ("the task execution order is not
guaranteed when task retries occur"); so raychaos's writer table keeps a set of seqs per
writer with a reorder window, not a high-water mark (``actors/_dedupe.py``).

    python findings/retry_order.py [rounds]
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile

import ray

N, CRASH_AT = 12, 3


@ray.remote(max_restarts=-1, max_task_retries=-1)
class Log:
    def __init__(self, path: str) -> None:
        self.path = path

    def call(self, seq: int) -> int:
        first_life = not os.path.exists(self.path + ".crashed")
        if seq == CRASH_AT and first_life:
            open(self.path + ".crashed", "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
        with open(self.path, "a") as f:
            f.write(f"{seq}\n")
        return seq


def one_round(root: str) -> list[int]:
    path = os.path.join(root, "order")
    actor = Log.remote(path)
    ray.get([actor.call.remote(i) for i in range(N)], timeout=120)
    ray.kill(actor)
    with open(path) as f:
        return [int(line) for line in f]


def first_runs(order: list[int]) -> list[int]:
    """Each call's first run, in the order they ran (a call whose reply was lost runs again)."""
    seen: set[int] = set()
    return [seq for seq in order if not (seq in seen or seen.add(seq))]


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    try:
        print(f"Ray {ray.__version__}")
        reordered = repeated = 0
        for i in range(rounds):
            order = one_round(tempfile.mkdtemp(prefix="retry-order-"))
            reordered += first_runs(order) != sorted(first_runs(order))
            repeated += len(order) > len(set(order))
            print(f"round {i}: executed in order {order}")
        print(f"REPRODUCED {reordered} of {rounds}: the retried calls ran out of submission order")
        print(f"(and in {repeated} of {rounds} a call that had already run ran again: at-least-once, as documented)")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
