"""``@mutation`` on ``async def``: logged once the coroutine's effect is whole, one at a time
(``await``s included, across event loops), replayed on restore; checkpoints never see half
of one."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from actors import Checkpointable, CheckpointConfig, checkpoint_async, mutation
from actors._checkpoint import _sync_mutation
from chaos.errors import CheckpointError


def tally_class(decorate: Callable[[Any], Any]) -> type[Checkpointable]:
    """An async counter whose mutation reads, awaits, then writes: two of them interleaved at
    the ``await`` lose an update unless mutations run one at a time."""

    class Tally(Checkpointable):
        def __init__(self, storage: str, *, restore: Any = "auto", every_n: int = 7) -> None:
            self.total, self.calls = 0, 0
            self.enable_checkpointing(CheckpointConfig(storage=storage, durability="wal", every_n=every_n),
                                      restore=restore)

        def state_dict(self) -> Mapping[str, Any]:
            return {"total": self.total, "calls": self.calls}

        def load_state_dict(self, state: Mapping[str, Any]) -> None:
            self.total, self.calls = int(state["total"]), int(state["calls"])

        @decorate
        async def add(self, k: int) -> int:
            seen = self.total
            await asyncio.sleep(0.0005)  # another call runs here unless mutations are gated
            self.total, self.calls = seen + k, self.calls + 1
            return self.total

    return Tally


Tally = tally_class(mutation)


def tally_problems(cls: type[Checkpointable], storage: str) -> list[str]:
    """Concurrent adds on one loop, then a restore: what does not add up."""
    tally = cls(storage)

    async def many() -> list[int]:
        return await asyncio.gather(*(tally.add(k) for k in range(1, 41)))  # type: ignore[attr-defined]

    asyncio.run(many())
    problems, want = [], sum(range(1, 41))
    if (tally.total, tally.calls) != (want, 40):  # type: ignore[attr-defined]
        problems.append(f"in memory: total {tally.total}, {tally.calls} calls; want {want}, 40")  # type: ignore[attr-defined]
    restored = cls(storage, restore="always")
    if restored.state_dict() != tally.state_dict():
        problems.append(f"restored {dict(restored.state_dict())}, had {dict(tally.state_dict())}")
    return problems


def test_async_mutations_run_one_at_a_time_and_replay_whole(tmp_path: Any) -> None:
    assert tally_problems(Tally, str(tmp_path / "ckpt")) == []


def test_an_async_mutation_logged_at_call_time_is_caught(tmp_path: Any) -> None:
    # The old wrapper: a synchronous one around the coroutine function. It logs the call when
    # the coroutine is created (before its effect) and holds no lock over the await.
    def logged_at_call(method: Any) -> Any:
        wrapper = _sync_mutation(method, False)
        wrapper.__raychaos_mutation__ = method  # type: ignore[attr-defined]
        wrapper.__raychaos_idempotent__ = False  # type: ignore[attr-defined]
        return wrapper

    problems = tally_problems(tally_class(logged_at_call), str(tmp_path / "ckpt"))
    assert any("in memory" in p for p in problems), problems


def test_async_mutations_are_gated_across_event_loops(tmp_path: Any) -> None:
    # Concurrency groups run one event loop per thread: the gate must hold across them.
    tally = Tally(str(tmp_path / "ckpt"), every_n=1000)

    def loop() -> None:
        async def run() -> None:
            await asyncio.gather(*(tally.add(1) for _ in range(20)))  # type: ignore[attr-defined]
        asyncio.run(run())

    threads = [threading.Thread(target=loop) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert (tally.total, tally.calls) == (60, 60)  # type: ignore[attr-defined]
    assert Tally(str(tmp_path / "ckpt"), restore="always").state_dict() == tally.state_dict()


def test_a_checkpoint_waits_for_the_async_mutation_in_flight(tmp_path: Any) -> None:
    tally = Tally(str(tmp_path / "ckpt"), every_n=1000)

    async def race() -> tuple[int, int]:
        adding = asyncio.create_task(tally.add(5))  # type: ignore[attr-defined]
        await asyncio.sleep(0)  # it now awaits inside its mutation: half done
        with pytest.raises(CheckpointError, match="in flight"):
            tally.checkpoint()
        info = await checkpoint_async(tally)
        await adding
        return info.seq, tally.total  # type: ignore[attr-defined]

    _, total = asyncio.run(race())
    assert total == 5
    assert tally._checkpointer().store.load_latest().chain[0]["total"] == 5  # whole, not half


def test_the_mixin_has_no_async_method() -> None:
    # One ``async def`` on the mixin makes Ray run every checkpointed actor as an async actor
    # (its methods on an event loop thread, up to 1000 at once): seen once, pinned here.
    assert [n for n in dir(Checkpointable) if inspect.iscoroutinefunction(getattr(Checkpointable, n))] == []


def test_an_async_checkpointed_class_from_a_users_script_pickles(tmp_path: Any) -> None:
    # Ray pickles a class defined in a script (``__main__``) by value, its methods' closures
    # and globals with it: a ContextVar named by the wrapper made that fail ("cannot pickle
    # '_contextvars.ContextVar' object"), so no such actor could be created.
    from ray import cloudpickle

    cls = cloudpickle.loads(cloudpickle.dumps(tally_class(mutation)))  # local: pickled by value
    assert tally_problems(cls, str(tmp_path / "ckpt")) == []
