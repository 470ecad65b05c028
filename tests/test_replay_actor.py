"""ReplayBufferActor on real Ray processes: idempotent adds, recovery after SIGKILL."""

from __future__ import annotations

import os
import re
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import ray
from ray import cloudpickle

from actors import CheckpointConfig, ReplayBufferActor
from chaos.cluster import ClusterHandle
from conftest import CALL_TIMEOUT
from test_replay_buffer import transitions

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/


def start(storage: str, durability: str, *, cls: type = ReplayBufferActor, every_n: int = 4,
          **kwargs: Any) -> Any:
    remote = ray.remote(max_restarts=3, max_task_retries=-1)(cls)
    return remote.remote(64, checkpoint=CheckpointConfig(storage=storage, durability=durability,
                                                          every_n=every_n), seed=0, **kwargs)


def call(ref: Any) -> Any:
    return ray.get(ref, timeout=CALL_TIMEOUT)


def test_repeated_writer_seq_is_stored_once(ray_cluster: ClusterHandle, storage: str) -> None:
    rb = start(storage, "policy")
    assert call(rb.add.remote(transitions(3), writer_id="w0", seq=0)).tolist() == [0, 1, 2]
    assert call(rb.add.remote(transitions(3), writer_id="w0", seq=0)).tolist() == []
    assert call(rb.add.remote(transitions(2), writer_id="w1", seq=0)).tolist() == [3, 4]
    stats = call(rb.stats.remote())
    assert (call(rb.size.remote()), stats.duplicate_adds, stats.writers) == (5, 1, 2)
    ray.kill(rb)


def test_writer_without_seq_is_refused(ray_cluster: ClusterHandle, storage: str) -> None:
    rb = start(storage, "policy")
    with pytest.raises(ValueError, match="give both writer_id and seq"):
        call(rb.add.remote(transitions(1), writer_id="w0"))
    assert call(rb.size.remote()) == 0
    ray.kill(rb)


class DiesAfterAcking:
    """Mixed in before an actor class: applies and logs an ``add``, then SIGKILLs itself
    before replying, once (``marker`` remembers across the restart): Ray delivers it again."""

    def __init__(self, *args: Any, marker: str, **kwargs: Any) -> None:
        self.marker = marker
        super().__init__(*args, **kwargs)

    # Not a @mutation itself: the class's own add logs (and checkpoints) before the kill.
    def add(self, *args: Any, **kwargs: Any) -> Any:
        result = super().add(*args, **kwargs)  # type: ignore[misc]
        if not os.path.exists(self.marker):
            Path(self.marker).write_text("died once")
            os.kill(os.getpid(), signal.SIGKILL)
        return result


class BufferDiesAfterAcking(DiesAfterAcking, ReplayBufferActor):
    pass


@pytest.mark.parametrize("durability", ["policy", "wal"])
def test_add_retried_after_the_actor_died_is_stored_once(
    ray_cluster: ClusterHandle, storage: str, tmp_path: Path, durability: str
) -> None:
    # every_n=1 in policy mode, so the add is durable before the crash in both modes.
    rb = start(storage, durability, cls=BufferDiesAfterAcking, marker=str(tmp_path / "died"), every_n=1)
    indices = call(rb.add.remote(transitions(5), writer_id="w0", seq=7))
    assert (tmp_path / "died").exists(), "the actor did not die after applying the add"
    assert indices.tolist() == []  # the retry found seq 7 already stored
    assert call(rb.size.remote()) == 5
    assert call(rb.stats.remote()).duplicate_adds == 1
    ray.kill(rb)


def sample_rounds(rb: Any, rounds: int) -> list[dict[str, np.ndarray]]:
    out = []
    for i in range(rounds):
        call(rb.add.remote(transitions(5, start=10 * i), writer_id="w", seq=i))
        batch = call(rb.sample.remote(8))
        call(rb.update_priorities.remote(batch["indices"], np.linspace(0.1, 2.0, 8)))
        out.append(batch)
    return out


def test_wal_mode_recovers_the_exact_pre_kill_state(
    ray_cluster: ClusterHandle, storage: str, sigkill: Callable[..., int]
) -> None:
    rb = start(storage, "wal", every_n=5)
    sample_rounds(rb, 6)
    before = call(rb.digest.remote())
    sigkill(rb)
    assert call(rb.digest.remote()) == before
    # The RNG came back too: the next samples are those a reference buffer draws.
    ref = start(storage + "-ref", "wal", every_n=5)
    sample_rounds(ref, 6)
    for a, b in zip(sample_rounds(rb, 2), sample_rounds(ref, 2)):
        assert all(np.array_equal(a[k], b[k]) for k in a)
    ray.kill(rb)
    ray.kill(ref)


def test_policy_mode_recovers_the_last_checkpoint(
    ray_cluster: ClusterHandle, storage: str, sigkill: Callable[..., int]
) -> None:
    rb = start(storage, "policy", every_n=1000)
    sample_rounds(rb, 3)
    call(rb.checkpoint.remote())
    at_checkpoint = call(rb.digest.remote())
    sample_rounds(rb, 2)  # the unsaved suffix
    assert call(rb.digest.remote()) != at_checkpoint
    sigkill(rb)
    assert call(rb.digest.remote()) == at_checkpoint
    assert call(rb.last_seq.remote("w")) == 2
    ray.kill(rb)


def test_sample_and_update_is_update_then_sample_in_one_logged_call(tmp_path: Path) -> None:
    # In-process: the actor class is plain Python; the WAL logs the one call as one record.
    def fresh(name: str) -> ReplayBufferActor:
        actor = ReplayBufferActor(64, checkpoint=CheckpointConfig(storage=str(tmp_path / name),
                                                                   durability="wal"), seed=3)
        actor.add(transitions(40))
        return actor

    one, two = fresh("one"), fresh("two")
    first = one.sample_and_update(8)
    np.testing.assert_array_equal(first["indices"], two.sample(8)["indices"])
    prios = np.linspace(0.1, 5.0, 8)
    after_one = one.sample_and_update(8, first["indices"], prios)
    two.update_priorities(first["indices"], prios)
    after_two = two.sample(8)
    np.testing.assert_array_equal(after_one["indices"], after_two["indices"])
    np.testing.assert_array_equal(after_one["weights"], after_two["weights"])
    assert one.checkpoint_stats().wal_records == 3  # add + two sample_and_update, one record each


def test_a_packed_batch_is_the_batch_bit_for_bit() -> None:
    from actors._wire import pack_batch, unpack_batch

    batch = {**transitions(5), "weights": np.linspace(0.1, 1.0, 5), "indices": np.arange(5) * 7,
             "frames": np.arange(5 * 2 * 3, dtype=np.uint8).reshape(5, 2, 3)}
    for _ in range(2):  # the second time from the layout caches
        back = unpack_batch(pack_batch(batch))
        assert list(back) == list(batch)
        for name, column in batch.items():
            assert back[name].dtype == column.dtype and back[name].shape == column.shape
            assert back[name].tobytes() == column.tobytes()


def test_a_packed_request_is_the_request_bit_for_bit() -> None:
    from actors._wire import pack_request, unpack_request

    indices, priorities = np.array([3, 1, 2]), np.array([0.5, 1e-300, 7.0])
    asked = unpack_request(pack_request(256, indices, priorities, 0.4))
    assert (asked.batch_size, asked.beta) == (256, 0.4)
    assert asked.indices is not None and asked.priorities is not None
    assert asked.indices.tolist() == [3, 1, 2] and asked.priorities.tobytes() == priorities.tobytes()
    first = unpack_request(pack_request(8, None, None, None))
    assert (first.batch_size, first.indices, first.priorities, first.beta) == (8, None, None, None)


def test_bytes_their_layout_does_not_account_for_are_refused() -> None:
    from actors._wire import pack_batch, pack_request, unpack_batch, unpack_request
    from chaos.errors import InvalidConfig

    request = pack_request(8, np.arange(3), np.ones(3), None)
    with pytest.raises(InvalidConfig, match="a packed request of 71 bytes says it holds 3 priorities \\(72 bytes\\)"):
        unpack_request(request[:-1])
    with pytest.raises(InvalidConfig, match="a packed request must be bytes of at least 24, got ndarray"):
        unpack_request(np.arange(3))  # type: ignore[arg-type]
    with pytest.raises(InvalidConfig, match="got 3 indices and 2 priorities; give one each"):
        pack_request(8, np.arange(3), np.ones(2), None)
    with pytest.raises(InvalidConfig, match="needs both `indices` and `priorities`"):
        pack_request(8, np.arange(3), None, None)
    with pytest.raises(InvalidConfig, match=re.escape("sample_and_update(8, beta=nan): give a whole batch size")):
        pack_request(8, None, None, float("nan"))  # NaN means "the buffer's beta" on the wire
    blob = pack_batch(transitions(2))
    with pytest.raises(InvalidConfig, match=f"a packed batch of {len(blob) - 1} bytes has a layout for {len(blob)}"):
        unpack_batch(blob[:-1])
    with pytest.raises(InvalidConfig, match="layout does not read as"):
        unpack_batch(blob[:4] + b"{" + blob[5:])


def test_the_client_draws_what_sample_and_update_draws_in_one_logged_call(
        ray_cluster: ClusterHandle, tmp_path: Path) -> None:
    from actors import ReplayClient

    # A real actor behind the client; its twin in-process, driven with the same calls.
    remote = start(str(tmp_path / "remote"), "wal")
    twin = ReplayBufferActor(64, checkpoint=CheckpointConfig(storage=str(tmp_path / "twin"), durability="wal",
                                                              every_n=4), seed=0)
    call(remote.add.remote(transitions(40)))
    twin.add(transitions(40))
    client, prios = ReplayClient(remote, timeout=CALL_TIMEOUT), np.linspace(0.1, 5.0, 8)
    got, want = client.sample_and_update(8), twin.sample_and_update(8)
    got, want = (client.sample_and_update(8, got["indices"], prios),
                 twin.sample_and_update(8, want["indices"], prios))
    assert list(got) == list(want) and all(got[k].tobytes() == want[k].tobytes() for k in want)
    assert call(remote.checkpoint_stats.remote()).wal_records == twin.checkpoint_stats().wal_records
    ray.kill(remote)


def test_sample_and_update_refuses_half_an_update_and_changes_nothing(tmp_path: Path) -> None:
    from chaos.errors import InvalidConfig

    actor = ReplayBufferActor(64, checkpoint=CheckpointConfig(storage=str(tmp_path)), seed=3)
    actor.add(transitions(40))
    before = actor.buffer.stats()
    with pytest.raises(InvalidConfig, match="needs both `indices` and `priorities`"):
        actor.sample_and_update(8, np.arange(8))
    with pytest.raises(InvalidConfig):
        actor.sample_and_update(8, np.arange(8), np.full(8, -1.0))  # a negative priority
    for batch_size, beta in ((0, None), (8, 1.5)):  # a draw that would fail after the update
        with pytest.raises(InvalidConfig):
            actor.sample_and_update(batch_size, np.arange(8), np.ones(8), beta=beta)
    assert actor.buffer.stats() == before
