"""The Serve verdicts on fabricated requests (Ray-free): each holds on a good history and
breaks on the bad one it is there to catch."""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path

import pytest

from chaos.errors import InvalidConfig
from scenarios.model._records import RunLabel, RunResult, RunStatus, Validity
from scenarios.workloads.serve._load import Failure, Request
from scenarios.workloads.serve._verdicts import (
    DOCUMENTED_ERRORS,
    Attribution,
    ServeFault,
    ServeSample,
    Unexcused,
    Window,
    availability_verdict,
    error_of,
    errors_documented_verdict,
    no_hang_verdict,
    p99,
    recovered_verdict,
    recovery_time,
    replicas_restored_verdict,
    serve_fault_of,
    unexcused,
)

TIMEOUT = 2.0


def _steady(seconds: float, *, latency: float = 0.01, rate: int = 20) -> list[Request]:
    return [Request(i / rate, latency, status=200) for i in range(int(seconds * rate))]


def _outage(reqs: list[Request], start: float, end: float, failure: Failure) -> list[Request]:
    return [Request(r.sent, TIMEOUT if failure is Failure.TIMEOUT else 0.001, failure=failure)
            if start <= r.sent < end else r for r in reqs]


def test_availability_holds_and_breaks() -> None:
    reqs = _steady(10)
    during = Window(3, 8)
    assert availability_verdict(reqs, during, objective=0.99, timeout=TIMEOUT).held
    down = _outage(reqs, 3, 3.5, Failure.TIMEOUT)  # 10 of 100 failed: 90 %
    verdict = availability_verdict(down, during, objective=0.99, timeout=TIMEOUT)
    assert not verdict.held and "90.0%" in verdict.detail
    assert availability_verdict(down, during, objective=0.9, timeout=TIMEOUT).held
    slow = [Request(r.sent, 2.5, status=200) if r.sent >= 5 else r for r in reqs]  # 200s past the timeout
    assert not availability_verdict(slow, during, objective=0.99, timeout=TIMEOUT).held
    assert not availability_verdict(reqs, Window(20, 30), objective=0.0, timeout=TIMEOUT).held  # none seen


def test_recovery_time_and_verdict() -> None:
    reqs = _outage(_steady(10), 3, 5, Failure.REFUSED)
    assert recovery_time(reqs, 3.0, bound=0.05, timeout=TIMEOUT) == 2.0
    assert recovered_verdict(reqs, [3.0], baseline_p99=0.01, factor=2, slack=0.0, within=3,
                             timeout=TIMEOUT).held
    assert not recovered_verdict(reqs, [3.0], baseline_p99=0.01, factor=2, slack=0.0, within=1.5,
                                 timeout=TIMEOUT).held
    slower = [Request(r.sent, 0.5, status=200) if r.sent >= 5 else r for r in reqs]  # served, never as fast
    verdict = recovered_verdict(slower, [3.0], baseline_p99=0.01, factor=2, slack=0.0, within=3, timeout=TIMEOUT)
    assert not verdict.held and "never" in verdict.detail
    assert not recovered_verdict(reqs, [3.0], baseline_p99=math.nan, factor=2, slack=0, within=3,
                                 timeout=TIMEOUT).held
    assert not recovered_verdict(reqs, [], baseline_p99=0.01, factor=2, slack=0, within=3, timeout=TIMEOUT).held


def test_no_hang() -> None:
    reqs = _steady(2)
    assert no_hang_verdict(reqs, timeout=TIMEOUT, grace=0.5).held
    assert not no_hang_verdict([*reqs, Request(1.0, 2.6, status=200)], timeout=TIMEOUT, grace=0.5).held
    assert not no_hang_verdict([*reqs, Request(1.0, 0.1, failure=Failure.HUNG)], timeout=TIMEOUT, grace=0.5).held


KILLED, SPARED = "a1" * 16, "b2" * 16  # two replicas' actor ids: the kill hit the first


def _fault(fault: ServeFault, at: float, *, bound: float = 20.0, killed: frozenset[str] = frozenset()) -> Attribution:
    """A fault confirmed at ``at`` whose errors count from a second before it to ``bound`` after."""
    return Attribution(fault, Window(at - 1.0, at + bound), killed=killed)


def _kill(at: float, *, bound: float = 20.0) -> Attribution:
    return _fault(ServeFault.REPLICA, at, bound=bound, killed=frozenset({KILLED}))


def test_errors_documented() -> None:
    refused = _outage(_steady(5), 2, 3, Failure.REFUSED)
    assert errors_documented_verdict(refused, [_fault(ServeFault.PROXY, 2.0)]).held
    assert not errors_documented_verdict(refused, [_fault(ServeFault.CONTROLLER, 2.0)]).held
    assert not errors_documented_verdict(refused, []).held
    served_500 = [*_steady(1), Request(1.0, 0.01, status=500)]
    assert errors_documented_verdict(served_500, [_kill(1.0)]).held  # ReplicaUnavailableError
    verdict = errors_documented_verdict(served_500, [_fault(ServeFault.CONTROLLER, 1.0)])
    assert not verdict.held and "500" in verdict.detail
    assert not errors_documented_verdict([*_steady(1), Request(1.0, 0.01, status=503)], [_kill(1.0)]).held
    assert errors_documented_verdict(_steady(1), []).held


def test_a_500_answered_by_a_replica_the_kill_spared_is_not_excused() -> None:
    # The app's own 500, in the kill's window, from the replica that was not killed: not the kill's.
    spared = [*_steady(5), Request(2.5, 0.01, status=500, replica=SPARED)]
    verdict = errors_documented_verdict(spared, [_kill(2.0)])
    assert not verdict.held and SPARED[:12] in verdict.detail, verdict.detail
    assert unexcused(spared[-1], [_kill(2.0)]) is Unexcused.SPARED_REPLICA
    # Nor by a proxy's or the controller's death: they killed no replica.
    assert unexcused(spared[-1], [_fault(ServeFault.CONTROLLER, 2.0), _fault(ServeFault.PROXY, 2.0)]) \
        is Unexcused.UNDOCUMENTED
    assert errors_documented_verdict([*_steady(5), Request(2.5, 0.01, status=500, replica=KILLED)], [_kill(2.0)]).held
    # A 500 naming no replica (Serve's own page: ReplicaUnavailableError) is excused by its window alone, and said so.
    unnamed = errors_documented_verdict([*_steady(5), Request(2.5, 0.01, status=500)], [_kill(2.0)])
    assert unnamed.held and "1 by their window alone" in unnamed.detail, unnamed.detail


def test_a_500_long_after_the_kills_bound_or_before_the_kill_is_not_excused() -> None:
    late = [*_steady(12), Request(9.5, 0.01, status=500)]
    verdict = errors_documented_verdict(late, [_kill(2.0, bound=5.0)])
    assert not verdict.held and "outside every fault's window" in verdict.detail, verdict.detail
    assert unexcused(late[-1], [_kill(2.0, bound=5.0)]) is Unexcused.OUTSIDE_WINDOW
    assert unexcused(Request(0.5, 0.01, status=500), [_kill(2.0)]) is Unexcused.OUTSIDE_WINDOW  # before it
    # Out when the kill came (sent before its window, answered after it opened): the kill's.
    assert unexcused(Request(0.5, 2.0, failure=Failure.TIMEOUT), [_kill(2.0)]) is None
    assert unexcused(Request(6.9, 2.0, failure=Failure.TIMEOUT), [_kill(2.0, bound=5.0)]) is None
    assert unexcused(Request(7.0, 0.01, failure=Failure.TIMEOUT), [_kill(2.0, bound=5.0)]) is Unexcused.OUTSIDE_WINDOW


def test_a_200_with_the_wrong_body_is_an_error_no_fault_documents() -> None:
    wrong = [Request(r.sent, r.latency, status=200, failure=Failure.WRONG_BODY, body_checked=True)
             if 3 <= r.sent < 3.5 else r for r in _steady(10)]  # 10 of the 100 requests of 2-7 s
    assert error_of(wrong[60]) is Failure.WRONG_BODY and not wrong[60].ok(TIMEOUT)
    verdict = availability_verdict(wrong, Window(2, 7), objective=0.99, timeout=TIMEOUT)
    assert not verdict.held and "90 of 100" in verdict.detail and "10 answered 200 with a wrong body" in verdict.detail
    # 200s no body check reached (a user's app without expect_body) are taken as they came, and the detail says so.
    unchecked = availability_verdict(_steady(10), Window(2, 7), objective=0.99, timeout=TIMEOUT)
    assert unchecked.held and "bodies not checked" in unchecked.detail, unchecked.detail
    documented = errors_documented_verdict(wrong, [_kill(2.0)])
    assert not documented.held and "wrong_body" in documented.detail, documented.detail
    assert not any(Failure.WRONG_BODY in kinds for kinds in DOCUMENTED_ERRORS.values())


def test_p99() -> None:
    assert p99([float(i) for i in range(1, 101)]) == 99.0
    assert math.isnan(p99([]))


def _look(at: float, running: int | None = 2, new: int = 1, controller: bool = False) -> ServeSample:
    return ServeSample(at, running, new, controller)


def test_replicas_restored_holds_and_breaks() -> None:
    replica = [(2.0, ServeFault.REPLICA)]
    back = [_look(2.5, running=1, new=0), _look(4.0, running=2, new=1)]
    verdict = replicas_restored_verdict(back, replica, replicas=2, within=5)
    assert verdict.held and "restored 2.0 s after" in verdict.detail
    # The survivor serves alone, or two RUNNING but none of them a replacement: not restored.
    assert not replicas_restored_verdict([_look(4.0, running=1, new=0)], replica, replicas=2, within=5).held
    assert not replicas_restored_verdict([_look(4.0, running=2, new=0)], replica, replicas=2, within=5).held
    assert not replicas_restored_verdict([_look(9.0)], replica, replicas=2, within=5).held  # too late
    assert not replicas_restored_verdict([_look(4.0, running=None)], replica, replicas=2, within=5).held
    controller = [(2.0, ServeFault.CONTROLLER)]
    assert replicas_restored_verdict([_look(3.0, new=0, controller=True)], controller, replicas=2, within=5).held
    never = replicas_restored_verdict([_look(3.0, new=0)], controller, replicas=2, within=5)
    assert not never.held and "never restored" in never.detail
    assert not replicas_restored_verdict(back, [], replicas=2, within=5).held  # the fault-free twin


def test_a_killed_proxy_is_restored_only_once_as_many_proxies_are_alive_as_before() -> None:
    proxy = [(3.0, ServeFault.PROXY)]
    back, short = ServeSample(4.0, 2, 0, False, 3), ServeSample(4.0, 2, 0, False, 2)
    assert replicas_restored_verdict([short, ServeSample(6.0, 2, 0, False, 3)], proxy, replicas=2, within=5,
                                     proxies=3).held
    verdict = replicas_restored_verdict([short], proxy, replicas=2, within=5, proxies=3)
    assert not verdict.held and "3 proxies to be back" in verdict.detail and "2 proxies alive" in verdict.detail
    # Without a proxy's kill, the proxies' count is not asked for.
    assert replicas_restored_verdict([short], [(3.0, ServeFault.CONTROLLER)], replicas=2, within=5, proxies=3).held \
        is False  # the controller is not back in this look
    assert replicas_restored_verdict([ServeSample(4.0, 2, 0, True, 2)], [(3.0, ServeFault.CONTROLLER)], replicas=2,
                                     within=5, proxies=3).held
    assert back.restored(replicas=2, replica_kills=0, controller_killed=False, proxies=3)


def test_an_everynode_serve_lacks_a_proxy_on_each_node_of_a_replica_or_the_controller_without_one() -> None:
    from types import SimpleNamespace as Row

    from scenarios.workloads.serve._app import CONTROLLER_CLASS, PROXY_CLASS, _proxyless

    replica = "ServeReplica:raychaos:echo"
    alive = {replica: {"r1": Row(node_id="n1"), "r2": Row(node_id="n2")},
             CONTROLLER_CLASS: {"c": Row(node_id="head")}, PROXY_CLASS: {"p0": Row(node_id="head")}}
    # The worker nodes' proxies start after serve.run returns: until then both are missing.
    assert _proxyless(alive, [replica]) == {"n1", "n2"}
    alive[PROXY_CLASS] |= {"p1": Row(node_id="n1"), "p2": Row(node_id="n2")}
    assert _proxyless(alive, [replica]) == set()
    # A node without a replica needs no proxy.
    alive[replica] = {"r1": Row(node_id="n1")}
    del alive[PROXY_CLASS]["p2"]
    assert _proxyless(alive, [replica]) == set()


def test_serve_fault_of_a_kill_target() -> None:
    assert serve_fault_of("ServeReplica:raychaos:echo") is ServeFault.REPLICA
    assert serve_fault_of("ServeController") is ServeFault.CONTROLLER
    assert serve_fault_of("ProxyActor") is ServeFault.PROXY
    with pytest.raises(InvalidConfig, match=r"'Buffer'.*aim the kill"):
        serve_fault_of("Buffer")


def test_errors_documented_refuses_an_unmeasured_fault() -> None:
    reqs = _steady(2)
    assert errors_documented_verdict(reqs, [_kill(1.0)]).held
    verdict = errors_documented_verdict(reqs, [_kill(1.0)], unmeasured=["kill_node"])
    assert not verdict.held and "kill_node" in verdict.detail


def test_each_kill_and_node_loss_excuses_errors_near_it_from_what_it_killed() -> None:
    from types import SimpleNamespace as Row

    from chaos import ActorTarget, FaultKind, Kill, KillNode, NodeTarget
    from chaos._targets import RayProcess
    from chaos.engine import Injection
    from scenarios.model._workload import FaultWindow, RunContext
    from scenarios.workloads.serve import _app as _serve

    params = _serve.ServeParams(restore_within=20.0, node_detected_within=5.0)
    replica = "ServeReplica:raychaos:echo"

    def app(*, faults: bool) -> _serve.ServeApp:
        made = _serve.ServeApp(RunContext(address="127.0.0.1:1", namespace="raychaos", seed=0, params=params,
                                          storage="", duration=30.0, faults=faults))
        made.p = params
        made.before = {replica: {KILLED: Row(node_id="n1"), SPARED: Row(node_id="n2")},
                       _serve.CONTROLLER_CLASS: {"c": Row(node_id="head")},
                       _serve.PROXY_CLASS: {"p": Row(node_id="n2")}}
        return made

    chaos = app(faults=True)
    killed = RayProcess(11, "n1", "replica", actor_id=KILLED)
    # The kill held to the run's end (heal = "at_end"): a kill heals nothing, its window ends at its bound.
    chaos.ctx.fault_settled(FaultWindow(FaultKind.KILL, 2.0, 28.0, injection=Injection(
        Kill(ActorTarget(class_name=replica)), (killed,))))
    chaos.ctx.fault_settled(FaultWindow(FaultKind.KILL_NODE, 10.0, 10.0, injection=Injection(
        KillNode(NodeTarget()), (RayProcess(12, "n2", "raylet of node n2"),))))
    lead = _serve.KILL_LEAD
    assert chaos._attributions() == [
        Attribution(ServeFault.REPLICA, Window(2.0 - lead, 22.0), frozenset({KILLED})),
        # A node's loss from node_detected_within before Ray declared it: the Serve actors that were on it.
        Attribution(ServeFault.NODE, Window(5.0, 30.0)),
        Attribution(ServeFault.REPLICA, Window(5.0, 30.0), frozenset({SPARED})),
        Attribution(ServeFault.PROXY, Window(5.0, 30.0), frozenset({"p"}))]
    assert app(faults=False)._attributions() == []  # the twin: no fault, nothing excused


def test_the_twins_p99_reaches_only_its_own_chaos_run_once() -> None:
    from scenarios.model._workload import RunContext
    from scenarios.workloads.serve import _app as _serve

    def app(seed: int, replicas: int = 2) -> _serve.ServeApp:
        params = _serve.ServeParams(replicas=replicas)
        made = _serve.ServeApp(RunContext(address="127.0.0.1:1", namespace="raychaos", seed=seed, params=params,
                                          storage="", duration=6.0, faults=True))
        made.p = params
        return made

    own = [Request(0.1, 0.5, status=200), Request(2.5, 0.01, status=200)]  # p99 before the fault at 2 s: 0.5
    with _serve._BASELINE_LOCK:
        _serve._BASELINE_P99[app(7)._key()] = 0.02
    assert app(8)._baseline_p99(own, [2.0]) == 0.5  # another seed: not this twin's run
    assert app(7, replicas=3)._baseline_p99(own, [2.0]) == 0.5  # other params: another experiment
    assert app(7)._baseline_p99(own, [2.0]) == 0.02
    assert app(7)._baseline_p99(own, [2.0]) == 0.5  # taken by its chaos run: it cannot reach a later one


def test_the_serve_workload_refuses_a_fault_without_a_measured_table() -> None:
    from chaos import ActorTarget, Kill, KillNode, NodeTarget, Pause
    from chaos._schedule import ScheduledFault
    from scenarios.workloads.serve._app import ServeApp

    measured = [ScheduledFault(2, Kill(ActorTarget(class_name=c)))
                for c in ("ServeReplica:raychaos:echo", "ServeController", "ProxyActor")]
    assert ServeApp.schedule_problems([*measured, ScheduledFault(3, KillNode(NodeTarget()))]) == []
    odd = [ScheduledFault(2, KillNode(NodeTarget(allow_head=True))),
           ScheduledFault(3, Kill(ActorTarget(class_name="Buffer"))), ScheduledFault(4, Kill(ActorTarget(name="echo"))),
           ScheduledFault(5, Pause(ActorTarget(class_name="ServeController"), seconds=1.0))]
    problems = ServeApp.schedule_problems(odd)
    assert [p.field for p in problems] == ["faults[0].kind", "faults[1].target.class_name", "faults[2].target",
                                           "faults[3].kind"]
    assert problems[0].value == "kill_node" and "'Buffer'" in problems[1].fix and problems[3].value == "pause"
    assert 'kind = "kill_node" of a worker node' in problems[3].fix


def test_load_scenario_refuses_a_fault_the_serve_workload_cannot_judge(tmp_path: Path) -> None:
    from scenarios import ScenarioError, load_scenario

    path = tmp_path / "pause.toml"
    path.write_text('workload = "serve"\nduration = 6\n[[faults]]\nat = 2\nkind = "pause"\nseconds = 1\n'
                    'target = { kind = "actor", class_name = "ServeController" }\n', encoding="utf-8")
    with pytest.raises(ScenarioError) as caught:
        load_scenario(str(path))
    (problem,) = caught.value.problems
    assert (problem.field, problem.value) == ("faults[0].kind", "pause")
    assert 'use kind = "kill"' in problem.fix and "faults[0].kind = 'pause'" in str(caught.value)
    load_scenario("serve-replica-kill")  # a kill of a replica is judged: loaded
    assert load_scenario("serve-node-loss").nodes == 3  # so is a worker node's loss


EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "serve"


def test_the_serve_example_loads_from_its_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    from scenarios import load_scenario

    monkeypatch.setattr(sys, "path", list(sys.path))  # loading checks the form only; nothing may stay on it
    monkeypatch.chdir(EXAMPLE)
    scenario = load_scenario("serve-app.toml")
    assert scenario.params["app"] == "app:app" and scenario.workload == "serve"


@pytest.mark.parametrize(("app", "field_fix"), [
    ("app", "is not 'module:attribute'"),
    ("app:", "is not 'module:attribute'"),
    ("my-app:app", "is not 'module:attribute'"),
])
def test_a_serve_app_of_the_wrong_form_is_refused_at_load_time(tmp_path: Path, app: str, field_fix: str) -> None:
    from scenarios import ScenarioError, load_scenario

    path = tmp_path / "bad.toml"
    path.write_text(f'workload = "serve"\nduration = 6\n[params]\napp = "{app}"\n[[faults]]\nat = 2\nkind = "kill"\n'
                    'target = { kind = "actor", class_name = "ServeController" }\n', encoding="utf-8")
    with pytest.raises(ScenarioError) as caught:
        load_scenario(str(path))
    (problem,) = caught.value.problems
    assert (problem.field, problem.value) == ("params.app", app)
    assert field_fix in problem.fix, problem.fix


def test_a_serve_app_not_found_or_no_application_is_refused_at_setup(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from scenarios.workloads.serve._app import _application

    (tmp_path / "not_an_app_mod.py").write_text("app = 42\n", encoding="utf-8")
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidConfig, match=r"not_an_app_mod.app is 42, not a Serve application.*MyDeployment.bind"):
        _application("not_an_app_mod:app", replicas=2)
    (tmp_path / "raising_app_mod.py").write_text("raise RuntimeError('no model file')\n", encoding="utf-8")
    with pytest.raises(InvalidConfig, match=r"importing 'raising_app_mod' raised RuntimeError: no model file"):
        _application("raising_app_mod:app", replicas=2)
    with pytest.raises(InvalidConfig, match=r"No module named 'no_such_serve_mod'.*current directory.*app's folder"):
        _application("no_such_serve_mod:app", replicas=2)


def _run(label: RunLabel, reqs: list[Request]) -> RunResult:
    from scenarios.workloads.serve._app import per_second

    series = {name: tuple(points) for name, points in per_second(reqs, timeout=TIMEOUT).items()}
    return RunResult(scenario="serve-app", label=label, seed=0, status=RunStatus.COMPLETED, seconds=4.0, verdicts=(),
                     probes=(), samples=(), faults=(), series=series)


def test_the_report_draws_a_serve_run_per_second_beside_its_twin() -> None:
    from scenarios.reports._files import summary
    from scenarios.reports._html import render_html
    from scenarios.workloads.serve._app import SERIES

    # The second from 2 s: 10 requests time out, the other 10 answered in 300 ms.
    hit = [Request(2 + i / 20, 2.0, failure=Failure.TIMEOUT) if i < 10 else Request(2 + i / 20, 0.3, status=200)
           for i in range(20)]
    chaos = [r for r in _steady(4.0) if not 2 <= r.sent < 3] + hit
    baseline, run = _run(RunLabel.BASELINE, _steady(4.0)), _run(RunLabel.CHAOS, chaos)
    assert run.series["requests/s"] == ((0.0, 20.0), (1.0, 20.0), (2.0, 20.0), (3.0, 20.0))
    assert run.series["errors/s"][2] == (2.0, 10.0) and run.series["served/s"][2] == (2.0, 10.0)
    assert run.series["p50_ms"][2] == (2.0, 300.0) and run.series["p99_ms"][2] == (2.0, 300.0)
    assert baseline.series["p99_ms"][2] == (2.0, 10.0) and baseline.series["errors/s"][2] == (2.0, 0.0)
    panels = {p.split("'", 1)[0]: p for p in render_html([baseline, run]).split("data-series='")[1:]}
    for name in SERIES:
        assert "data-run='baseline'" in panels[name] and "data-run='chaos'" in panels[name], name
    runs = summary([baseline, run])["runs"]
    assert isinstance(runs, list) and runs[1]["series"]["p99_ms"][2] == [2.0, 300.0]


def test_a_second_without_an_answer_has_no_latency_point() -> None:
    from scenarios.workloads.serve._app import per_second

    lost = [Request(1 + i / 20, 2.0, failure=Failure.TIMEOUT) for i in range(20)]
    series = per_second(_steady(1.0) + lost, timeout=TIMEOUT)
    assert series["errors/s"] == [(0.0, 0.0), (1.0, 20.0)]
    assert [t for t, _ in series["p99_ms"]] == [0.0]  # a gap, not a latency of zero


def test_an_app_is_imported_afresh_each_run_and_leaves_sys_path_as_it_was(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    from ray import serve

    from scenarios.workloads.serve._app import _application

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    before = list(sys.path)
    source = ("from ray import serve\n@serve.deployment(num_replicas={n})\nclass D:\n"
              "    def __call__(self, request): return 'ok'\napp = D.bind()\n")
    (tmp_path / "fresh_app_mod.py").write_text(source.format(n=2), encoding="utf-8")
    first = _application("fresh_app_mod:app", replicas=2)
    (tmp_path / "fresh_app_mod.py").write_text(source.format(n=1), encoding="utf-8")
    os.utime(tmp_path / "fresh_app_mod.py", (1, 1))  # else a same-second rewrite may reuse the bytecode
    second = _application("fresh_app_mod:app", replicas=2)
    assert isinstance(second, serve.Application) and sys.path == before
    assert [first._bound_deployment.num_replicas, second._bound_deployment.num_replicas] == [2, 1]


def test_a_missing_dependency_of_an_app_is_named_as_such(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from scenarios.workloads.serve._app import _application

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    (tmp_path / "needs_dep_mod.py").write_text("import no_such_dep_xyz\n", encoding="utf-8")
    with pytest.raises(InvalidConfig, match=r"needs 'no_such_dep_xyz', which is not installed"):
        _application("needs_dep_mod:app", replicas=2)


@pytest.mark.parametrize(("params", "field", "said"), [
    ('path = "?text=a"', "params.path", "is not a route"),
    ('path = "/a b"', "params.path", "is not a route"),
    ('expect_body = "ok"', "params.expect_body", "always checked"),  # the built-in app's body is its own
])
def test_params_the_serve_workload_cannot_take_are_refused_at_load_time(tmp_path: Path, params: str, field: str,
                                                                         said: str) -> None:
    from scenarios import ScenarioError, load_scenario

    scenario = tmp_path / "bad.toml"
    scenario.write_text(f'workload = "serve"\nduration = 6\n[params]\n{params}\n[[faults]]\nat = 2\n'
                        'kind = "kill"\ntarget = { kind = "actor", class_name = "ServeController" }\n',
                        encoding="utf-8")
    with pytest.raises(ScenarioError) as caught:
        load_scenario(str(scenario))
    (problem,) = caught.value.problems
    assert problem.field == field and said in problem.fix, problem


# -- each verdict's edges: where a request, a fault or a bound sits exactly on a boundary ---------


def test_a_request_answered_as_the_window_opens_was_out_in_it() -> None:
    window = Window(2.0, 5.0)
    assert window.meets(Request(1.0, 1.0, status=500))  # ended at 2.0: out when it opened
    assert not window.meets(Request(1.0, 0.999, status=500))
    assert window.meets(Request(4.999, 0.01, status=500)) and not window.meets(Request(5.0, 0.01, status=500))


def test_a_fault_that_documents_nothing_says_so() -> None:
    assert _fault(ServeFault.CONTROLLER, 2.0).describe().endswith(": none")
    assert "500" in _kill(2.0).describe() and "timeout" in _kill(2.0).describe()


def test_recovery_starts_at_the_fault_and_its_bounds_are_inclusive() -> None:
    reqs = _outage(_steady(10), 3, 5, Failure.REFUSED)
    # The first second all served is the one starting when the outage ends: 2.0 s after the fault.
    assert recovery_time(reqs, 3.0, bound=0.01, timeout=TIMEOUT) == 2.0  # a p99 exactly at its bound
    assert recovery_time(reqs, 3.0, bound=0.0099, timeout=TIMEOUT) is None
    # A request sent exactly at the fault counts among the later ones; the last request ends the search.
    at_fault = [Request(3.0, 0.01, status=200), Request(3.5, 0.01, status=200)]
    assert recovery_time(at_fault, 3.0, bound=0.05, timeout=TIMEOUT) == 0.0
    assert recovery_time([Request(3.0, 0.01, status=200)], 3.0, bound=0.05, timeout=TIMEOUT) == 0.0
    # A window is one second wide, its end excluded: a failure at 4.0 s is not in the one from 3.0 s.
    edge = [Request(3.0 + i / 4, 0.01, status=200) for i in range(4)] + [Request(4.0, 0.01, failure=Failure.RESET)]
    assert recovery_time(edge, 3.0, bound=0.05, timeout=TIMEOUT) == 0.0
    # A 200 past the request's timeout is no answer: that second does not count as recovered.
    slow = [Request(3.0, TIMEOUT + 0.1, status=200), Request(5.0, 0.01, status=200)]
    assert recovery_time(slow, 3.0, bound=9.0, timeout=TIMEOUT) == 1.25  # the first second holding only 5.0 s


def test_recovered_to_baseline_bounds_are_the_twins_p99_times_the_factor_plus_the_slack() -> None:
    reqs = _outage(_steady(10), 3, 5, Failure.REFUSED)
    kw = {"timeout": TIMEOUT, "factor": 2.0}
    # p99 of 10 ms: within 0.004 x 2 + 0.002 = 10 ms exactly, not within 0.004 x 2 + 0.0019.
    assert recovered_verdict(reqs, [3.0], baseline_p99=0.004, slack=0.002, within=3, **kw).held
    assert not recovered_verdict(reqs, [3.0], baseline_p99=0.004, slack=0.0019, within=3, **kw).held
    assert recovered_verdict(reqs, [3.0], baseline_p99=0.01, slack=0.0, within=2.0, **kw).held  # recovered at the bound
    assert not recovered_verdict(reqs, [3.0], baseline_p99=0.01, slack=0.0, within=1.99, **kw).held
    nothing = recovered_verdict(reqs, [3.0], baseline_p99=math.nan, slack=0.0, within=3, **kw)
    assert nothing.validity is Validity.UNKNOWN


def test_a_request_hangs_only_past_its_timeout_and_grace() -> None:
    reqs = _steady(2)
    assert no_hang_verdict([*reqs, Request(1.0, 2.5, status=200)], timeout=TIMEOUT, grace=0.5).held  # exactly at it
    assert not no_hang_verdict([*reqs, Request(1.0, 2.51, status=200)], timeout=TIMEOUT, grace=0.5).held
    assert not no_hang_verdict([*reqs, Request(1.0, 2.0, status=200)], timeout=TIMEOUT, grace=-0.5).held


def test_errors_documented_counts_what_only_a_window_excused_and_breaks_on_an_unmeasured_fault() -> None:
    named = Request(2.2, 0.01, status=500, replica=KILLED)
    unnamed = [Request(2.4, 0.01, status=500), Request(2.6, TIMEOUT, failure=Failure.TIMEOUT)]
    odd = Request(2.8, 0.01, status=503)  # no fault documents it, and it names no replica
    verdict = errors_documented_verdict([*_steady(5), named, *unnamed, odd], [_kill(2.0)])
    assert not verdict.held and "4 failed requests, 3 excused (2 by their window alone" in verdict.detail, \
        verdict.detail
    clean = errors_documented_verdict(_steady(5), [_kill(2.0)], unmeasured=["kill of ServeController? no"])
    assert not clean.held and "faults without a measured table" in clean.detail


def test_replicas_are_restored_by_the_bound_counted_from_the_last_fault() -> None:
    replica = [(2.0, ServeFault.REPLICA)]
    assert replicas_restored_verdict([_look(7.0)], replica, replicas=2, within=5).held  # a look exactly at the bound
    assert not replicas_restored_verdict([_look(7.01)], replica, replicas=2, within=5).held
    assert not replicas_restored_verdict([_look(1.9)], replica, replicas=2, within=5).held  # before the fault
    assert replicas_restored_verdict([_look(2.0)], replica, replicas=2, within=5).held  # at it
    assert replicas_restored_verdict([], [], replicas=2, within=5).validity is Validity.UNKNOWN
