"""The Ray-library workloads' verdicts, on journals written by hand: each can be false."""

from __future__ import annotations

from typing import Any

import numpy as np

from scenarios.workloads.apps._libraries import combined, reference_weights, resume_verdicts

# Epoch e of attempt `pid` starts at t = 10 * attempt + e and ends half a second later; the
# library takes its checkpoint `lag` seconds after that (Ray Train's controller polls).


def attempt(pid: int, epochs: range, *, at: float, finished: bool = True, lag: float = 0.2,
            taken_until: float = float("inf")) -> list[dict[str, Any]]:
    """One attempt's journal; checkpoints taken only up to ``taken_until`` (the kill)."""
    records = []
    for i, epoch in enumerate(epochs):
        records.append({"event": "start", "epoch": epoch, "pid": pid, "t": at + i})
        if finished or epoch != epochs[-1]:
            records.append({"event": "end", "epoch": epoch, "pid": pid, "t": at + i + 0.5})
            if at + i + 0.5 + lag <= taken_until:
                records.append({"event": "taken", "epoch": epoch, "t": at + i + 0.5 + lag})
    return sorted(records, key=lambda r: r["t"])


def verdicts(journal: list[dict[str, Any]], kills: list[float]) -> dict[str, bool]:
    return {v.name: v.held for v in resume_verdicts(journal, kills, epochs=6)}


ALL_HELD = {"no_epoch_lost": True, "resumed_from_latest_checkpoint": True, "no_reported_epoch_redone": True}


def test_a_restart_at_the_epoch_after_the_last_one_taken_holds() -> None:
    # Epochs 0-2 end by 2.5 s and are taken by 2.7 s; killed at 3.2 s in epoch 3; resumed at 3.
    journal = attempt(1, range(4), at=0, finished=False, taken_until=3.2) + attempt(2, range(3, 6), at=10)
    assert verdicts(journal, kills=[3.2]) == ALL_HELD


def test_a_report_not_yet_taken_at_the_kill_may_be_redone_however_long_it_waited() -> None:
    # The controller had taken only epoch 0 (its polls fell behind): epochs 1 and 2 ended 2.7 and
    # 1.7 s before the kill but were never taken. Resuming at 1 is Ray Train's guarantee (CI saw
    # it), shown only by the stricter verdict; no fixed window can tell this from a lost checkpoint.
    journal = attempt(1, range(4), at=0, finished=False, lag=0.2, taken_until=0.8) + attempt(2, range(1, 6), at=10)
    assert verdicts(journal, kills=[3.2]) == {**ALL_HELD, "no_reported_epoch_redone": False}


def test_resuming_at_or_before_a_checkpoint_the_library_had_taken_is_caught() -> None:
    # Epoch 2's checkpoint was taken at 2.7 s, before the kill at 3.2 s: resuming at 2 or 0 lost it.
    for resumed in (2, 0):
        journal = attempt(1, range(4), at=0, finished=False, taken_until=3.2) + attempt(2, range(resumed, 6), at=10)
        held = verdicts(journal, kills=[3.2])
        assert not held["resumed_from_latest_checkpoint"] and not held["no_reported_epoch_redone"], resumed


def test_a_journal_with_no_checkpoint_taken_cannot_pass_as_resumed() -> None:
    # The callback never ran (or wrote elsewhere): with epochs ended and nothing taken, the
    # resume is unjudged, and that fails closed.
    journal = [r for r in attempt(1, range(4), at=0, finished=False) + attempt(2, range(3, 6), at=10)
               if r["event"] != "taken"]
    assert not verdicts(journal, kills=[3.2])["resumed_from_latest_checkpoint"]


def test_an_epoch_taken_but_killed_before_its_end_line_is_done_not_lost() -> None:
    # Epoch 3's checkpoint was taken at 3.7 s; the kill at 3.8 s came before the worker wrote
    # "end": resuming at 4 is right, and epoch 3 is not lost.
    journal = attempt(1, range(4), at=0, taken_until=3.8)
    journal = [r for r in journal if not (r["event"] == "end" and r["epoch"] == 3)] + attempt(2, range(4, 6), at=10)
    assert verdicts(journal, kills=[3.8]) == ALL_HELD


def test_a_run_with_no_restart_has_no_resume_to_judge() -> None:
    # The fault-free twin, or a kill that never reached training: "every restart resumed from
    # the latest checkpoint" over no restart checked nothing, so it does not hold.
    assert verdicts(attempt(1, range(6), at=0), kills=[]) == {**ALL_HELD, "resumed_from_latest_checkpoint": False}


def test_trials_combine_over_what_each_saw() -> None:
    killed = resume_verdicts(attempt(1, range(4), at=0, finished=False, taken_until=3.2)
                             + attempt(2, range(3, 6), at=10), [3.2], epochs=6)
    untouched = resume_verdicts(attempt(3, range(6), at=0), [], epochs=6)
    stale = resume_verdicts(attempt(1, range(4), at=0, finished=False, taken_until=3.2)
                            + attempt(2, range(0, 6), at=10), [3.2], epochs=6)

    def held(parts: dict[str, list]) -> dict[str, bool]:
        return {v.name: v.held for v in combined(parts)}

    # A trial never killed has no restart to judge: it neither holds the verdict up nor breaks it.
    assert held({"t0": killed, "t1": untouched}) == ALL_HELD
    assert not held({"t0": stale, "t1": untouched})["resumed_from_latest_checkpoint"]
    # No trial restarted at all: nothing was judged.
    assert not held({"t0": untouched, "t1": untouched})["resumed_from_latest_checkpoint"]


def test_rllibs_nan_counts_count_as_none() -> None:
    from scenarios.workloads.apps._libraries import _count

    # RLlib reports numpy scalars: an np.int64 is no int (a first version counted them all as 0,
    # and the fault-free twin showed every iteration "sampled nothing").
    values = (3, 2.0, np.int64(1000), np.float32(2.0), np.float64("nan"), float("nan"), None, "2", float("inf"))
    assert [_count(v) for v in values] == [3, 2, 1000, 2, 0, 0, 0, 0, 0]


def test_skipping_an_epoch_or_a_restart_no_kill_explains_is_caught() -> None:
    skipped = attempt(1, range(4), at=0, finished=False, taken_until=3.2) + attempt(2, range(4, 6), at=10)
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
    journal = attempt(1, range(4), at=0, finished=False, taken_until=3.2) + attempt(2, range(3, 6), at=10)
    assert verdicts(journal, kills=[3.2, 8.0]) == ALL_HELD


def test_the_healthy_runner_count_must_come_back_within_the_bound() -> None:
    from scenarios.workloads.apps._libraries import Iteration, restored_within

    def its(*healthy: int) -> list[Iteration]:
        return [Iteration(float(t), 0.5, 20.0, 1000, h, 0) for t, h in enumerate(healthy, start=1)]

    assert restored_within(its(2, 1, 1, 2, 2), [1.5], target=2, bound=3) == []
    assert restored_within(its(2, 1, 1, 1, 2), [1.5], target=2, bound=3) == [
        "fault at 1.5 s: healthy [1, 1, 1] within 3 s (target 2)"]
    # A window the run did not see to its end is not restored: it fails, and says why.
    assert restored_within(its(2, 1, 1), [1.5], target=2, bound=3) == [
        "fault at 1.5 s: healthy [1, 1] within 3 s (target 2); the run ended 1.5 s after it"]
    # An iteration begun before a kill may count the dead runner: a kill RLlib never
    # showed is not restored. A pause may go unnoticed.
    assert restored_within(its(2, 2, 2, 2, 2), [1.5], target=2, bound=3) == [
        "fault at 1.5 s: healthy [2, 2, 2] within 3 s (target 2); RLlib never showed a runner missing"]
    assert restored_within(its(2, 2, 2, 2), [1.5], target=2, bound=3, must_dip=False) == []


def test_rllib_trains_until_the_return_is_reached_the_faults_played_out_and_both_runners_back() -> None:
    from chaos import FaultKind
    from scenarios.model._workload import Params, RunContext
    from scenarios.workloads.apps._libraries import Iteration, RllibPPO

    ppo = RllibPPO(RunContext(address="", namespace="t", seed=0, params=Params(), storage="", duration=90,
                              faults=True))
    ppo.target, ppo.bound, ppo.iterations = 150.0, 30.0, [Iteration(1.0, 0.5, 160.0, 1000, 2, 0)]
    down = Iteration(2.0, 0.5, 160.0, 1000, 1, 1)
    assert not ppo._finished(ppo.iterations[-1])  # a fault still to come
    ppo.ctx.faults_settled.set()
    assert ppo._finished(ppo.iterations[-1]) and not ppo._finished(down)
    ppo.iterations = [Iteration(1.0, 0.5, 140.0, 1000, 2, 0)]
    assert not ppo._finished(ppo.iterations[-1])  # the return not reached
    ppo.ctx.injected_fault(FaultKind.KILL)  # a kill at ~0 s, after which RLlib still shows 2
    ppo.iterations = [Iteration(1.0, 0.5, 160.0, 1000, 2, 0)]
    assert not ppo._finished(ppo.iterations[-1])
    ppo.iterations += [down, Iteration(3.0, 0.5, 160.0, 1000, 2, 1)]
    assert ppo._finished(ppo.iterations[-1])


def test_an_iteration_that_samples_nothing_with_every_runner_healthy_is_silent() -> None:
    from scenarios.workloads.apps._libraries import Iteration, silent_drops

    reported = Iteration(1.0, 0.5, float("nan"), 0, 1, 0)  # a runner down: RLlib said so
    silent = Iteration(2.0, 0.5, float("nan"), 0, 2, 0)
    assert silent_drops([reported], target=2) == [] and silent_drops([reported, silent], target=2) == [
        "iteration at 2.0 s"]


def test_recovery_is_timed_from_the_fault_to_both_runners_healthy_after_a_dip() -> None:
    from scenarios.workloads.apps._libraries import Iteration, recovery_times

    its = [Iteration(float(t), 0.5, 20.0, 1000, h, 0) for t, h in enumerate([2, 2, 1, 1, 2, 2], start=1)]
    assert recovery_times(its, [1.5, 5.5], target=2) == [3.5, None]  # the second: no dip seen
