"""What a check found, in three values (and n/a), and how findings compose.

Jepsen's checkers answer ``:valid?`` true, false or ``:unknown``, and ``checker/compose`` merges
them: false beats unknown, unknown beats true. A check that could not be judged (the evidence it
needs is missing: nothing was seen, the fault never reached what the check reads) is *unknown*:
never a pass, and never a break either, since nothing broke that anyone saw. *n/a* is a check a
run cannot be asked at all (a fault's trace in the fault-free twin): composing ignores it.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

__all__ = ["Validity", "compose"]


class Validity(StrEnum):
    """What a verdict found: the check held, broke, could not be judged, or does not apply."""

    HELD = "held"
    BROKEN = "broken"
    #: Not judged: the evidence the check stands on is missing. Never a pass.
    UNKNOWN = "unknown"
    #: The check cannot apply to this run (a fault's trace, asked of a run without faults).
    NOT_APPLICABLE = "n/a"

    @classmethod
    def of(cls, held: bool) -> Validity:
        """``HELD`` or ``BROKEN``: a check that was judged."""
        return cls.HELD if held else cls.BROKEN


_RANK = {Validity.BROKEN: 0, Validity.UNKNOWN: 1, Validity.HELD: 2}


def compose(found: Iterable[Validity]) -> Validity:
    """The validity of several checks together: ``BROKEN`` beats ``UNKNOWN`` beats ``HELD``;
    ``NOT_APPLICABLE`` counts for nothing. Nothing judged at all is ``UNKNOWN`` (fail closed:
    a run that checked nothing did not pass)."""
    judged = [v for v in found if v is not Validity.NOT_APPLICABLE]
    return min(judged, key=_RANK.__getitem__, default=Validity.UNKNOWN)
