"""Jepsen-style concurrent histories: three writers through Ray with ``max_task_retries=-1``,
the actor SIGKILLed at random times, Ray's retry delivering the lost replies; the set checker
then requires every acknowledged write stored exactly once."""

from __future__ import annotations

import functools
import re
import sys
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import ray
from hypothesis import given
from hypothesis import strategies as st
from ray import cloudpickle

import histories
from actors import ReplayBufferActor, WriterSeqs
from chaos import HangError, History
from chaos.cluster import ClusterHandle
from chaos.history import OpStatus, drive_writers
from conftest import scaled
from histories import (
    add_row,
    buffer_keys,
    push,
    replayed_weights,
    run_history,
    start_buffer,
    start_server,
)

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/
cloudpickle.register_pickle_by_value(histories)

pytestmark = pytest.mark.property
CAPACITY = 8192  # more than the writers' 3 × 2000: no add is evicted


class HighWaterSeqs(WriterSeqs):
    """The planted bug (raychaos's own dedupe before the failpoint sweep found it): a call
    at or below the highest seq applied is taken for a repeat. Right only if Ray kept a
    caller's order on retries, which it does not."""

    def is_repeat(self, writer_id: str | None, seq: int | None) -> bool:
        if writer_id is None or seq is None or int(seq) > self.last_of(str(writer_id)):
            return False
        self.duplicates += 1
        return True


class HighWaterBuffer(ReplayBufferActor):
    """The buffer with the planted table for the calls it serves (its restore used the real
    one, then hands the state over): Ray's reordered retries land on the planted one."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        planted = HighWaterSeqs()
        planted.load_state_dict(self._seqs.state_dict())
        self._seqs = planted


@ray.remote
class Stuck:
    def call(self, seq: int) -> None:
        threading.Event().wait(60)  # never set: a write that gets no reply (bounded all the same)


def test_a_write_without_a_reply_is_a_hang_not_a_pass(ray_cluster: ClusterHandle) -> None:
    stuck, history = Stuck.remote(), History()
    try:
        errors = drive_writers(lambda w, s: stuck.call.remote(s), history, writers=["w"], writes=2,
                               window=2, timeout=1.0)
    finally:
        ray.kill(stuck)
    assert isinstance(errors["w"], HangError)
    assert re.fullmatch(r"write .+ got no reply within 1\.0 s", str(errors["w"]))
    assert [op.status for op in history.ops()] == [OpStatus.INFO, OpStatus.INFO]


@pytest.mark.slow  # 19 s: make test's 10-minute budget
@given(seed=st.integers(0, 2**16))
@scaled(2)
def test_every_acknowledged_add_is_stored_once_under_random_kills(
        ray_cluster: ClusterHandle, tmp_path_factory: pytest.TempPathFactory, seed: int) -> None:
    actor = start_buffer(str(tmp_path_factory.mktemp("hist") / "ckpt"), CAPACITY)
    try:
        run = run_history(actor, add_row(actor), lambda: buffer_keys(actor), seed=seed,
                          gap=(0.1, 0.6), kills=3)
    finally:
        ray.kill(actor)
    assert run.kills == 3 and not run.errors, run.explain()
    assert run.verdict.ok and run.verdict.indeterminate == 0, run.explain()
    assert run.verdict.acknowledged > 0


@pytest.mark.slow  # make test's 10-minute budget: the end-to-end tier (CI runs both) has room
def test_a_dedupe_that_assumes_ordered_retries_is_caught(ray_cluster: ClusterHandle, tmp_path: Path) -> None:
    """Up to four histories of four kills each; the checker must see an acknowledged add lost."""
    runs = []
    for attempt in range(4):
        actor = start_buffer(str(tmp_path / f"ckpt{attempt}"), CAPACITY, cls=HighWaterBuffer)
        try:
            runs.append(run_history(actor, add_row(actor), functools.partial(buffer_keys, actor),
                                    seed=attempt, gap=(0.1, 0.6), kills=4))
        finally:
            ray.kill(actor)
        if runs[-1].verdict.lost:
            break
    assert runs[-1].verdict.lost and not runs[-1].verdict.ok, [r.explain() for r in runs]


@pytest.mark.slow
@pytest.mark.deep  # CI's hour: make slow checks the counter's history under random kills
def test_the_parameter_server_applies_each_push_once_in_a_replayable_order(
        ray_cluster: ClusterHandle, tmp_path: Path) -> None:
    server = start_server(str(tmp_path / "ckpt"))
    try:
        run = run_history(server, push(server), lambda: ray.get(server.applied_order.remote(), timeout=60),
                          seed=7, gap=(0.1, 0.6), kills=3)
        order = ray.get(server.applied_order.remote(), timeout=60)
        stats = ray.get(server.stats.remote(), timeout=60)
        weights = ray.get(server.weights.remote(), timeout=60)
    finally:
        ray.kill(server)
    assert run.kills == 3 and not run.errors, run.explain()
    assert run.verdict.ok and run.verdict.indeterminate == 0, run.explain()  # each push applied once
    assert stats.version == stats.applied_pushes == len(order) == run.verdict.acknowledged
    expected = replayed_weights(order)
    for name, value in weights.items():
        np.testing.assert_allclose(value.numpy(), expected[name], rtol=0, atol=1e-6, err_msg=name)
