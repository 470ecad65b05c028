"""The pytest plugin, tested from the outside in subprocesses (as pytest tests its own)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from chaos import wait_until
from chaos._marker import MARKER_HELP, NO_FAULT_NO_FIXTURE, NO_FAULT_RAN
from conftest import default_sigint

pytest_plugins = ["pytester"]


def test_markers_are_listed(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--markers")
    result.stdout.fnmatch_lines([
        "@pytest.mark.multinode: the test needs the 3-node cluster*",
        "@pytest.mark.ray: the test starts real Ray processes*",
        "@pytest.mark.chaos(seed=None, faults=(), menu=(), rate=0.5, duration=5.0, strict=True): *",
    ])


# -- a guest: tests that do not use raychaos are left alone ------------------------------------

COUNTING = """
    from hypothesis import given, settings, strategies as st
    CALLS = []

    @given(st.integers())
    def test_unrelated(x):
        CALLS.append(x)

    def test_report():
        print("EXAMPLES", len(CALLS), "PROFILE", settings.get_current_profile_name())
"""


@pytest.mark.parametrize("ci", [False, True])
def test_an_unrelated_given_test_still_runs_100_examples(pytester: pytest.Pytester,
                                                         monkeypatch: pytest.MonkeyPatch, ci: bool) -> None:
    # raychaos is installed (its plugin loads: see the header), yet Hypothesis's own default
    # and its own `ci` profile (loaded by Hypothesis when CI is set) are untouched.
    monkeypatch.delenv("CI", raising=False)
    if ci:
        monkeypatch.setenv("CI", "true")
    pytester.makepyfile(COUNTING)
    result = pytester.runpytest_subprocess("-s")
    profile = "ci" if ci else "default"
    result.stdout.fnmatch_lines(["raychaos: machine profile 'ci'*", f"*EXAMPLES 100 PROFILE {profile}*",
                                 "*2 passed*"])


def test_the_thorough_profile_is_loaded_only_when_asked(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        from hypothesis import settings
        def test_profile():
            print("PROFILE", settings.get_current_profile_name(), settings.default.max_examples,
                  settings.default.stateful_step_count)
    """)
    result = pytester.runpytest_subprocess("-s", "--hypothesis-profile=thorough")
    result.stdout.fnmatch_lines(["*PROFILE thorough 1000 500*", "*1 passed*"])


# -- the Ray harness --------------------------------------------------------------------------


def _new_ray_processes(before: set[int]) -> list[psutil.Process]:
    from chaos.cluster import ray_processes

    return [p for p in ray_processes() if p.pid not in before]


@pytest.mark.slow  # make test's budget on a slower day (the scenario's Ctrl-C test is slow too)
def test_ctrl_c_tears_the_cluster_down(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    test_file = tmp_path / "test_hang.py"
    test_file.write_text(f"""
import pathlib, time
def test_hang(ray_cluster):
    pathlib.Path({str(ready)!r}).write_text("up")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # stands in for a long test; SIGINT ends it
        time.sleep(0.1)
""")
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(test_file)],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=default_sigint)
    try:
        wait_until(ready.exists, timeout=90, what="the child's cluster to come up")
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children, "the child pytest started no Ray processes"
        os.kill(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    assert b"KeyboardInterrupt" in out
    _, alive = psutil.wait_procs(children, timeout=15)
    assert not alive, f"left running after Ctrl-C: {[p.pid for p in alive]}"


LOST_HEAD = """
import os, signal, ray
from chaos import wait_until
from chaos.cluster._cluster import head_down, head_of

@ray.remote
def one():
    return 1

def test_kills_the_gcs(ray_cluster):
    os.kill(head_of(ray_cluster.address).gcs_pid(), signal.SIGKILL)
    wait_until(lambda: head_down(ray_cluster.address), timeout=10, what="the GCS's exit to be seen")

def test_not_ray_at_all():
    pass

def test_kills_it_for_good_with_chaos(ray_cluster):
    from chaos import Chaos, KillGcs
    with Chaos(address=ray_cluster.address).inject(KillGcs(restart=False)):
        pass

def test_a_later_test_gets_a_cluster(ray_cluster):
    assert ray.get(one.remote(), timeout=60) == 1
"""


@pytest.mark.slow  # three clusters started in a child pytest (~60 s)
def test_a_test_during_which_the_shared_clusters_gcs_died_fails_naming_it(pytester: pytest.Pytester) -> None:
    """Unnamed, the GCS's loss ends the driver 60 s later (exit code 1, mid-way through some
    other test, nothing printed): the test it died in errors at teardown, naming what exited
    (or that a KillGcs without restart took it) and the head's last severe log lines, and the
    next test gets a fresh cluster."""
    pytester.makepyfile(test_lost_head=LOST_HEAD)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", timeout=240)
    result.assert_outcomes(passed=4, errors=2)
    result.stdout.fnmatch_lines(["*ERROR at teardown of test_kills_the_gcs*",
                                 "*the shared Ray cluster's head died during this test: gcs_server pid * "
                                 "exited with code -9*",
                                 "*ERROR at teardown of test_kills_it_for_good_with_chaos*",
                                 "*head died during this test: gcs_server was killed and not started again*"])


# -- the chaos fixture and marker: fail closed --------------------------------------------------

EXAMPLE = MARKER_HELP.split("Example: ", 1)[1]

CHAOS_TESTS = f"""
import os, time, ray, pytest
from chaos import ActorTarget, Kill, Pause, wait_until

@ray.remote(max_restarts=-1, max_task_retries=-1)
class Victim:
    def pid(self):
        return os.getpid()

def start(name):
    actor = Victim.options(name=name).remote()
    return actor, ray.get(actor.pid.remote(), timeout=30)

def killed(actor, first):
    wait_until(lambda: ray.get(actor.pid.remote(), timeout=30) != first, timeout=30,
               what="the scheduled kill and the restart")

def name_free(name):
    try:
        ray.get_actor(name)
    except ValueError:
        return True
    return False

@pytest.fixture
def victim(chaos):  # set up after `chaos`: a fault at 0 s must wait for the test body
    actor, pid = start("victim")
    yield actor, pid
    ray.kill(actor)
    wait_until(lambda: name_free("victim"), timeout=30, what="the name to be free for the next test")

{EXAMPLE}
def test_the_markers_help_example(victim, chaos):
    killed(*victim)

@pytest.mark.chaos(faults=[(0.0, Kill(ActorTarget(name="victim")))])
def test_at_counts_from_the_body(victim, chaos):
    killed(*victim)
    assert [e.kind for e in chaos.journal.events][:2] == ["start", "inject"]

@pytest.mark.chaos(faults=[(0.1, Kill(ActorTarget(name="victiim")))])
def test_misspelled_target(victim, chaos):
    time.sleep(1.0)  # the body outlasts the fault's time

@pytest.mark.chaos(seed=7, faults=('kill',))
def test_invalid_fault(chaos):
    pass

@pytest.mark.chaos(faults=[(30.0, Kill(ActorTarget(name="victim")))])
def test_fault_after_the_end(victim, chaos):
    pass

@pytest.mark.chaos(faults=[(30.0, Kill(ActorTarget(name="victim")))], strict=False)
def test_best_effort_in_words(victim, chaos):
    pass

@pytest.mark.chaos(faults=[(0.0, Kill(ActorTarget(name="victim")))])
def test_marker_without_the_fixture():
    pass

@pytest.mark.chaos(seed=2, menu=[Kill(ActorTarget(name="victim"))])
def test_a_menu_that_drew_nothing(chaos):
    pass

@pytest.mark.chaos(seed=2, menu=[Kill(ActorTarget(name="victim"))], strict=False)
def test_nothing_drawn_accepted_in_words(chaos):
    pass

def test_the_cluster_has_an_explicit_address(ray_cluster):
    from ray.util.state import list_nodes

    assert ray.get_runtime_context().gcs_address == ray_cluster.address
    assert len(list_nodes(address=ray_cluster.address)) == 1

def test_the_seed_comes_from_the_option(chaos):
    assert chaos.seed == 5

@pytest.mark.chaos(seed=11)
def test_the_markers_seed_wins(chaos):  # a marker that only seeds the faults of the body
    assert chaos.seed == 11
    actor, _ = start("seeded")
    chaos.kill(Kill(ActorTarget.of(actor)))
    ray.kill(actor)

@pytest.mark.chaos()
def test_an_empty_marker(chaos):
    pass

@pytest.mark.chaos(seed=3)
def test_an_empty_marker_without_the_fixture():
    pass

@pytest.mark.chaos(strict=False)
def test_no_fault_accepted_in_words(chaos):
    pass

def test_a_failure_prints_the_journal(chaos):
    actor, _ = start("printed")
    chaos.kill(Kill(ActorTarget.of(actor)))
    assert False, "deliberate"
"""


@pytest.mark.slow  # make test's budget: 36 s of inner runs on a slow day (CI runs it in make slow)
def test_the_chaos_marker_fails_closed(pytester: pytest.Pytester) -> None:
    """One child session (one cluster) for all the marker's cases; it leaves no Ray process."""
    pytester.makepyfile(test_chaos_marker=CHAOS_TESTS)
    before = {p.pid for p in psutil.process_iter()}
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--chaos-seed=5", "-rA", "-v",
                                           "--junitxml=junit.xml")
    assert not _new_ray_processes(before)
    out = result.stdout.str()
    # The short summary's lines (-rA): "PASSED file::test" (-v prints others that start alike).
    states = {m["name"]: m["state"] for m in re.finditer(r"^(?P<state>PASSED|FAILED) (?P<name>\S+::\S+)", out, re.M)}
    assert {k.split("::")[1]: v for k, v in states.items()} == {
        "test_the_markers_help_example": "PASSED", "test_at_counts_from_the_body": "PASSED",
        "test_misspelled_target": "FAILED", "test_invalid_fault": "FAILED",
        "test_fault_after_the_end": "FAILED", "test_best_effort_in_words": "PASSED",
        "test_marker_without_the_fixture": "FAILED", "test_a_menu_that_drew_nothing": "FAILED",
        "test_nothing_drawn_accepted_in_words": "PASSED", "test_the_cluster_has_an_explicit_address": "PASSED",
        "test_the_seed_comes_from_the_option": "PASSED", "test_the_markers_seed_wins": "PASSED",
        "test_an_empty_marker": "FAILED", "test_an_empty_marker_without_the_fixture": "FAILED",
        "test_no_fault_accepted_in_words": "PASSED",
        "test_a_failure_prints_the_journal": "FAILED"}, out[-6000:]
    for expected in [
        "1 of 1 scheduled faults did not happen in this test:",
        "faults[0] kill of actor /victiim at 0.1 s: not_found: TargetNotFound: no live process matches",
        "raychaos usage error: chaos marker faults[0] = 'kill' is not a fault: give a fault record",
        "faults[0] kill of actor /victim at 30 s: not_reached: the run stopped",
        "raychaos usage error: the test has @pytest.mark.chaos faults but does not use the `chaos` fixture",
        "raychaos: @pytest.mark.chaos drew no fault from its menu with seed 2 (at 0.5 faults/s over 5 s a "
        "draw is empty 8.2% of the time)",
        "replay this test with: pytest 'test_chaos_marker.py::test_misspelled_target' --chaos-seed=5",
        f"raychaos: {NO_FAULT_RAN}", f"raychaos usage error: {NO_FAULT_NO_FIXTURE}",
        # a passing test shows its faults too: the summary, each test's (-v), and JUnit's property
        "raychaos: 11 chaos test(s), 5 scheduled fault(s), 2 injected and confirmed",
        "  test_chaos_marker.py::test_the_markers_help_example: faults[0] kill of actor /victim at 0.5 s: "
        "injected, confirmed at ",
    ]:
        assert expected in out, expected
    junit = (pytester.path / "junit.xml").read_text(encoding="utf-8")
    assert '<property name="raychaos_faults" value="faults[0] kill of actor /victim at 0.5 s: injected' in junit
    result.stdout.fnmatch_lines([  # a failing test's journal: start, the kill confirmed, heal, end
        "*raychaos journal*",
        "chaos seed 5; replay this test with: pytest "
        "'test_chaos_marker.py::test_a_failure_prints_the_journal' --chaos-seed=5",
        "4 events (Schedule.from_journal rebuilds the schedule):",
        '*"kind": "start"*',
        '*"kind": "inject"*"outcome": "SIGKILL sent; process gone after *',
    ])


SEEDED = """
import json, os, ray, pytest
from chaos import ActorTarget, Pause, wait_until

@ray.remote
class Flock:
    def ping(self):
        return 1

@pytest.fixture
def flock(ray_cluster):
    actors = [Flock.options(name=f"flock-{i}").remote() for i in range(4)]
    ray.get([a.ping.remote() for a in actors], timeout=60)
    yield actors
    for a in actors:
        ray.kill(a)

@pytest.mark.chaos(menu=[Pause(ActorTarget(class_name="Flock"), seconds=0.2)], rate=1.0, duration=4.0)
def test_random_schedule(flock, chaos):
    start = next(e for e in chaos.journal.events if e.kind == "start")
    wanted = len(start.schedule)
    wait_until(lambda: sum(e.kind == "heal" for e in chaos.journal.events) >= wanted, timeout=60,
               what="every scheduled pause to be over")
    injects = [(e.observed.name, round(e.mono - start.mono, 4)) for e in chaos.journal.events
               if e.kind == "inject"]
    with open(os.environ["JOURNAL_OUT"], "w") as f:
        json.dump({"schedule": [p.model_dump(mode="json") for p in start.schedule], "injects": injects}, f)
"""


#: How late an injection may start after its planned time (a State API lookup on a busy machine).
INJECT_LATENCY = 1.0


@pytest.mark.slow
@pytest.mark.deep  # CI's budget: the schedule's seeding is unit-tested in make test
def test_the_same_chaos_seed_gives_the_same_journal(pytester: pytest.Pytester, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_seeded=SEEDED)
    runs = []
    for i in range(2):
        out = tmp_path / f"run{i}.json"
        monkeypatch.setenv("JOURNAL_OUT", str(out))
        pytester.runpytest_subprocess("-p", "no:cacheprovider", "--chaos-seed=123").assert_outcomes(passed=1)
        runs.append(json.loads(out.read_text()))
    first, second = runs
    assert first["schedule"] == second["schedule"] and len(first["schedule"]) >= 2
    assert [n for n, _ in first["injects"]] == [n for n, _ in second["injects"]]  # same targets
    # Same times: each injection at its planned time, never before it, late by at most the
    # injection's own latency (finding the actor, SIGSTOP, confirming it). Comparing the two
    # runs' latencies to each other was a timed test: CI saw the first, cold one differ by 51 ms.
    planned = sorted(p["at"] for p in first["schedule"])
    for run in runs:
        lags = [t - at for at, (_, t) in zip(planned, run["injects"])]
        assert len(lags) == len(planned) and all(-0.005 <= lag < INJECT_LATENCY for lag in lags), (planned, run)


# -- the suite's own properties deepen with the profile --------------------------------------

ROOT = Path(__file__).resolve().parents[1]


def examples_run(profile: str) -> int:
    """Passing examples of one of this suite's properties (a pure one: cheap) under ``profile``."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--hypothesis-profile={profile}",
         "--hypothesis-show-statistics",
         "tests/test_chaos_unit.py::test_strategies_build_valid_sorted_schedules"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:]
    return sum(int(n) for n in re.findall(r"(\d+) passing", out.stdout))


@pytest.mark.slow  # make test's budget (a fresh clone took 9 min 49 s)
def test_the_thorough_profile_runs_ten_times_the_examples_of_ci() -> None:
    ci, thorough = examples_run("ci"), examples_run("thorough")
    assert ci >= 25 and thorough >= 10 * ci, (ci, thorough)


BOUNDS = """
    import pytest

    @pytest.mark.property
    def test_property(request):
        marker = request.node.get_closest_marker("timeout")
        print("BOUND", marker.args[0] if marker else None)

    @pytest.mark.property
    @pytest.mark.timeout(7)
    def test_own_bound(request):
        print("OWN", request.node.get_closest_marker("timeout").args[0])

    def test_plain(request):
        print("PLAIN", request.node.get_closest_marker("timeout"))
"""


@pytest.mark.parametrize(("args", "bound"), [((), "None"), (("--hypothesis-profile=thorough",), "3000.0"),
                                            (("--hypothesis-profile=thorough", "--timeout=50"), "None")])
def test_the_suites_per_test_bound_grows_with_the_profile(pytester: pytest.Pytester, args: tuple[str, ...],
                                                          bound: str) -> None:
    # This suite's conftest hook, in a project of its own: pyproject's 300 s times the depth.
    pytester.makeini("[pytest]\ntimeout = 300\nmarkers =\n    property: a property\n")
    pytester.makeconftest(f"""
        import importlib.util
        spec = importlib.util.spec_from_file_location("suite_conftest", {str(ROOT / "conftest.py")!r})
        suite = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(suite)
        pytest_collection_modifyitems = suite.pytest_collection_modifyitems
    """)
    pytester.makepyfile(BOUNDS)
    result = pytester.runpytest_subprocess("-s", *args)
    result.stdout.fnmatch_lines([f"*BOUND {bound}*", "*OWN 7*", "*PLAIN None*", "*3 passed*"])
