"""The ground every fault kind stands on, and the one registry of kinds.

A kind is one module: its record (a frozen dataclass deriving :class:`Fault`), its injector
(inject → confirm → ``yield`` → heal in ``finally``, written against
:class:`chaos.engine.FaultContext`), and one :class:`FaultSpec` it registers on import with
what the kind needs of a cluster, the colour a report draws it in, an example a reference
shows and what its injector records as observed (:class:`~chaos._observed.Observed`, or the
kind's own subclass of it). Its name is a :class:`FaultKind` member, and its module is listed in
:data:`KIND_MODULES`: adding a kind touches this file and the kind's own.

Nothing here imports the engine, Ray or the journal: records, their serialised form and the
registry's lookup stand beneath everything that uses them (the engine's modules are imported
the first time the registry is read, not before).
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import Field, asdict, dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any, ClassVar

from chaos._errors import InvalidFaultSpec
from chaos._json import JsonValue
from chaos._observed import Observed
from chaos._targets import target_from_dict, target_to_dict

__all__ = ["KIND_MODULES", "MAX_FAULT_SECONDS", "ON_NODES", "ON_PROCESSES",
           "Fault", "FaultKind", "FaultSpec", "Need", "duration",
           "fault_from_dict", "fault_specs", "fault_to_dict", "number_in", "register", "spec_of"]

#: The longest any fault is held, in seconds: every fault is bounded in time.
MAX_FAULT_SECONDS = 3600.0


class FaultKind(StrEnum):
    """Every fault's kind, as scenario files and journals spell it (each fault class's ``KIND``)."""

    KILL = "kill"
    KILL_NODE = "kill_node"
    PAUSE = "pause"
    MEMORY = "memory"
    CPU = "cpu"
    OBJECT_STORE = "object_store"
    STARVE = "starve"
    FREEZE_NODE = "freeze_node"
    LIMIT_OPEN_FILES = "limit_open_files"
    FILL_DISK = "fill_disk"
    DRAIN_NODE = "drain_node"
    KILL_GCS = "kill_gcs"
    PARTITION = "partition"
    PACKET_LOSS = "packet_loss"
    BANDWIDTH = "bandwidth"
    FLAPPING_LINK = "flapping_link"
    SLOW_DISK = "slow_disk"
    STALL_DISK = "stall_disk"
    FAILING_DISK = "failing_disk"
    POWER_LOSS = "power_loss"
    FILE_CORRUPTION = "file_corruption"
    KILL_REDIS = "kill_redis"
    REDIS_CLIENT_KILL = "redis_client_kill"
    REDIS_IDLE_TIMEOUT = "redis_idle_timeout"
    #: Ray's RPC failure knob, set on the worker nodes for a whole run (``[[rpc_failures]]``):
    #: not a scheduled fault (no record, no injector), confirmed from what Ray logged it injected.
    RPC_FAILURE = "rpc_failure"


#: The modules that implement the scheduled kinds; each registers its kinds' specs on import.
KIND_MODULES = ("chaos._process_faults", "chaos._resource_faults", "chaos.net._faults", "chaos.gcs._faults",
                "chaos.disks._faults", "chaos.corruption")


class Need(StrEnum):
    """What a kind of fault needs of the cluster (each kind's :attr:`FaultSpec.needs`)."""

    AGENT = "a chaos agent that starts and answers"
    STATE_API = "the State API (the dashboard of ray[default])"
    PROC = "/proc readable by the agent"
    CONTROL = "permission over the node's Ray processes (the agent runs as their user, or as root)"
    GCS = "a GCS this driver may kill and restart (a cluster it started, with Redis)"
    RAYCHAOS = "raychaos importable by the node's workers (the memory fault's task is a Ray task)"
    NETWORK = "links raychaos made (nodes it started in network namespaces, network = true)"
    WORKER_NODE = "a live worker node besides the head (a cluster of two or more nodes)"
    REDIS = "a Redis this driver started, holding the GCS's tables (GCS fault tolerance)"


#: What a kind acting on a node's processes through its agent needs of every node.
ON_PROCESSES = frozenset({Need.AGENT, Need.STATE_API, Need.PROC, Need.CONTROL})
#: What a kind acting on a node (not on a chosen process) through its agent needs.
ON_NODES = frozenset({Need.AGENT, Need.STATE_API})


class Fault:
    """A fault record: what to inject, validated on construction (nothing is injected if invalid).
    Every kind's record is a frozen dataclass deriving this class."""

    __slots__ = ()
    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind]
    #: Whether the chaos agent on the target's node carries it out (see :func:`chaos.agents.start_agents`).
    USES_AGENT: ClassVar[bool]
    __dataclass_fields__: ClassVar[dict[str, Field[Any]]]  # every record is a dataclass (asdict, replace)


# -- validators: each raises InvalidFaultSpec naming the field, the value and what it must be ----


def number_in(name: str, value: object, low: float, high: float, *, what: str = "", after: str = "",
              why: str = "", low_open: bool = False, whole: bool = False) -> None:
    """``value`` must be a finite number (a bool is not; with ``whole``, an int) in [low, high]
    (``(low, high]`` with ``low_open``), else :class:`InvalidFaultSpec` says so: "`name` must be
    <what> in <bounds> <after>, got <value>: <why>"."""
    kind = int if whole else (int, float)
    number = not isinstance(value, bool) and isinstance(value, kind) and math.isfinite(value)
    if number and (low < value if low_open else low <= value) and value <= high:  # type: ignore[operator]
        return
    bounds = f"{'(' if low_open else '['}{low:g}, {high:g}]"
    raise InvalidFaultSpec(f"`{name}` must be {what + ' ' if what else ''}in {bounds}{' ' + after if after else ''}, "
                           f"got {value!r}{': ' + why if why else ''}", field=name)


def duration(name: str, value: object, *, most: float = MAX_FAULT_SECONDS) -> None:
    """``value`` must be a duration in (0, most] seconds: every fault is bounded in time."""
    number_in(name, value, 0, most, what="a duration", after="seconds", why="every fault is bounded in time",
              low_open=True)


# -- the registry ---------------------------------------------------------------------------------

#: An injector: ``(context, fault, at, rng)`` → a context manager yielding an ``Injection``
#: (precisely typed where each kind defines it, against :class:`chaos.engine.FaultContext`).
Injector = Callable[..., Any]


@dataclass(frozen=True, slots=True, kw_only=True)
class FaultSpec:
    """One kind of fault, whole: its record, its injector, what it needs of every node it may hit
    (empty: nothing of the cluster, e.g. a disk fault on this driver's mount), the colour a
    report draws it in, an example of its fields for the scenario reference, and the type of
    what its injector observes."""

    record: type[Fault]
    inject: Injector
    needs: frozenset[Need]
    colour: str
    example: Mapping[str, JsonValue]
    #: What its injector records as observed: :class:`Observed`, or the kind's own subclass
    #: with the facts only it gives (a pause's deadline, a memory fault's peak).
    observed: type[Observed] = Observed
    #: Readies a schedule's faults of this kind before its time zero, so none is late (maps the
    #: object store's memory, leaves an idle worker on each node); None: nothing to ready.
    warm_up: Callable[[Sequence[Fault]], None] | None = None
    #: The GCS restarts under it (killed, or exiting when its Redis goes), and Ray keeps task
    #: events in the GCS's memory only, Redis or not: what Ray says of a run's task attempts
    #: afterwards misses those before the restart.
    forgets_task_events: bool = False

    @property
    def kind(self) -> FaultKind:
        return self.record.KIND


_SPECS: dict[FaultKind, FaultSpec] = {}


def _name(record: type[Fault]) -> str:
    # A module imported again (pytester restores sys.modules after an in-process run) registers
    # the same kind from the same place: not a second kind.
    return f"{record.__module__}.{record.__qualname__}"


def register(*specs: FaultSpec) -> None:
    """Register kinds (a kind's module calls this once, on import).

    Raises:
        InvalidFaultSpec: a kind registered twice by different specs.
    """
    for spec in specs:
        known = _SPECS.get(spec.kind)
        if known is not None and _name(known.record) != _name(spec.record):
            raise InvalidFaultSpec(f"fault kind {spec.kind!r} is registered twice ({known.record.__module__} "
                                   f"and {spec.record.__module__}): give the new kind a FaultKind of its own")
        _SPECS[spec.kind] = spec


def fault_specs() -> Mapping[FaultKind, FaultSpec]:
    """Every scheduled kind's spec, by kind (its modules imported the first time)."""
    if len(_SPECS) < len(FaultKind) - 1:  # RPC_FAILURE has no spec: not a scheduled fault
        for module in KIND_MODULES:
            importlib.import_module(module)
    return MappingProxyType({kind: _SPECS[kind] for kind in FaultKind if kind in _SPECS})  # FaultKind's order


def spec_of(fault: object) -> FaultSpec:
    """The spec of ``fault``'s kind.

    Raises:
        InvalidFaultSpec: ``fault`` is not a fault record.
    """
    spec = fault_specs().get(getattr(type(fault), "KIND", None))  # type: ignore[arg-type]
    if spec is None or type(fault) is not spec.record:
        raise InvalidFaultSpec(
            f"{fault!r} is not a fault: give a fault record such as "
            "Kill(ActorTarget(name='victim')) or Pause(TaskTarget('collect'), seconds=2)")
    return spec


# -- one serialised form: a tagged dict -----------------------------------------------------------

_TARGET_FIELDS = ("target", "node")


def fault_to_dict(fault: Fault) -> dict[str, JsonValue]:
    """A JSON-able dict of the fault, tagged with its ``kind`` (for the journal and scenario
    files); :func:`fault_from_dict` inverts it."""
    data = asdict(fault)
    for name in _TARGET_FIELDS:
        value = getattr(fault, name, None)
        if name in data:
            data[name] = None if value is None else target_to_dict(value)
    return {"kind": fault.KIND.value, **data}


def fault_from_dict(data: Mapping[str, object]) -> Fault:
    """Rebuild a fault from :func:`fault_to_dict`'s output (validated again).

    Raises:
        InvalidFaultSpec: an unknown kind, or a field its record refuses.
        TypeError: a field its record does not have, or one it needs missing.
    """
    fields = dict(data)
    kind = fields.pop("kind", None)
    specs = {k.value: s for k, s in fault_specs().items()}
    if kind not in specs:
        raise InvalidFaultSpec(f"unknown fault kind {kind!r}; use one of {sorted(specs)}")
    for name in _TARGET_FIELDS:
        if fields.get(name) is not None:
            fields[name] = target_from_dict(fields[name])
    return specs[str(kind)].record(**fields)
