"""What the generated programs run on Ray: one task, one actor, one generator and one
cancellable task, each driven by its step's record. Plain functions and classes, made remote
by :func:`remote` when a program first runs; workers import this module by name."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import ray

from chaos import wait_until

#: How long a held step waits for its fault (the driver releases it as soon as the fault lands).
HOLD_BOUND = 60.0


def resolve(value: Any) -> int:
    """An argument's int: a nested (borrowed) ref or a boxed ref is got here, by the callee."""
    while not isinstance(value, int):
        value = value[0] if isinstance(value, list) else ray.get(value, timeout=HOLD_BOUND)
    return value


def hold(marks: str, index: int) -> None:
    """Say the step started, then wait (bounded) until the driver releases it after its fault."""
    Path(marks, f"started-{index}").write_text(str(os.getpid()))
    wait_until(lambda: Path(marks, f"release-{index}").exists(), timeout=HOLD_BOUND, interval=0.01,
               what=f"step {index} to be released")


def first_attempt(marks: str, index: int) -> bool:
    """True once per step: the attempt that raises when the step is flaky."""
    try:
        Path(marks, f"raised-{index}").touch(exist_ok=False)
    except FileExistsError:
        return False
    return True


def boxed(value: int, box: bool) -> Any:
    """The value, or a list holding a ref this process put (and so owns)."""
    return [ray.put(value)] if box else value


def hunt_task(index: int, const: int, marks: str, held: bool, flaky: bool, box: bool, *args: Any) -> Any:
    total = const + sum(resolve(a) for a in args)
    if held:
        hold(marks, index)
    if flaky and first_attempt(marks, index):
        raise ValueError(f"step {index}: first attempt")
    return boxed(total, box)


class HuntActor:
    """An actor whose base comes from its constructor's args (resolved again on a restart)."""

    def __init__(self, const: int, *args: Any) -> None:
        self.base = const + sum(resolve(a) for a in args)

    def call(self, index: int, const: int, marks: str, held: bool, box: bool, *args: Any) -> Any:
        total = self.base + const + sum(resolve(a) for a in args)
        if held:
            hold(marks, index)
        return boxed(total, box)


def hunt_stream(const: int, count: int, *args: Any) -> Iterator[int]:
    base = const + sum(resolve(a) for a in args)
    for i in range(count):
        yield base + i


def hunt_cancellable(const: int, seconds: float) -> int:
    # An Event's wait is interruptible: a cancel's KeyboardInterrupt lands at once.
    threading.Event().wait(seconds)
    return const


def hunt_ping(value: int) -> int:
    return value


class HuntProbe:
    def ping(self, value: int) -> int:
        return value


@cache
def remote(obj: Any) -> Any:
    """``ray.remote(obj)``, once per process (a probe actor gets no CPU: it only answers)."""
    return ray.remote(num_cpus=0)(obj) if obj is HuntProbe else ray.remote(obj)
