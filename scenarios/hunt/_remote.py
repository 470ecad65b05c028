"""What the generated programs run on Ray: one task, one actor, one generator and one
cancellable task, each driven by its step's record. Plain functions and classes, made remote
by :func:`remote` when a program first runs; workers import this module by name."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import ray

from chaos import wait_until

#: How long a held step waits for its fault (the driver releases it as soon as the fault lands).
HOLD_BOUND = 60.0
#: Seconds between the checks for a cancel in the cancellable task.
CANCEL_SLICE = 0.05


def resolve(value: Any) -> int:
    """An argument's int: a nested (borrowed) ref or a boxed ref is got here, by the callee."""
    while not isinstance(value, int):
        value = value[0] if isinstance(value, list) else ray.get(value, timeout=HOLD_BOUND)
    return value


def hold(marks: str, index: int, *, flagged: bool = False) -> None:
    """Say the step started, in which process, then wait (bounded) until the driver releases it
    after its fault.
    ``flagged`` (an actor's call): a cancel flags the call rather than interrupting it; seeing the
    flag, the call says so (its ``flagged`` mark) and goes on waiting for its release."""
    interruptible()  # a cancel fault's KeyboardInterrupt must reach a held task
    say_started(marks, index)

    def released() -> bool:
        if flagged and _cancel_flagged():
            Path(marks, f"flagged-{index}").touch()
        return Path(marks, f"release-{index}").exists()

    wait_until(released, timeout=HOLD_BOUND, interval=0.01, what=f"step {index} to be released")


def say_started(marks: str, index: int) -> None:
    """Write step ``index``'s started mark with this process's pid, whole (renamed into place)."""
    said = Path(marks, f"starting-{index}-{os.getpid()}")
    said.write_text(str(os.getpid()))
    said.replace(Path(marks, f"started-{index}"))


def _cancel_flagged() -> bool:
    """Has ``ray.cancel`` flagged the running actor call (Ray 2.60's ``is_canceled``; an older
    Ray has no flag to read, and a cancel there is never seen: missed)?"""
    context = ray.get_runtime_context()
    return bool(getattr(context, "is_canceled", lambda: False)())


def first_attempt(marks: str, index: int) -> bool:
    """True once per step: the attempt that raises when the step is flaky."""
    return _once(marks, f"raised-{index}")


def first_run(marks: str, index: int) -> bool:
    """True for the first run of step ``index`` (a retry or a replay is not)."""
    return _once(marks, f"ran-{index}")


def _once(marks: str, name: str) -> bool:
    """True for the first caller, across processes: the one whose mark ``name`` is new."""
    try:
        Path(marks, name).touch(exist_ok=False)
    except FileExistsError:
        return False
    return True


def boxed(value: int, box: bool, marks: str, index: int) -> Any:
    """The value, or a list holding a ref this process put (and so owns), saying so first."""
    if not box:
        return value
    Path(marks, f"owner-{index}-{os.getpid()}").touch()  # before the put: a process killed meanwhile counts
    return [ray.put(value)]


def note_pid(marks: str, index: int) -> None:
    """Say which process ran step ``index`` (its worker's log is where Ray's RPC failure knob
    logs what it injected into that process's calls; a force cancel ends the process that ran it)."""
    Path(marks, f"pid-{index}-{os.getpid()}").touch()


def hunt_task(index: int, const: int, marks: str, held: bool, flaky: bool, box: bool, *args: Any,
              pad: int = 0) -> Any:
    """``pad`` > 0: the value is returned :func:`padded`: it lives in this node's object store."""
    note_pid(marks, index)
    total = const + sum(resolve(a) for a in args)
    if held:
        hold(marks, index)
    if flaky and first_attempt(marks, index):
        raise ValueError(f"step {index}: first attempt")
    return padded(boxed(total, box, marks, index), pad)


def actor_base(const: int, args: tuple[Any, ...], slow_restart: float) -> int:
    """An actor's base from its constructor's args (resolved again on a restart); a restart of a
    slow actor takes ``slow_restart`` seconds here (the workload: a constructor that takes seconds)."""
    base = const + sum(resolve(a) for a in args)
    if slow_restart and ray.get_runtime_context().was_current_actor_reconstructed:
        threading.Event().wait(slow_restart)
    return base


class HuntActor:
    """An actor whose base comes from its constructor's args: a regular actor, one call at a time."""

    def __init__(self, const: int, *args: Any, slow_restart: float = 0.0) -> None:
        self.base = actor_base(const, args, slow_restart)

    def call(self, index: int, const: int, marks: str, held: bool, box: bool, *args: Any, pad: int = 0) -> Any:
        note_pid(marks, index)
        total = self.base + const + sum(resolve(a) for a in args)
        if held:
            hold(marks, index, flagged=True)
        return padded(boxed(total, box, marks, index), pad)


class HuntAsyncActor:
    """:class:`HuntActor` as an async actor: its call is a coroutine, so its calls run
    concurrently on its event loop, and a held one waits there without blocking the others."""

    def __init__(self, const: int, *args: Any, slow_restart: float = 0.0) -> None:
        self.base = actor_base(const, args, slow_restart)

    async def call(self, index: int, const: int, marks: str, held: bool, box: bool, *args: Any,
                   pad: int = 0) -> Any:
        note_pid(marks, index)
        total = self.base + const + sum([await resolve_async(a) for a in args])
        if held:
            await hold_async(marks, index)
        return padded(boxed(total, box, marks, index), pad)


async def resolve_async(value: Any) -> int:
    """:func:`resolve` on an async actor's event loop: a ref is awaited (a blocking get would
    stall every call of the actor, the one it waits for among them). Past the bound it raises
    what :func:`resolve`'s get does, ``GetTimeoutError``, so a class is labelled the same either way."""
    import asyncio

    from ray.exceptions import GetTimeoutError

    while not isinstance(value, int):
        try:
            value = value[0] if isinstance(value, list) else await asyncio.wait_for(value, HOLD_BOUND)
        except TimeoutError:
            raise GetTimeoutError(f"a ref was not ready within {HOLD_BOUND:g} s") from None
    return value


async def hold_async(marks: str, index: int) -> None:
    """:func:`hold` on an async actor's event loop, other calls running meanwhile. Ray cancels
    an async actor's running call as an asyncio task: CancelledError is raised at its await here,
    and the call says so (its ``cancelled`` mark) before letting it end the call."""
    import asyncio

    say_started(marks, index)
    try:
        async with asyncio.timeout(HOLD_BOUND):
            while not Path(marks, f"release-{index}").exists():
                await asyncio.sleep(0.01)
    except asyncio.CancelledError:
        Path(marks, f"cancelled-{index}").touch()
        raise


def padded(value: Any, pad: int) -> Any:
    """``value``, or ``[value, pad zero bytes]`` (:func:`resolve` reads it): past 100 KiB, too big
    for Ray to inline, so it lives in an object store."""
    return [value, bytes(pad)] if pad else value


def hunt_stream(const: int, count: int, *args: Any, marks: str = "", index: int = -1, pad: int = 0,
                held_at: int = -1, varying: int = 0) -> Iterator[Any]:
    """``held_at`` >= 0: held (:func:`hold`) once that many items are yielded, until its fault.
    ``varying``: every run after the first (a retry, a reconstruction's replay) yields that many
    items more (or fewer): a non-deterministic generator."""
    if marks:
        note_pid(marks, index)
    if varying and not first_run(marks, index):
        count += varying
    base = const + sum(resolve(a) for a in args)
    for i in range(count):
        if i == held_at:
            hold(marks, index)
        yield padded(base + i, pad)


def hunt_fill(capacity: int, chunk: int, marks: str, index: int) -> int:
    """Fill this node's object store to ``capacity`` bytes and more (refs this worker puts and
    holds), so Ray spills what the store held; say so (the ``filled`` mark), then hold them until
    the driver releases step ``index`` (its node is removed meanwhile, this worker with it)."""
    import numpy as np

    held: list[Any] = []
    while len(held) * chunk <= capacity:
        held.append(ray.put(np.zeros(chunk, np.uint8)))
    Path(marks, f"filled-{index}").touch()
    wait_until(lambda: Path(marks, f"release-{index}").exists(), timeout=HOLD_BOUND, interval=0.05,
               what=f"step {index}'s node pressure to be released")
    return len(held) * chunk


def hunt_cancellable(const: int, seconds: float, started: str = "", *, marks: str = "", index: int = -1) -> int:
    """Wait ``seconds``, then return ``const``; a cancel's KeyboardInterrupt ends the wait within
    :data:`CANCEL_SLICE`. ``started``, a path: touched once the wait is about to begin.
    ``marks``: say which process runs step ``index`` first (a force cancel ends that process)."""
    if marks:
        note_pid(marks, index)
    interruptible()
    if started:
        Path(started).touch()
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        # Short waits: a cancel's interrupt was raised only once a wait returned (a 20 s wait
        # ended 20 s after ray.cancel; Ray 2.60, 2026-12-04, this machine).
        threading.Event().wait(min(CANCEL_SLICE, left))
    return const


def interruptible() -> None:
    """Give this worker Python's own SIGINT handler if it inherited SIGINT ignored.

    Ray's non-force cancel of a running task raises KeyboardInterrupt through Python's SIGINT
    handling, which does nothing while SIGINT is ignored; Ray's workers inherit the disposition
    of whatever started the cluster, and a background job, ``nohup`` or a CI runner starts it
    ignored (findings/cancel_ignored_when_sigint_ignored.py). Python installs this handler
    itself in a process started with SIGINT at its default, so a cancel lost here is Ray's,
    not the way the hunt was launched. Normal tasks run on the worker's main thread."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def hunt_ping(value: int) -> int:
    return value


class HuntProbe:
    def ping(self, value: int) -> int:
        return value

    def pid(self) -> int:
        return os.getpid()


@cache
def remote(obj: Any) -> Any:
    """``ray.remote(obj)``, once per process (a probe actor gets no CPU: it only answers)."""
    return ray.remote(num_cpus=0)(obj) if obj is HuntProbe else ray.remote(obj)
