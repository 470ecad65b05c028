"""Ctrl-C during a run: the first one interrupts, the ones after it cannot stop the healing.

A run interrupted by Ctrl-C still heals every fault, journals its end and tears its cluster
down; each of those steps has its own deadline. A second Ctrl-C during them is noted and
ignored: raised inside the teardown, it would leave paused or Ray processes behind.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["interrupt_once"]

AGAIN = ("raychaos: still healing and tearing down after Ctrl-C (every step is bounded); "
         "Ctrl-\\ (SIGQUIT) abandons it and may leave processes behind")


@contextmanager
def interrupt_once() -> Iterator[None]:
    """Within the block, the first SIGINT raises ``KeyboardInterrupt``; later ones are ignored
    with a note. SIGINT that was ignored when we started (a background job) stays ignored,
    as Python itself does. Outside the main thread this changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if previous is signal.SIG_IGN:
        yield
        return

    def again(signum: int, frame: FrameType | None) -> None:
        print(AGAIN, file=sys.stderr, flush=True)

    def first(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGINT, again)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, first)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
