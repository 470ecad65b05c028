"""An idempotent mutation that raises leaves no trace: not in the writer table, not in the log.

Its corrected retry under the same ``(writer_id, seq)`` must then be applied, not dropped as a
repeat; a writer that retries a refused batch with the same seq would otherwise lose it while
being told it was stored. Ray-free: the actor bodies run in-process.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from actors import CheckpointConfig, CheckpointedCounter, ReplayBufferActor
from actors.replay import SchemaError
from test_replay_buffer import transitions


def buffer(storage: str, *, restore: str = "never") -> ReplayBufferActor:
    return ReplayBufferActor(64, checkpoint=CheckpointConfig(storage=storage, durability="wal", every_n=100),
                             seed=0, restore=restore)  # type: ignore[arg-type]


def refused_batches() -> list[tuple[dict[str, np.ndarray], Any, type[Exception]]]:
    """Batches the buffer refuses once it holds ``transitions``' columns, and the error each raises."""
    wrong_dtype = {**transitions(2), "action": np.zeros(2, dtype=np.float64)}
    ragged = {**transitions(2), "reward": np.zeros(3, dtype=np.float32)}
    return [(wrong_dtype, None, SchemaError), (ragged, None, SchemaError),
            (transitions(2), np.array([1.0, np.nan]), ValueError)]


@pytest.mark.parametrize("case", range(len(refused_batches())))
def test_a_refused_add_leaves_its_seq_free_for_the_corrected_retry(tmp_path: Any, case: int) -> None:
    storage = str(tmp_path / "ckpt")
    rb = buffer(storage)
    rb.add(transitions(3), writer_id="w", seq=0)
    batch, priorities, error = refused_batches()[case]
    with pytest.raises(error):
        rb.add(batch, priorities, writer_id="w", seq=1)
    assert (rb.last_seq("w"), rb.size()) == (0, 3)  # no trace of seq 1
    assert rb.add(transitions(2, start=3), writer_id="w", seq=1).tolist() == [3, 4]  # applied
    assert rb.add(transitions(2, start=3), writer_id="w", seq=1).tolist() == []  # now a repeat
    assert (rb.size(), rb.stats().duplicate_adds) == (5, 1)
    restored = buffer(storage, restore="always")  # the log replays the retry, not the refusal
    assert restored.digest() == rb.digest()


def test_a_refused_counter_add_leaves_its_seq_free(tmp_path: Any) -> None:
    """The same for the smallest actor: an add whose ``k`` cannot be added raises TypeError."""
    storage = str(tmp_path / "ckpt")
    counter = CheckpointedCounter(storage, durability="wal", restore="never")
    with pytest.raises(TypeError):
        counter.add("two", writer_id="w", seq=0)  # type: ignore[arg-type]
    assert counter.applied_seqs("w") == [] and counter.get() == 0
    assert counter.add(2, writer_id="w", seq=0) == 2
    assert counter.add(2, writer_id="w", seq=0) == 2  # a repeat now
    assert CheckpointedCounter(storage, durability="wal", restore="always").get() == 2
