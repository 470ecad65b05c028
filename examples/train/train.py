"""A small Ray Train script: a linear model fitted by two CPU workers (torch DDP), a
checkpoint each epoch, and a FailureConfig that lets Train restart its workers.

Run it as your own script: ``python train.py``; under faults: ``raychaos run --job
'python train.py' schedule.toml`` from this folder. ``RAYCHAOS_SEED`` seeds it (raychaos
sets it, the same in the run under faults and the run without). ``EXAMPLE_NO_FT=1`` turns
fault tolerance off (``max_failures=0``): a killed worker then fails the job.
"""

from __future__ import annotations

import os
import tempfile
import time

import ray
import torch
from ray import train
from ray.train import Checkpoint, CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer, prepare_model

EPOCHS = 10
STEPS_PER_EPOCH = 20


def _start_epoch(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> int:
    """The epoch after the latest reported checkpoint (0 on a first start): a restarted
    worker group resumes there instead of from scratch."""
    checkpoint = train.get_checkpoint()
    if checkpoint is None:
        return 0
    with checkpoint.as_directory() as folder:
        state = torch.load(os.path.join(folder, "state.pt"), weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return int(state["epoch"]) + 1


def _report(epoch: int, loss: float, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    with tempfile.TemporaryDirectory() as folder:
        if train.get_context().get_world_rank() == 0:  # one copy of the state is enough
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch},
                       os.path.join(folder, "state.pt"))
            train.report({"epoch": epoch, "loss": loss}, checkpoint=Checkpoint.from_directory(folder))
        else:
            train.report({"epoch": epoch, "loss": loss})


def train_loop(config: dict[str, int]) -> None:
    torch.manual_seed(config["seed"] + train.get_context().get_world_rank())
    model = prepare_model(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    true_w = torch.tensor([[1.0, -2.0, 0.5, 3.0]])
    for epoch in range(_start_epoch(model, optimizer), EPOCHS):
        for _ in range(STEPS_PER_EPOCH):
            x = torch.randn(32, 4)
            loss = torch.nn.functional.mse_loss(model(x), x @ true_w.T)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        time.sleep(1.0)  # stands for real work: gives the schedule an epoch to land in
        _report(epoch, float(loss), model, optimizer)


def main() -> None:
    seed = int(os.environ.get("RAYCHAOS_SEED", "0"))
    max_failures = 0 if os.environ.get("EXAMPLE_NO_FT") == "1" else 3
    ray.init()
    trainer = TorchTrainer(
        train_loop, train_loop_config={"seed": seed},
        scaling_config=ScalingConfig(num_workers=2, use_gpu=False, resources_per_worker={"CPU": 0.5}),
        run_config=RunConfig(
            name=f"example-train-{seed}", storage_path=tempfile.mkdtemp(prefix="example-train-"),
            checkpoint_config=CheckpointConfig(num_to_keep=2),
            failure_config=FailureConfig(max_failures=max_failures)))
    result = trainer.fit()
    print(f"finished: epoch {result.metrics['epoch']}, loss {result.metrics['loss']:.4f}, "
          f"checkpoint {result.checkpoint}")


if __name__ == "__main__":
    main()
