"""The actors docs/how-to/test-your-actor.md calls "your" actors: each keeps its state in a file
of its own (a restart reads it back) and applies a call delivered again once."""

import os

import pytest
import ray


@ray.remote(max_restarts=-1, max_task_retries=-1)
class Keyed:
    """Keys in a file, one a line, fsynced before the call returns; a key held already is not
    written again."""

    def __init__(self, path: str):
        self.path = path
        self.held: list[str] = []
        if os.path.exists(path):
            with open(path) as saved:
                self.held = saved.read().split()

    def _add(self, key: str) -> None:
        if key in self.held:
            return
        with open(self.path, "a") as out:
            out.write(key + "\n")
            out.flush()
            os.fsync(out.fileno())
        self.held.append(key)

    def place(self, order_id: str) -> None:
        self._add(order_id)

    def count(self) -> int:
        return len(self.held)

    def add(self, writer: str, seq: int) -> None:
        self._add(f"{writer}:{seq}")

    def keys(self) -> list[tuple[str, int]]:
        return [(writer, int(seq)) for writer, seq in (key.split(":") for key in self.held)]


def started(name: str, path: str):
    actor = Keyed.options(name=name).remote(path)
    ray.get(actor.count.remote(), timeout=60)
    return actor


@pytest.fixture
def orders(ray_cluster, tmp_path):
    actor = started("orders", str(tmp_path / "orders"))
    yield actor
    ray.kill(actor)


@pytest.fixture
def store(ray_cluster, tmp_path):
    actor = started("store", str(tmp_path / "store"))
    yield actor
    ray.kill(actor)
