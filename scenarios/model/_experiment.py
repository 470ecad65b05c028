"""An attack's experiment file: the faults, the probes that judge the program under them, and
their pace, in one TOML file (``kind = "attack"``) that ``raychaos attack`` and ``run --job``
run and ``raychaos validate`` checks.

The program under attack was not started by raychaos, so the file holds no workload and no
cluster shape. Every option of the command line overrides the file's field of the same meaning
(the command line wins; :class:`Overrides`), and an option left out leaves the file's value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from chaos import ActorTarget, Schedule, ScheduledFault, TaskTarget, WorkerTarget
from scenarios.model._load_spec import PROBE_VERDICTS, SLO_VERDICTS, LoadSpec, SloSpec
from scenarios.model._probes import probes_problems
from scenarios.model._records import Problem
from scenarios.model._scenario import (
    ATTACK_KIND,
    CHECKS_NOTHING,
    FIELDS,
    FieldSpec,
    Scenario,
    ScenarioError,
    _load,
    _number,
    _validate,
    foreign_fields,
)
from scenarios.model._tables import MISSING, did_you_mean

__all__ = [
    "ABORT_FIELDS",
    "ATTACK_FIELDS",
    "ATTACK_KIND",
    "NO_OVERRIDES",
    "SCOPE_FIELDS",
    "AttackFile",
    "Overrides",
    "is_attack_file",
    "load_attack",
    "probe_options",
    "read_attack",
    "within_scope",
]

#: Seconds a failing probe has to pass again, and each fault from its heal (an attack's default).
ATTACK_RECOVERY = 30.0
_SHARED = ("name", "description", "duration", "heal", "steady_state", "faults", "random", "strict_faults")

#: Every top-level field of an attack's file, in the order the reference lists them.
ATTACK_FIELDS: dict[str, FieldSpec] = {
    "kind": FieldSpec(name="kind", type="string", choices=(ATTACK_KIND,), required=True,
                      description="`\"attack\"`: this file attacks a program raychaos did not start (`raychaos "
                                  "attack FILE --address ...`, or `raychaos run --job COMMAND FILE`)."),
    **{n: FIELDS[n] for n in _SHARED},
    "recovery_within": replace(FIELDS["recovery_within"], default=ATTACK_RECOVERY,
                               description="Seconds a failing probe has to pass again, and each fault from its "
                                           "heal until the probes pass (`--recover-within` overrides)."),
    "probes": FieldSpec(name="probes", type="array",
                        description="What must keep working (`[[probes]]`): each a `command`, `python` or `http` "
                                    "probe. `--probe`, `--probe-python` and `--probe-http` replace them all."),
    "probe_every": FieldSpec(name="probe_every", type="number", default=1.0, minimum=0.1, maximum=600.0,
                             description="Seconds between rounds of probes (`--every` overrides)."),
    "probe_timeout": FieldSpec(name="probe_timeout", type="number", default=10.0, minimum=0.1, maximum=600.0,
                               description="Seconds each probe has to pass before it fails (`--probe-timeout` "
                                           "overrides)."),
    "scope": FieldSpec(name="scope", type="object",
                       description="What the faults may reach (`scope = { namespace = \"...\", job = \"...\" }`): "
                                   "given to every actor, task and worker target that names no scope of its own. A "
                                   "job is a job id (`02000000`) or a submission id; a namespace scopes actors."),
    "load": FieldSpec(name="load", type="object",
                      description="An open-loop HTTP load (`[load]`) on any endpoint, judged by `[slo]` fault by "
                                  "fault against its steady state before the first fault."),
    "slo": FieldSpec(name="slo", type="object",
                     description="The load's service level objectives (`[slo]`; needs `[load]`)."),
    "abort_when": FieldSpec(name="abort_when", type="object",
                            description="Stop conditions (`[abort_when]`): the attack stops early, heals every fault "
                                        "and exits 1 naming the condition."),
}
def model_problems(model: type[BaseModel], raw: object, where: str) -> list[Problem]:
    """Every problem of ``raw`` as ``model`` at ``where`` (``load``): field, value, fix."""
    if not isinstance(raw, Mapping):
        return [Problem(where, raw, f"a table ({_doc_line(model)})")]
    try:
        model.model_validate(dict(raw))
    except ValidationError as exc:
        return [Problem(where + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e["loc"]),
                        MISSING if e["type"] == "missing" else e["input"],
                        "unknown field" if e["type"] == "extra_forbidden" else e["msg"].lower())
                for e in exc.errors()]
    return []


def _doc_line(model: type[BaseModel]) -> str:
    return " ".join((model.__doc__ or "").split())


#: The fields of ``scope``.
SCOPE_FIELDS: dict[str, FieldSpec] = {f.name: f for f in (
    FieldSpec(name="namespace", type="string", description="Only actors of this Ray namespace."),
    FieldSpec(name="job", type="string",
              description="Only actors, tasks and workers of this job: a job id or a submission id."),
)}
#: The fields of ``[abort_when]``.
ABORT_FIELDS: dict[str, FieldSpec] = {f.name: f for f in (
    FieldSpec(name="probe_failures", type="integer", minimum=1, maximum=10_000,
              description="Stop once one probe failed this many rounds in a row."),
    FieldSpec(name="slo_breach_seconds", type="integer", minimum=1, maximum=3600,
              description="Stop once the load has been below its availability objective this many seconds "
                          "without a break (needs `[load]`)."),
)}


@dataclass(frozen=True, slots=True, kw_only=True)
class Overrides:
    """What the command line gives over an attack's file: each None when not given (the file's
    value, else the field's default, stands). Probes given replace the file's, all of them."""

    probes: tuple[Mapping[str, object], ...] | None = None
    probe_every: float | None = None
    probe_timeout: float | None = None
    recovery_within: float | None = None
    duration: float | None = None

    def apply(self, data: dict[str, Any]) -> dict[str, Any]:
        given = {"probe_every": self.probe_every, "probe_timeout": self.probe_timeout,
                 "recovery_within": self.recovery_within, "duration": self.duration,
                 "probes": None if self.probes is None else [dict(p) for p in self.probes]}
        return data | {k: v for k, v in given.items() if v is not None}


#: Why a scenario's field (a workload, a cluster's shape) is refused in an attack file.
NOT_FOR_ATTACK = "an attack (the program under attack was not started by raychaos)"
#: The command line gave nothing over the file.
NO_OVERRIDES = Overrides()


def is_attack_file(data: Mapping[str, object]) -> bool:
    """Whether a file's data is an attack's: it says ``kind = "attack"``."""
    return data.get("kind") == ATTACK_KIND


@dataclass(frozen=True, slots=True, kw_only=True)
class AttackFile:
    """An attack file read: its scenario fields (overrides applied), its probes and their pace
    (the attack-only fields), and the problems found in both so far."""

    source: str
    data: dict[str, Any]
    probes: list[dict[str, Any]]
    every: float
    timeout: float
    scope: Mapping[str, str]
    abort_when: Mapping[str, int]
    load: Mapping[str, Any] | None
    slo: Mapping[str, Any]
    problems: list[Problem]

    def params(self) -> dict[str, Any]:
        """The probes' part of the attack and job workloads' ``[params]``."""
        bound = self.data["recovery_within"]  # one recovery bound: the probes' and each fault's
        return {"probes": self.probes, "every": self.every, "probe_timeout": self.timeout,
                "recover_within": bound if _number(bound) else ATTACK_RECOVERY}


def _table(data: dict[str, Any], name: str, fields: Mapping[str, FieldSpec],
           problems: list[Problem]) -> dict[str, Any]:
    """Table ``name`` popped from ``data``, its problems (not a table, an unknown or mistyped
    field, a number out of bounds) added to ``problems``; what is wrong is left out."""
    raw = data.pop(name, {})
    if not isinstance(raw, Mapping):
        problems.append(Problem(name, raw, f"a table of {', '.join(fields)}"))
        return {}
    kept = {}
    for key, value in raw.items():
        spec = fields.get(key)
        if spec is None:
            problems.append(Problem(f"{name}.{key}", value, f"unknown field; {did_you_mean(key, sorted(fields))}"
                                                            f"{name} holds {', '.join(fields)}"))
        elif spec.type == "string" and not (isinstance(value, str) and value.strip()):
            problems.append(Problem(f"{name}.{key}", value, "a non-empty string"))
        elif spec.type == "integer" and (isinstance(value, bool) or not isinstance(value, int)
                                         or not (spec.minimum or 0) <= value <= (spec.maximum or value)):
            problems.append(Problem(f"{name}.{key}", value,
                                    f"a whole number from {spec.minimum:g} to {spec.maximum:g}"))
        else:
            kept[key] = value
    return kept


def read_attack(path: str, overrides: Overrides, *, not_for: str = NOT_FOR_ATTACK) -> AttackFile:
    """The file with the overrides applied, split into scenario fields and probes, with the
    problems of the attack's own fields (``not_for``: what a scenario-only field is not for)."""
    source, data = _load(path)
    data = overrides.apply(data)
    problems = foreign_fields(data, ATTACK_FIELDS, not_for, "an attack file")
    kind = data.pop("kind", ATTACK_KIND)  # the attack commands know what they were given
    if kind != ATTACK_KIND:
        problems.append(Problem("kind", kind, f'an attack\'s file says kind = "{ATTACK_KIND}"'))
    problems += probes_problems(data.get("probes", []))
    data.setdefault("recovery_within", ATTACK_RECOVERY)
    pace = {n: data.pop(n, ATTACK_FIELDS[n].default) for n in ("probe_every", "probe_timeout")}
    problems += [Problem(n, v, "a number of seconds from 0.1 to 600") for n, v in pace.items()
                 if not (_number(v) and 0.1 <= float(v) <= 600)]
    probes = data.pop("probes", [])
    scope = _table(data, "scope", SCOPE_FIELDS, problems)
    abort_when = _table(data, "abort_when", ABORT_FIELDS, problems)
    load, slo = data.pop("load", None), data.pop("slo", {})
    problems += ([] if load is None else model_problems(LoadSpec, load, "load")) + model_problems(SloSpec, slo, "slo")
    problems += [Problem(name, value, "needs [load]: it judges the load") for name, value in
                 (("slo", slo), ("abort_when.slo_breach_seconds", abort_when.get("slo_breach_seconds")))
                 if load is None and value]
    return AttackFile(source=source, data=data, probes=probes if isinstance(probes, list) else [],
                      every=float(pace["probe_every"]) if _number(pace["probe_every"]) else 1.0,
                      timeout=float(pace["probe_timeout"]) if _number(pace["probe_timeout"]) else 10.0,
                      scope=scope, abort_when=abort_when, load=load if isinstance(load, Mapping) else None,
                      slo=slo if isinstance(slo, Mapping) else {}, problems=problems)


def within_scope(scenario: Scenario, scope: Mapping[str, str]) -> Scenario:
    """The scenario with ``scope`` given to each actor, task and worker target that names none
    of its own: a namespace to actors, a job to all three."""
    if not scope:
        return scenario
    entries = tuple(ScheduledFault(e.at, replace(e.fault, target=_scoped(target, scope)))
                    if isinstance(target := getattr(e.fault, "target", None), ActorTarget | TaskTarget | WorkerTarget)
                    else e for e in scenario.schedule.entries)
    return replace(scenario, schedule=Schedule(entries, scenario.schedule.seed))


def _scoped(target: ActorTarget | TaskTarget | WorkerTarget,
            scope: Mapping[str, str]) -> ActorTarget | TaskTarget | WorkerTarget:
    job = target.job or scope.get("job")
    if isinstance(target, ActorTarget):
        return replace(target, job=job, namespace=target.namespace or scope.get("namespace"))
    return replace(target, job=job)


def load_attack(path: str, *, overrides: Overrides = NO_OVERRIDES, seed: int = 0,
                require_probes: bool = True) -> Scenario:
    """A scenario that attacks a running program: the file's faults, the ``attack`` workload
    running the file's probes (or the overriding ones) every ``probe_every`` s.

    ``require_probes=False`` (``raychaos validate``) accepts a file without a probe, which
    ``run --job`` judges by its job; ``raychaos attack`` refuses it.

    Raises:
        ScenarioError: every problem found (a field an attack cannot use among them).
    """
    read = read_attack(path, overrides)
    problems = list(read.problems)
    if require_probes and not read.probes and read.load is None and not problems:  # it would pass untested
        problems.append(Problem("probes", [], f"{CHECKS_NOTHING}; add [[probes]] or [load] to the file, or give "
                                              "--probe 'COMMAND', --probe-python MODULE:FUNCTION or --probe-http URL"))
    if problems:
        raise ScenarioError(read.source, problems)
    params = read.params() | {"abort_probe_failures": read.abort_when.get("probe_failures"),
                              "abort_slo_breach": read.abort_when.get("slo_breach_seconds"),
                              "load": None if read.load is None else dict(read.load), "slo": dict(read.slo)}
    # Without probes of its own, a load's URL is probed (its steady state before and after).
    invariants = [*PROBE_VERDICTS, *(SLO_VERDICTS if read.load is not None else ())]
    data = read.data | {"workload": "attack", "invariants": invariants, "params": params}
    data.setdefault("name", f"attack-{Path(path).stem}")
    return within_scope(_validate(read.source, data, seed, None), read.scope)


def probe_options(shell: Sequence[str], python: Sequence[str],
                  http: Sequence[str]) -> tuple[dict[str, str], ...] | None:
    """The command line's probes as ``[[probes]]`` tables; None when it gave none (the file's stand)."""
    found = ([{"kind": "command", "command": c} for c in shell] + [{"kind": "python", "call": c} for c in python]
             + [{"kind": "http", "url": u} for u in http])
    return tuple(found) or None
