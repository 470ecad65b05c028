"""The scenario model: a workload, a fault schedule, steady-state checks, invariants, a heal strategy.

Scenario files are TOML. :func:`load_scenario` validates the whole file before anything runs
and reports every problem at once, one line each: the field, the value, the fix.
"""

from __future__ import annotations

import importlib
import math
import os
import sys
import tomllib
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from chaos import ChaosError, Fault, RpcFailure, Schedule, ScheduledFault
from chaos.disks import DISK_GRACE, MAX_STALL_SECONDS, STORAGE, StallDisk
from chaos.engine import MAX_CONCURRENT_FAULTS
from chaos.errors import InvalidConfig, InvalidFaultSpec
from scenarios.model._records import Problem
from scenarios.model._spill import SPILL, spill_kinds
from scenarios.model._tables import MISSING, did_you_mean, fault_problems, rpc_failure_problems, unknown_keys

if TYPE_CHECKING:
    from scenarios.model._workload import Workload

__all__ = ["FIELDS", "STEADY_STATE_FIELDS", "FieldSpec", "HealStrategy", "Problem", "Scenario", "ScenarioError",
           "SteadyState", "builtin_names", "load_scenario", "resolve_workload"]

HealStrategy = Literal["after_each", "at_end"]
JsonType = Literal["string", "number", "integer", "boolean", "array", "object"]
MAX_DURATION = 3600.0
MAX_NODES = 8
#: What an attack's file says it is (``kind``), and how it is run.
ATTACK_KIND = "attack"
ATTACK_FILE_USE = ("an attack's file runs with `raychaos attack FILE --address HOST:PORT` or `raychaos run --job "
                   "'COMMAND' FILE`, and `raychaos validate FILE` checks it")
#: Seconds a fault has, from its heal, until the workload's probe holds again (the default).
RECOVERY_WITHIN = 60.0


@dataclass(frozen=True, slots=True)
class FieldSpec:
    """A field of a scenario file as the loader checks it, the JSON Schema states it and the
    reference page describes it (:mod:`scenarios.model._schema` reads these; nothing else does)."""

    name: str
    type: JsonType
    description: str
    #: What an absent field means; None: no value (the field is unset, or required).
    default: object = None
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    required: bool = False


#: Every top-level field of a scenario file, in the order the reference lists them.
FIELDS: dict[str, FieldSpec] = {f.name: f for f in (
    FieldSpec(name="name", type="string",
              description="The scenario's name in reports and journals (default: `unnamed`).", default=""),
    FieldSpec(name="description", type="string",
              description="One paragraph: what the scenario does and what must hold.", default=""),
    FieldSpec(name="workload", type="string",
              description="The workload to run: a built-in name, a registered or installed one, or `module:Class` "
                          "naming a `scenarios.Workload` subclass.", required=True),
    FieldSpec(name="params", type="object",
              description="The workload's own options (see the workloads below).", default={}),
    FieldSpec(name="duration", type="number",
              description="Seconds the workload runs under faults, from time zero (after setup).",
              default=60.0, minimum=1.0, maximum=MAX_DURATION),
    FieldSpec(name="nodes", type="integer",
              description="Embedded nodes, the head included (each a raylet and its workers on this machine).",
              default=1, minimum=1, maximum=MAX_NODES),
    FieldSpec(name="num_cpus", type="integer",
              description="CPUs each embedded node declares.", default=2, minimum=1, maximum=64),
    FieldSpec(name="network", type="boolean",
              description="Put each embedded worker node in its own network namespace, with its own address on a "
                          "bridge, so that network faults (`partition`, `packet_loss`, `bandwidth`, `flapping_link`) "
                          "can cut its links; needs root, `nft`, `ip` and `tc` (`make net`), and `nodes` >= 2.",
              default=False),
    FieldSpec(name="system_config", type="object",
              description="Ray system config for the embedded cluster (`_system_config`).", default={}),
    FieldSpec(name="oom_headroom_gib", type="number",
              description="Set Ray's memory monitor threshold to the host's use at the start plus this many GiB, and "
                          "aim every memory fault just past it (unset: Ray's threshold).",
              default=None, minimum=0.25, maximum=64.0),
    FieldSpec(name="heal", type="string",
              description="When faults are healed: after each one, or all at the run's end.",
              default="after_each", choices=get_args(HealStrategy)),
    FieldSpec(name="invariants", type="array",
              description="The workload's invariants to judge; each yields a verdict or the run fails. Left out: the "
                          "workload's defaults. An empty list is refused."),
    FieldSpec(name="steady_state", type="object",
              description="When the workload's probe must hold (`[steady_state]`)."),
    FieldSpec(name="faults", type="array",
              description="The fault schedule (`[[faults]]`): each entry a fault kind, its fields and `at`, seconds "
                          "after time zero. Not with `[random]`."),
    FieldSpec(name="random", type="object",
              description="A seeded random schedule (`[random]`): `rate` faults per second drawn from `menu`. Not with "
                          "`[[faults]]`."),
    FieldSpec(name="strict_faults", type="boolean",
              description="A scheduled fault that did not happen fails the run; false accepts it (best effort).",
              default=True),
    FieldSpec(name="gcs_fault_tolerance", type="boolean",
              description="Start a Redis (`redis-server`) and give the embedded head GCS fault tolerance: it survives "
                          "`kill_gcs`.", default=False),
    FieldSpec(name="rpc_failures", type="array",
              description="Ray's RPC failure knob on the worker nodes' processes for the whole run "
                          "(`[[rpc_failures]]`); needs `nodes` >= 2."),
    FieldSpec(name="storage_mb", type="integer",
              description="Put each run's checkpoint storage on a tmpfs of this many MiB (needs root); a `fill_disk` of"
                          " `path = \"$STORAGE\"` fills it. Unset: a temporary directory.",
              default=None, minimum=1, maximum=1024),
    FieldSpec(name="storage_faultfs", type="boolean",
              description="Mount each run's checkpoint storage through a fault filesystem (needs FUSE 3 and mfusepy: "
                          "`pip install 'raychaos[disk]'`; over the tmpfs when `storage_mb` is set too), so that disk "
                          "faults (`slow_disk`, `stall_disk`, `failing_disk`, `power_loss`) of `mount = \"$STORAGE\"` "
                          "reach it.", default=False),
    FieldSpec(name="spill_faultfs", type="boolean",
              description="Point Ray's object spilling (and its fallback allocation) of the embedded cluster at a "
                          "directory mounted through a fault filesystem for the whole run (needs FUSE 3 and mfusepy), "
                          "so that disk faults of `mount = \"$SPILL\"` reach it. Not with `--address`.", default=False),
    FieldSpec(name="object_store_mb", type="integer",
              description="Object store MiB per node of the embedded cluster (small, so that objects spill).",
              default=200, minimum=80, maximum=65536),
    FieldSpec(name="recovery_within", type="number",
              description="Seconds each fault has, from its heal, until the probe holds again (the "
                          "`recovered_after_each_fault` verdict).",
              default=RECOVERY_WITHIN, minimum=0.1, maximum=MAX_DURATION),
)}
_TOP_LEVEL = frozenset(FIELDS)
#: The fields of ``[steady_state]``.
STEADY_STATE_FIELDS: dict[str, FieldSpec] = {f.name: f for f in (
    FieldSpec(name="before", type="boolean", description="The probe must hold before the first fault.", default=True),
    FieldSpec(name="after", type="boolean",
              description="The probe must hold after the last heal (and each fault must recover within "
                          "`recovery_within`).", default=True),
    FieldSpec(name="during_min", type="number",
              description="The share of probes during the run that must hold.", default=0.0, minimum=0.0, maximum=1.0),
    FieldSpec(name="probe_every", type="number",
              description="Seconds between probes.", default=2.0, minimum=0.1, maximum=60.0),
)}


class ScenarioError(ChaosError, ValueError):
    """A scenario file or option is invalid; ``problems`` lists each problem."""

    def __init__(self, source: str, problems: list[Problem]) -> None:
        self.source, self.problems = source, problems
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"{source}: {len(problems)} problem(s)\n{lines}")


@dataclass(frozen=True, slots=True)
class SteadyState:
    """When the workload's probe must hold: before faults, during them (a fraction), after."""

    before: bool = True
    after: bool = True
    during_min: float = 0.0
    probe_every: float = 2.0


@dataclass(frozen=True, slots=True)
class Scenario:
    """A validated scenario. ``params`` are the workload's own options."""

    name: str
    description: str
    workload: str
    schedule: Schedule
    duration: float
    invariants: tuple[str, ...]
    params: Mapping[str, object] = field(default_factory=dict)
    nodes: int = 1
    num_cpus: int = 2
    system_config: Mapping[str, object] = field(default_factory=dict)
    heal: HealStrategy = "after_each"
    steady_state: SteadyState = field(default_factory=SteadyState)
    source: str = ""  # what load_scenario was given: a built-in name or a file path
    #: Set Ray's memory monitor threshold to the host's use at the start plus this many GiB,
    #: and aim every memory fault just past it: the OOM kill then happens alike on any host.
    oom_headroom_gib: float | None = None
    #: A scheduled fault that did not happen fails the run; ``strict_faults = false`` in the
    #: file accepts that (best effort), in words.
    strict_faults: bool = True
    #: Start a Redis and give the embedded head GCS fault tolerance (it survives KillGcs).
    gcs_fault_tolerance: bool = False
    #: Ray's RPC failure knob for the embedded worker nodes' processes, set at their start.
    rpc_failures: tuple[RpcFailure, ...] = ()
    #: Put each run's checkpoint storage on a tmpfs of this many MiB (a FillDisk of
    #: ``path = "$STORAGE"`` fills it); None: an ordinary temporary directory.
    storage_mb: int | None = None
    #: Mount each run's checkpoint storage through a fault filesystem (disk faults of
    #: ``mount = "$STORAGE"`` act on it).
    storage_faultfs: bool = False
    #: Ray's object spilling directory on a fault filesystem mounted for the whole run (disk
    #: faults of ``mount = "$SPILL"`` act on it).
    spill_faultfs: bool = False
    #: Object store MiB per node of the embedded cluster.
    object_store_mb: int = 200
    #: Each embedded worker node in its own network namespace (``local_cluster(network=True)``).
    network: bool = False
    #: Seconds each fault has, from its heal, until the probe holds again: the bound of the
    #: ``recovered_after_each_fault`` verdict every run with faults gets (when the workload has
    #: a probe and the scenario expects the steady state back, ``steady_state.after``).
    recovery_within: float = RECOVERY_WITHIN

    def with_nodes(self, nodes: int) -> Scenario:
        """This scenario on ``nodes`` embedded nodes (CLI ``--nodes``)."""
        return replace(self, nodes=nodes)

    @property
    def faultless(self) -> bool:
        """No fault at all: neither scheduled nor Ray's RPC failure knob."""
        return not self.schedule.entries and not self.rpc_failures


def builtin_names() -> list[str]:
    """The built-in scenarios, by name."""
    folder = resources.files("scenarios") / "builtin"
    return sorted(p.name.removesuffix(".toml") for p in folder.iterdir() if p.name.endswith(".toml"))


def load_scenario(name_or_path: str, *, seed: int = 0, duration: float | None = None,
                  workloads: Mapping[str, type[Workload]] | None = None) -> Scenario:
    """Load and validate a scenario: a built-in name or a TOML file.

    Args:
        seed: draws the schedule when the file asks for a ``[random]`` one.
        duration: overrides the file's ``duration`` (CLI ``--duration``).
        workloads: known workloads besides the built-in ones; ``workload = "module:Class"``
            in the file names any importable :class:`scenarios.Workload` subclass.

    Raises:
        ScenarioError: every problem found, one per line; nothing has run.
    """
    source, data = _load(name_or_path)
    if data.get("kind") == ATTACK_KIND:
        raise ScenarioError(source, [Problem("kind", ATTACK_KIND, ATTACK_FILE_USE)])
    if duration is not None:
        data["duration"] = duration
    return _validate(source, data, seed, workloads)


def foreign_fields(data: Mapping[str, object], allowed: Collection[str], not_for: str, holder: str) -> list[Problem]:
    """A problem for each field of ``data`` outside ``allowed``: a scenario's field ``not_for``
    this kind of file (``holder``), or no field at all (with the closest allowed one)."""
    keys = ", ".join(sorted(allowed))
    return [Problem(k, data[k], f"not for {not_for}; {holder} holds {keys}" if k in FIELDS else
                    f"unknown field; {did_you_mean(k, sorted(allowed))}{holder} holds {keys}")
            for k in sorted(set(data) - set(allowed))]


def _number(value: object) -> bool:
    """A finite number a float can hold (a bool is not one; TOML's whole numbers have no bound)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return abs(value) <= sys.float_info.max if isinstance(value, int) else math.isfinite(value)


def _load(name_or_path: str) -> tuple[str, dict[str, Any]]:
    source, text = _read(name_or_path)
    try:
        return source, tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(source, [Problem("file", source, f"is not valid TOML ({exc}); fix the syntax")]) from None


def resolve_workload(name: str, workloads: Mapping[str, type[Workload]] | None = None) -> type[Workload]:
    """The workload class a scenario names: one of ``workloads``, a built-in, or a
    ``module:Class`` path to a :class:`scenarios.Workload` subclass (imported with the
    current directory on ``sys.path``; Ray passes the driver's path on to its workers).

    Raises:
        InvalidConfig: no such workload; the message says what was tried and the fix.
    """
    found, fix = _find_workload(name, workloads)
    if found is None:
        raise InvalidConfig(f"workload {name!r}: {fix}")
    return found


def _find_workload(name: str, workloads: Mapping[str, type[Workload]] | None) -> tuple[type[Workload] | None, str]:
    """(the class, "") or (None, what is wrong and the fix)."""
    from scenarios.workloads._registry import known_workloads

    known = {**known_workloads(), **(workloads or {})}
    if name in known:
        return known[name], ""
    if ":" not in name:
        return None, (f"unknown workload; {did_you_mean(name, sorted(known))}use one of {', '.join(sorted(known))}, "
                      "or 'module:Class' naming a scenarios.Workload subclass")
    return _import_workload(name)


#: How a ``module:Class`` workload is written.
_MODULE_CLASS = "e.g. 'mypkg.workloads:MyWorkload' (module:Class)"


def _import_workload(name: str) -> tuple[type[Workload] | None, str]:
    """``module:Class`` imported, the current directory on ``sys.path`` (as ``python -m`` has
    it: the user's own modules, from here); or None and what is wrong and the fix."""
    from scenarios.model._workload import Workload

    module, _, attr = name.partition(":")
    if not all(part.isidentifier() for part in module.split(".")) or not attr.isidentifier():
        return None, f"is no module:Class path; give a dotted module path and a class name, {_MODULE_CLASS}"
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        imported = importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module == exc.name or module.startswith(f"{exc.name}.")):
            return None, (f"cannot be imported: there is no module {exc.name!r} on sys.path (the current "
                          "directory is on it); check the module path")
        return None, _import_failed(module, exc)
    except Exception as exc:  # noqa: BLE001 - the user's own module failed as it was imported: said as such
        return None, _import_failed(module, exc)
    found = getattr(imported, attr, None)
    if found is None:
        ours = sorted(k for k, v in vars(imported).items()
                      if isinstance(v, type) and issubclass(v, Workload) and v is not Workload)
        return None, (f"module {module!r} has no {attr!r}; {did_you_mean(attr, ours)}name a scenarios.Workload "
                      f"subclass it defines ({', '.join(ours) or 'it defines none'})")
    if not (isinstance(found, type) and issubclass(found, Workload)):
        return None, f"is {found!r}, not a scenarios.Workload subclass"
    return found, ""


def _import_failed(module: str, exc: Exception) -> str:
    """The user's module raised while it was imported: its own error is the one to fix."""
    return f"cannot be imported: module {module!r} raised {type(exc).__name__} as it was imported ({exc}); fix it"


def _read(name_or_path: str) -> tuple[str, str]:
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        if not path.is_file():
            raise ScenarioError(name_or_path, [Problem("scenario", name_or_path,
                                                       "no such file; give a TOML file or a built-in name")])
        return str(path), _text(path)
    if name_or_path not in builtin_names():
        raise ScenarioError(name_or_path, [Problem(
            "scenario", name_or_path, f"unknown; use a TOML file or one of {', '.join(builtin_names())}")])
    text = (resources.files("scenarios") / "builtin" / f"{name_or_path}.toml").read_text(encoding="utf-8")
    return f"builtin:{name_or_path}", text


def _text(path: Path) -> str:
    """The file's text; a file that is not UTF-8 or cannot be read is one problem."""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        fix = f"is not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start}); save it as UTF-8"
    except OSError as exc:
        fix = f"cannot be read ({exc.strerror or 'an error of the operating system'}); check its permissions"
    raise ScenarioError(str(path), [Problem("file", str(path), fix)])


class _Checker:
    """Collects problems while reading fields, so one pass reports all of them."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        self.data = data
        self.problems: list[Problem] = []

    def add(self, name: str, value: object, fix: str) -> None:
        self.problems.append(Problem(name, value, fix))

    def get(self, name: str, kind: type | tuple[type, ...], default: Any, fix: str) -> Any:
        value = self.data.get(name, default)
        if isinstance(value, bool) and kind in (int, float, (int, float)):
            self.add(name, value, fix)
            return default
        if not isinstance(value, kind):
            self.add(name, value, fix)
            return default
        return value

    def spec(self, spec: FieldSpec) -> Any:
        """The field as ``spec`` states it: a number in its bounds, or a value of its type."""
        if spec.type in ("number", "integer"):
            assert spec.minimum is not None and spec.maximum is not None, spec.name
            default = spec.default if isinstance(spec.default, (int, float)) else spec.minimum
            return self.number(spec.name, default, spec.minimum, spec.maximum, whole=spec.type == "integer")
        kind = {"string": str, "boolean": bool, "object": dict, "array": list}[spec.type]
        return self.get(spec.name, kind, spec.default, _TYPE_FIX[spec.type])

    def number(self, name: str, default: float, lo: float, hi: float, *, whole: bool = False) -> Any:
        kind = "a whole number" if whole else "a number"
        fix = f"must be {kind} in [{lo:g}, {hi:g}]"
        value = self.get(name, int if whole else (int, float), default, fix)
        if not (_number(value) and lo <= value <= hi):
            self.add(name, value, fix)
            return default
        return value


_TYPE_FIX = {"string": "must be a string", "boolean": "must be true or false", "object": "must be a table",
             "array": "must be an array"}


#: Seconds a fault under ``heal = "at_end"`` is asked to outlast the run: the driver heals it
#: at the end; the agent's own deadline is only the backstop for a driver that died.
AT_END_SLACK = 10.0
#: The longest a stall may be held (the fault filesystem's own cap, less its grace).
_STALL_MOST = MAX_STALL_SECONDS - DISK_GRACE


def _stall_past_cap(schedule: Schedule, duration: float) -> tuple[float, float] | None:
    """The first stall that ``heal = "at_end"`` would hold past its cap: (at, seconds held)."""
    for entry in schedule.entries:
        held = duration - entry.at + AT_END_SLACK
        if isinstance(entry.fault, StallDisk) and held > _STALL_MOST:
            return entry.at, held
    return None


def _validate(source: str, data: dict[str, Any], seed: int,
              workloads: Mapping[str, type[Workload]] | None) -> Scenario:
    c = _Checker(data)
    for key in sorted(set(data) - _TOP_LEVEL):
        c.add(key, data[key], f"unknown field; {did_you_mean(key, sorted(_TOP_LEVEL))}the fields are "
              f"{', '.join(sorted(_TOP_LEVEL))}")
    name = c.get("name", str, "", "must be a non-empty string") or "unnamed"
    workload = c.get("workload", str, "", "must name a workload")
    workload_cls, fix = _find_workload(workload, workloads)
    if "workload" not in data:  # a file of faults alone is an attack's, missing its kind
        c.add("workload", None, "required: the workload this scenario runs; a file of faults against a program "
              f'raychaos did not start says kind = "{ATTACK_KIND}" instead ({ATTACK_FILE_USE})')
    elif workload_cls is None:
        c.add("workload", workload, fix)
    duration = c.spec(FIELDS["duration"])
    nodes = c.spec(FIELDS["nodes"])
    invariants = _invariants(c, workload_cls)
    schedule = _schedule(c, seed, duration)
    if workload_cls is not None:  # a fault the workload cannot judge: refused before anything runs
        c.problems.extend(workload_cls.schedule_problems(schedule.entries))
    heal = c.get("heal", str, "after_each", "must be a string")
    if heal not in get_args(HealStrategy):
        c.add("heal", heal, f"use one of {', '.join(get_args(HealStrategy))}")
    elif heal == "at_end" and len(schedule.entries) > MAX_CONCURRENT_FAULTS:
        # Held to the end, the first faults keep every fault thread: the rest could never start.
        c.add("heal", heal, f"holds every fault to the run's end, and at most {MAX_CONCURRENT_FAULTS} faults are "
              f"held at once: this schedule has {len(schedule.entries)}; use heal = \"after_each\" or at most "
              f"{MAX_CONCURRENT_FAULTS} faults")
    elif heal == "at_end" and (stall := _stall_past_cap(schedule, float(duration))) is not None:
        c.add("heal", heal, f"holds each fault to the run's end, and the stall_disk at {stall[0]:g} s would be held "
              f"{stall[1]:g} s, past a stall's {_STALL_MOST:g} s; use heal = \"after_each\" or a duration that "
              f"ends within {_STALL_MOST - AT_END_SLACK:g} s of the stall")
    steady = _steady_state(c)
    scenario = Scenario(
        name=name, description=c.get("description", str, "", "must be a string"),
        workload=workload, schedule=schedule, duration=float(duration), invariants=invariants,
        params=_params(c, workload_cls), nodes=nodes, num_cpus=c.spec(FIELDS["num_cpus"]),
        system_config=c.get("system_config", dict, {}, "must be a table of Ray system config"),
        heal=heal if heal in get_args(HealStrategy) else "after_each", steady_state=steady,
        source=source.removeprefix("builtin:"),
        oom_headroom_gib=c.spec(FIELDS["oom_headroom_gib"]) if "oom_headroom_gib" in data else None,
        strict_faults=c.get("strict_faults", bool, True, "must be true or false (false: faults "
                            "that did not happen do not fail the run)"),
        gcs_fault_tolerance=c.get("gcs_fault_tolerance", bool, False, "must be true or false (true: "
                                  "the embedded head keeps its GCS tables in a Redis it starts)"),
        rpc_failures=_rpc_failures(c, nodes),
        storage_mb=c.spec(FIELDS["storage_mb"]) if "storage_mb" in data else None,
        recovery_within=float(c.spec(FIELDS["recovery_within"])), network=_network(c, nodes),
        storage_faultfs=_storage_faultfs(c, schedule), spill_faultfs=_spill_faultfs(c, schedule),
        object_store_mb=c.spec(FIELDS["object_store_mb"]))
    _some_fault(c, scenario, seed)
    _checks_something(c, scenario, workload_cls)
    if c.problems:
        raise ScenarioError(source, c.problems)
    return scenario


def _some_fault(c: _Checker, scenario: Scenario, seed: int) -> None:
    """A chaos run without a fault tests nothing under faults, and would pass as if it had:
    refused unless the file says ``strict_faults = false`` (a run without faults, in words)."""
    if not scenario.faultless or not scenario.strict_faults \
            or any(p.field.startswith(("faults", "random", "rpc_failures")) for p in c.problems):
        return
    if "random" in c.data:
        rate = c.data["random"].get("rate", 0.1)
        c.add("random", f"rate {rate} over {scenario.duration:g} s, seed {seed}",
              f"drew no fault (an empty draw has probability {math.exp(-rate * scenario.duration):.1%}), "
              "so the run would test nothing under faults; raise the rate or the duration, pass another "
              "--seed, or set strict_faults = false to run without faults")
    else:
        c.add("faults", "none", "the run needs a [[faults]] entry, a [random] schedule or "
              "[[rpc_failures]]; set strict_faults = false to run the workload without faults")


def _params(c: _Checker, workload_cls: Any) -> dict[str, Any]:
    """The ``[params]`` table, checked against the workload's params model (when it is known)."""
    from scenarios.model._workload import params_problems

    params: dict[str, Any] = c.get("params", dict, {}, "must be a table of the workload's options")
    if workload_cls is not None:
        c.problems.extend(params_problems(workload_cls.Params, params))
    return params


def _network(c: _Checker, nodes: int) -> bool:
    """``network = true`` needs worker nodes. (A network fault on a cluster without a network is
    refused when it is injected, and fails the run: the cluster may be one given by address.)"""
    network = bool(c.get("network", bool, False, "must be true or false (true: each worker node in its own "
                         "network namespace)"))
    if network and nodes < 2:
        c.add("network", network, "puts worker nodes in namespaces: set nodes >= 2")
    return network


def _storage_faultfs(c: _Checker, schedule: Schedule) -> bool:
    """A disk fault of ``mount = "$STORAGE"`` needs the run's storage on a fault filesystem."""
    faultfs = bool(c.get("storage_faultfs", bool, False, "must be true or false (true: each run's checkpoint "
                         "storage mounted through a fault filesystem)"))
    kinds = sorted({e.fault.KIND.value for e in schedule.entries if getattr(e.fault, "mount", None) == STORAGE})
    if kinds and not faultfs:
        c.add("faults", ", ".join(kinds), f"a disk fault of mount = {STORAGE!r} acts on the run's storage through "
              "a fault filesystem: set storage_faultfs = true (or give the mount point of one)")
    return faultfs


def _spill_faultfs(c: _Checker, schedule: Schedule) -> bool:
    """A disk fault of ``mount = "$SPILL"`` needs Ray's spill directory on a fault filesystem."""
    faultfs = bool(c.get("spill_faultfs", bool, False, "must be true or false (true: Ray's object spilling "
                         "directory mounted through a fault filesystem)"))
    kinds = spill_kinds(schedule)
    if kinds and not faultfs:
        c.add("faults", ", ".join(kinds), f"a disk fault of mount = {SPILL!r} acts on Ray's spill directory "
              "through a fault filesystem: set spill_faultfs = true")
    return faultfs


def _rpc_failures(c: _Checker, nodes: int) -> tuple[RpcFailure, ...]:
    tables = c.get("rpc_failures", list, [], "must be an array of tables (method, request_percent, "
                   "response_percent, in_flight_percent, num_failures)")
    if tables and nodes < 2:
        c.add("rpc_failures", f"{len(tables)} entries", "they apply to worker nodes: set nodes >= 2")
    found = []
    for i, table in enumerate(tables):
        failure, problems = rpc_failure_problems(table, f"rpc_failures[{i}]")
        c.problems.extend(problems)
        found += [failure] if failure is not None else []
    return tuple(found)


def _invariants(c: _Checker, workload: type[Workload] | None) -> tuple[str, ...]:
    """The declared invariants; without the field, the workload's defaults: its
    ``DEFAULT_INVARIANTS`` when it has them (not all of its invariants can hold in one run),
    else every one it names (a scenario that leaves it out checks all of them, not none). An
    empty list is refused."""
    known = tuple(workload.INVARIANTS) if workload is not None else ()
    if "invariants" not in c.data:
        default = workload.DEFAULT_INVARIANTS if workload is not None else None
        return known if default is None else tuple(default)
    names = c.get("invariants", list, [], "must be a list of invariant names")
    if names == [] and isinstance(c.data["invariants"], list):
        c.add("invariants", [], f"{EMPTY_INVARIANTS}; name some of {', '.join(known) or 'none'}, "
              "or leave the field out to check every invariant of the workload")
    for i, name in enumerate(names):
        if workload is not None and name not in known:
            c.add(f"invariants[{i}]", name, f"not an invariant of this workload; use {', '.join(known)}")
    return tuple(str(n) for n in names)


#: Why ``invariants = []`` is refused (tests match it).
EMPTY_INVARIANTS = "an empty list checks nothing, so the run would pass untested"
#: Why a scenario whose workload has neither invariants nor a probe is refused.
CHECKS_NOTHING = "the scenario checks nothing (no invariant, and no steady-state probe to run)"
#: Why a steady state asked of a workload without a probe is refused.
NO_PROBE = "has no steady-state probe, so this steady state cannot be checked"


def _checks_something(c: _Checker, scenario: Scenario, workload: Any) -> None:
    """Refuse a scenario that could pass without checking anything, and a steady state asked
    in words of a workload that has no probe to check it with (it would hold by default)."""
    if workload is None or any(p.field.startswith(("invariants", "steady_state")) for p in c.problems):
        return
    table = c.data.get("steady_state", {})
    asked = [k for k in ("before", "after") if table.get(k) is True]
    asked += ["during_min"] if scenario.steady_state.during_min > 0 else []
    if not workload.HAS_PROBE and asked:
        c.add(f"steady_state.{asked[0]}", table[asked[0]],
              f"workload {scenario.workload!r} {NO_PROBE}; drop it, or give the workload a probe()")
    steady = scenario.steady_state
    probed = workload.HAS_PROBE and (steady.before or steady.after or steady.during_min > 0)
    if not scenario.invariants and not probed:
        c.add("invariants", list(scenario.invariants), f"{CHECKS_NOTHING}; declare invariants of "
              f"workload {scenario.workload!r} or a [steady_state] its probe can check")


def _steady_state(c: _Checker) -> SteadyState:
    table = c.get("steady_state", dict, {}, "must be a table (before, after, during_min, probe_every)")
    sub = _Checker(table)
    c.problems.extend(unknown_keys(table, list(STEADY_STATE_FIELDS), "steady_state", "[steady_state]"))
    steady = SteadyState(**{name: sub.spec(spec) for name, spec in STEADY_STATE_FIELDS.items()})
    c.problems.extend(Problem(f"steady_state.{p.field}", p.value, p.fix) for p in sub.problems)
    return steady


def _schedule(c: _Checker, seed: int, duration: float) -> Schedule:
    entries = c.get("faults", list, [], "must be an array of [[faults]] tables")
    parsed = [e for i, raw in enumerate(entries) if (e := _entry(c, i, raw, duration)) is not None]
    if "random" not in c.data:
        return Schedule(tuple(sorted(parsed, key=lambda e: e.at)))
    if entries:
        c.add("faults", f"{len(entries)} entries", "give [[faults]] or [random], not both")
    return _random_schedule(c, c.data["random"], seed, duration)


def _entry(c: _Checker, i: int, raw: object, duration: float) -> ScheduledFault | None:
    """A ``[[faults]]`` entry: its ``at`` and its fault, each problem of both reported."""
    where = f"faults[{i}]"
    at = raw.get("at", MISSING) if isinstance(raw, dict) else 0
    if not (_number(at) and 0 <= at < duration):
        said = "required: each entry needs `at`, " if at is MISSING else "must be "
        c.add(f"{where}.at", at, f"{said}seconds in [0, duration={duration:g})")
    fault, problems = fault_problems(raw, where, also=("at",))
    c.problems.extend(problems)
    if fault is None or not (_number(at) and 0 <= at < duration):
        return None
    return ScheduledFault(float(at), fault)


#: The keys of ``[random]``.
_RANDOM_KEYS = ("rate", "menu")
_MENU_FIX = ('must be an array of at least one fault table (without `at`), e.g. menu = [{ kind = "kill", '
             'target = { kind = "worker" } }]')


def _random_schedule(c: _Checker, raw: object, seed: int, duration: float) -> Schedule:
    """A ``[random]`` schedule drawn from ``seed``, once every key, the rate and each item of
    the menu are valid (each problem reported)."""
    if not isinstance(raw, dict):
        c.add("random", raw, "must be a table: rate (faults per second), menu (an array of fault tables)")
        return Schedule(())
    problems = unknown_keys(raw, _RANDOM_KEYS, "random", "[random]")
    rate = raw.get("rate", 0.1)
    if not (_number(rate) and 0 < rate <= 1):
        problems.append(Problem("random.rate", rate, "must be faults per second in (0, 1]"))
    menu = _menu(raw.get("menu", MISSING), problems)
    c.problems.extend(problems)
    if problems:
        return Schedule(())
    try:
        return Schedule.random(menu, rate=rate, duration=duration, seed=seed)
    except InvalidFaultSpec as exc:  # the menu and rate are checked above: a backstop, said as such
        c.add("random", raw, str(exc))
        return Schedule(())


def _menu(raw: object, problems: list[Problem]) -> list[Fault]:
    """The faults of a ``[random]`` menu; each problem added to ``problems``."""
    if not isinstance(raw, list) or not raw:
        problems.append(Problem("random.menu", raw, _MENU_FIX))
        return []
    menu = []
    for i, item in enumerate(raw):
        where = f"random.menu[{i}]"
        if isinstance(item, dict) and "at" in item:
            problems.append(Problem(f"{where}.at", item["at"], "a menu's faults come at times drawn from `rate`: "
                                    "drop `at` (or give [[faults]] instead of [random])"))
            item = {k: v for k, v in item.items() if k != "at"}
        fault, found = fault_problems(item, where)
        problems.extend(found)
        menu += [fault] if fault is not None else []
    return menu
