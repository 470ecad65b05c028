"""Polling a condition under a deadline: the only way raychaos waits for something."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from chaos._errors import HangError

T = TypeVar("T")


def wait_until(
    condition: Callable[[], T | None],
    *,
    timeout: float,
    interval: float = 0.05,
    what: str = "condition",
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """Call ``condition`` until it returns a truthy value and return that value.

    Exceptions raised by ``condition`` count as "not yet" (a restarting actor raises
    while it comes back); the last one is chained to the :class:`HangError`.

    Raises:
        HangError: ``condition`` was not met within ``timeout`` seconds.
    """
    deadline, last_exc = clock() + timeout, None
    while True:
        try:
            value = condition()
            if value:
                return value
        except Exception as exc:  # noqa: BLE001 - "not yet", kept for the error
            last_exc = exc
        if clock() >= deadline:
            raise HangError(
                f"{what} not met within {timeout:g} s"
                + (f"; last error: {last_exc!r}" if last_exc else "")
            ) from last_exc
        time.sleep(interval)  # the poll interval of a deadline-bounded wait
