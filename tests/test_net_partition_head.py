"""The partition-head scenario: every worker node cut from the head for shorter, then for longer,
than Ray's health check.

Ray-free: each verdict function fed fabricated observations (cut windows, node deaths, calls,
head tasks, the nodes' states, the writers' logs) holds on a good run's and turns red on each
planted bad one; the cut read-back parses what nft prints. With Ray (slow tier, root): the
scenario on the runner's own network cluster, and its fault-free twin, which misses every
trace of the cuts.
"""

from __future__ import annotations

import pytest

from chaos.history import Op, OpStatus, check_set
from scenarios.model._records import RunLabel, Verdict
from scenarios.workloads.net._partition_head import (
    Call,
    CallOutcome,
    CutWindow,
    HeadTask,
    actors_answer_after,
    cut_from_head,
    cut_windows,
    head_kept_serving,
    long_cut_declared,
    no_call_hung,
    no_rejoin,
    no_superseded_write,
    nothing_acknowledged_lost,
    short_cut_tolerated,
)
from scenarios.workloads.net._partition_worker import LogLine

HEAD, A, B = "head" + "0" * 52, "a" * 56, "b" * 56
BOUND = 9.0  # the runner's health check: 3 x (1 + 2) s
#: A good run's cuts: 2 s from 1 s, 12 s from 6 s, both of every worker.
SHORT, LONG = CutWindow(1.0, 3.0, frozenset({A, B})), CutWindow(6.0, 18.0, frozenset({A, B}))
CUTS = [SHORT, LONG]
DEATHS = {A: 14.5, B: 14.8}  # 8.5 and 8.8 s into the long cut
ALIVE_AT_END = {HEAD: "ALIVE", A: "DEAD", B: "DEAD"}


WORKERS = frozenset({A, B})  # the worker nodes the workload knows: every cut must cut them all


def _call(at: float, ended: float | None, *, actor: str = "w0", node: str = A,
          outcome: CallOutcome = CallOutcome.OK, pid: int = 100) -> Call:
    return Call(actor, int(at * 10), at, ended, outcome, node, pid)


#: Calls made before, during and after each cut, answered as a good run's were.
GOOD_CALLS = [_call(0.5, 0.51), _call(1.5, 4.0), _call(2.5, 4.1), _call(4.0, 4.01),
              _call(7.0, 15.5, node=HEAD), _call(16.0, 16.01, node=HEAD),
              _call(18.5, 18.51, node=HEAD), _call(18.5, 18.51, actor="w1", node=HEAD)]
GOOD_TASKS = [HeadTask(t / 2, 0.02, CallOutcome.OK) for t in range(40)]


def _judge(*, windows: list[CutWindow] = CUTS, deaths: dict[str, float] = DEATHS,
           calls: list[Call] = GOOD_CALLS) -> dict[str, bool]:
    return {"short": short_cut_tolerated(windows, deaths, calls, workers=WORKERS, bound=BOUND, settle=5.0,
                                         now=20.0).held,
            "long": long_cut_declared(windows, deaths, workers=WORKERS, bound=BOUND, within=15.0, now=20.0).held,
            "after": actors_answer_after(calls, windows, ALIVE_AT_END, actors=["w0", "w1"], bound=BOUND,
                                         now=20.0).held}


# -- the cuts, read back --------------------------------------------------------------------------

RULES = """table inet rc-3e1a-f1 {
\tchain output {
\t\ttype filter hook output priority filter; policy accept;
\t\tip daddr 10.245.165.1 counter packets 4 bytes 240 drop
\t}
}
table inet rc-3e1a-f2 {
\tchain output {
\t\ttype filter hook output priority filter; policy accept;
\t\tip daddr { 10.245.165.1, 10.245.165.12 } numgen random mod 10000 < 3000 counter packets 4 bytes 9 drop
\t}
}
"""


def test_a_drop_rule_naming_the_head_is_a_cut_and_a_random_drop_or_another_address_is_not() -> None:
    assert cut_from_head(RULES, "10.245.165.1")
    assert not cut_from_head(RULES.split("table inet rc-3e1a-f2")[1], "10.245.165.1")  # a loss only
    assert not cut_from_head(RULES, "10.245.165.11")  # 10.245.165.1 is not .11
    assert cut_from_head("ip saddr { 10.2.3.11, 10.2.3.1 } counter packets 0 bytes 0 drop", "10.2.3.1")
    assert not cut_from_head("", "10.2.3.1")


def test_reads_make_windows_from_the_first_cut_read_to_the_first_uncut_one() -> None:
    none: frozenset[str] = frozenset()
    reads = [(0.0, none), (1.1, frozenset({A})), (1.3, frozenset({A, B})), (3.1, none), (6.0, frozenset({B}))]
    assert cut_windows(reads) == [CutWindow(1.1, 3.1, frozenset({A, B})), CutWindow(6.0, None, frozenset({B}))]
    assert cut_windows([(0.0, none), (1.0, none)]) == []


# -- the verdicts: held on a good run's observations, red on each planted bad one ----------------


def test_a_good_runs_observations_hold_every_verdict_about_the_cuts() -> None:
    assert _judge() == {"short": True, "long": True, "after": True}


def test_short_cut_tolerated_is_red_for_a_death_a_late_or_failed_call_or_no_short_cut() -> None:
    assert not _judge(deaths={**DEATHS, A: 4.5})["short"]  # declared dead for the short cut
    late = [*GOOD_CALLS, _call(2.0, 8.5)]  # answered 5.5 s after the heal
    assert not _judge(calls=late)["short"]
    failed = [*GOOD_CALLS, _call(2.0, 3.5, outcome=CallOutcome.FAILED)]
    assert not _judge(calls=failed)["short"]
    assert not _judge(calls=[*GOOD_CALLS, _call(2.0, None, outcome=CallOutcome.PENDING)])["short"]
    assert not _judge(windows=[LONG])["short"]
    idle = short_cut_tolerated(CUTS, DEATHS, [c for c in GOOD_CALLS if not SHORT.covers(c.at)], workers=WORKERS,
                               bound=BOUND, settle=5.0, now=20.0)
    assert not idle.held and "nothing to check" in idle.detail  # no call met the short cut


def test_short_cut_tolerated_is_red_for_a_call_answered_by_a_new_process_or_from_an_uncut_node() -> None:
    # Each in time (2.5 s after a heal at 3 s), as a good run's calls are; only where differs.
    for moved in (_call(2.0, 3.5, pid=200), _call(2.0, 3.5, node=HEAD), _call(2.0, 3.5, node=HEAD, pid=200)):
        red = short_cut_tolerated(CUTS, DEATHS, [*GOOD_CALLS, moved], workers=WORKERS, bound=BOUND, settle=5.0,
                                  now=20.0)
        assert not red.held and "pre-cut process on a cut node: 1 (first: w0" in red.detail, moved
    # A writer never answered before the cut: nothing says its answer came from where it was.
    unknown = [*GOOD_CALLS, _call(2.0, 3.5, actor="w1", node=B)]
    assert not _judge(calls=unknown)["short"]
    before = [*GOOD_CALLS, _call(0.6, 0.61, actor="w1", node=B, pid=300),
              _call(2.0, 3.5, actor="w1", node=B, pid=300)]
    assert _judge(calls=before)["short"]


def test_the_cut_verdicts_are_red_when_a_worker_node_was_not_cut() -> None:
    one = [CutWindow(1.0, 3.0, frozenset({A})), CutWindow(6.0, 18.0, frozenset({A}))]
    short = short_cut_tolerated(one, {A: 14.5}, GOOD_CALLS, workers=WORKERS, bound=BOUND, settle=5.0, now=20.0)
    long = long_cut_declared(one, {A: 14.5}, workers=WORKERS, bound=BOUND, within=15.0, now=20.0)
    for red in (short, long):
        assert not red.held and f"worker nodes not cut: {B[:12]}" in red.detail, red
    # Only the short cut, or only the long one, spared a worker.
    assert _judge(windows=[one[0], LONG]) == {"short": False, "long": True, "after": True}
    assert _judge(windows=[SHORT, one[1]], deaths={A: 14.5})["long"] is False
    c = "c" * 56  # a third worker no cut touched
    third = long_cut_declared(CUTS, DEATHS, workers=WORKERS | {c}, bound=BOUND, within=15.0, now=20.0)
    assert not third.held and f"worker nodes not cut: {c[:12]}" in third.detail


def test_a_death_of_the_long_cut_is_not_blamed_on_the_short_one() -> None:
    # 11 s is within the health check's 9 s of the short cut's heal, but after the long cut began.
    assert _judge(deaths={A: 11.0, B: 11.5}) == {"short": True, "long": True, "after": True}
    assert not _judge(windows=[SHORT, CutWindow(12.0, 24.0, frozenset({A, B}))], deaths={A: 11.0, B: 11.5})["short"]


def test_long_cut_declared_is_red_for_a_node_never_or_late_or_early_declared_dead_or_no_long_cut() -> None:
    assert not _judge(deaths={A: 14.5})["long"]  # B never
    assert not _judge(deaths={A: 14.5, B: 21.5})["long"]  # 15.5 s: past the bound
    assert not _judge(deaths={A: 5.0, B: 14.8})["long"]  # dead before the cut: not its detection
    assert not _judge(windows=[SHORT])["long"]


def test_head_kept_serving_is_red_for_a_slow_or_failed_task_or_a_cut_without_tasks() -> None:
    assert head_kept_serving(GOOD_TASKS, CUTS, within=2.0).held
    for bad in (HeadTask(7.0, 2.5, CallOutcome.OK), HeadTask(7.0, None, CallOutcome.FAILED, "RayTaskError"),
                HeadTask(7.0, None, CallOutcome.PENDING, "GetTimeoutError")):
        assert not head_kept_serving([*GOOD_TASKS, bad], CUTS, within=2.0).held, bad
    outside = [t for t in GOOD_TASKS if not LONG.covers(t.at)]
    red = head_kept_serving(outside, CUTS, within=2.0)
    assert not red.held and "submitted during each cut: [4, 0]" in red.detail
    assert not head_kept_serving([], [], within=2.0).held


def test_actors_answer_after_is_red_for_a_silent_writer_or_one_answering_from_a_cut_node() -> None:
    silent = [c for c in GOOD_CALLS if c.actor != "w1"]
    assert not _judge(calls=silent)["after"]
    stranded = [*GOOD_CALLS, _call(19.0, 19.01, actor="w1", node=B)]  # the old node answered
    assert not _judge(calls=stranded)["after"]
    assert not _judge(windows=[SHORT])["after"]
    # A cut node the GCS holds alive (never declared dead, or back) is still not where to answer from.
    rejoined = actors_answer_after(stranded, CUTS, {**ALIVE_AT_END, B: "ALIVE"}, actors=["w0", "w1"],
                                   bound=BOUND, now=20.0)
    assert not rejoined.held and "w1" in rejoined.detail.rsplit(":", 1)[1]
    unhealed = [SHORT, CutWindow(6.0, None, frozenset({A, B}))]
    assert not _judge(windows=unhealed)["after"]


def test_no_rejoin_is_red_for_a_dead_node_alive_again_or_no_death() -> None:
    assert no_rejoin(DEATHS, ALIVE_AT_END).held
    assert not no_rejoin(DEATHS, {**ALIVE_AT_END, B: "ALIVE"}).held
    assert not no_rejoin({}, ALIVE_AT_END).held  # the fault-free twin: nothing declared dead


def _op(seq: int, status: OpStatus = OpStatus.OK) -> Op:
    return Op(("w0", seq), "driver", float(seq), float(seq) + 0.1, status)


def test_nothing_acknowledged_lost_is_red_for_a_lost_or_unexpected_write_not_a_duplicate() -> None:
    ops = [_op(0), _op(1), _op(2, OpStatus.INFO)]
    stored = [("w0", 0), ("w0", 1), ("w0", 1)]  # a retried call ran twice: at least once, as documented
    assert nothing_acknowledged_lost({"w0": check_set(ops, stored)}).held
    assert not nothing_acknowledged_lost({"w0": check_set(ops, [("w0", 0)])}).held
    assert not nothing_acknowledged_lost({"w0": check_set(ops, [*stored, ("w0", 9)])}).held


def test_no_call_hung_is_red_for_an_unanswered_or_too_slow_call_or_task() -> None:
    assert no_call_hung(GOOD_CALLS, GOOD_TASKS, within=20.0).held
    assert not no_call_hung([*GOOD_CALLS, _call(7.0, None, outcome=CallOutcome.PENDING)], GOOD_TASKS,
                            within=20.0).held
    assert not no_call_hung([*GOOD_CALLS, _call(7.0, 28.0)], GOOD_TASKS, within=20.0).held
    assert not no_call_hung(GOOD_CALLS, [*GOOD_TASKS, HeadTask(3.0, None, CallOutcome.PENDING)], within=20.0).held


def test_no_superseded_write_is_red_for_a_write_of_the_old_incarnation_after_the_new_started() -> None:
    log = [LogLine("start", 1, -1, 0.0), LogLine("write", 1, 0, 1.0), LogLine("start", 2, -1, 15.0),
           LogLine("write", 2, 1, 15.5)]
    assert no_superseded_write({"w0": log}).held
    red = no_superseded_write({"w0": [*log, LogLine("write", 1, 0, 18.4)]})
    assert not red.held and "pid 1" in red.detail
    assert not no_superseded_write({"w0": log[:2]}).held  # no restart: nothing was judged


# -- with Ray: the scenario and its fault-free twin ---------------------------------------------


def _network_missing() -> list[str]:
    from chaos.net._lab import network_missing

    return network_missing()


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.usefixtures("no_shared_cluster")
@pytest.mark.skipif(bool(_network_missing()), reason="the network lab needs root, nft, ip and tc")
@pytest.mark.deep  # CI's budget: make slow partitions a worker (partition-worker) beside its twin
def test_partition_head_holds_its_invariants_and_its_twin_misses_the_cuts() -> None:
    from scenarios import run_scenario
    from scenarios.model._scenario import load_scenario

    scenario = load_scenario("partition-head")
    runs = {run.label: run for run in run_scenario(scenario, baseline=True)}
    verdicts: dict[str, Verdict] = {v.name: v for v in runs[RunLabel.CHAOS].verdicts}
    twin: dict[str, Verdict] = {v.name: v for v in runs[RunLabel.BASELINE].verdicts}
    assert all(v.held for v in verdicts.values()), verdicts
    # The fault-free twin, on a cluster of its own: every trace of the cuts is missing ...
    for name in ("short_cut_tolerated", "long_cut_declared", "actors_answer_after", "no_rejoin"):
        assert not twin[name].held, twin[name]
    # ... and what does not need a cut holds there too.
    for name in ("head_kept_serving", "nothing_acknowledged_lost", "no_call_hung"):
        assert twin[name].held, twin[name]
