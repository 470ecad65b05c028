"""Project-wide test helpers. The Ray harness itself lives in the plugin (chaos.pytest_plugin)."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

import pytest

CALL_TIMEOUT = 30.0


def actor_pid(actor: Any) -> int:
    import ray

    return ray.get(actor.pid.remote(), timeout=CALL_TIMEOUT)


def sigkill_and_wait_restart(actor: Any, *, timeout: float = 30.0) -> int:
    """SIGKILL the actor's worker and wait (bounded) until a new process answers; return its pid."""
    from chaos import wait_until

    old = actor_pid(actor)
    os.kill(old, signal.SIGKILL)
    return wait_until(lambda: (pid := actor_pid(actor)) != old and pid,
                      timeout=timeout, what=f"restart of actor after SIGKILL of pid {old}")


@pytest.fixture
def storage(tmp_path: Any) -> str:
    """A fresh local checkpoint directory."""
    return str(tmp_path / "ckpt")


@pytest.fixture
def sigkill() -> Callable[..., int]:
    return sigkill_and_wait_restart
