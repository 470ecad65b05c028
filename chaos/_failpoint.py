"""Named failpoints: crash, fail or stall a process at an exact point of its code.

After etcd's gofail and TiKV's fail-rs. Code marks a dangerous point with
``failpoint("wal.append.written")``; a test arms it from outside the process with a
:class:`FailpointPlan` — through the environment variable :data:`FAILPOINTS_ENV` (pass
:func:`failpoint_env` as an actor's ``runtime_env``), or in-process with :func:`armed`.

Off, a failpoint costs one function call and one test of an empty dict: nothing is armed
unless the variable was set when this module was imported (or :func:`arm` was called).

Every firing leaves evidence: an ``O_EXCL`` token file in the plan's ``evidence_dir``, written
before the action runs. It is also the budget: a failpoint with ``times=1`` fires once across
every restart of the process, because the restarted process finds the token and passes.
:func:`firings` reads the tokens, so a test can fail closed when an armed point was never reached.
"""

from __future__ import annotations

import contextlib
import enum
import json
import os
import re
import signal
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from chaos._errors import ChaosError, InvalidConfig, InvalidFaultSpec
from chaos._json import JsonValue

__all__ = [
    "FAILPOINTS_ENV",
    "FailAction",
    "Failpoint",
    "FailpointError",
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

FAILPOINTS_ENV = "RAYCHAOS_FAILPOINTS"
_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)*$")


class FailpointError(ChaosError, RuntimeError):
    """Raised by a failpoint armed with the ``error`` action, at exactly that point."""


class FailAction(enum.Enum):
    """What an armed failpoint does when reached."""

    CRASH = "crash"  # SIGKILL this process: no cleanup, no finally, no reply
    ERROR = "error"  # raise FailpointError
    PAUSE = "pause"  # stall this thread for ``seconds``: a straggler at exactly this point


@dataclass(frozen=True, slots=True, kw_only=True)
class Failpoint:
    """One armed point: its name, what it does, after how many passes, how many times in all.

    Args:
        name: the dotted name given to :func:`failpoint` in the code.
        action: what happens when it fires.
        skip: hits that pass through first, counted in each process.
        times: how many times it fires in all, across processes (the evidence tokens count).
        seconds: how long ``pause`` stalls.
    """

    name: str
    action: FailAction = FailAction.CRASH
    skip: int = 0
    times: int = 1
    seconds: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise InvalidFaultSpec(
                f"failpoint name {self.name!r} is not a dotted lower-case name; "
                "use one like 'wal.append.written'")
        if not isinstance(self.action, FailAction):
            raise InvalidFaultSpec(
                f"failpoint {self.name}: action {self.action!r} is not a FailAction; "
                f"use one of {', '.join(a.name for a in FailAction)}")
        for field, least in (("skip", 0), ("times", 1)):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise InvalidFaultSpec(
                    f"failpoint {self.name}: `{field}` must be a whole number >= {least}, got {value!r}")
        if isinstance(self.seconds, bool) or not isinstance(self.seconds, (int, float)) \
                or not 0 < self.seconds <= 3600:
            raise InvalidFaultSpec(
                f"failpoint {self.name}: `seconds` must be in (0, 3600], got {self.seconds!r}")


@dataclass(frozen=True, slots=True)
class FailpointPlan:
    """The failpoints to arm in a process, and the folder their firings are recorded in."""

    points: tuple[Failpoint, ...]
    evidence_dir: str

    def __post_init__(self) -> None:
        names = [p.name for p in self.points]
        if len(set(names)) != len(names):
            raise InvalidFaultSpec(f"a failpoint plan names a point twice: {names}; give each once")
        if not self.evidence_dir:
            raise InvalidFaultSpec("a failpoint plan needs an evidence_dir (a writable folder)")

    def to_json(self) -> str:
        return json.dumps({"evidence_dir": self.evidence_dir, "points": [
            {"name": p.name, "action": p.action.value, "skip": p.skip, "times": p.times,
             "seconds": p.seconds} for p in self.points]})

    @classmethod
    def from_json(cls, text: str) -> FailpointPlan:
        try:
            raw = json.loads(text)
            points = tuple(Failpoint(**{**p, "action": FailAction(p["action"])}) for p in raw["points"])
            return cls(points, str(raw["evidence_dir"]))
        except (ValueError, KeyError, TypeError) as exc:
            raise InvalidFaultSpec(
                f"{FAILPOINTS_ENV} is not a failpoint plan ({exc}): {text[:200]!r}; "
                "build it with FailpointPlan(...).to_json() or failpoint_env(plan)") from exc


@dataclass(frozen=True, slots=True)
class Firing:
    """Evidence that a failpoint fired: which, its n-th firing, in which process, when."""

    name: str
    n: int
    pid: int
    at: float
    action: FailAction


class _Armed:
    """One armed point in this process: counts hits, takes a token, acts."""

    def __init__(self, point: Failpoint, evidence_dir: str) -> None:
        self.point, self.evidence_dir, self.hits = point, evidence_dir, 0

    def hit(self) -> None:
        self.hits += 1
        if self.hits > self.point.skip and self._take_token():
            _act(self.point)

    def _take_token(self) -> bool:
        """Claim one of the point's ``times`` firings, durably across processes."""
        for n in range(self.point.times):
            path = os.path.join(self.evidence_dir, f"{self.point.name}.{n}")
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                continue
            record = {"pid": os.getpid(), "at": time.time(), "action": self.point.action.value}
            os.write(fd, json.dumps(record).encode())
            os.close(fd)  # in the page cache: it survives the SIGKILL that may follow
            return True
        return False


def _act(point: Failpoint) -> None:
    if point.action is FailAction.CRASH:
        os.kill(os.getpid(), signal.SIGKILL)
    elif point.action is FailAction.ERROR:
        raise FailpointError(f"failpoint {point.name} fired (action error)")
    else:
        time.sleep(point.seconds)  # the injected stall itself, not a wait for anything


_ARMED: dict[str, _Armed] = {}


def failpoint(name: str) -> None:
    """Mark a point in the code; does nothing unless ``name`` is armed in this process."""
    if _ARMED:
        armed_point = _ARMED.get(name)
        if armed_point is not None:
            armed_point.hit()


def is_armed(name: str) -> bool:
    """Whether ``name`` is armed here: for points that need set-up first (a torn write)."""
    return bool(_ARMED) and name in _ARMED


def arm(plan: FailpointPlan) -> None:
    """Arm ``plan`` in this process, replacing whatever was armed."""
    os.makedirs(plan.evidence_dir, exist_ok=True)
    _ARMED.clear()
    _ARMED.update((p.name, _Armed(p, plan.evidence_dir)) for p in plan.points)


def disarm() -> None:
    _ARMED.clear()


@contextlib.contextmanager
def armed(plan: FailpointPlan) -> Iterator[None]:
    """Arm ``plan`` for the block, in this process; disarm after it, whatever happened."""
    arm(plan)
    try:
        yield
    finally:
        disarm()


def failpoint_env(plan: FailpointPlan, base: Mapping[str, JsonValue] | None = None) -> dict[str, JsonValue]:
    """A ``runtime_env`` (``base`` plus one variable) that arms ``plan`` in an actor's process
    and in every process Ray restarts it in."""
    os.makedirs(plan.evidence_dir, exist_ok=True)
    env = dict(base or {})
    given = env.get("env_vars") or {}
    if not isinstance(given, dict):
        raise InvalidConfig(f"runtime_env env_vars = {given!r}: must be a mapping of variable names to values")
    env["env_vars"] = {**given, FAILPOINTS_ENV: plan.to_json()}
    return env


def firings(evidence_dir: str) -> list[Firing]:
    """Every firing recorded in ``evidence_dir``, oldest first."""
    if not os.path.isdir(evidence_dir):
        return []
    found = []
    for entry in os.listdir(evidence_dir):
        name, _, n = entry.rpartition(".")
        if not (n.isdigit() and _NAME.match(name)):
            continue
        with open(os.path.join(evidence_dir, entry), "rb") as f:
            record = json.loads(f.read() or b"{}")  # JSON only: never unpickled
        found.append(Firing(name=name, n=int(n), pid=int(record.get("pid", 0)), at=float(record.get("at", 0.0)),
                            action=FailAction(record.get("action", "crash"))))
    return sorted(found, key=lambda f: f.at)


def _arm_from_env() -> None:
    text = os.environ.get(FAILPOINTS_ENV)
    if text:
        arm(FailpointPlan.from_json(text))


_arm_from_env()
