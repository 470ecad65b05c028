"""The Ray-library workloads' verdicts, on journals written by hand: each can be false."""

from __future__ import annotations

from typing import Any

import numpy as np

from scenarios._apps import reference_weights, resume_verdicts

# Epoch e of attempt `pid` starts at t = 10 * attempt + e and ends half a second later.


def attempt(pid: int, epochs: range, *, at: float, finished: bool = True) -> list[dict[str, Any]]:
    records = []
    for i, epoch in enumerate(epochs):
        records.append({"event": "start", "epoch": epoch, "pid": pid, "t": at + i})
        if finished or epoch != epochs[-1]:
            records.append({"event": "end", "epoch": epoch, "pid": pid, "t": at + i + 0.5})
    return records


def verdicts(journal: list[dict[str, Any]], kills: list[float]) -> dict[str, bool]:
    return {v.name: v.held for v in resume_verdicts(journal, kills, epochs=6, window=2.0)}


ALL_HELD = {"no_epoch_lost": True, "resumed_from_latest_checkpoint": True, "no_reported_epoch_redone": True}


def test_a_restart_at_the_epoch_after_the_last_one_ended_holds() -> None:
    # Epochs 0-2 end by 2.5 s; killed at 3.2 s in epoch 3; resumed at 3.
    journal = attempt(1, range(4), at=0, finished=False) + attempt(2, range(3, 6), at=10)
    assert verdicts(journal, kills=[3.2]) == ALL_HELD


def test_a_checkpoint_reported_just_before_the_kill_may_be_redone_but_it_is_shown() -> None:
    # Epoch 2 ended 0.7 s before the kill (inside the window): resuming at 2 is Ray Train's
    # guarantee, but the epoch ran to its end twice.
    journal = attempt(1, range(4), at=0, finished=False) + attempt(2, range(2, 6), at=10)
    assert verdicts(journal, kills=[3.2]) == {**ALL_HELD, "no_reported_epoch_redone": False}


def test_resuming_before_a_checkpoint_older_than_the_window_is_caught() -> None:
    # Epoch 0 ended 2.7 s before the kill: resuming at 0 lost a checkpoint Ray had taken.
    journal = attempt(1, range(4), at=0, finished=False) + attempt(2, range(6), at=10)
    held = verdicts(journal, kills=[3.2])
    assert not held["resumed_from_latest_checkpoint"] and not held["no_reported_epoch_redone"]


def test_skipping_an_epoch_or_a_restart_no_kill_explains_is_caught() -> None:
    skipped = attempt(1, range(4), at=0, finished=False) + attempt(2, range(4, 6), at=10)
    assert not verdicts(skipped, kills=[3.2])["no_epoch_lost"]  # epoch 3 never ended
    unexplained = attempt(1, range(4), at=0, finished=False) + attempt(2, range(3, 6), at=10)
    assert not verdicts(unexplained, kills=[])["resumed_from_latest_checkpoint"]


def test_the_reference_is_deterministic_and_learns() -> None:
    first = reference_weights(0, epochs=2, steps=5, lr=0.05)
    assert all(np.array_equal(first[k], v) for k, v in reference_weights(0, epochs=2, steps=5, lr=0.05).items())
    assert not np.array_equal(first["weight"], reference_weights(0, epochs=3, steps=5, lr=0.05)["weight"])


def test_a_kill_while_the_group_forms_again_does_not_count_as_the_cause() -> None:
    # The first kill (3.2 s) ended attempt 1; the second (8 s) hit the group still forming:
    # the checkpoint was decided by the first.
    journal = attempt(1, range(4), at=0, finished=False) + attempt(2, range(3, 6), at=10)
    assert verdicts(journal, kills=[3.2, 8.0]) == ALL_HELD


def test_the_healthy_runner_count_must_come_back_within_the_bound() -> None:
    from scenarios._apps import Iteration, restored_within

    def its(*healthy: int) -> list[Iteration]:
        return [Iteration(float(t), 0.5, 20.0, 1000, h, 0) for t, h in enumerate(healthy, start=1)]

    assert restored_within(its(2, 1, 1, 2, 2), [1.5], target=2, bound=3) == []
    assert restored_within(its(2, 1, 1, 1, 2), [1.5], target=2, bound=3) == [
        "kill at 1.5 s: healthy [1, 1, 1] within 3 s (target 2)"]


def test_an_iteration_that_samples_nothing_with_every_runner_healthy_is_silent() -> None:
    from scenarios._apps import Iteration, silent_drops

    reported = Iteration(1.0, 0.5, float("nan"), 0, 1, 0)  # a runner down: RLlib said so
    silent = Iteration(2.0, 0.5, float("nan"), 0, 2, 0)
    assert silent_drops([reported], target=2) == [] and silent_drops([reported, silent], target=2) == [
        "iteration at 2.0 s"]


def test_recovery_is_timed_from_the_fault_to_both_runners_healthy_after_a_dip() -> None:
    from scenarios._apps import Iteration, recovery_times

    its = [Iteration(float(t), 0.5, 20.0, 1000, h, 0) for t, h in enumerate([2, 2, 1, 1, 2, 2], start=1)]
    assert recovery_times(its, [1.5, 5.5], target=2) == [3.5, None]  # the second: no dip seen
