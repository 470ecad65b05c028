"""Disk faults as records, on a fault filesystem: a slow disk, a stalled one, a failing one, a
power loss. Each is injected, confirmed by an operation that must see it, held, healed, and
confirmed healed by an operation that must not see it any more (roachprod's shape).

The records live with every other fault (:mod:`chaos._faults`), so the engine runs them as it
runs any fault (:meth:`chaos.engine.Chaos.inject`, a schedule, a scenario's ``[[faults]]``).
The fault filesystem is found by its mount point (:func:`chaos._fusefs.connect`): mount one
with :func:`chaos._fusefs.fault_filesystem` and put the storage under attack below it. A probe
is a hidden file at the mount's root, or on a path built to match the fault's glob; when no
probe can reach the glob (its folder does not exist yet), the confirmation is an operation of
the workload, counted by the server, within ``confirm_within`` seconds.
"""

from __future__ import annotations

import contextlib
import errno as errnos
import fnmatch
import os
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Literal

from chaos._errors import FaultIneffective, TargetNotFound
from chaos._faults import DISK_GRACE, STORAGE, DiskFault, FailingDisk, PowerLoss, SlowDisk, StallDisk
from chaos._fuse_faults import DEFAULT_ERROR_OPS, MAX_FAULT_SECONDS, MAX_STALL_SECONDS
from chaos._fusefs import FaultFS, PowerLossResult, connect
from chaos._wait import wait_until

__all__ = ["DiskEvent", "DiskFault", "DiskInjection", "FailingDisk", "PowerLoss", "SlowDisk", "StallDisk",
           "inject_disk", "switch_off"]

#: How long an operation may take to show a fault, or its absence, before the fault is ineffective.
CONFIRM_WITHIN = 5.0
_PROBE = ".raychaos-probe"
_PROBED_OPS = ("fsync", "write", "create", "open", "read", "getattr")


@dataclass(frozen=True, slots=True)
class DiskEvent:
    """A disk fault's step: ``inject`` and ``heal`` each after their confirmation,
    ``ineffective`` when one was not seen. ``measured``: what confirmed it (seconds an
    operation took or was blocked, the errno it got, bytes a power loss cut)."""

    kind: Literal["inject", "heal", "ineffective"]
    fault: DiskFault
    outcome: str
    measured: float | None = None


@dataclass(frozen=True, slots=True)
class DiskInjection:
    """What a disk fault hit and what confirmed it (see :class:`DiskEvent`)."""

    fault: DiskFault
    mount: str
    confirmed: DiskEvent
    power_loss: PowerLossResult | None = None


Record = Callable[[DiskEvent], None]


@contextlib.contextmanager
def inject_disk(fault: DiskFault, *, record: Record | None = None, confirm_within: float = CONFIRM_WITHIN,
                grace: float = DISK_GRACE) -> Iterator[DiskInjection]:
    """Inject ``fault`` on its mount, confirm it, yield, heal it and confirm the heal (also on
    error or Ctrl-C). ``record`` receives each step. The fault filesystem itself ends the fault
    ``grace`` seconds after its ``seconds``, should this driver never heal it; a block that
    outlasts that deadline did not hold the fault to its end, and its exit raises.

    Raises:
        TargetNotFound: no fault filesystem is mounted at ``fault.mount``.
        FaultIneffective: no operation saw the fault (it is healed again first), one still saw
            it after the heal, or the filesystem's own deadline ended it before the heal.
    """
    if fault.mount == STORAGE:
        raise TargetNotFound(f"`mount` {STORAGE!r} is a scenario run's checkpoint storage, which only the "
                             "scenario runner resolves (storage_faultfs = true); give a mount point")
    steps = record or (lambda event: None)
    fs = connect(fault.mount)
    injector = _INJECTORS[type(fault)]
    with injector(fs, fault, steps, confirm_within, grace) as injection:
        yield injection


#: The fault filesystem's switch each held disk fault turns on (a power loss is instant).
_SWITCH: dict[type, str] = {SlowDisk: "latency", StallDisk: "stall", FailingDisk: "errors"}


def switch_off(fault: DiskFault) -> None:
    """Switch ``fault`` off on its mount at once, unconfirmed: a rollback (after Ctrl-C) that
    must not wait; :func:`inject_disk`'s own heal still confirms it. Quiet when the mount is gone."""
    kind = _SWITCH.get(type(fault))
    if kind is not None and fault.mount != STORAGE:
        with contextlib.suppress(TargetNotFound, OSError):
            connect(fault.mount).heal(kind)


def _ineffective(steps: Record, fault: DiskFault, why: str) -> FaultIneffective:
    steps(DiskEvent("ineffective", fault, why))
    return FaultIneffective(f"{type(fault).__name__} on {fault.mount}: {why}")


#: Why a fault the filesystem's own deadline ended before the driver's heal is ineffective.
EXPIRED = ("its {kind} was ended by the fault filesystem's own deadline ({seconds:g} s + {grace:g} s grace) "
           "before the driver healed it, so it was not on to the end of the block; give `seconds` as long "
           "as the fault is held")


def _check_not_expired(fs: FaultFS, kind: str, before: int, steps: Record, fault: SlowDisk | StallDisk | FailingDisk,
                       grace: float) -> None:
    """Raise when the server's deadline, not the heal, ended ``kind`` (counted ``expired.<kind>``)."""
    if fs.state().count(f"expired.{kind}") > before:
        raise _ineffective(steps, fault, EXPIRED.format(kind=kind, seconds=fault.seconds, grace=grace))


# -- probes ------------------------------------------------------------------------------------


def _probe_path(fs: FaultFS, glob: str = "*") -> str | None:
    """A path in the mount matching ``glob`` whose folder exists (None: no such path can be probed)."""
    name = f"{_PROBE}-{uuid.uuid4().hex[:8]}"
    inside = "/" + re.sub(r"\[[^]]*\]", "p", glob).replace("?", "p").replace("*", name).lstrip("/")
    if not fnmatch.fnmatchcase(inside, glob) or not os.path.isdir(fs.mount + os.path.dirname(inside)):
        return None
    return fs.mount + inside


def _timed_op(op: str, path: str) -> float:
    """Run one ``op`` on ``path`` (created first when the op needs a file); its seconds."""
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600) if op not in ("create", "getattr", "open") else -1
    try:
        start = time.perf_counter()
        if op == "create":
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        elif op == "open":
            os.close(os.open(path, os.O_CREAT | os.O_RDONLY, 0o600))
        elif op == "getattr":
            with contextlib.suppress(FileNotFoundError):
                os.stat(path)
        elif op == "fsync":
            os.fsync(fd)
        elif op == "write":
            os.pwrite(fd, b"probe", 0)
        else:  # a read of a byte that is there: the kernel answers an empty file without asking
            os.pwrite(fd, b"p", 0)
            os.fsync(fd)
            start = time.perf_counter()
            os.pread(fd, 1, 0)
        return time.perf_counter() - start
    finally:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(path)


# -- injectors: inject → confirm → yield → heal → confirm healed ----------------------------------


@contextlib.contextmanager
def _slow(fs: FaultFS, fault: SlowDisk, steps: Record, within: float, grace: float) -> Iterator[DiskInjection]:
    op = next((o for o in fault.ops if o in _PROBED_OPS), None)
    expired = fs.state().count("expired.latency")
    fs.set_latency({o: fault.latency for o in fault.ops}, until=_until(fault, within, grace))
    try:
        took = _timed_op(op, fs.mount + f"/{_PROBE}-{uuid.uuid4().hex[:8]}") if op else None
        if took is not None and took < 0.9 * fault.latency:
            raise _ineffective(steps, fault, f"a probe {op} took {took:.3f} s, not {fault.latency:g} s")
        if took is None:
            took = _seen(fs, "delayed", within, steps, fault)
        event = DiskEvent("inject", fault, f"{op or 'a workload operation'} delayed {took:.3f} s", took)
        steps(event)
        yield DiskInjection(fault, fs.mount, event)
    finally:
        fs.heal("latency")
    _check_not_expired(fs, "latency", expired, steps, fault, grace)
    if op is None:  # nothing a probe can time: the server's own state says the latency is off
        if fs.state().latency:
            raise _ineffective(steps, fault, f"the latency is still on after the heal: {fs.state().latency}")
        steps(DiskEvent("heal", fault, "latency off (read back from the fault filesystem)", None))
        return
    after = _fastest_probe(op, fs, under=0.5 * fault.latency)
    if after >= 0.5 * fault.latency:
        raise _ineffective(steps, fault, f"each of {HEAL_PROBES} probe {op}s still took {after:.3f} s "
                                         "or more after the heal")
    steps(DiskEvent("heal", fault, f"latency off; a probe {op} took {after:.3f} s", after))


#: Probes a heal may take to show a fast operation: one alone can be slow on a loaded machine
#: (0.31 s for an fsync once, with a Ray cluster busy on both cores), while every one of them
#: is slow while the latency is still on.
HEAL_PROBES = 5


def _fastest_probe(op: str, fs: FaultFS, *, under: float) -> float:
    """Time ``op`` up to ``HEAL_PROBES`` times; the first time under ``under``, else the least."""
    least = float("inf")
    for _ in range(HEAL_PROBES):
        least = min(least, _timed_op(op, fs.mount + f"/{_PROBE}-{uuid.uuid4().hex[:8]}"))
        if least < under:
            break
    return least


def _until(fault: SlowDisk | StallDisk | FailingDisk, within: float, grace: float) -> float:
    """The filesystem's own deadline for ``fault``, counted from when it is switched on: the
    driver holds it ``seconds`` after confirming it, and confirming may take ``within`` (a slow
    probe its latency too). Capped at the longest deadline the filesystem takes: a fault held
    past it fails as expired, never passes."""
    probe = fault.latency if isinstance(fault, SlowDisk) else 0.0
    most = MAX_STALL_SECONDS if isinstance(fault, StallDisk) else MAX_FAULT_SECONDS
    return min(most, fault.seconds + within + probe + grace)


def _seen(fs: FaultFS, counter: str, within: float, steps: Record, fault: DiskFault) -> float:
    """Wait until an operation of the workload is counted under ``counter``; the seconds waited."""
    start, before = time.monotonic(), fs.state().count(counter)
    try:
        wait_until(lambda: fs.state().count(counter) > before, timeout=within,
                   what=f"an operation counted as {counter!r}")
    except TimeoutError:
        raise _ineffective(steps, fault, f"no probe could reach it and no operation of the workload "
                                         f"was {counter} within {within:g} s") from None
    return time.monotonic() - start


@contextlib.contextmanager
def _stall(fs: FaultFS, fault: StallDisk, steps: Record, within: float, grace: float) -> Iterator[DiskInjection]:
    probe, done = _probe_path(fs, fault.glob), threading.Event()
    state = fs.state()
    before, expired = state.count("stalled"), state.count("expired.stall")
    fs.stall(glob=fault.glob, seconds=_until(fault, within, grace))
    prober = threading.Thread(target=_probe_until_released, args=(probe, done), daemon=True)
    try:
        prober.start()
        start = time.monotonic()
        try:
            wait_until(lambda: fs.state().count("stalled") > before, timeout=within, what="a stalled operation")
        except TimeoutError:
            raise _ineffective(steps, fault, f"no operation on {fault.glob!r} was stalled within {within:g} s") \
                from None
        if done.is_set():
            raise _ineffective(steps, fault, "the probe was released while the stall was on")
        event = DiskEvent("inject", fault, f"an operation on {fault.glob!r} blocked", time.monotonic() - start)
        steps(event)
        yield DiskInjection(fault, fs.mount, event)
    finally:
        fs.heal("stall")
    prober.join(within)
    _check_not_expired(fs, "stall", expired, steps, fault, grace)
    if (probe and not done.is_set()) or fs.state().stall is not None:
        raise _ineffective(steps, fault, f"the stall on {fault.glob!r} held {within:g} s after the heal")
    steps(DiskEvent("heal", fault, "stall off; the blocked probe returned" if probe else "stall off (read back)"))


@contextlib.contextmanager
def _failing(fs: FaultFS, fault: FailingDisk, steps: Record, within: float,
             grace: float) -> Iterator[DiskInjection]:
    hits = set(fault.ops or DEFAULT_ERROR_OPS[fault.code])
    probe = _probe_path(fs, fault.glob) if hits & {"create", "write"} else None
    expired = fs.state().count("expired.errors")
    fs.fail(fault.code, glob=fault.glob, ops=fault.ops or None, until=_until(fault, within, grace))
    try:
        got = _failed_probe(probe) if probe else None
        if probe and got != fault.code:
            seen = errnos.errorcode.get(got or 0, "no error")
            raise _ineffective(steps, fault, f"a probe write to {probe} got {seen}, not {fault.errno}")
        if got is None:
            _seen(fs, f"errno.{fault.code}", within, steps, fault)
        event = DiskEvent("inject", fault, f"an operation on {fault.glob!r} failed with {fault.errno}", fault.code)
        steps(event)
        yield DiskInjection(fault, fs.mount, event)
    finally:
        fs.heal("errors")
    _check_not_expired(fs, "errors", expired, steps, fault, grace)
    if (probe and _failed_probe(probe) is not None) or fs.state().errors:
        raise _ineffective(steps, fault, f"a probe write to {probe} still failed after the heal" if probe
                           else f"the server still lists errno rules after the heal: {fs.state().errors}")
    steps(DiskEvent("heal", fault, "errors off; a probe write succeeded" if probe else "errors off (read back)"))


def _probe_until_released(probe: str | None, done: threading.Event) -> None:
    if probe is not None:
        _timed_op("getattr", probe)
        done.set()


def _failed_probe(path: str) -> int | None:
    """Create and write ``path``; the errno it failed with (None: it worked)."""
    try:
        _timed_op("write", path)
    except OSError as exc:
        return exc.errno
    return None


@contextlib.contextmanager
def _power_loss(fs: FaultFS, fault: PowerLoss, steps: Record, within: float,
                grace: float) -> Iterator[DiskInjection]:
    probe = fs.mount + f"/{_PROBE}-{uuid.uuid4().hex[:8]}"
    with open(probe, "wb") as f:  # written, never fsynced: the power loss must take it
        f.write(b"unsynced")
    lost = fs.power_loss()
    if os.path.exists(probe):
        os.unlink(probe)
        raise _ineffective(steps, fault, f"an unsynced probe file {probe} survived the power loss")
    event = DiskEvent("inject", fault, f"unsynced writes dropped: {lost.files_reverted} files reverted, "
                                       f"{lost.bytes_cut} bytes cut, {lost.names_undone} name changes undone, "
                                       f"{lost.handles_killed} open handles dead", lost.bytes_cut)
    steps(event)
    yield DiskInjection(fault, fs.mount, event, lost)
    took = _timed_op("fsync", probe)  # nothing to heal: the disk answers again, as after a reboot
    steps(DiskEvent("heal", fault, f"the mount answers: a probe write and fsync took {took:.3f} s", took))


_INJECTORS: dict[type, Callable[..., contextlib.AbstractContextManager[DiskInjection]]] = {
    SlowDisk: _slow, StallDisk: _stall, FailingDisk: _failing, PowerLoss: _power_loss,
}
