"""The built-in workloads' verdicts require their evidence, Ray-free: each check below is shown
false on the case it exists for, with the numbers a real run reports."""

from __future__ import annotations

from scenarios._workloads import blocked_verdict, loop_bound


def test_the_loop_bound_follows_the_wait_timeout() -> None:
    assert loop_bound(0.5) == 1.0 and loop_bound(0.3, 0.2) == 0.5


def test_a_loop_blocked_through_a_whole_pause_is_blocked() -> None:
    # straggler's numbers: ray.wait timeout 0.5 s, a task paused 4 s, the loop waiting on it.
    verdict = blocked_verdict(20, 4.5, 0.5, None)
    assert not verdict.held and "4.50 s, bound 1 s" in verdict.detail, verdict
    assert blocked_verdict(20, 0.9, 0.5, None).held  # a slow turn, not a block


def test_no_turn_is_no_verdict() -> None:
    verdict = blocked_verdict(0, 0.0, 0.5, None)
    assert not verdict.held and verdict.seen == 0, verdict

