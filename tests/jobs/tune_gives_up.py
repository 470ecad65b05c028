"""A Tune search shaped to fool a count: three trials on two slots, ``max_failures=0``, and a
script that never looks at its result's errors. A killed trial is given up, the pending third
trial starts in its slot (as many trials alive as before), and the script exits 0 all the same.

``raychaos run --job 'python tune_gives_up.py' tune-gives-up.toml`` must not pass it: the
killed trial's training was never restored (``tests/test_job_examples.py``).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

from ray import tune

ITERATIONS = 12


def objective(config: dict[str, float]) -> None:
    for iteration in range(ITERATIONS):
        time.sleep(1.0)  # stands for real work: the kill lands in an iteration
        tune.report({"iteration": iteration, "score": config["lr"] * iteration})


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="example-tune-") as storage:
        tuner = tune.Tuner(
            tune.with_resources(objective, {"cpu": 1}),  # two slots on a 2-CPU cluster, three trials
            param_space={"lr": tune.grid_search([0.1, 0.2, 0.3])},
            tune_config=tune.TuneConfig(metric="score", mode="max"),
            run_config=tune.RunConfig(name=f"gives-up-{os.getpid()}", storage_path=storage,
                                      failure_config=tune.FailureConfig(max_failures=0)))
        tuner.fit()  # its errors are never read: the mistake this job plants
    print("finished")
    return 0


if __name__ == "__main__":
    sys.exit(main())
