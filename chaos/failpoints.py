"""Failpoints: name a point in your code with :func:`failpoint`, then arm it (in this process
or, through the environment, in a Ray worker) to crash, raise or stall exactly there."""

from chaos._failpoint import (
    FAILPOINTS_ENV,
    FailAction,
    Failpoint,
    FailpointPlan,
    Firing,
    arm,
    armed,
    disarm,
    failpoint,
    failpoint_env,
    firings,
    is_armed,
)

__all__ = [
    "FAILPOINTS_ENV",
    "FailAction",
    "Failpoint",
    "FailpointPlan",
    "Firing",
    "arm",
    "armed",
    "disarm",
    "failpoint",
    "failpoint_env",
    "firings",
    "is_armed",
]
