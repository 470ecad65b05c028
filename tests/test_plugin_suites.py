"""The plugin in a user's own suite: cluster fixtures with the scopes suites use, the shape from
ini options and a marker, a fault the test's cluster cannot take refused at collection, bounded
state machines, and a plugin that costs a suite that never uses it nothing but its load."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from chaos import wait_until
from chaos._errors import InvalidConfig
from chaos._suite import ClusterShape, Profile, profile_for, shape_for

pytest_plugins = ["pytester"]


# -- the shape: ini options, then the multi-node fixture, then the closest marker ----------------------


def test_the_shape_comes_from_the_ini_then_the_fixture_then_the_closest_marker() -> None:
    ini = {"raychaos_nodes": "2", "raychaos_cpus": "3", "raychaos_resources": "worker=4 disk=1",
           "raychaos_redis": "yes"}
    assert shape_for(ini, multinode=False, markers=()) == ClusterShape(
        nodes=2, cpus=3, resources=(("disk", 1.0), ("worker", 4.0)), redis=True)
    assert shape_for({}, multinode=True, markers=()) == ClusterShape(nodes=3, cpus=1, resources=(("worker", 100.0),))
    module, function = {"nodes": 4, "cpus": 2}, {"cpus": 1, "resources": {"gpu_slot": 1}}
    assert shape_for({}, multinode=False, markers=[module, function]) == ClusterShape(
        nodes=4, cpus=1, resources=(("gpu_slot", 1.0),))


@pytest.mark.parametrize(("ini", "markers", "multinode", "match"), [
    ({"raychaos_nodes": "two"}, (), False, "raychaos_nodes = 'two' is not a whole number"),
    ({"raychaos_redis": "maybe"}, (), False, "raychaos_redis = 'maybe' is not true or false"),
    ({"raychaos_resources": "worker"}, (), False, "'worker' is not name=amount"),
    ({"raychaos_resources": "worker=-1"}, (), False, "is not an amount"),
    ({}, [{"nodes": 0}], False, "`nodes` must be a whole number >= 1, got 0"),
    ({}, [{"node": 3}], False, r"unknown argument\(s\) \['node'\]"),
    ({}, [{"resources": {"worker": 1}}], False, "go on worker nodes, and nodes=1 has none"),
    ({}, [{"nodes": 1}], True, "asks for ray_multinode_cluster but its @pytest.mark.ray_cluster says nodes=1"),
])
def test_a_wrong_shape_is_refused_naming_the_value_and_the_fix(
        ini: dict[str, str], markers: list[dict[str, object]], multinode: bool, match: str) -> None:
    with pytest.raises(InvalidConfig, match=match):
        shape_for(ini, multinode=multinode, markers=markers)


# -- collection: shapes, scopes and faults the cluster cannot take ------------------------------------

NODE_FAULTS = """
    import pytest
    from chaos import KillNode, NodeTarget, Partition

    @pytest.mark.chaos(faults=[(1.0, KillNode(NodeTarget()))])
    def test_on_one_node(ray_cluster, chaos): ...

    @pytest.mark.chaos(faults=[(1.0, KillNode(NodeTarget()))])
    def test_on_three_nodes(ray_multinode_cluster, chaos): ...
"""


def test_a_node_fault_on_a_one_node_cluster_fails_at_collection_naming_the_fixture(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_nodes=NODE_FAULTS)
    result = pytester.runpytest_subprocess("--collect-only", "-q")
    result.stdout.fnmatch_lines([
        "*test_on_one_node: raychaos: @pytest.mark.chaos schedules KillNode, which needs a live worker node "
        "besides the head*; this test's cluster (ray_cluster: 1 node x 4 CPUs) has none: ask for the "
        "ray_multinode_cluster fixture, or mark the test @pytest.mark.ray_cluster(nodes=3)*",
    ])
    assert result.ret == pytest.ExitCode.INTERRUPTED  # a collection error stops the run before any cluster


def test_a_partition_needs_a_network_cluster_and_says_which_marker_gives_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_net="""
        import pytest
        from chaos import NodeTarget, Partition

        @pytest.mark.chaos(faults=[(1.0, Partition(seconds=5, target=NodeTarget()))])
        def test_cut(ray_multinode_cluster, chaos): ...
    """)
    result = pytester.runpytest_subprocess("--collect-only", "-q")
    result.stdout.fnmatch_lines(["*Partition, which needs links raychaos made*"
                                 "mark the test @pytest.mark.ray_cluster(nodes=3, network=True)*"])


def test_the_multinode_fixture_and_a_marked_shape_collect_with_the_test_ids_unchanged(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_nodes="""
        import pytest
        from chaos import KillNode, NodeTarget

        @pytest.mark.chaos(faults=[(1.0, KillNode(NodeTarget()))])
        def test_on_three_nodes(ray_multinode_cluster, chaos): ...

        @pytest.mark.ray_cluster(nodes=2)
        @pytest.mark.chaos(faults=[(1.0, KillNode(NodeTarget()))])
        def test_on_two_nodes(ray_cluster, chaos): ...

        @pytest.mark.parametrize("x", [1, 2])
        def test_mine(ray_cluster, x): ...
    """)
    result = pytester.runpytest_subprocess("--collect-only", "-q")
    result.stdout.fnmatch_lines(["test_nodes.py::test_on_three_nodes", "test_nodes.py::test_on_two_nodes",
                                 "test_nodes.py::test_mine[1]", "test_nodes.py::test_mine[2]", "*4 tests collected*"])


def test_the_cluster_fixtures_have_the_scope_the_ini_gives(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="def test_x(ray_cluster): ...")
    for scope in ("session", "module"):
        pytester.makeini(f"[pytest]\nraychaos_cluster_scope = {scope}\nraychaos_nodes = 2\nraychaos_cpus = 1\n")
        result = pytester.runpytest_subprocess("--fixtures", "-v")
        result.stdout.fnmatch_lines([f"ray_cluster [[]{scope} scope[]]*",
                                     f"ray_multinode_cluster [[]{scope} scope[]]*"])
        result = pytester.runpytest_subprocess("--collect-only")
        result.stdout.fnmatch_lines([f"raychaos: *clusters per {scope}, ray_cluster 2 nodes x 1 CPU"])
    pytester.makeini("[pytest]\nraychaos_cluster_scope = class\n")
    result = pytester.runpytest_subprocess("--collect-only", "-q")
    result.stderr.fnmatch_lines(["*raychaos_cluster_scope = 'class' is not a scope; use session or module*"])


SCOPED = """
    import pytest, ray

    @ray.remote
    class Service:
        def address(self):
            return ray.get_runtime_context().gcs_address

    @pytest.fixture(scope="session")
    def service(ray_cluster):
        return Service.options(name="service", lifetime="detached", get_if_exists=True).remote()

    @pytest.fixture(scope="module")
    def same_service(ray_cluster, service):
        return ray.get_actor("service")

    def test_{name}_session_and_module_fixtures_share_the_cluster(ray_cluster, service, same_service):
        assert ray.get(service.address.remote(), timeout=60) == ray_cluster.address
        assert ray.get(same_service.address.remote(), timeout=60) == ray_cluster.address
        print("CLUSTER", ray_cluster.address)
"""


@pytest.mark.ray
@pytest.mark.slow  # 13-19 s (a pytest run of its own starting a cluster): make test's 8 minutes
def test_a_suites_session_and_module_fixtures_start_actors_on_the_session_cluster(pytester: pytest.Pytester) -> None:
    """``ray_cluster`` was function-scoped: a module- or session-scoped fixture on it was a
    ScopeMismatch. Now it lives for the session: two modules' fixtures share one cluster."""
    pytester.makepyfile(test_a=SCOPED.format(name="a"), test_b=SCOPED.format(name="b"))
    result = pytester.runpytest_subprocess("-s", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    addresses = {line.split("CLUSTER ")[1].split()[0] for line in result.outlines if "CLUSTER " in line}
    assert len(addresses) == 1, result.outlines


# -- bounded state machines -----------------------------------------------------------------------

MACHINE = """
    from hypothesis import settings
    from chaos.testing import ActorChaosMachine

    class Plain(ActorChaosMachine):
        pass

    @settings(max_examples=2, stateful_step_count=3)
    class Mine(ActorChaosMachine):
        pass

    def test_depth():
        for cls in (Plain, Mine):
            s = cls.TestCase.settings
            print("DEPTH", cls.__name__, cls.profile, s.max_examples, s.stateful_step_count)
        print("NOTE", Plain.depth_note(Plain.__new__(Plain)))  # what a failure's message ends with
        print("FOREIGN", settings.default.max_examples)
"""


@pytest.mark.parametrize(("args", "ini", "env", "depth"), [
    ((), "", "", "ci 5 10"), (("--chaos-profile=thorough",), "", "", "thorough 50 30"),
    (("--hypothesis-profile=thorough",), "", "", "thorough 50 30"),
    ((), "thorough", "", "thorough 50 30"),  # the suite's own ini (the order of the rest: below)
])
def test_a_machine_runs_a_bounded_profile_unless_given_settings_and_foreign_tests_keep_theirs(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], ini: str, env: str,
        depth: str) -> None:
    """Before, a subclass ran Hypothesis's 100 examples of 50 real-kill steps."""
    pytester.makepyfile(test_machine=MACHINE)
    pytester.makeini(f"[pytest]\nraychaos_profile = {ini}\n")
    monkeypatch.setenv("RAYCHAOS_PROFILE", env)
    result = pytester.runpytest_subprocess("-s", *args)
    foreign = 1000 if "--hypothesis-profile=thorough" in args else 100
    profile, examples, steps = depth.split()
    deeper = "" if profile == "thorough" else "; pytest --chaos-profile=thorough searches 50 examples"
    result.stdout.fnmatch_lines([f"*DEPTH Plain {depth}", "DEPTH Mine * 2 3",
                                 f"NOTE Plain runs, unless given settings of its own, raychaos's '{profile}' profile: "
                                 f"{examples} examples of up to {steps} steps{deeper}", f"FOREIGN {foreign}"])


def test_a_suites_own_thorough_profile_is_the_one_loaded(pytester: pytest.Pytester) -> None:
    """The plugin registers ``thorough`` only where the suite has not: a suite's conftest that
    registers its own keeps it under ``--hypothesis-profile=thorough``."""
    pytester.makeconftest("from hypothesis import settings\n"
                          "settings.register_profile('thorough', max_examples=7)\n")
    pytester.makepyfile(test_machine=MACHINE)
    result = pytester.runpytest_subprocess("-s", "--hypothesis-profile=thorough")
    result.stdout.fnmatch_lines(["*DEPTH Plain thorough 50 30", "FOREIGN 7"])

@pytest.mark.parametrize(("option", "hypothesis", "env", "ini", "profile"), [
    (None, None, None, "", Profile.CI),
    (None, None, None, "thorough", Profile.THOROUGH),
    (None, None, "thorough", "ci", Profile.THOROUGH),  # a nightly job's environment beats the suite's ini
    (None, "thorough", "ci", "ci", Profile.THOROUGH),  # the command line beats both
    ("ci", "thorough", "thorough", "thorough", Profile.CI),  # and --chaos-profile beats Hypothesis's
    (None, "default", "", " ci ", Profile.CI),  # an empty variable is not set; spaces around a word go
])
def test_the_nearest_profile_setting_wins(option: str | None, hypothesis: str | None, env: str | None, ini: str,
                                          profile: Profile) -> None:
    assert profile_for(option=option, hypothesis_profile=hypothesis, env=env, ini=ini) is profile


@pytest.mark.parametrize(("env", "ini", "where"), [
    (None, "deep", "ini option raychaos_profile = 'deep'"),
    ("Thorough", "ci", "environment variable RAYCHAOS_PROFILE = 'Thorough'")])
def test_a_profile_that_is_not_one_is_refused_naming_where_it_came_from(env: str | None, ini: str,
                                                                        where: str) -> None:
    with pytest.raises(InvalidConfig, match=f"{re.escape(where)} is not a raychaos profile; use ci or thorough"):
        profile_for(option=None, hypothesis_profile=None, env=env, ini=ini)


def test_a_wrong_ini_profile_stops_the_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_machine=MACHINE)
    pytester.makeini("[pytest]\nraychaos_profile = deep\n")
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini option raychaos_profile = 'deep' is not a raychaos profile*"])


# -- a guest's cost ---------------------------------------------------------------------------------


def test_loading_the_plugin_imports_neither_ray_nor_hypothesis_nor_pydantic() -> None:
    """Every pytest run of the environment loads the plugin; before, it imported pydantic, the
    engine and Hypothesis (about 0.4 s)."""
    code = ("import sys, chaos.pytest_plugin; "
            "print(sorted(m for m in ('ray', 'hypothesis', 'pydantic', 'chaos._engine') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_the_sessions_leak_check_names_a_process_of_its_clusters_left_running(tmp_path: Path) -> None:
    """Each process (each xdist worker) checks at its end that nothing of the clusters it started
    runs on; the check finds a process that names one of their folders, and no other."""
    from chaos.pytest_plugin import RayHarness

    harness = RayHarness()
    harness.temp_dirs = [str(tmp_path / "rc-mine")]
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)", "raylet"]  # "raylet": a Ray process's name
    mine = subprocess.Popen([*sleeper, str(tmp_path / "rc-mine")])
    other = subprocess.Popen([*sleeper, str(tmp_path / "rc-other")])
    try:
        wait_until(lambda: harness.leftovers(), timeout=10, what="the left process to be listed")
        assert [line.split()[0] for line in harness.leftovers()] == [str(mine.pid)]
    finally:
        for proc in (mine, other):
            proc.kill()
            proc.wait(timeout=10)
    assert harness.leftovers() == []


def test_the_tests_of_one_shape_run_together_whatever_the_order_of_their_files(pytester: pytest.Pytester) -> None:
    """One cluster start per shape: pytest 9.2 groups a parameter's tests by its value, earlier
    releases by its index (each test's shape is its only one, index 0), which the plugin's own
    grouping makes up for."""
    pytester.makepyfile(test_a="""
        import pytest
        def test_a1(ray_cluster): ...
        def test_a2(ray_multinode_cluster): ...
        def test_a3(ray_cluster): ...
    """, test_b="""
        def test_b1(ray_multinode_cluster): ...
        def test_b2(ray_cluster): ...
        def test_b3(): ...
    """)
    result = pytester.runpytest_subprocess("--collect-only", "-q")
    result.stdout.fnmatch_lines(["test_a.py::test_a1", "test_a.py::test_a3", "test_b.py::test_b2",
                                 "test_a.py::test_a2", "test_b.py::test_b1", "test_b.py::test_b3"])


def test_a_positional_ray_cluster_marker_is_refused_at_collection(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_x="""
        import pytest
        @pytest.mark.ray_cluster(3)
        def test_x(ray_cluster): ...
    """)
    result = pytester.runpytest_subprocess("--collect-only", "-q")
    result.stdout.fnmatch_lines(["*ray_cluster takes keyword arguments only, got positional (3,)*"])
