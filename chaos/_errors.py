"""The one exception hierarchy of raychaos.

Every error raised on purpose by the toolkit is a :class:`ChaosError`. Each subclass
also inherits the built-in that matches its meaning, so callers may catch either
(``except ValueError`` keeps working for bad input), as Hypothesis does with
``InvalidArgument(HypothesisException, TypeError)``.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ChaosError",
    "CheckpointError",
    "CheckpointFormatError",
    "FaultIneffective",
    "HangError",
    "InvalidConfig",
    "InvalidFaultSpec",
    "MissingExtra",
    "MutationNotLogged",
    "StorageUnreachable",
    "TargetNotFound",
    "UnsafeTarget",
]


class ChaosError(Exception):
    """Root of every error that raychaos raises on purpose."""


class InvalidConfig(ChaosError, ValueError):
    """An option, policy or spec given by the user is not valid; nothing was changed."""


class MissingExtra(ChaosError, ImportError):
    """An optional dependency is not installed; the message names the extra that brings it."""


class StorageUnreachable(ChaosError, OSError):
    """Checkpoint storage cannot be opened or written at the given URL."""


class CheckpointError(ChaosError, RuntimeError):
    """A checkpoint could not be written or restored."""


class MutationNotLogged(CheckpointError):
    """A mutation ran but its log record could not be written (a full disk, a vanished mount).

    ``undone`` says whether its effect was undone (the actor restored its last logged state, so
    memory and log agree again and the call may simply be retried); when False the actor
    refuses further mutations until Ray restarts it from its storage.
    """

    def __init__(self, message: str, *, undone: bool) -> None:
        super().__init__(message)
        self.undone = undone

    def __reduce__(self) -> tuple[Any, ...]:  # Ray pickles it back to the caller
        return (_mutation_not_logged, (str(self), self.undone))


def _mutation_not_logged(message: str, undone: bool) -> MutationNotLogged:
    return MutationNotLogged(message, undone=undone)


class CheckpointFormatError(CheckpointError, ValueError):
    """A checkpoint was written by a newer format version than this raychaos reads."""


class HangError(ChaosError, TimeoutError):
    """A wait ran past its deadline; the message names what was stuck and why."""


class FaultIneffective(ChaosError, RuntimeError):
    """A fault was sent but its effect was not observed within its bound (a process that
    outlived its signal, a pause that never showed state T, an allocation that never grew).

    The injection counts as failed: a chaos run must not pass on a fault that did not happen.
    """


class InvalidFaultSpec(ChaosError, ValueError):
    """A fault, target or schedule was specified with a bad value; nothing was injected.

    ``field`` names the record's field that holds it (``"seconds"``, ``"target.allow_head"``)
    when one does, so that a scenario file's loader reports the problem at that field.
    """

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class TargetNotFound(ChaosError, LookupError):
    """No live process matches the target (no actor of that class, no running task of that name)."""


class UnsafeTarget(ChaosError, PermissionError):
    """The process may not be signalled: PID 1, the driver, the agent, or not of this Ray session."""
