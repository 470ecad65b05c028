"""Hunt: small generated Ray programs under faults drawn into the same example, judged by an
oracle that computes each value directly and allows only the exceptions a table documents.

A program is a list of steps over named values (:class:`Put`, :class:`Task`, :class:`Actor`,
:class:`Call`, :class:`Stream`, :class:`Wait`, :class:`Cancel`, :class:`Drop`; values padded to
sizes that live in the object store) and the :class:`Fault` records
drawn into it; :func:`programs` generates them, :func:`run_program` runs one on the connected
cluster and returns its :class:`ProgramVerdict`, whose failures are classified by :class:`Signature`.
A verdict's ``report()`` prints the program as a replayable ``run_program(Program(...))``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names below, for type checkers; at run time each is imported when first used
    from scenarios.hunt._model import (
        Actor,
        Arg,
        Call,
        Cancel,
        Drop,
        Fault,
        FaultKind,
        Naming,
        Program,
        Put,
        StepKind,
        Stream,
        Task,
        Wait,
    )
    from scenarios.hunt._oracle import TABLE, ErrorKind, Seen, Signature, Situation
    from scenarios.hunt._run import ProgramVerdict, run_program
    from scenarios.hunt._strategies import programs

#: Where each public name lives: importing ``scenarios.hunt`` (as every Ray worker that runs one of
#: its functions or actors does, for the module that defines it) imports none of them until one is
#: used: a worker started for a hunt's actor does not pay for Hypothesis and the oracle.
_WHERE = {
    "Actor": "scenarios.hunt._model",
    "Arg": "scenarios.hunt._model",
    "Call": "scenarios.hunt._model",
    "Cancel": "scenarios.hunt._model",
    "Drop": "scenarios.hunt._model",
    "ErrorKind": "scenarios.hunt._oracle",
    "Fault": "scenarios.hunt._model",
    "FaultKind": "scenarios.hunt._model",
    "Naming": "scenarios.hunt._model",
    "Program": "scenarios.hunt._model",
    "ProgramVerdict": "scenarios.hunt._run",
    "Put": "scenarios.hunt._model",
    "Seen": "scenarios.hunt._oracle",
    "Signature": "scenarios.hunt._oracle",
    "Situation": "scenarios.hunt._oracle",
    "StepKind": "scenarios.hunt._model",
    "Stream": "scenarios.hunt._model",
    "TABLE": "scenarios.hunt._oracle",
    "Task": "scenarios.hunt._model",
    "Wait": "scenarios.hunt._model",
    "programs": "scenarios.hunt._strategies",
    "run_program": "scenarios.hunt._run",
}

__all__ = [
    "TABLE",
    "Actor",
    "Arg",
    "Call",
    "Cancel",
    "Drop",
    "ErrorKind",
    "Fault",
    "FaultKind",
    "Naming",
    "Program",
    "ProgramVerdict",
    "Put",
    "Seen",
    "Signature",
    "Situation",
    "StepKind",
    "Stream",
    "Task",
    "Wait",
    "programs",
    "run_program",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'scenarios.hunt' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups find it without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
