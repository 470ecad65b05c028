"""What a lesson is: a pitfall of the reference chapter, its measured figures, and its run."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from chaos.errors import InvalidConfig

__all__ = ["CHAPTER", "SECTIONS", "Lesson", "LessonOutcome", "LessonResult", "LessonRun", "Measure", "lesson"]

Better = Literal["lower", "higher"]

#: The reference chapter the pitfalls come from, by its title (it is not shipped with raychaos).
CHAPTER = "chapter 4, Ray高级特性 (Ray advanced features)"
#: Each section a lesson can name: the chapter's five, in English, and raychaos's own failure modes.
SECTIONS: Mapping[str, str] = {
    "4.1": "§4.1 Remote functions: the basis of stateless parallel work",
    "4.2": "§4.2 The actor lifecycle: managing stateful services",
    "4.3": "§4.3 ObjectRefs and passing data: distributed reference semantics",
    "4.4": "§4.4 ray.wait and ray.get: balancing blocking and non-blocking",
    "4.5": "§4.5 Resource management and scheduling",
    "failure": "failure modes, raychaos's own lessons beyond the chapter",
}


class LessonOutcome(StrEnum):
    """What a measured figure (or a whole lesson) showed."""

    FIX_WINS = "fix wins"  #: the fix beat the mistake by more than the margin
    #: The two figures are within the margin of each other: noise cannot tell them apart. A
    #: loaded machine does this; it is not the lesson failing (run it again on a quieter one).
    NOISY = "too noisy to tell"
    FIX_LOSES = "the fix did not win"  #: the mistake did as well as the fix, or better, beyond noise


@dataclass(frozen=True, slots=True)
class Measure:
    """One measured figure of a lesson: the mistake's value and the fix's, and which is better."""

    what: str
    unit: str
    mistake: float
    fix: float
    better: Better = "lower"
    #: How much better the fix must be, in ``unit``: a figure that barely moves between runs
    #: would otherwise favour a fix no better than the mistake half the time, by noise alone.
    margin: float = 0.0

    @property
    def favours_fix(self) -> bool:
        if self.better == "lower":
            return self.fix + self.margin < self.mistake
        return self.fix > self.mistake + self.margin

    @property
    def outcome(self) -> LessonOutcome:
        """``FIX_WINS``; ``NOISY`` when a figure with a margin lies within it of the other
        (either side); else ``FIX_LOSES``. Without a margin a tie is no noise: the mistake
        did not show (a count of lost updates, say, is exact)."""
        if self.favours_fix:
            return LessonOutcome.FIX_WINS
        if self.margin > 0 and abs(self.fix - self.mistake) <= self.margin:
            return LessonOutcome.NOISY
        return LessonOutcome.FIX_LOSES


@dataclass(frozen=True, slots=True)
class LessonResult:
    """A lesson's run: its figures and how long it took."""

    lesson: Lesson
    measures: tuple[Measure, ...]
    seconds: float
    notes: tuple[str, ...] = ()

    @property
    def favours_fix(self) -> bool:
        return all(m.favours_fix for m in self.measures)

    @property
    def outcome(self) -> LessonOutcome:
        """The lesson's outcome: any figure the fix lost beyond noise makes it ``FIX_LOSES``,
        else any noisy one ``NOISY``, else ``FIX_WINS``."""
        found = {m.outcome for m in self.measures}
        for worst in (LessonOutcome.FIX_LOSES, LessonOutcome.NOISY):
            if worst in found:
                return worst
        return LessonOutcome.FIX_WINS if found else LessonOutcome.FIX_LOSES


@dataclass(frozen=True, slots=True)
class Lesson:
    """A pitfall of the chapter: where it is, the mistake, the fix, and how it is measured.

    ``run`` gets the cluster's address and returns the figures (and optional notes, such
    as the watchdog's diagnosis). ``nodes``/``num_gpus`` say what cluster it needs.
    """

    id: str
    section: str
    title: str
    mistake: str
    fix: str
    why: str
    run: LessonRun
    nodes: int = 1
    num_gpus: int = 0
    tip: bool = False

    @property
    def source(self) -> str:
        """Where the pitfall comes from: the chapter's title and section, or the failure modes."""
        where = SECTIONS[self.section]
        return where if self.section == "failure" else f"{CHAPTER}, {where}"


LessonRun = Callable[[str], tuple[Sequence[Measure], Sequence[str]]]


def lesson(*, id: str, section: str, title: str, mistake: str, fix: str, why: str, nodes: int = 1,
           num_gpus: int = 0, tip: bool = False) -> Callable[[LessonRun], Lesson]:
    """The decorated measurement as a :class:`Lesson` (the catalogue in
    :mod:`scenarios.lessons._catalog` lists each section's lessons; nothing registers on import)."""
    if section not in SECTIONS:
        raise InvalidConfig(f"lesson {id!r}: section {section!r} is none of {sorted(SECTIONS)}; add it to SECTIONS")

    def make(run: LessonRun) -> Lesson:
        return Lesson(id=id, section=section, title=title, mistake=mistake, fix=fix, why=why, run=run,
                      nodes=nodes, num_gpus=num_gpus, tip=tip)
    return make
