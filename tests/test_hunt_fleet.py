"""Hunt clusters side by side (``scenarios.hunt._fleet``): bad requests are refused before any
process starts; a hunter that cannot start its cluster fails the run with its own traceback;
two hunters share the programs given, each run once."""

from __future__ import annotations

import pytest

from scenarios.hunt import Actor, Call, Fault, FaultKind, Program, Put, Task
from scenarios.hunt._fleet import HunterFailed, HuntSetup, SideBySide, program_from


@pytest.mark.parametrize(("clusters", "minutes", "programs", "says"), [
    (0, 1.0, (), "clusters must be a whole number >= 1, got 0"),
    (True, 1.0, (), "clusters must be a whole number >= 1, got True"),
    (2, 0.0, (), "give minutes > 0 or programs, one of them: got minutes=0.0 and 0 programs"),
    (2, 1.0, ("Program(())",), "give minutes > 0 or programs, one of them: got minutes=1.0 and 1 programs"),
])
def test_a_bad_request_is_refused_before_any_hunter_starts(clusters: int, minutes: float, programs: tuple[str, ...],
                                                           says: str) -> None:
    with pytest.raises(ValueError, match=says.replace("(", r"\(").replace(")", r"\)")):
        SideBySide(clusters, minutes=minutes, programs=programs)


def test_a_program_comes_back_from_its_repr() -> None:
    program = Program((Put(1, size=200 * 1024), Task(2, max_retries=1), Actor(3, max_restarts=-1), Call(2, 4)),
                      (Fault(FaultKind.KILL_ACTOR, 3, 3),))
    assert program_from(repr(program)) == program


def test_a_hunter_whose_cluster_cannot_start_fails_the_run_with_its_traceback() -> None:
    side = SideBySide(1, setup=HuntSetup(store_mb=10), programs=[repr(Program((Put(1),)))])
    with pytest.raises(HunterFailed, match=r"(?s)a hunter crashed:.*InvalidConfig.*object_store_mb.*got 10"):
        side.__enter__()
    assert [process.exitcode for process, _ in side.hunters] == [0]  # it said why, and ended


@pytest.mark.ray
@pytest.mark.slow
def test_two_hunters_share_the_programs_given_each_run_once(no_shared_cluster: None) -> None:
    programs = [Program((Put(i), Task(i, max_retries=1)), (Fault(FaultKind.KILL_WORKER, 1, 1),)) for i in range(4)]
    bare = HuntSetup(gcs_restart=False, rpc_failures=False, rpc_delay=False)  # a head and a removable node
    with SideBySide(2, setup=bare, programs=[repr(p) for p in programs]) as side:
        verdicts = list(side.verdicts())
    assert sorted(repr(v.program) for v in verdicts) == sorted(repr(p) for p in programs)
    assert all(v.ok and [f.kind for f in v.landed] == [FaultKind.KILL_WORKER] for v in verdicts), \
        [v.report() for v in verdicts if not v.ok]
    assert side.seconds > 0 and sum(side.ran_by) == 4 and min(side.ran_by) >= 1, side.ran_by
    assert [process.exitcode for process, _ in side.hunters] == [0, 0]  # each stopped its cluster and ended
