"""A call with a deadline, for code raychaos does not control (a workload's hooks, a user's probe)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from chaos import HangError

__all__ = ["CallHang", "bounded"]

T = TypeVar("T")


class CallHang(HangError):
    """A call into code raychaos does not control did not return within its bound."""


def bounded(call: Callable[[], T], *, what: str, seconds: float) -> T:
    """``call()``, waited for at most ``seconds``: its value, or what it raised.

    It runs in a daemon thread of its own. A Python thread cannot be killed, so a call past
    its bound is left running there (it ends when its own wait gives up, or with the process);
    the caller goes on, and must treat the callee as broken from then on.

    Raises:
        CallHang: ``call`` had not returned after ``seconds``; the message names ``what``.
    """
    value: list[T] = []
    error: list[BaseException] = []
    done = threading.Event()

    def run() -> None:
        try:
            value.append(call())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread as it was
            error.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, daemon=True, name=f"raychaos-call {what}").start()
    if not done.wait(seconds):
        raise CallHang(f"{what} did not return within {seconds:g} s (its thread is left running: "
                       "a Python thread cannot be killed); find what it waits on, or bound that wait")
    if error:
        raise error[0]
    return value[0]
