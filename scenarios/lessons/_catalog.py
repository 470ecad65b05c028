"""Lessons: each pitfall of the reference chapter, run as the mistake and the fix, measured.

``raychaos explain`` lists them; ``raychaos explain ID`` runs one on an embedded cluster (or
the cluster at ``--address``) and prints both figures side by side, then why, and the
chapter section. The measurements live in one module per chapter section
(``scenarios.lessons._tasks`` for §4.1 … ``scenarios.lessons._resources`` for §4.5). Every figure
is measured in the run (nothing is hard-coded); the tests assert only its direction.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from chaos import local_cluster
from chaos.errors import InvalidConfig
from scenarios.lessons import _actors, _failures, _objects, _resources, _tasks, _waiting
from scenarios.lessons._model import Lesson, LessonResult, Measure

__all__ = ["CATALOGUE", "Lesson", "LessonResult", "Measure", "find", "lessons", "run_lesson"]

#: Every lesson, by chapter section, then the failure modes.
CATALOGUE: tuple[Lesson, ...] = (*_tasks.LESSONS, *_actors.LESSONS, *_objects.LESSONS,
                                 *_waiting.LESSONS, *_resources.LESSONS, *_failures.LESSONS)


def lessons() -> list[Lesson]:
    """Every lesson in number order (the chapter's pitfalls, then the failure modes), then the tips."""
    return sorted(CATALOGUE, key=lambda item: (item.tip, _number(item.id)))


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
    return LessonResult(lesson=item, measures=tuple(measures), seconds=round(time.monotonic() - start, 2),
                        notes=tuple(notes))


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
