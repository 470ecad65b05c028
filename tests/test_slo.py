"""An attack's load judged against its objectives, without Ray: the steady state before the
first fault, each fault's window, the recovery after it; each verdict red on a planted
history, unknown where the evidence is missing, and the stop condition's measure."""

from __future__ import annotations

from dataclasses import replace

import pytest

from scenarios.model._records import Validity
from scenarios.workloads.serve._load import Failure, Request
from scenarios.workloads.user._slo import (
    MIN_STEADY,
    Objective,
    breached_for,
    fault_windows,
    slo_verdicts,
    steady_state,
)

SLO = Objective(availability=0.9, p99_factor=3.0, p99_slack=0.0, recover_within=3.0, window=2.0, timeout=1.0)


def history(*, seconds: float = 20.0, rate: int = 20, down: tuple[float, float] = (10.0, 11.0),
            slow: tuple[float, float] = (0.0, 0.0), latency: float = 0.01) -> list[Request]:
    """``rate`` requests a second: failing (refused) in ``down``, at 0.5 s in ``slow``, else ``latency``."""
    out = []
    for n in range(int(seconds * rate)):
        t = n / rate
        if down[0] <= t < down[1]:
            out.append(Request(t, 0.001, failure=Failure.REFUSED))
        else:
            out.append(Request(t, 0.5 if slow[0] <= t < slow[1] else latency, status=200))
    return out


def judged(requests: list[Request], faults: list[tuple[str, float, float]]) -> dict[str, Validity]:
    windows = fault_windows(faults, at_least=SLO.window)
    steady = steady_state(requests, before=min((f[1] for f in faults), default=20.0), timeout=SLO.timeout)
    return {v.name: v.validity for v in slo_verdicts(requests, windows, steady, SLO)}


HELD = {"slo_steady_state": Validity.HELD, "slo_availability": Validity.HELD, "slo_latency": Validity.HELD,
        "slo_recovered": Validity.HELD}


def test_a_service_that_dips_within_its_objective_holds_every_verdict() -> None:
    # 1 s of 20 refused out of a 2 s window at 20/s is 50 % down: the objective allows 10 %.
    assert judged(history(down=(10.0, 10.1)), [("kill@10.0s", 10.0, 10.0)]) == HELD


@pytest.mark.parametrize(("plant", "faults", "broken"), [
    ({"down": (10.0, 11.0)}, [("kill@10.0s", 10.0, 10.0)], "slo_availability"),  # half a window unanswered
    ({"down": (0.0, 0.0), "slow": (10.0, 11.0)}, [("pause@10.0s", 10.0, 11.0)], "slo_latency"),
    ({"down": (10.0, 16.0)}, [("kill@10.0s", 10.0, 10.0)], "slo_recovered"),  # back 4 s after its window
    ({"down": (2.0, 4.0)}, [("kill@5.0s", 5.0, 5.0)], "slo_steady_state"),  # down before any fault
])
def test_each_verdict_is_red_on_its_plant(plant: dict[str, tuple[float, float]], faults: list[tuple[str, float, float]],
                                          broken: str) -> None:
    found = judged(history(**plant), faults)  # type: ignore[arg-type]
    assert found[broken] is Validity.BROKEN, found


def test_missing_evidence_is_unknown_never_held() -> None:
    few = history(rate=2)  # 2/s: 10 requests before a fault at 5 s, fewer than MIN_STEADY
    found = judged(few, [("kill@5.0s", 5.0, 5.0)])
    assert MIN_STEADY > 5 * 2 and found["slo_steady_state"] is Validity.UNKNOWN
    assert found["slo_latency"] is Validity.UNKNOWN
    quiet = [r for r in history() if not 10.0 <= r.sent < 12.0]  # nothing sent in the fault's window
    assert judged(quiet, [("kill@10.0s", 10.0, 10.0)])["slo_availability"] is Validity.UNKNOWN
    none = judged(history(), [])  # no fault happened: nothing to judge the faults by
    assert none["slo_availability"] is Validity.UNKNOWN and none["slo_recovered"] is Validity.UNKNOWN


def test_a_slow_wrong_body_is_no_answer() -> None:
    wrong = [replace(r, failure=Failure.WRONG_BODY) if 10.0 <= r.sent < 12.0 else r for r in history(down=(0, 0))]
    assert judged(wrong, [("kill@10.0s", 10.0, 10.0)])["slo_availability"] is Validity.BROKEN


def test_the_stop_condition_counts_whole_seconds_below_the_objective_without_a_break() -> None:
    requests = history(down=(10.0, 14.0))
    assert breached_for(requests, now=12.0 + SLO.timeout, slo=SLO) == 2.0  # 10-11 and 11-12 complete, both down
    assert breached_for(requests, now=16.0 + SLO.timeout, slo=SLO) == 0.0  # 15-16 answered: the streak ended
    assert breached_for(requests, now=9.0 + SLO.timeout, slo=SLO) == 0.0
