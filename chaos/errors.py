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
from chaos._preflight import ClusterUnfit
from chaos._reclaim._owner import StillMounted, TeardownFailed
from chaos._scope import Unscoped
from chaos.agents._agent import AgentMismatch, AgentUnavailable
from chaos.disks._fusefs import FaultFSError
from chaos.net._lab import NetworkUnavailable

__all__ = [
    "AgentMismatch",
    "AgentUnavailable",
    "ChaosError",
    "CheckpointError",
    "CheckpointFormatError",
    "ClusterUnfit",
    "FailpointError",
    "FaultFSError",
    "FaultIneffective",
    "FaultsNotApplied",
    "HangError",
    "InvalidConfig",
    "InvalidFaultSpec",
    "JournalCorrupt",
    "MissingExtra",
    "MutationNotLogged",
    "NetworkUnavailable",
    "StillMounted",
    "StorageUnreachable",
    "TargetNotFound",
    "TeardownFailed",
    "UnsafeTarget",
    "Unscoped",
]
