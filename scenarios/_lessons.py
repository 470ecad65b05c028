"""Lessons: each pitfall of the reference chapter, run as the mistake and the fix, measured.

``raychaos explain`` lists them; ``raychaos explain ID`` runs one on an embedded cluster (or
the cluster at ``--address``) and prints both figures side by side, then why, and the
chapter section. The measurements live in :mod:`scenarios._lesson_cases`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Literal

from chaos import InvalidConfig, local_cluster

__all__ = ["Lesson", "LessonResult", "Measure", "lesson", "lessons", "run_lesson"]

Better = Literal["lower", "higher"]


@dataclass(frozen=True, slots=True)
class Measure:
    """One measured figure of a lesson: the mistake's value and the fix's, and which is better."""

    what: str
    unit: str
    mistake: float
    fix: float
    better: Better = "lower"

    @property
    def favours_fix(self) -> bool:
        return self.fix < self.mistake if self.better == "lower" else self.fix > self.mistake


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
    run: Callable[[str], tuple[Sequence[Measure], Sequence[str]]]
    nodes: int = 1
    num_gpus: int = 0
    tip: bool = False


_LESSONS: dict[str, Lesson] = {}


def lesson(**fields: object) -> Callable[[Callable[[str], tuple[Sequence[Measure], Sequence[str]]]], Lesson]:
    """Register the decorated measurement as a lesson (its id must be new)."""
    def register(run: Callable[[str], tuple[Sequence[Measure], Sequence[str]]]) -> Lesson:
        item = Lesson(run=run, **fields)  # type: ignore[arg-type]
        if item.id in _LESSONS:
            raise InvalidConfig(f"lesson id {item.id!r} is registered twice")
        _LESSONS[item.id] = item
        return item
    return register


def lessons() -> list[Lesson]:
    """Every lesson, pitfalls first in chapter order, then the tips."""
    import scenarios._lesson_cases  # noqa: F401 - registers the lessons

    return sorted(_LESSONS.values(), key=lambda item: (item.tip, _number(item.id)))


def _number(lesson_id: str) -> int:
    digits = "".join(ch for ch in lesson_id.split("-")[0] if ch.isdigit())
    return int(digits or 0)


def find(lesson_id: str) -> Lesson:
    """The lesson with this id (its number alone, ``7``, works too)."""
    for item in lessons():
        if lesson_id in (item.id, item.id.split("-")[0], item.id.split("-")[0].lstrip("0")):
            return item
    raise InvalidConfig(f"no lesson {lesson_id!r}; `raychaos explain` lists them: "
                        + ", ".join(item.id for item in lessons()))


def run_lesson(item: Lesson, *, address: str | None = None) -> LessonResult:
    """Run ``item`` on a cluster it fits (embedded unless ``address``) and return its figures."""
    start = time.monotonic()
    with _cluster_for(item, address) as addr:
        measures, notes = item.run(addr)
    return LessonResult(item, tuple(measures), round(time.monotonic() - start, 2), tuple(notes))


@contextmanager
def _cluster_for(item: Lesson, address: str | None) -> Iterator[str]:
    import ray

    if address is not None:
        if not ray.is_initialized():
            ray.init(address=address, log_to_driver=False)
        yield ray.get_runtime_context().gcs_address
        return
    with local_cluster(nodes=item.nodes, num_cpus=2 if item.nodes == 1 else 1, num_gpus=item.num_gpus,
                       worker_resources={"worker": 100}, log_to_driver=False) as handle:
        yield handle.address
