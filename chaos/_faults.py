"""What every fault shares: how a scheduled one went (:class:`FaultStatus`), the storage a
scenario's faults aim at (:data:`STORAGE`), and the records' base and serialised form (from
:mod:`chaos._kinds`). Each kind's record lives with its injector, in the module of its kind."""

from __future__ import annotations

from enum import StrEnum

from chaos._kinds import Fault, FaultKind, fault_from_dict, fault_to_dict

__all__ = ["STORAGE", "Fault", "FaultKind", "FaultStatus", "fault_from_dict", "fault_to_dict"]


class FaultStatus(StrEnum):
    """How a scheduled fault went. Only ``INJECTED`` means it happened."""

    INJECTED = "injected"  #: sent, its effect confirmed, then healed
    NOT_FOUND = "not_found"  #: no live process matched its target
    REFUSED = "refused"  #: the safety check refused the process it matched
    INEFFECTIVE = "ineffective"  #: sent, but its effect was not observed within its bound
    FAILED = "failed"  #: the injection raised another error
    NOT_REACHED = "not_reached"  #: the run ended before the fault's time came


#: The storage of the run a scenario's fault aims at (``path = "$STORAGE"``, ``mount = "$STORAGE"``).
STORAGE = "$STORAGE"
