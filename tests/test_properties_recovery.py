"""Recovery under max_restarts, model-based, with real SIGKILLs and pauses; broken actors shrink."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import rule, run_state_machine_as_test
from ray import cloudpickle

from actors import CheckpointConfig, ParameterServer, ReplayBufferActor
from chaos import ClusterHandle
from chaos.testing import ActorChaosMachine

from test_param_server import LINEAR, grads, reference

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/

CAPACITY = 6
FAST = settings(max_examples=4, stateful_step_count=8, deadline=None,
                suppress_health_check=list(HealthCheck))


class BufferMachine(ActorChaosMachine):
    """ReplayBufferActor: which transition sits in which slot, and the write cursor."""

    initial_model: Any = {"slots": [None] * CAPACITY, "cursor": 0, "next_id": 0}
    actor_class: type = ReplayBufferActor

    def create(self, storage: str) -> Any:
        cfg = CheckpointConfig(storage=storage, policy="on_demand", durability=self.durability)
        return self.remote(self.actor_class, CAPACITY, checkpoint=cfg, seed=0)

    def observe(self, actor: Any) -> Any:
        stats = self.call(actor.stats.remote()).buffer
        ids = self.call(actor.column.remote("id")).tolist() if stats.size else []
        return ids, stats.cursor

    def expected(self, model: Any) -> Any:
        return [s for s in model["slots"] if s is not None], model["cursor"]

    @rule(n=st.integers(1, 4))
    def add(self, n: int) -> None:
        ids = np.arange(self.model["next_id"], self.model["next_id"] + n)
        self.call(self.actor.add.remote({"id": ids, "x": ids.astype(np.float32)},
                                        writer_id="w", seq=int(self.model["next_id"])))
        for i in ids:
            self.model["slots"][self.model["cursor"]] = int(i)
            self.model["cursor"] = (self.model["cursor"] + 1) % CAPACITY
        self.model["next_id"] += n

    @rule()
    def sample_and_update(self) -> None:
        if self.model["slots"][0] is not None:
            batch = self.call(self.actor.sample.remote(3))
            self.call(self.actor.update_priorities.remote(batch["indices"], np.ones(3)))

    def observe_ref(self) -> Any:
        return self.actor.size.remote()


class PSMachine(ActorChaosMachine):
    """ParameterServer: version and weights equal a reference applying each push once."""

    initial_model: Any = {"applied": [], "last": None, "seq": 0}
    actor_class: type = ParameterServer

    def create(self, storage: str) -> Any:
        cfg = CheckpointConfig(storage=storage, policy="on_demand", durability=self.durability)
        return self.remote(self.actor_class, LINEAR, checkpoint=cfg)

    def observe(self, actor: Any) -> Any:
        weights = self.call(actor.weights.remote())
        return self.call(actor.version.remote()), {k: v.tolist() for k, v in weights.items()}

    def expected(self, model: Any) -> Any:
        weights = reference([grads(s) for s in model["applied"]])
        return len(model["applied"]), {k: v.tolist() for k, v in weights.items()}

    @rule(scale=st.sampled_from([1.0, 2.0, 3.0]))
    def push(self, scale: float) -> None:
        seq, version = self.model["seq"], len(self.model["applied"])
        self.call(self.actor.push.remote(grads(scale), worker_id="w", seq=seq, base_version=version))
        self.model = {"applied": [*self.model["applied"], scale], "last": (scale, seq, version),
                      "seq": seq + 1}

    @rule()
    def redeliver_last_push(self) -> None:
        """At-least-once delivery: the same (worker, seq) arrives again; nothing may change."""
        if self.model["last"] is not None:
            scale, seq, version = self.model["last"]
            self.call(self.actor.push.remote(grads(scale), worker_id="w", seq=seq, base_version=version))


@pytest.mark.parametrize("durability", ["policy", "wal"])
def test_replay_buffer_recovers(ray_cluster: ClusterHandle, durability: str) -> None:
    machine = type(f"Buffer{durability}", (BufferMachine,), {"durability": durability})
    run_state_machine_as_test(machine, settings=FAST)


@pytest.mark.parametrize("durability", ["policy", "wal"])
def test_parameter_server_recovers(ray_cluster: ClusterHandle, durability: str) -> None:
    machine = type(f"PS{durability}", (PSMachine,), {"durability": durability})
    run_state_machine_as_test(machine, settings=settings(FAST, max_examples=3))


# -- deliberately broken actors: caught, and shrunk to a short schedule -----------------------


class ForgetsCursor(ReplayBufferActor):
    """Bug: the checkpoint forgets the write cursor, so a restored buffer overwrites slot 0."""

    def state_dict(self) -> Any:
        state = super().state_dict()
        state["buffer"]["counters"] = {**state["buffer"]["counters"], "cursor": 0}
        return state


def shrunk_steps(excinfo: pytest.ExceptionInfo[BaseException]) -> list[str]:
    notes = "\n".join(getattr(excinfo.value, "__notes__", []))
    steps = re.findall(r"^state\.(\w+)\(", notes, flags=re.M)
    return [s for s in steps if s not in ("matches_the_model", "teardown")]


BREAK = settings(max_examples=30, stateful_step_count=6, deadline=None, derandomize=True,
                 suppress_health_check=list(HealthCheck))


def test_a_buffer_that_forgets_its_cursor_is_caught_and_shrunk(ray_cluster: ClusterHandle) -> None:
    machine = type("Broken", (BufferMachine,), {"actor_class": ForgetsCursor, "durability": "policy"})
    with pytest.raises(AssertionError, match="actor state .* != model") as excinfo:
        run_state_machine_as_test(machine, settings=BREAK)
    assert shrunk_steps(excinfo) == ["add", "checkpoint", "kill"]
    notes = "\n".join(excinfo.value.__notes__)
    assert "raychaos journal of this example" in notes and '"outcome": "SIGKILL sent"' in notes


def readme_example() -> str:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("## Testing your own actor", 1)[1]
    return re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)  # type: ignore[union-attr]


def test_the_readme_example_runs(ray_cluster: ClusterHandle) -> None:
    code = readme_example()
    assert len([line for line in code.splitlines() if line.strip()]) <= 15
    namespace: dict[str, Any] = {"__name__": "readme_example"}
    exec(compile(code, "README.md", "exec"), namespace)  # noqa: S102 - our own README
    run_state_machine_as_test(namespace["CounterMachine"], settings=FAST)

