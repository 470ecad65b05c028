"""A scenario file's table checked against the record it builds, before the record is built.

Every key the record does not take (with the closest one it does), every field it needs that
is missing, every value of another type: each a :class:`Problem` at its path
(``faults[0].target.name``), all of them at once. Only a table without such a problem is
built, and what the record itself refuses (a duration out of range, a choice it does not
offer) is reported at the field its :class:`InvalidFaultSpec` names. The user reads the field,
the value and the fix, never a Python exception's own text (``__init__() got an unexpected
keyword argument``).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import json
import math
import sys
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from chaos import Fault, RpcFailure
from chaos.engine import TARGET_CLASSES, fault_specs, target_from_dict
from chaos.errors import InvalidFaultSpec
from scenarios.model._records import Problem
from scenarios.model._spill import fault_or_spill

__all__ = ["MISSING", "did_you_mean", "fault_problems", "path", "record_problems", "rpc_failure_problems",
           "target_problems", "unknown_keys"]

R = TypeVar("R")


class _Missing:
    """The value of a field the file leaves out, as a problem shows it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "(missing)"


#: The value of a problem about a field the file does not give: ``faults[0].seconds = (missing)``.
MISSING: Final = _Missing()
#: What a value of each simple type is called in a fix.
_NOUNS: dict[object, str] = {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}
_PLURALS: dict[object, str] = {bool: "booleans", int: "whole numbers", float: "numbers", str: "strings"}
_TARGET_EXAMPLES = {"actor": '{ kind = "actor", name = "replay" }', "task": '{ kind = "task", name = "sample_env" }',
                    "worker": '{ kind = "worker" }', "node": '{ kind = "node" }'}


def path(where: str, key: str) -> str:
    """``key`` of the table at ``where``, as a problem names it (``faults[0].target``); a key that
    is no plain name is quoted as TOML quotes it (``faults[0]."a b"``)."""
    name = key if key.isidentifier() else json.dumps(key)
    return f"{where}.{name}" if where else name


def did_you_mean(name: object, choices: Iterable[str]) -> str:
    """``"did you mean 'x'? "`` for the choice closest to ``name`` (difflib's), or ``""``."""
    if not isinstance(name, str):
        return ""
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f"did you mean {close[0]!r}? " if close else ""


def unknown_keys(table: Mapping[str, object], known: Sequence[str], where: str, what: str, *,
                 whose: Callable[[str], str] = lambda key: "") -> list[Problem]:
    """A problem for each key of ``table`` that ``what`` does not take: the closest of ``known``,
    all of them, and ``whose(key)`` (who else takes it, when someone does)."""
    return [Problem(path(where, key), value, f"not a key of {what}; {did_you_mean(key, known)}it takes "
                    f"{', '.join(known)}{whose(key)}") for key, value in table.items() if key not in known]


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def _required(f: dataclasses.Field[Any]) -> bool:
    return f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING


def record_problems(cls: type, table: Mapping[str, object], where: str, what: str, *,
                    also: Sequence[str] = (), whose: Callable[[str], str] = lambda key: "") -> list[Problem]:
    """What keeps ``table`` from being the dataclass ``cls`` (``what``, e.g. ``a kill fault``):
    unknown keys (``also``: keys its caller takes, such as ``kind``; ``whose`` as
    :func:`unknown_keys`), missing fields, values of another type. Choices among strings and
    ranges are left to the record, which refuses them."""
    fields = dataclasses.fields(cls)
    problems = unknown_keys(table, [*also, *(f.name for f in fields)], where, what, whose=whose)
    for f in fields:
        hint = _hints(cls)[f.name]
        if f.name in table:
            problems += _value_problems(hint, table[f.name], path(where, f.name))
        elif _required(f):
            problems.append(Problem(path(where, f.name), MISSING, f"required: {what} needs {f.name} "
                                    f"({_noun(hint)})"))
    return problems


def _noun(hint: Any) -> str:
    targets = _target_kinds(hint)
    if targets:
        return f"a table such as {_TARGET_EXAMPLES[targets[0]]}"
    kept = [a for a in get_args(hint) if a is not type(None)] if _is_union(hint) else [hint]
    if get_origin(kept[0]) is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(kept[0]))
    return _NOUNS.get(kept[0], "a value")


def _is_union(hint: Any) -> bool:
    return get_origin(hint) in (Union, types.UnionType)


def _target_kinds(hint: Any) -> list[str]:
    """The target kinds a field annotated ``hint`` takes (none: it is no target)."""
    classes = get_args(hint) if _is_union(hint) else (hint,)
    return [kind for kind, cls in TARGET_CLASSES.items() if cls in classes]


def _value_problems(hint: Any, value: object, where: str) -> list[Problem]:
    """The problems of ``value`` (from TOML: no null) as a field annotated ``hint``; none when it can be one."""
    if _target_kinds(hint):
        return target_problems(value, where, _target_kinds(hint))
    origin, args = get_origin(hint), get_args(hint)
    if _is_union(hint):
        kept = [a for a in args if a is not type(None)]
        return _value_problems(kept[0], value, where) if len(kept) == 1 else []
    if origin is tuple:  # tuple[X, ...]: a TOML array
        if not isinstance(value, list | tuple):
            return [Problem(where, value, f"must be an array of {_PLURALS.get(args[0], 'values')}")]
        return [p for i, item in enumerate(value) for p in _value_problems(args[0], item, f"{where}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [Problem(where, value, f"must be a table of {_PLURALS.get(args[1], 'values')}")]
        return [p for key, item in value.items() for p in _value_problems(args[1], item, path(where, key))]
    check = _CHECKS.get(hint)
    return [Problem(where, value, f"must be {_NOUNS[hint]}")] if check and not check(value) else []


def _finite(value: object) -> bool:
    """A finite number a float can hold: a record's checks (``math.isfinite``) take it safely."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return abs(value) <= sys.float_info.max if isinstance(value, int) else math.isfinite(value)


_CHECKS: dict[object, Callable[[object], bool]] = {
    bool: lambda v: isinstance(v, bool), int: lambda v: isinstance(v, int) and not isinstance(v, bool),
    float: _finite, str: lambda v: isinstance(v, str)}


def target_problems(value: object, where: str, kinds: Sequence[str]) -> list[Problem]:
    """What keeps ``value`` from being a target of one of ``kinds`` (as the field at ``where`` takes)."""
    if not isinstance(value, Mapping):
        return [Problem(where, value, f"must be a table such as {_TARGET_EXAMPLES[kinds[0]]}")]
    kind = value.get("kind", MISSING)
    if not isinstance(kind, str) or kind not in kinds:
        return [Problem(path(where, "kind"), kind, _target_kind_fix(kind, kinds))]
    problems = record_problems(TARGET_CLASSES[kind], value, where, f"a{'n' * (kind[0] in 'aeiou')} {kind} target",
                               also=("kind",))
    if problems:
        return problems
    return _built(lambda: target_from_dict(value), value, where, TARGET_CLASSES[kind])[1]


def _target_kind_fix(kind: object, kinds: Sequence[str]) -> str:
    use = f'use kind = "{kinds[0]}"' if len(kinds) == 1 else "use one of " + ", ".join(f'"{k}"' for k in kinds)
    if kind is MISSING:
        return f"required: a target names its kind; {use}"
    if isinstance(kind, str) and kind in TARGET_CLASSES:
        return f"not a target this field takes; {use}"
    return f"unknown target kind; {did_you_mean(kind, kinds)}{use}"


def fault_problems(table: object, where: str, *, also: Sequence[str] = ()) -> tuple[Fault | None, list[Problem]]:
    """The fault ``table`` describes (a ``[[faults]]`` entry, ``also=("at",)``, or a ``[random]``
    menu's item), or None and every problem found."""
    if not isinstance(table, Mapping):
        return None, [Problem(where, table, "must be a table with `kind` and the fault's fields, "
                              'e.g. { kind = "kill", target = { kind = "worker" } }')]
    kind = table.get("kind", MISSING)
    classes = _fault_classes()
    if not isinstance(kind, str) or kind not in classes:
        said = "required: a fault names its kind" if kind is MISSING else f"unknown fault kind {kind!r}"
        return None, [Problem(path(where, "kind"), kind, f"{said}; {did_you_mean(kind, classes)}use one of "
                              f"{', '.join(sorted(classes))}")]
    cls = classes[kind]
    problems = record_problems(cls, table, where, f"a {kind} fault", also=(*also, "kind"), whose=_fault_kinds_of)
    if problems:
        return None, problems
    return _built(lambda: fault_or_spill({k: v for k, v in table.items() if k not in also}), table, where, cls)


def _fault_classes() -> dict[str, type]:
    """Each scheduled fault kind's record, by the name files spell it."""
    return {kind.value: spec.record for kind, spec in fault_specs().items()}


def _fault_kinds_of(key: str) -> str:
    """`` (signal is a key of kill)``: the fault kinds that take ``key``, or ``""``."""
    kinds = [k for k, cls in _fault_classes().items() if key in {f.name for f in dataclasses.fields(cls)}]
    return f" ({key} is a key of {', '.join(kinds)})" if kinds else ""


def rpc_failure_problems(table: object, where: str) -> tuple[RpcFailure | None, list[Problem]]:
    """The ``[[rpc_failures]]`` entry ``table`` describes, or None and every problem found."""
    if not isinstance(table, Mapping):
        return None, [Problem(where, table, "must be a table: method, request_percent, response_percent, "
                              "in_flight_percent, num_failures")]
    problems = record_problems(RpcFailure, table, where, "an RPC failure")
    if problems:
        return None, problems
    return _built(lambda: RpcFailure(**table), table, where, RpcFailure)


def _built(build: Callable[[], R], table: Mapping[str, object], where: str,
           cls: type) -> tuple[R | None, list[Problem]]:
    """``build()``, or what the record refused, at the field it names (the table's path else)."""
    try:
        return build(), []
    except InvalidFaultSpec as exc:
        if exc.field is None:
            return None, [Problem(where, dict(table), str(exc))]
        at: str = where
        value: object = table
        for part in exc.field.split("."):
            at, value = path(at, part), value.get(part, MISSING) if isinstance(value, Mapping) else MISSING
        return None, [Problem(at, value, f"{exc}{_choice_hint(cls, exc.field, value)}")]


def _choice_hint(cls: type, field: str, value: object) -> str:
    """``; did you mean 'SIGKILL'?`` for a choice among strings the record refused, or ``""``."""
    hint = _hints(cls).get(field)
    if get_origin(hint) is not Literal:
        return ""
    said = did_you_mean(value, [str(a) for a in get_args(hint)]).strip()
    return f"; {said}" if said else ""
