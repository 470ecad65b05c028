"""Ray's libraries under faults: a Train DDP run, Tune trials, an RLlib PPO run."""

from __future__ import annotations

from scenarios.model._workload import Workload
from scenarios.workloads.apps._libraries import RllibPPO, TrainDDP, TuneTrials

__all__ = ["WORKLOADS"]

WORKLOADS: dict[str, type[Workload]] = {"train-torch-ddp": TrainDDP, "tune-trials": TuneTrials,
                                        "rllib-ppo-cartpole": RllibPPO}
