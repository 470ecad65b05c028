"""Standalone reproduction: a Ray Train worker that dies takes its last reported checkpoints
with it; the run resumes from an older one and trains those epochs again.

Ray Train documents that after a worker failure the run "restores from the latest checkpoint"
(``FailureConfig(max_failures)``), and ``ray.train.report(metrics, checkpoint=...)`` reads as the
moment a checkpoint is reported. In Ray 2.60, ``report`` returns once the report is *queued* on
the worker; the controller takes one report per worker per poll (every 2 s). A worker that dies
loses what it queued: the latest checkpoint a user saw reported is not the one the run resumes
from.

Each round: a ``TorchTrainer`` with one CPU worker, an epoch every ``EPOCH`` seconds, a
checkpoint reported each epoch; in its first attempt the worker SIGKILLs itself right after
reporting epoch ``KILL_AT``. The restarted worker writes which checkpoint it got.

    python findings/train_report_lost_with_worker.py [rounds]
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
import time

import ray
import ray.train
from ray.train import Checkpoint, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer

EPOCHS, KILL_AT, EPOCH = 10, 6, 0.3


def train_loop(config: dict) -> None:
    marker, log = config["marker"], config["log"]
    restored = ray.train.get_checkpoint()
    start = 0
    if restored is not None:
        with restored.as_directory() as folder, open(os.path.join(folder, "epoch")) as f:
            start = int(f.read()) + 1
    with open(log, "a") as f:
        f.write(json.dumps({"attempt_starts_at_epoch": start}) + "\n")
    for epoch in range(start, EPOCHS):
        time.sleep(EPOCH)  # an epoch's work
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "epoch"), "w") as f:
                f.write(str(epoch))
            ray.train.report({"epoch": epoch}, checkpoint=Checkpoint.from_directory(folder))
        if epoch == KILL_AT and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)  # the worker dies right after its report returned


def one_round(root: str) -> int:
    """The epoch the restarted worker started at (``KILL_AT + 1``: it resumed from the latest)."""
    log = os.path.join(root, "log.jsonl")
    trainer = TorchTrainer(
        train_loop, train_loop_config={"marker": os.path.join(root, "killed"), "log": log},
        scaling_config=ScalingConfig(num_workers=1),
        run_config=RunConfig(storage_path=os.path.join(root, "storage"), name="finding",
                             failure_config=FailureConfig(max_failures=1)))
    trainer.fit()
    with open(log) as f:
        starts = [json.loads(line)["attempt_starts_at_epoch"] for line in f]
    return starts[-1]


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    ray.init(address="local", num_cpus=2, log_to_driver=False)
    try:
        print(f"Ray {ray.__version__}; a report every {EPOCH:g} s, the worker killed after reporting epoch {KILL_AT}")
        lost_rounds = 0
        for i in range(rounds):
            resumed_at = one_round(tempfile.mkdtemp(prefix="finding-train-"))
            lost = KILL_AT + 1 - resumed_at
            lost_rounds += lost > 0
            print(f"round {i}: the restart got epoch {resumed_at - 1}'s checkpoint, {lost} behind the last "
                  f"reported (epoch {KILL_AT}): epochs {resumed_at}..{KILL_AT} ran again", flush=True)
        print(f"REPRODUCED {lost_rounds} of {rounds}: the restart did not resume from the latest reported checkpoint")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
