"""`raychaos attack` on a cluster as it is: its nodes run from an environment with only
``ray[default]`` (as a staging image is), raychaos only where the attack is run from. The agent
travels with the attack, and leaves nothing behind; a node that cannot run one is named, and
the attack refused before any fault."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
import ray as ray_here

from chaos import wait_until
from chaos.cluster._cluster import _free_port
from conftest import stop_ray_start
from test_attack import FRESH, SCHEDULE, _assert_every_fault_confirmed

RAYCHAOS = os.path.join(os.path.dirname(sys.executable), "raychaos")
CONSTRAINTS = Path(__file__).resolve().parent.parent / "constraints.txt"
#: Built once per Ray and Python version, then reused: a virtual environment with ray[default] only.
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
BARE = Path.home() / ".cache" / "raychaos" / f"bare-ray-{ray_here.__version__}-py{PYTHON}"
#: The program: a detached named actor, called in a loop; progress written after each answer.
PROGRAM = textwrap.dedent("""\
    import os, sys, time
    import ray

    progress = sys.argv[1]
    ray.init(address=os.environ["RAY_ADDRESS"], namespace="app", log_to_driver=False)

    @ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0)
    class Worker:
        def __init__(self):
            self.n = 0
        def incr(self):
            self.n += 1
            return self.n

    worker = Worker.options(name="worker", lifetime="detached").remote()
    end = time.monotonic() + 180
    while time.monotonic() < end:
        try:
            ray.get(worker.incr.remote(), timeout=10)
            with open(progress + ".tmp", "w") as f:
                f.write(str(time.time()))
            os.replace(progress + ".tmp", progress)
        except Exception as exc:
            print("call failed:", type(exc).__name__, flush=True)
        time.sleep(0.1)
""")
#: Run with the bare environment's Python: the agents alive on the cluster, by node.
AGENTS_ALIVE = textwrap.dedent("""\
    import os
    from ray.util.state import list_actors
    alive = list_actors(address=os.environ["RAY_ADDRESS"], filters=[("class_name", "=", "ChaosAgent"),
                        ("state", "!=", "DEAD")], timeout=30)
    print(len(alive))
""")


def _bare_venv() -> Path:
    """The environment a staging image has: ``ray[default]`` at this Ray's version, pinned by the
    project's constraints, nothing else. Built with uv on first use (PyPI), then cached; built
    in place (its scripts name its own interpreter), complete once its marker is written."""
    if (BARE / ".complete").exists():
        return BARE
    shutil.rmtree(BARE, ignore_errors=True)  # a build that was cut short
    uv = os.path.join(os.path.dirname(sys.executable), "uv")
    base = os.path.realpath(sys.executable)  # the interpreter itself, not this project's venv
    subprocess.run([uv, "venv", "-q", "--python", base, str(BARE)], check=True, timeout=300)
    subprocess.run([uv, "pip", "install", "-q", "--python", str(BARE / "bin" / "python"),
                    f"ray[default]=={ray_here.__version__}", "-c", str(CONSTRAINTS)], check=True, timeout=900)
    (BARE / ".complete").write_text(ray_here.__version__)
    return BARE


@dataclass(frozen=True)
class Bare:
    venv: Path
    address: str
    env: dict[str, str]  #: the cluster's address and token, given explicitly
    worker_node: subprocess.Popen[bytes]  #: the second node's `ray start --block`


def _start(venv: Path, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([str(venv / "bin" / "ray"), "start", "--block", "--disable-usage-stats", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)


def _python(bare: Bare, code: str, *args: str) -> str:
    out = subprocess.run([str(bare.venv / "bin" / "python"), "-c", code, *args], env=bare.env, capture_output=True,
                         text=True, timeout=120, check=True)
    return out.stdout


# The session's shared cluster (and its chaos agents) down first: these tests look for
# raychaos's processes on the whole machine, and find none only when no other cluster runs.
pytestmark = pytest.mark.usefixtures("no_shared_cluster")


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bare]:
    """A head and a second node from the bare environment, with a token of their own. Each
    ``ray start --block`` stops its node when its process group is ended: unlike ``ray stop``,
    which ends every Ray process of the machine, it stops this cluster only."""
    venv, port = _bare_venv(), _free_port()
    address, temp = f"127.0.0.1:{port}", tmp_path_factory.mktemp("bare-ray")
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16), "RAY_ADDRESS": address}
    head = _start(venv, ["--head", f"--port={port}", "--num-cpus=2", f"--temp-dir={temp}", "--include-dashboard=true",
                         f"--dashboard-port={_free_port()}", f"--dashboard-agent-listen-port={_free_port()}"], env)
    nodes = [head]
    try:
        wait_until(lambda: subprocess.run([str(venv / "bin" / "ray"), "status", f"--address={address}"],
                                          capture_output=True, env=env, timeout=30, check=False).returncode == 0,
                   timeout=90, interval=1.0, what="the bare head to answer")
        nodes.append(_start(venv, [f"--address={address}", "--num-cpus=1",
                                   f"--dashboard-agent-listen-port={_free_port()}"], env))
        bare = Bare(venv, address, env, nodes[1])
        wait_until(lambda: _python(bare, "import ray; ray.init(); print(len([n for n in ray.nodes() if n['Alive']]))"
                                   ).strip() == "2", timeout=90, interval=1.0, what="the second node to join")
        yield bare
    finally:
        for proc in reversed(nodes):
            stop_ray_start(proc)


def _ours() -> list[str]:
    """Processes raychaos leaves on a node when it does not clean up: its agent, a pause's
    healer, a CPU hog."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        text = " ".join(proc.info["cmdline"] or [])
        if "ray::ChaosAgent" in text or "chaos.agents._healer" in text or "burning" in text:
            found.append(f"{proc.pid}: {text[:120]}")
    return found


def _attack(bare: Bare, tmp_path: Path, probe: str, *extra: str) -> subprocess.CompletedProcess[str]:
    schedule = tmp_path / "attack.toml"
    schedule.write_text(SCHEDULE)
    # From a directory of its own, as from a laptop: Ray puts the driver's directory first on its
    # workers' path, and this checkout's chaos must not be what the nodes import.
    return subprocess.run([RAYCHAOS, "attack", str(schedule), "--address", bare.address, "--probe", probe,
                           "--recover-within", "4", "--report", str(tmp_path / "r"), *extra],
                          capture_output=True, text=True, timeout=300, check=False, env=bare.env, cwd=tmp_path)


@pytest.mark.slow
def test_an_attack_on_a_cluster_with_only_ray_installed(bare: Bare, tmp_path: Path) -> None:
    progress = tmp_path / "progress"
    (tmp_path / "program.py").write_text(PROGRAM)
    program = subprocess.Popen([str(bare.venv / "bin" / "python"), str(tmp_path / "program.py"), str(progress)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=bare.env)
    try:
        wait_until(progress.exists, timeout=90, interval=0.2, what="the program's first progress")
        out = _attack(bare, tmp_path, FRESH.format(progress))
    finally:
        program.kill()
        program.wait(timeout=30)
    run = json.loads((tmp_path / "r" / "summary.json").read_text())["runs"][-1]
    _assert_every_fault_confirmed(out, run, tmp_path / "r")
    assert _python(bare, AGENTS_ALIVE).strip() == "0"
    wait_until(lambda: not _ours(), timeout=30, interval=0.2, what="raychaos's processes to be gone")


def _raylet_of(node: subprocess.Popen[bytes]) -> psutil.Process:
    (raylet,) = [p for p in psutil.Process(node.pid).children(recursive=True) if p.name() == "raylet"]
    return raylet


def _node_id(raylet: psutil.Process) -> str:
    (arg,) = [a for a in raylet.cmdline() if a.startswith("--node_id=")]
    return arg.split("=", 1)[1]


@pytest.mark.slow
def test_a_node_that_cannot_run_an_agent_refuses_the_attack_before_any_fault(bare: Bare, tmp_path: Path) -> None:
    raylet = _raylet_of(bare.worker_node)
    node = _node_id(raylet)
    raylet.suspend()  # a frozen node: it takes no new actor, so no agent starts there
    try:
        out = _attack(bare, tmp_path, "true", "--agent-timeout", "5")
    finally:
        raylet.resume()
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-2000:]
    refusal = [line for line in out.stderr.splitlines() if node[:12] in line]
    assert len(refusal) == 1 and "kill: needs a chaos agent that starts and answers" in refusal[0], out.stderr
    assert "did not answer within 5 s" in refusal[0]
    assert not (tmp_path / "r" / "journal.jsonl").exists()  # no run began: no fault
    assert _python(bare, AGENTS_ALIVE).strip() == "0"  # the head's agent and the pending one both gone
    wait_until(lambda: not _ours(), timeout=30, interval=0.2, what="raychaos's processes to be gone")
