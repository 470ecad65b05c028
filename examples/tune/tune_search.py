"""A small Ray Tune script: two trials of a toy objective, a checkpoint each iteration, and a
FailureConfig that lets Tune restart a failed trial from its latest checkpoint.

Run it as your own script: ``python tune_search.py``; under faults: ``raychaos run --job
'python tune_search.py' schedule.toml`` from this folder. ``RAYCHAOS_SEED`` seeds it (raychaos
sets it, the same in the run under faults and the run without). ``EXAMPLE_NO_FT=1`` turns
fault tolerance off (``max_failures=0``): a killed trial then errors and the script exits 1.
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
import time

from ray import tune

ITERATIONS = 12


def _start(seed: int) -> tuple[int, float]:
    """(the iteration after the latest checkpoint, the score so far): a restarted trial
    resumes there instead of from scratch."""
    checkpoint = tune.get_checkpoint()
    if checkpoint is None:
        return 0, 0.0
    with checkpoint.as_directory() as folder, open(os.path.join(folder, "state.json"), encoding="utf-8") as src:
        state = json.load(src)
    return state["iteration"] + 1, state["score"]


def objective(config: dict[str, float]) -> None:
    first, score = _start(int(config["seed"]))
    rng = random.Random(config["seed"])
    for iteration in range(first, ITERATIONS):
        score += config["lr"] * rng.random()
        time.sleep(1.0)  # stands for real work: gives the schedule an iteration to land in
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "state.json"), "w", encoding="utf-8") as out:
                json.dump({"iteration": iteration, "score": score}, out)
            tune.report({"iteration": iteration, "score": score},
                        checkpoint=tune.Checkpoint.from_directory(folder))


def main() -> int:
    seed = int(os.environ.get("RAYCHAOS_SEED", "0"))
    with tempfile.TemporaryDirectory(prefix="example-tune-") as storage:  # the run's results, gone after
        return _search(seed, storage, max_failures=0 if os.environ.get("EXAMPLE_NO_FT") == "1" else 3)


def _search(seed: int, storage: str, *, max_failures: int) -> int:
    tuner = tune.Tuner(
        tune.with_resources(objective, {"cpu": 0.5}),
        param_space={"lr": tune.grid_search([0.1, 0.3]), "seed": seed},
        tune_config=tune.TuneConfig(metric="score", mode="max"),
        run_config=tune.RunConfig(
            name=f"example-tune-{seed}", storage_path=storage,
            checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
            failure_config=tune.FailureConfig(max_failures=max_failures)))
    results = tuner.fit()
    if results.errors:  # Tune returns failed trials in its result, it does not raise: say it
        print(f"{len(results.errors)} trial(s) failed: {results.errors}", file=sys.stderr)
        return 1
    best = results.get_best_result()
    print(f"finished: best lr {best.config['lr']}, score {best.metrics['score']:.3f}")
    return 0

if __name__ == "__main__":
    sys.exit(main())
