"""The checker layer: what a check found, in three values (and n/a), as one verdict type, and
how findings compose.

Jepsen's checkers answer ``:valid?`` true, false or ``:unknown``, and ``checker/compose`` merges
them: false beats unknown, unknown beats true. A check that could not be judged (the evidence it
needs is missing: nothing was seen, the fault never reached what the check reads) is *unknown*:
never a pass, and never a break either, since nothing broke that anyone saw. *n/a* is a check a
run cannot be asked at all (a fault's trace in the fault-free twin): composing ignores it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import StrEnum

__all__ = ["Validity", "Verdict", "compose"]


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


@dataclass(frozen=True, slots=True)
class Verdict:
    """What a check of the run (an invariant, a steady-state check) found, and the evidence.

    ``validity`` is three-valued (and n/a): held, broken, or unknown when the evidence the check
    stands on is missing (never a pass); n/a for a check the run cannot be asked (a fault's
    trace in the fault-free twin), with what its measurement found in ``measured``. Build one
    with :meth:`of`, :meth:`over`, :meth:`unknown`; :meth:`unless` and :meth:`not_applicable`
    derive one from another.
    """

    name: str
    validity: Validity
    detail: str
    #: How many things the run did that the verdict is about; None where it checks by itself.
    seen: int | None = None
    #: For an n/a verdict: what the same measurement found in this run (None otherwise).
    measured: Validity | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.validity, Validity):
            raise TypeError(f"Verdict {self.name!r}: validity must be a Validity, got {self.validity!r}; "
                            "build a judged one with Verdict.of(name, held, detail)")

    @property
    def held(self) -> bool:
        """It held (an unknown or n/a verdict did not)."""
        return self.validity is Validity.HELD

    @classmethod
    def of(cls, name: str, held: bool, detail: str, seen: int | None = None) -> Verdict:
        """A check that was judged: held or broken."""
        return cls(name, Validity.of(held), detail, seen)

    @classmethod
    def unknown(cls, name: str, why: str, seen: int | None = None) -> Verdict:
        """A check that could not be judged: ``why`` says which evidence is missing."""
        return cls(name, Validity.UNKNOWN, f"unknown: {why}", seen)

    @classmethod
    def over(cls, name: str, seen: int, *, held: bool, detail: str) -> Verdict:
        """The verdict of an invariant about ``seen`` things the run did (calls, adds, tasks,
        pushes). Over none it is unknown, whatever ``held`` says: "nothing acknowledged was
        lost" after no add was acknowledged checked nothing (fail closed: never a pass)."""
        if seen > 0:
            return cls.of(name, held, detail, seen)
        return cls(name, Validity.UNKNOWN, f"nothing to check, none seen: {detail}", 0)

    def unless(self, missing: str | None) -> Verdict:
        """This verdict, unknown instead of held when ``missing`` names evidence the check stands
        on that the run lacks (a broken one stays broken: what it saw broke)."""
        if missing is None or self.validity is not Validity.HELD:
            return self
        return replace(self, validity=Validity.UNKNOWN, detail=f"unknown: {missing}; measured: {self.detail}")

    def not_applicable(self, why: str) -> Verdict:
        """This verdict as n/a (``why``: why the run cannot be asked it), keeping what it measured."""
        if self.validity is Validity.NOT_APPLICABLE:
            return self
        return replace(self, validity=Validity.NOT_APPLICABLE, measured=self.validity,
                       detail=f"n/a: {why}; measured: {self.validity.value}: {self.detail}")
