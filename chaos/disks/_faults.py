"""Disk faults as records, on a fault filesystem: a slow disk, a stalled one, a failing one, a
power loss. Each is injected, confirmed by an operation that must see it, held, healed, and
confirmed healed by an operation that must not see it any more (roachprod's shape).

The records, their injector and their specs live here, registered like every other kind, so the
engine runs them as it runs any fault (:meth:`chaos.engine.Chaos.inject`, a schedule, a
scenario's ``[[faults]]``).
The fault filesystem is found by its mount point (:func:`chaos.disks._fusefs.connect`): mount one
with :func:`chaos.disks._fusefs.fault_filesystem` and put the storage under attack below it. A probe
is a hidden file at the mount's root, or on a path built to match the fault's glob; when no
probe can reach the glob (its folder does not exist yet), the confirmation is an operation of
the workload, counted by the server, within ``confirm_within`` seconds.
"""

from __future__ import annotations

import contextlib
import errno as errnos
import fnmatch
import os
import random
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import ClassVar, Literal

from chaos._context import FaultContext, Injection, driver_node
from chaos._errors import FaultIneffective, InvalidFaultSpec, TargetNotFound
from chaos._faults import STORAGE
from chaos._kinds import Fault, FaultKind, FaultSpec, Need, duration, number_in, register
from chaos._observed import Observed
from chaos._targets import RayProcess
from chaos._wait import wait_until
from chaos.disks._fuse_faults import DEFAULT_ERROR_OPS, MAX_FAULT_SECONDS, MAX_STALL_SECONDS, OPS
from chaos.disks._fusefs import FaultFS, PowerLossResult, connect

__all__ = ["DISK_GRACE", "DiskEvent", "DiskFault", "DiskInjection", "FailingDisk", "PowerLoss", "SlowDisk", "StallDisk",
           "inject_disk", "switch_off"]

#: How long after its ``seconds`` a disk fault the driver never healed is ended by the fault
#: filesystem's own deadline (a driver still holding it then gets FaultIneffective).
DISK_GRACE = 5.0
ErrnoName = Literal["EIO", "ENOSPC", "EROFS"]
_MOUNT_FIX = ("give the absolute mount point of a fault filesystem (chaos.disks.fault_filesystem), or "
              f"{STORAGE!r} in a scenario with storage_faultfs = true")


def _mount(value: object) -> None:
    if not isinstance(value, str) or not (value.startswith("/") or value == STORAGE):
        raise InvalidFaultSpec(f"`mount` must be where a fault filesystem is mounted, got {value!r}: {_MOUNT_FIX}",
                               field="mount")


def _ops(value: object, *, allow_empty: bool) -> tuple[str, ...]:
    ops = tuple(value) if isinstance(value, (list, tuple)) else ()
    if not isinstance(value, (list, tuple)) or any(op not in OPS for op in ops) or not (ops or allow_empty):
        raise InvalidFaultSpec(f"`ops` must be a list of operations among {', '.join(OPS)}, got {value!r}",
                               field="ops")
    return ops


@dataclass(frozen=True, slots=True)
class SlowDisk(Fault):
    """Delay each operation in ``ops`` on the fault filesystem at ``mount`` by ``latency``
    seconds, for ``seconds``. Confirmed by a probe operation that took the latency, healed
    when one no longer does."""

    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind] = FaultKind.SLOW_DISK
    #: Carried out by this driver, through the fault filesystem's control socket.
    USES_AGENT: ClassVar[bool] = False

    mount: str
    seconds: float
    latency: float = 0.2
    ops: tuple[str, ...] = ("fsync",)

    def __post_init__(self) -> None:
        _mount(self.mount)
        duration("seconds", self.seconds)
        number_in("latency", self.latency, 0.001, 60.0, what="seconds", after="per operation")
        object.__setattr__(self, "ops", _ops(self.ops, allow_empty=False))


@dataclass(frozen=True, slots=True)
class StallDisk(Fault):
    """Block every operation on paths matching ``glob`` (inside the mount, ``*`` crosses ``/``)
    until healed, for ``seconds``. Confirmed by a blocked operation, healed when it returns."""

    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind] = FaultKind.STALL_DISK
    #: Carried out by this driver, through the fault filesystem's control socket.
    USES_AGENT: ClassVar[bool] = False

    mount: str
    seconds: float
    glob: str = "*"

    def __post_init__(self) -> None:
        _mount(self.mount)
        number_in("seconds", self.seconds, 0, MAX_STALL_SECONDS - DISK_GRACE, what="a duration", after="for a stall",
                  why="a stall is bounded tighter than other faults", low_open=True)
        if not isinstance(self.glob, str) or not self.glob:
            raise InvalidFaultSpec(f"`glob` must be a path pattern inside the mount, e.g. '/ckpt/*', got "
                                   f"{self.glob!r}", field="glob")


@dataclass(frozen=True, slots=True)
class FailingDisk(Fault):
    """Fail operations on paths matching ``glob`` with ``errno`` for ``seconds``; ``ops``
    (empty: what that error hits on a real disk) chooses which. Confirmed by a probe write
    that got the error (or an operation of the workload's, when no probe can reach the glob)."""

    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind] = FaultKind.FAILING_DISK
    #: Carried out by this driver, through the fault filesystem's control socket.
    USES_AGENT: ClassVar[bool] = False

    mount: str
    seconds: float
    errno: ErrnoName = "EIO"
    glob: str = "*"
    ops: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _mount(self.mount)
        duration("seconds", self.seconds)
        if self.errno not in ("EIO", "ENOSPC", "EROFS"):
            raise InvalidFaultSpec(f"`errno` must be 'EIO', 'ENOSPC' or 'EROFS', got {self.errno!r}", field="errno")
        if not isinstance(self.glob, str) or not self.glob:
            raise InvalidFaultSpec(f"`glob` must be a path pattern inside the mount, e.g. '/ckpt/*', got "
                                   f"{self.glob!r}", field="glob")
        object.__setattr__(self, "ops", _ops(self.ops, allow_empty=True))

    @property
    def code(self) -> int:
        """The errno's number."""
        return int(getattr(errnos, self.errno))


@dataclass(frozen=True, slots=True)
class PowerLoss(Fault):
    """Drop every write on the mount that no fsync covered, at once (an instant fault, like a
    kill); stop its writers first: their open handles fail with ``EIO`` afterwards."""

    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind] = FaultKind.POWER_LOSS
    #: Carried out by this driver, through the fault filesystem's control socket.
    USES_AGENT: ClassVar[bool] = False

    mount: str

    def __post_init__(self) -> None:
        _mount(self.mount)


DiskFault = SlowDisk | StallDisk | FailingDisk | PowerLoss


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
    name = _probe_name()
    inside = "/" + re.sub(r"\[[^]]*\]", "p", glob).replace("?", "p").replace("*", name).lstrip("/")
    if not fnmatch.fnmatchcase(inside, glob) or not os.path.isdir(fs.mount + os.path.dirname(inside)):
        return None
    return fs.mount + inside


#: A probe file's permissions: the driver's own, for the moment it exists.
_PROBE_MODE = 0o600


def _fresh_probe(fs: FaultFS) -> str:
    """A path at the mount's root no file holds yet, named as a probe's."""
    return fs.mount + f"/{_probe_name()}"


def _probe_name() -> str:
    return f"{_PROBE}-{uuid.uuid4().hex[:8]}"


def _timed_op(op: str, path: str) -> float:
    """Run one ``op`` on ``path`` (created first when the op needs a file); its seconds. The
    probe file is gone afterwards, and so is its descriptor."""
    try:
        return _timed_name_op(op, path) if op in ("create", "getattr") else _timed_file_op(op, path)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)


def _timed_name_op(op: str, path: str) -> float:
    start = time.perf_counter()
    if op == "create":
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, _PROBE_MODE))
    else:
        with contextlib.suppress(FileNotFoundError):
            os.stat(path)
    return time.perf_counter() - start


def _timed_file_op(op: str, path: str) -> float:
    fd = os.open(path, os.O_CREAT | os.O_RDWR, _PROBE_MODE)
    try:
        start = time.perf_counter()
        if op == "open":  # of the file there now: an open that creates is the filesystem's create
            os.close(os.open(path, os.O_RDONLY))
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
        os.close(fd)


# -- injectors: inject → confirm → yield → heal → confirm healed ----------------------------------


@contextlib.contextmanager
def _slow(fs: FaultFS, fault: SlowDisk, steps: Record, within: float, grace: float) -> Iterator[DiskInjection]:
    op = next((o for o in fault.ops if o in _PROBED_OPS), None)
    expired = fs.state().count("expired.latency")
    fs.set_latency({o: fault.latency for o in fault.ops}, until=_until(fault, within, grace))
    try:
        took = _timed_op(op, _fresh_probe(fs)) if op else None
        if took is not None and took < 0.9 * fault.latency:
            raise _ineffective(steps, fault, f"a probe {op} took {took:.3f} s, not {fault.latency:g} s")
        if took is None:
            took = _seen(fs, "delayed", within, steps, fault)
        event = DiskEvent(kind="inject", fault=fault, outcome=f"{op or 'a workload operation'} delayed {took:.3f} s",
                          measured=took)
        steps(event)
        yield DiskInjection(fault, fs.mount, event)
    finally:
        fs.heal("latency")
    _check_not_expired(fs, "latency", expired, steps, fault, grace)
    if op is None:  # nothing a probe can time: the server's own state says the latency is off
        if fs.state().latency:
            raise _ineffective(steps, fault, f"the latency is still on after the heal: {fs.state().latency}")
        steps(DiskEvent(kind="heal", fault=fault, outcome="latency off (read back from the fault filesystem)",
                        measured=None))
        return
    after = _fastest_probe(op, fs, under=0.5 * fault.latency)
    if after >= 0.5 * fault.latency:
        raise _ineffective(steps, fault, f"each of {HEAL_PROBES} probe {op}s still took {after:.3f} s "
                                         "or more after the heal")
    steps(DiskEvent(kind="heal", fault=fault, outcome=f"latency off; a probe {op} took {after:.3f} s", measured=after))


#: Probes a heal may take to show a fast operation: one alone can be slow on a loaded machine
#: (0.31 s for an fsync once, with a Ray cluster busy on both cores), while every one of them
#: is slow while the latency is still on.
HEAL_PROBES = 5


def _fastest_probe(op: str, fs: FaultFS, *, under: float) -> float:
    """Time ``op`` up to ``HEAL_PROBES`` times; the first time under ``under``, else the least."""
    least = float("inf")
    for _ in range(HEAL_PROBES):
        least = min(least, _timed_op(op, _fresh_probe(fs)))
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
        event = DiskEvent(kind="inject", fault=fault, outcome=f"an operation on {fault.glob!r} blocked",
                          measured=time.monotonic() - start)
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
        event = DiskEvent(kind="inject", fault=fault,
                          outcome=f"an operation on {fault.glob!r} failed with {fault.errno}", measured=fault.code)
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
    probe = _fresh_probe(fs)
    with open(probe, "wb") as f:  # written, never fsynced: the power loss must take it
        f.write(b"unsynced")
    lost = fs.power_loss()
    if os.path.exists(probe):
        os.unlink(probe)
        raise _ineffective(steps, fault, f"an unsynced probe file {probe} survived the power loss")
    event = DiskEvent(kind="inject", fault=fault, measured=lost.bytes_cut,
                      outcome=f"unsynced writes dropped: {lost.files_reverted} files reverted, {lost.bytes_cut} bytes "
                              f"cut, {lost.names_undone} name changes undone, {lost.handles_killed} open handles dead")
    steps(event)
    yield DiskInjection(fault=fault, mount=fs.mount, confirmed=event, power_loss=lost)
    took = _timed_op("fsync", probe)  # nothing to heal: the disk answers again, as after a reboot
    steps(DiskEvent(kind="heal", fault=fault, outcome=f"the mount answers: a probe write and fsync took {took:.3f} s",
                    measured=took))


_INJECTORS: dict[type, Callable[..., contextlib.AbstractContextManager[DiskInjection]]] = {
    SlowDisk: _slow, StallDisk: _stall, FailingDisk: _failing, PowerLoss: _power_loss,
}


@contextlib.contextmanager
def _inject(ctx: FaultContext, fault: DiskFault, at: float | None, rng: random.Random) -> Iterator[Injection]:
    """A disk fault on the fault filesystem at its mount (:mod:`chaos.disks._faults`), each
    confirmed step journaled; a Ctrl-C's rollback (:meth:`Chaos.heal_all`) switches it off."""
    proc = RayProcess(0, driver_node(), f"fault filesystem at {fault.mount}")

    def step(event: DiskEvent) -> None:
        if event.kind != "ineffective":  # Chaos.inject journals the FaultIneffective raised with it
            lost = isinstance(fault, PowerLoss) and event.kind == "inject" and event.measured is not None
            ctx.record(event.kind, fault, at, proc, event.outcome,
                       Observed(bytes=int(event.measured or 0)) if lost else None)

    with _held_alone(fault), inject_disk(fault, record=step) as injection, \
            ctx.on_heal(lambda: switch_off(fault)):
        yield Injection(fault, (proc,), found=injection)


#: The switched disk faults on now, by mount and kind: a heal switches off every rule of its
#: kind on its mount, so a second fault of that kind there would be ended by the first's heal
#: and then reported as held (its own heal finding nothing on).
_DISK_HELD: set[tuple[str, type]] = set()
_DISK_HELD_LOCK = threading.Lock()


@contextlib.contextmanager
def _held_alone(fault: DiskFault) -> Iterator[None]:
    key = (fault.mount, type(fault))
    if isinstance(fault, PowerLoss):  # one instant, nothing held
        yield
        return
    with _DISK_HELD_LOCK:
        if key in _DISK_HELD:
            raise InvalidFaultSpec(
                f"a {fault.KIND} on {fault.mount} while another is on: a heal switches off every "
                f"{fault.KIND} rule of a mount, so the two cannot be judged apart; schedule them one "
                "after the other, or use different kinds")
        _DISK_HELD.add(key)
    try:
        yield
    finally:
        with _DISK_HELD_LOCK:
            _DISK_HELD.discard(key)


#: A fault filesystem this driver reaches by its mount point: nothing of a node is needed.
_ON_MOUNT: frozenset[Need] = frozenset()
register(
    FaultSpec(record=SlowDisk, inject=_inject, needs=_ON_MOUNT, colour="#b08968",
              example={"mount": "/mnt/faultfs", "seconds": 4, "latency": 0.2, "ops": ["fsync"]}),
    FaultSpec(record=StallDisk, inject=_inject, needs=_ON_MOUNT, colour="#9c6644",
              example={"mount": "/mnt/faultfs", "seconds": 2, "glob": "/ckpt/*"}),
    FaultSpec(record=FailingDisk, inject=_inject, needs=_ON_MOUNT, colour="#e07a5f",
              example={"mount": "/mnt/faultfs", "seconds": 3, "errno": "EIO", "glob": "/ckpt/*"}),
    FaultSpec(record=PowerLoss, inject=_inject, needs=_ON_MOUNT, colour="#3d405b", example={"mount": "/mnt/faultfs"}),
)
