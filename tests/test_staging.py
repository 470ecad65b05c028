"""`raychaos attack` on a shared staging cluster, in the shape release engineers meet it: a head
and a worker node of `ray start`, two teams' jobs in two namespaces with actors of the same
class, team A's Serve app (examples/serve) under an open-loop load from the experiment file.

Shown here: the attack's scope hits only team A's actors (team B's pids unchanged); the load's
availability and p99 are judged per fault against the steady state before the first fault; a
stop condition stops the attack early, healed, exit 1 with its reason; a dry run names the
exact processes each fault would hit and changes nothing; an unscoped class target is refused
while two jobs run.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from chaos import wait_until
from chaos.cluster._cluster import _free_port
from conftest import stop_ray_start, wait_for_ray_start_head

pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.usefixtures("no_shared_cluster")]

ROOT = Path(__file__).resolve().parents[1]
TOKEN_ENV = {**os.environ, "RAY_AUTH_MODE": "token"}
RAYCHAOS = os.path.join(os.path.dirname(sys.executable), "raychaos")
RAY = os.path.join(os.path.dirname(sys.executable), "ray")
QUERY = "/?text=the+quick+brown+fox"
ANSWER = '{"words":4,"letters":16}'

#: A team's program: two `Worker` actors in its namespace, called in a loop; team A's also
#: deploys examples/serve's WordCount app. It writes its job id and actors' pids once they answer.
TEAM = textwrap.dedent("""\
    import json, sys, time
    import ray

    address, namespace, out, serve_port = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    ray.init(address=address, namespace=namespace, log_to_driver=False)

    @ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0)
    class Worker:
        def pid(self):
            import os
            return os.getpid()

    workers = [Worker.options(name=f"w{i}").remote() for i in range(2)]
    pids = ray.get([w.pid.remote() for w in workers], timeout=60)
    if serve_port:
        from ray import serve
        sys.path.insert(0, sys.argv[5])
        import app
        serve.start(http_options={"host": "127.0.0.1", "port": serve_port})
        serve.run(app.app, name="words", route_prefix="/")
    with open(out + ".tmp", "w") as f:
        json.dump({"job": ray.get_runtime_context().get_job_id(), "pids": pids}, f)
    import os
    os.replace(out + ".tmp", out)
    while True:
        try:
            ray.get([w.pid.remote() for w in workers], timeout=30)
        except Exception:
            pass
        time.sleep(0.2)
""")


@dataclass(frozen=True)
class Staging:
    address: str
    serve_port: int
    team_a: dict  #: {"job": hex id, "pids": [worker pids]}
    team_b: dict
    nodes: tuple[subprocess.Popen[bytes], ...]


def _ray_start(args: list[str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([RAY, "start", "--block", "--disable-usage-stats", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=TOKEN_ENV, start_new_session=True)


def _team(address: str, namespace: str, out: Path, serve_port: int) -> subprocess.Popen[bytes]:
    script = out.parent / "team.py"
    script.write_text(TEAM)
    return subprocess.Popen([sys.executable, str(script), address, namespace, str(out), str(serve_port),
                             str(ROOT / "examples" / "serve")], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env=TOKEN_ENV, cwd=out.parent)


@pytest.fixture(scope="module")
def staging(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Staging]:
    port, work = _free_port(), tmp_path_factory.mktemp("teams")
    temp = tempfile.mkdtemp(prefix="rc-st-", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    address = f"127.0.0.1:{port}"
    nodes = [_ray_start(["--head", f"--port={port}", "--num-cpus=2", f"--temp-dir={temp}", "--include-dashboard=true",
                         f"--dashboard-port={_free_port()}", f"--dashboard-agent-listen-port={_free_port()}"])]
    teams: list[subprocess.Popen[bytes]] = []
    try:
        wait_for_ray_start_head(address, env=TOKEN_ENV, what="the staging head to list its node")
        nodes.append(_ray_start([f"--address={address}", "--num-cpus=2",
                                 f"--dashboard-agent-listen-port={_free_port()}"]))
        serve_port = _free_port()
        (work / "a").mkdir()
        (work / "b").mkdir()
        teams = [_team(address, "team-a", work / "a" / "ready.json", serve_port),
                 _team(address, "team-b", work / "b" / "ready.json", 0)]
        wait_until(lambda: all((work / t / "ready.json").exists() for t in "ab"), timeout=180, interval=0.5,
                   what="both teams' programs (and team A's Serve app) to be up")
        yield Staging(address, serve_port, json.loads((work / "a" / "ready.json").read_text()),
                      json.loads((work / "b" / "ready.json").read_text()), tuple(nodes))
    finally:
        for proc in teams:
            proc.kill()
            proc.wait(timeout=30)
        for proc in reversed(nodes):
            stop_ray_start(proc)
        shutil.rmtree(temp, ignore_errors=True)


def _cluster_processes(staging: Staging) -> set[tuple[int, str]]:
    """Every process of the staging cluster (under its `ray start`s) and whether it runs."""
    found = set()
    for node in staging.nodes:
        for proc in psutil.Process(node.pid).children(recursive=True):
            try:
                found.add((proc.pid, "stopped" if proc.status() == psutil.STATUS_STOPPED else "running"))
            except psutil.NoSuchProcess:
                pass
    return found


def _experiment(staging: Staging, tmp_path: Path, body: str, *, scoped: bool = True) -> Path:
    scope = f'scope = {{ job = "{staging.team_a["job"]}" }}\n' if scoped else ""
    path = tmp_path / "staging.toml"
    path.write_text(textwrap.dedent(f"""\
        kind = "attack"
        duration = 14
        probe_timeout = 1
        {scope}
        [load]
        url = "http://127.0.0.1:{staging.serve_port}{QUERY}"
        rate = 20
        timeout = 2
        body = '{ANSWER}'

        [slo]
        availability = 0.8
        p99_factor = 10        # two cores: a restart's work slows the app's answers for a moment
        p99_slack_ms = 500
        window = 3
        recover_within = 10
        """) + textwrap.dedent(body), encoding="utf-8")
    return path


KILLS = """
[[faults]]
at = 5
kind = "kill"
target = { kind = "actor", class_name = "Worker", pick = "all" }

[[faults]]
at = 9
kind = "kill"
target = { kind = "actor", class_name = "ServeReplica:words:WordCount" }
"""


def _attack(staging: Staging, path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RAYCHAOS, "attack", str(path), "--address", staging.address, *args],
                          capture_output=True, text=True, timeout=300, check=False, env=TOKEN_ENV, cwd=path.parent)


def _worker_pids(staging: Staging, namespace: str) -> list[int]:
    code = ("import json, sys, ray; ray.init(address=sys.argv[1], namespace=sys.argv[2], log_to_driver=False); "
            "print(json.dumps([ray.get(ray.get_actor(f'w{i}').pid.remote(), timeout=60) for i in range(2)]))")
    out = subprocess.run([sys.executable, "-c", code, staging.address, namespace], capture_output=True, text=True,
                         timeout=120, check=True, env=TOKEN_ENV)
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def test_a_dry_run_names_the_exact_targets_and_changes_nothing(staging: Staging, tmp_path: Path) -> None:
    before = _cluster_processes(staging)
    out = _attack(staging, _experiment(staging, tmp_path, KILLS), "--dry-run")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    for pid in staging.team_a["pids"]:
        assert f"pid {pid} on node" in out.stdout, out.stdout
    for pid in staging.team_b["pids"]:
        assert f"pid {pid} " not in out.stdout, out.stdout  # team B's workers are out of the scope
    assert "hits 2 of 2 matching now" in out.stdout and "hits 1 of 2 matching now" in out.stdout, out.stdout
    assert _cluster_processes(staging) == before  # no process started, ended or stopped
    # A fault that would find nothing now: the attack would fail, so the dry run says no.
    nobody = KILLS.replace('class_name = "Worker"', 'class_name = "Nobody"')
    out = _attack(staging, _experiment(staging, tmp_path, nobody), "--dry-run")
    assert out.returncode == 2 and "WOULD FAIL" in out.stdout and "class Nobody" in out.stderr, out.stderr


def test_an_unscoped_class_target_is_refused_while_two_jobs_run(staging: Staging, tmp_path: Path) -> None:
    before = _cluster_processes(staging)
    out = _attack(staging, _experiment(staging, tmp_path, KILLS, scoped=False))
    assert out.returncode == 2, out.stdout[-3000:] + out.stderr[-3000:]
    assert staging.team_a["job"] in out.stderr and staging.team_b["job"] in out.stderr, out.stderr
    assert "all actor(s) of class Worker, one actor(s) of class ServeReplica:words:WordCount would reach any of " \
           "them" in out.stderr, out.stderr
    assert _cluster_processes(staging) == before


def test_the_attack_hits_only_its_jobs_actors_and_judges_the_load_per_fault(staging: Staging, tmp_path: Path) -> None:
    b_before = _worker_pids(staging, "team-b")
    path = _experiment(staging, tmp_path, KILLS)
    out = _attack(staging, path, "--report", str(tmp_path / "r"))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    run = json.loads((tmp_path / "r" / "summary.json").read_text())["runs"][-1]
    assert [f["status"] for f in run["faults"]] == ["injected", "injected"], run["faults"]
    verdicts = {v["name"]: v for v in run["verdicts"]}
    assert {"slo_steady_state", "slo_availability", "slo_latency", "slo_recovered"} <= set(verdicts)
    assert all(v["held"] for v in verdicts.values()), verdicts
    for name in ("slo_availability", "slo_latency"):  # judged per fault: each fault's window named
        assert "kill@5." in verdicts[name]["detail"] and "kill@9." in verdicts[name]["detail"], verdicts[name]
    assert _worker_pids(staging, "team-b") == b_before  # team B's workers untouched
    assert not set(_worker_pids(staging, "team-a")) & set(staging.team_a["pids"])  # team A's all restarted


PAUSE = """
[abort_when]
slo_breach_seconds = 2

[[faults]]
at = 5
kind = "pause"
seconds = 8
target = { kind = "actor", class_name = "ServeReplica:words:WordCount", pick = "all" }
"""


def test_a_stop_condition_stops_the_attack_early_healed_with_its_reason(staging: Staging, tmp_path: Path) -> None:
    out = _attack(staging, _experiment(staging, tmp_path, PAUSE), "--report", str(tmp_path / "r"))
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    run = json.loads((tmp_path / "r" / "summary.json").read_text())["runs"][-1]
    assert run["status"] == "aborted" and "abort_when slo_breach_seconds = 2" in run["error"], run
    assert float(run["seconds"]) < 14, run["seconds"]  # stopped before the attack's end
    assert all(status == "running" for _, status in _cluster_processes(staging))  # the pause healed
    wait_until(lambda: _answers(staging), timeout=60, interval=0.5, what="the app to answer again")


def _answers(staging: Staging) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{staging.serve_port}{QUERY}", timeout=2) as answer:
            return answer.status == 200 and ANSWER in answer.read().decode()
    except OSError:
        return False
