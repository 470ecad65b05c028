"""Every error raychaos raises: one root, :class:`ChaosError`, and each subclass also inherits
the matching built-in (``InvalidConfig`` is a ``ValueError``, ``HangError`` a ``TimeoutError``),
so callers can catch either."""

from chaos._driver import FaultsNotApplied
from chaos._errors import (
    ChaosError,
    CheckpointError,
    CheckpointFormatError,
    FaultIneffective,
    HangError,
    InvalidConfig,
    InvalidFaultSpec,
    MissingExtra,
    MutationNotLogged,
    StorageUnreachable,
    TargetNotFound,
    UnsafeTarget,
)
from chaos._failpoint import FailpointError
from chaos._journal import JournalCorrupt

__all__ = [
    "ChaosError",
    "CheckpointError",
    "CheckpointFormatError",
    "FailpointError",
    "FaultIneffective",
    "FaultsNotApplied",
    "HangError",
    "InvalidConfig",
    "InvalidFaultSpec",
    "JournalCorrupt",
    "MissingExtra",
    "MutationNotLogged",
    "StorageUnreachable",
    "TargetNotFound",
    "UnsafeTarget",
]
