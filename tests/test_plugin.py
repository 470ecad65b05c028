"""The pytest plugin, tested from the outside in subprocesses (as pytest tests its own)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from chaos import wait_until

pytest_plugins = ["pytester"]


def test_markers_are_listed(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--markers")
    result.stdout.fnmatch_lines([
        "@pytest.mark.multinode: the test needs the 3-node cluster*",
        "@pytest.mark.ray: the test starts real Ray processes*",
        "@pytest.mark.chaos(seed=None, faults=()): run the test under a seeded fault schedule*",
    ])


@pytest.mark.parametrize("profile", ["dev", "ci", "thorough"])
def test_hypothesis_profile_is_chosen_with_the_option(pytester: pytest.Pytester, profile: str) -> None:
    pytester.makepyfile("""
        from hypothesis import settings
        def test_profile(pytestconfig):
            print("PROFILE", settings.get_current_profile_name())
    """)
    result = pytester.runpytest_subprocess("-s", f"--hypothesis-profile={profile}")
    result.stdout.fnmatch_lines([f"*PROFILE {profile}*", "*1 passed*"])


def test_ci_profile_is_loaded_when_CI_is_set(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "true")
    pytester.makepyfile("""
        from hypothesis import settings
        def test_profile():
            assert settings.default.derandomize and settings.default.deadline is None
            assert settings.default.print_blob
    """)
    result = pytester.runpytest_subprocess()
    result.stdout.fnmatch_lines(["raychaos: hypothesis profile 'ci'*", "*1 passed*"])


def test_ray_cluster_fixture_gives_an_explicit_address_and_leaves_nothing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import ray
        from ray.util.state import list_nodes

        def test_cluster(ray_cluster):
            assert ray.get_runtime_context().gcs_address == ray_cluster.address
            assert len(list_nodes(address=ray_cluster.address)) == 1
            assert ray.get(ray.put(41), timeout=30) + 1 == 42
    """)
    before = {p.pid for p in psutil.process_iter()}
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*1 passed*"])
    assert not _new_ray_processes(before)


def _new_ray_processes(before: set[int]) -> list[psutil.Process]:
    from chaos import ray_processes

    return [p for p in ray_processes() if p.pid not in before]


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
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
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
    gone, alive = psutil.wait_procs(children, timeout=15)
    assert not alive, f"left running after Ctrl-C: {[p.pid for p in alive]}"


def test_chaos_fixture_marker_seed_and_journal_on_failure(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import os, ray, pytest
        from chaos import ActorTarget, Kill

        @ray.remote(max_restarts=1, max_task_retries=-1)
        class Victim:
            def pid(self):
                return os.getpid()

        def test_seed_comes_from_the_option(chaos):
            import random
            assert chaos.rng.getstate() == random.Random(5).getstate()

        @pytest.mark.chaos(seed=11)
        def test_marker_seed_wins(chaos):
            import random
            assert chaos.rng.getstate() == random.Random(11).getstate()

        def test_fails_and_prints_its_journal(chaos):
            victim = Victim.remote()
            ray.get(victim.pid.remote(), timeout=30)
            chaos.kill(Kill(ActorTarget.of(victim)))
            assert False, "deliberate"
    """)
    result = pytester.runpytest_subprocess("--chaos-seed=5", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines([
        "raychaos: hypothesis profile *, chaos seed 5, *",
        "*raychaos journal*",
        "chaos seed 5 (rerun with --chaos-seed=5); 2 events, replay with Schedule.from_journal:",
        '*"kind": "inject"*"outcome": "SIGKILL sent"*',
        "*1 failed, 2 passed*",
    ])


def test_marker_faults_run_during_the_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import os, time, ray, pytest
        from chaos import ActorTarget, Kill, wait_until

        @ray.remote(max_restarts=2, max_task_retries=-1, name="marked-victim")
        class Victim:
            def pid(self):
                return os.getpid()

        victim = None

        @pytest.fixture
        def started(ray_cluster):
            global victim
            victim = Victim.remote()
            return ray.get(victim.pid.remote(), timeout=30)

        @pytest.mark.chaos(seed=3, faults=[(1.0, Kill(ActorTarget(name="marked-victim")))])
        def test_victim_is_killed_and_restarts(started, chaos):
            wait_until(lambda: ray.get(victim.pid.remote(), timeout=30) != started, timeout=60,
                       what="the scheduled kill and the restart")
            assert [e.kind for e in chaos.journal.events][:1] == ["inject"]
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*1 passed*"])
