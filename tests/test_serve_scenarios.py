"""The Ray Serve scenarios end to end on a real cluster: each passes with its fault-free
twin, and a planted broken deployment (``make deep``) turns its verdicts red."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from chaos import FaultKind
from chaos.cluster import ClusterHandle
from chaos.engine import FaultStatus
from chaos.errors import InvalidConfig
from scenarios import load_scenario, run_scenario
from scenarios.model._records import RunLabel, RunResult, RunStatus
from scenarios.model._workload import RunContext
from scenarios.workloads.serve._app import ServeApp, ServeParams, _free_port

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def _red(run: RunResult) -> list[str]:
    return [f"{v.name}: {v.detail}" for v in run.verdicts if not v.held]


def _say(run: RunResult) -> None:
    """The chaos run's verdicts, for the figures the Serve page quotes (``pytest -s``)."""
    for v in run.verdicts:
        print(f"{run.scenario} {v.name}: {v.detail}")


def _held(run: RunResult) -> dict[str, bool]:
    return {v.name: v.held for v in run.verdicts}


def _one_kill_held_beside_its_twin(scenario: str, address: str) -> tuple[RunResult, RunResult]:
    """``scenario`` and its fault-free twin: the twin served every request, the chaos run held
    every verdict, and its one fault, a kill, was injected."""
    baseline, chaos = run_scenario(load_scenario(scenario), address=address)
    assert baseline.status is RunStatus.COMPLETED and baseline.metrics["served_share"] == 1.0, baseline.error
    _say(chaos)
    assert not chaos.deviated, (chaos.error, _red(chaos), chaos.faults)
    (fault,) = chaos.faults
    assert fault.kind is FaultKind.KILL and fault.status is FaultStatus.INJECTED
    return baseline, chaos


def test_serve_replica_kill_holds_beside_its_fault_free_twin(ray_cluster: ClusterHandle) -> None:
    baseline, chaos = run_scenario(load_scenario("serve-replica-kill"), address=ray_cluster.address)
    assert baseline.label is RunLabel.BASELINE and baseline.status is RunStatus.COMPLETED, baseline.error
    _say(chaos)
    assert chaos.label is RunLabel.CHAOS and not chaos.deviated, (chaos.error, _red(chaos), chaos.faults)
    (fault,) = chaos.faults
    assert fault.kind is FaultKind.KILL and fault.status is FaultStatus.INJECTED
    assert chaos.metrics["requests"] >= 100 and baseline.metrics["served_share"] == 1.0
    # The twin saw no fault: the verdicts about one do not hold there.
    assert not _held(baseline)["availability"] and not _held(baseline)["recovered_to_baseline"]
    assert not _held(baseline)["replicas_restored"]
    assert chaos.metrics.get("serve_shutdown_s") is not None
    assert _held(baseline)["no_request_hung"] and _held(baseline)["errors_documented"]
    # The built-in app's every 200 echoed its request's nonce and named its replica: checked, right.
    assert chaos.metrics["bodies_checked"] >= 100 and baseline.metrics["bodies_checked"] >= 100, chaos.metrics


@pytest.mark.deep
def test_a_deployment_of_one_replica_turns_availability_and_recovery_red(ray_cluster: ClusterHandle) -> None:
    scenario = load_scenario("serve-replica-kill")
    scenario = replace(scenario, params={**scenario.params, "replicas": 1})
    (chaos,) = run_scenario(scenario, address=ray_cluster.address, baseline=False)
    assert chaos.status is RunStatus.COMPLETED, chaos.error
    red = {name for name, held in _held(chaos).items() if not held}
    # Requests wait at the proxy while no replica serves: timeouts, documented for a replica's loss.
    assert red == {"availability", "recovered_to_baseline"}, chaos.verdicts


def test_serve_controller_kill_holds_beside_its_fault_free_twin(ray_cluster: ClusterHandle) -> None:
    baseline, chaos = run_scenario(load_scenario("serve-controller-kill"), address=ray_cluster.address)
    assert baseline.status is RunStatus.COMPLETED, baseline.error
    _say(chaos)
    assert not chaos.deviated, (chaos.error, _red(chaos), chaos.faults)
    (fault,) = chaos.faults
    assert fault.kind is FaultKind.KILL and fault.status is FaultStatus.INJECTED
    assert chaos.metrics["served_share"] == 1.0  # the proxy and replicas served without their controller


@pytest.mark.deep  # CI's budget
def test_a_cluster_already_running_serve_is_refused_and_left_running(ray_cluster: ClusterHandle) -> None:
    from ray import serve
    from ray.util.state import list_actors

    # The user's Serve: the workload must neither take it over nor shut it down.
    serve.start(http_options={"host": "127.0.0.1", "port": _free_port()})
    try:
        ctx = RunContext(address=ray_cluster.address, namespace="raychaos", seed=0, params=ServeParams(),
                         storage="", duration=5.0, faults=True)
        app = ServeApp(ctx)
        with pytest.raises(InvalidConfig, match=r"already runs Ray Serve.*ServeController.*embedded cluster"):
            app.setup()
        app.teardown()  # after a failed setup: no AttributeError, and no shutdown of a Serve it did not start
        rows = list_actors(address=ray_cluster.address, filters=[("class_name", "=", "ServeController"),
                                                                 ("state", "=", "ALIVE")], timeout=10)
        assert len(rows) == 1 and "serve_shutdown_s" not in ctx.metrics
    finally:
        serve.shutdown()


EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "serve"


@pytest.fixture
def in_the_example(monkeypatch: pytest.MonkeyPatch) -> None:
    """The example's folder as the user runs it: the current directory, its ``app`` module
    imported afresh (EXAMPLE_NO_FT is read at import)."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "app", raising=False)
    monkeypatch.chdir(EXAMPLE)


@pytest.mark.deep  # CI's hour: make slow runs the four Serve scenarios, each beside its twin
@pytest.mark.usefixtures("in_the_example")
def test_the_serve_example_holds_beside_its_fault_free_twin(ray_cluster: ClusterHandle) -> None:
    baseline, chaos = _one_kill_held_beside_its_twin("serve-app.toml", ray_cluster.address)
    # Its scenario says what each 200 carries (expect_body): every one was checked.
    assert chaos.metrics["bodies_checked"] >= 100 and baseline.metrics["bodies_checked"] >= 100, chaos.metrics


@pytest.mark.deep
@pytest.mark.usefixtures("in_the_example")
def test_an_app_answering_the_wrong_body_turns_availability_and_errors_documented_red(
        ray_cluster: ClusterHandle) -> None:
    scenario = load_scenario("serve-app.toml")
    # The app answers {"words":4,...}: a scenario expecting 5 words finds every 200 wrong.
    scenario = replace(scenario, params={**scenario.params, "expect_body": '{"words":5'})
    (chaos,) = run_scenario(scenario, address=ray_cluster.address, baseline=False)
    assert chaos.status is RunStatus.COMPLETED, chaos.error
    _say(chaos)
    red = {name for name, held in _held(chaos).items() if not held}
    assert {"availability", "recovered_to_baseline", "errors_documented"} <= red, chaos.verdicts
    assert chaos.metrics["served_share"] == 0.0 and chaos.metrics["bodies_checked"] >= 100, chaos.metrics


@pytest.mark.deep
@pytest.mark.usefixtures("in_the_example")
def test_the_serve_example_without_fault_tolerance_turns_availability_red(ray_cluster: ClusterHandle,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EXAMPLE_NO_FT", "1")
    (chaos,) = run_scenario(load_scenario("serve-app.toml"), address=ray_cluster.address, baseline=False)
    assert chaos.status is RunStatus.COMPLETED, chaos.error
    _say(chaos)
    red = {name for name, held in _held(chaos).items() if not held}
    assert red == {"availability", "recovered_to_baseline"}, chaos.verdicts


def _rc_node(index: int) -> str:
    """The id of the live worker node that has the harness's ``rc_node<index>`` resource."""
    import ray

    return next(n["NodeID"] for n in ray.nodes() if n["Alive"] and f"rc_node{index}" in n["Resources"])


def _replace_lost_workers(handle: ClusterHandle) -> None:
    """The shared 3-node cluster whole again: each dead worker's bookkeeping dropped and a node
    with its ``rc_node<i>`` resource started in its place (later tests pick nodes by it)."""
    import ray

    alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    held = {r for n in ray.nodes() if n["Alive"] for r in n["Resources"]}
    cluster = handle.cluster
    for node in [n for n in cluster.worker_nodes if n.node_id not in alive]:
        cluster.remove_node(node, allow_graceful=False)
    for i in [i for i in range(1, handle.nodes) if f"rc_node{i}" not in held]:
        cluster.add_node(num_cpus=1, resources={"worker": 100.0, f"rc_node{i}": 1.0})
    cluster.wait_for_nodes(timeout=60)


def test_serve_node_loss_holds_beside_its_fault_free_twin(ray_multinode_cluster: ClusterHandle) -> None:
    try:
        baseline, chaos = run_scenario(load_scenario("serve-node-loss"), address=ray_multinode_cluster.address)
    finally:
        _replace_lost_workers(ray_multinode_cluster)
    assert baseline.status is RunStatus.COMPLETED and baseline.metrics["served_share"] == 1.0, baseline.error
    _say(chaos)
    assert not chaos.deviated, (chaos.error, _red(chaos), chaos.faults)
    (fault,) = chaos.faults
    assert fault.kind is FaultKind.KILL_NODE and fault.status is FaultStatus.INJECTED
    # One replica on each worker node: whichever died, it took one with it.
    assert baseline.metrics["replica_nodes"] == chaos.metrics["replica_nodes"] == 2


@pytest.mark.deep
def test_replicas_on_the_lost_node_only_turn_availability_red(ray_multinode_cluster: ClusterHandle) -> None:
    from chaos import KillNode, NodeTarget
    from chaos._schedule import Schedule, ScheduledFault

    scenario = load_scenario("serve-node-loss")
    # Both replicas on worker node 1, and node 1 the one that dies: no replica survives it.
    scenario = replace(scenario, params={**scenario.params, "replica_resources": {"rc_node1": 0.5}},
                       schedule=Schedule((ScheduledFault(3.0, KillNode(NodeTarget(_rc_node(1)))),), None))
    try:
        (chaos,) = run_scenario(scenario, address=ray_multinode_cluster.address, baseline=False)
    finally:
        _replace_lost_workers(ray_multinode_cluster)
    assert chaos.status is RunStatus.COMPLETED, chaos.error
    _say(chaos)
    assert chaos.metrics["replica_nodes"] == 1
    red = {name for name, held in _held(chaos).items() if not held}
    assert {"availability", "recovered_to_baseline", "replicas_restored"} <= red, chaos.verdicts


def test_serve_proxy_kill_holds_beside_its_fault_free_twin(ray_multinode_cluster: ClusterHandle) -> None:
    baseline, chaos = _one_kill_held_beside_its_twin("serve-proxy-kill", ray_multinode_cluster.address)
    assert not _held(baseline)["availability"] and not _held(baseline)["replicas_restored"]
    # One replica a node: two nodes with a replica, so a proxy on each (the head's among them
    # or beside them), all ALIVE before the load began.
    assert chaos.metrics["replica_nodes"] == 2 and chaos.metrics["proxies"] >= 2, chaos.metrics


@pytest.mark.deep
def test_replicas_spread_over_more_nodes_than_the_cluster_has_are_refused_before_serve_starts(
        ray_cluster: ClusterHandle) -> None:
    from ray.util.state import list_actors

    # One node, two replicas, at most one a node: serve.run would wait for a second node.
    (run,) = run_scenario(load_scenario("serve-proxy-kill"), address=ray_cluster.address, baseline=False)
    assert run.status is RunStatus.ABORTED and "max_replicas_per_node = 1 need 2 nodes" in run.error, run.error
    assert "has 1" in run.error
    controllers = list_actors(address=ray_cluster.address, filters=[("class_name", "=", "ServeController"),
                                                                    ("state", "=", "ALIVE")])
    assert not controllers, controllers


@pytest.mark.deep
def test_a_single_proxy_turns_availability_and_recovery_red(ray_cluster: ClusterHandle) -> None:
    scenario = load_scenario("serve-proxy-kill")
    scenario = replace(scenario, params={**scenario.params, "proxy_location": "HeadOnly", "max_replicas_per_node": 0})
    (chaos,) = run_scenario(scenario, address=ray_cluster.address, baseline=False)
    assert chaos.status is RunStatus.COMPLETED, chaos.error
    _say(chaos)
    red = {name for name, held in _held(chaos).items() if not held}
    # The only proxy's port refuses connections until the controller starts a new proxy.
    assert {"availability", "recovered_to_baseline"} <= red and "errors_documented" not in red, chaos.verdicts


@pytest.mark.deep
def test_both_replicas_on_the_head_leave_one_proxy_and_its_kill_turns_availability_red(
        ray_multinode_cluster: ClusterHandle) -> None:
    scenario = load_scenario("serve-proxy-kill")
    # The spread undone and both replicas put on the head: Serve starts no worker node's proxy.
    params = {**scenario.params, "max_replicas_per_node": 0, "replica_resources": {"rc_head": 0.5}}
    (chaos,) = run_scenario(replace(scenario, params=params), address=ray_multinode_cluster.address, baseline=False)
    assert chaos.status is RunStatus.COMPLETED, chaos.error
    _say(chaos)
    assert chaos.metrics["replica_nodes"] == 1 and chaos.metrics["proxies"] == 1, chaos.metrics
    red = {name for name, held in _held(chaos).items() if not held}
    assert {"availability", "recovered_to_baseline"} <= red and "errors_documented" not in red, chaos.verdicts
