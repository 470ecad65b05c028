"""``restore="auto"`` decides "first start" from what Ray says, and on any doubt refuses.

Ray-free: Ray's runtime context is replaced by a fake that answers as a driver, as an actor
Ray restarted or not, or fails the way a GCS that cannot be reached does.
"""

from __future__ import annotations

import os
import re
from typing import Any

import pytest
import ray

from actors import Checkpointable, CheckpointConfig, mutation
from actors._checkpoint import CHOOSE_RESTORE, RestartUnknown, _reconstructed
from chaos.errors import CheckpointError

ACTOR_ID = "0123456789abcdef"


class FakeContext:
    """Ray's runtime context as a process sees it: its actor's id (None: a driver or a task)
    and the GCS's answer to "was it restarted", or the error the lookup raises."""

    def __init__(self, *, actor_id: str | None = ACTOR_ID, answer: object = False,
                 error: Exception | None = None) -> None:
        self.actor_id, self.answer, self.error = actor_id, answer, error

    def get_actor_id(self) -> str | None:
        return self.actor_id

    @property
    def was_current_actor_reconstructed(self) -> object:
        if self.error is not None:
            raise self.error
        return self.answer


@pytest.fixture
def in_ray(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Make this process look like a Ray worker whose runtime context is the one given."""
    def use(context: FakeContext) -> None:
        monkeypatch.setattr(ray, "is_initialized", lambda: True)
        monkeypatch.setattr(ray, "get_runtime_context", lambda: context)
    return use


class Tally(Checkpointable):
    def __init__(self, storage: str, *, restore: str = "auto") -> None:
        self.n = 0
        self.enable_checkpointing(CheckpointConfig(storage=storage, every_n=1), restore=restore)  # type: ignore[arg-type]

    def state_dict(self) -> dict[str, Any]:
        return {"n": self.n}

    def load_state_dict(self, state: Any) -> None:
        self.n = int(state["n"])

    @mutation
    def add(self, k: int) -> int:
        self.n += k
        return self.n


def folders(storage: str) -> list[str]:
    return sorted(p for p in os.listdir(storage) if p.startswith("ckpt-"))


def test_outside_ray_nothing_was_restarted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    assert _reconstructed() is False


def test_a_driver_or_task_is_no_restarted_actor(in_ray: Any) -> None:
    in_ray(FakeContext(actor_id=None, error=AssertionError("not an actor")))
    assert _reconstructed() is False


@pytest.mark.parametrize("answer", [True, False])
def test_inside_an_actor_ray_answers(in_ray: Any, answer: bool) -> None:
    in_ray(FakeContext(answer=answer))
    assert _reconstructed() is answer


def test_a_failed_lookup_inside_an_actor_is_refused_not_taken_for_a_first_start(in_ray: Any) -> None:
    """The GCS did not answer: guessing "first start" would commit the initial state over the
    newest checkpoint of a restarted actor."""
    in_ray(FakeContext(error=TimeoutError("GCS unreachable")))
    with pytest.raises(RestartUnknown, match=re.escape(CHOOSE_RESTORE)) as caught:
        _reconstructed()
    assert isinstance(caught.value, CheckpointError) and "GCS unreachable" in str(caught.value)


def test_no_record_of_the_actor_is_refused(in_ray: Any) -> None:
    """Ray 2.60 answers ``{}`` (falsy) when the GCS has no record of the actor."""
    in_ray(FakeContext(answer={}))
    with pytest.raises(RestartUnknown, match=re.escape(ACTOR_ID)):
        _reconstructed()


def test_a_restart_ray_cannot_confirm_writes_nothing_over_its_checkpoints(tmp_path: Any, in_ray: Any) -> None:
    storage = str(tmp_path / "ckpt")
    tally = Tally(storage, restore="never")
    tally.add(7)
    before = folders(storage)
    in_ray(FakeContext(error=RuntimeError("GCS unreachable")))
    with pytest.raises(RestartUnknown):
        Tally(storage)
    assert folders(storage) == before
    in_ray(FakeContext(answer=True))
    assert Tally(storage).n == 7  # the restart, once Ray answers, restores it
