"""Hunt: small generated Ray programs under faults drawn into the same example, judged by an
oracle that computes each value directly and allows only the exceptions a table documents.

A program is a list of steps over named values (:class:`Put`, :class:`Task`, :class:`Actor`,
:class:`Call`, :class:`Stream`, :class:`Wait`, :class:`Cancel`, :class:`Drop`; values padded to
sizes that live in the object store) and the :class:`Fault` records
drawn into it; :func:`programs` generates them, :func:`run_program` runs one on the connected
cluster and returns its :class:`ProgramVerdict`, whose failures are classified by :class:`Signature`.
A verdict's ``report()`` prints the program as a replayable ``run_program(Program(...))``.
"""

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
