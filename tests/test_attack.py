"""`raychaos attack`: faults against a program raychaos did not start, judged by the user's probes."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from chaos import wait_until
from chaos.cluster._cluster import _free_port
from conftest import stop_ray_start, wait_for_ray_start_head
from scenarios import ScenarioError, load_attack
from scenarios.cli import main
from scenarios.model._experiment import Overrides
from scenarios.model._probes import CommandProbe, HttpProbe, PythonProbe
from scenarios.workloads.user._attack import ProbeRun, recovered

#: Ray 2.60 clusters use token authentication; a client sends its token (~/.ray/auth_token,
#: which `ray start` writes) only when asked to.
TOKEN_ENV = {**os.environ, "RAY_AUTH_MODE": "token"}
RAYCHAOS = os.path.join(os.path.dirname(sys.executable), "raychaos")
RAY = os.path.join(os.path.dirname(sys.executable), "ray")
SCHEDULE = """\
duration = 8

[[faults]]
at = 2
kind = "kill"
target = { kind = "actor", name = "worker", namespace = "app" }

[[faults]]
at = 5
kind = "kill"
target = { kind = "actor", name = "worker", namespace = "app" }
"""

TRUE_PROBE = Overrides(probes=({"kind": "command", "command": "true"},))  # a probe that always passes


def test_an_attack_file_refuses_what_belongs_to_the_program(tmp_path: Path) -> None:
    path = tmp_path / "attack.toml"
    path.write_text('workload = "sampling"\nnodes = 3\n' + SCHEDULE)
    with pytest.raises(ScenarioError, match="nodes = 3: not for an attack") as caught:
        load_attack(str(path), overrides=TRUE_PROBE)
    assert [(p.field, p.value) for p in caught.value.problems] == [("nodes", 3), ("workload", "sampling")]


def test_an_attack_without_a_probe_is_refused_before_anything_runs(tmp_path: Path) -> None:
    path = tmp_path / "attack.toml"
    path.write_text(SCHEDULE)
    result = CliRunner().invoke(main, ["attack", str(path), "--address", "127.0.0.1:1"])
    assert result.exit_code == 2 and "probes = []" in result.output and "add [[probes]]" in result.output
    result = CliRunner().invoke(main, ["attack", str(path), "--address", "127.0.0.1:1", "--probe-python", "os.getcwd"])
    assert result.exit_code == 2 and "use MODULE:FUNCTION" in result.output


def test_probes_pass_or_fail_and_say_why() -> None:
    assert CommandProbe(command="exit 0").run(timeout=5) == (True, "exit 0")
    assert CommandProbe(command="echo down; exit 3").run(timeout=5) == (False, "exit 3: down")
    assert CommandProbe(command="sleep 5").run(timeout=0.2) == (False, "still running after 0.2 s")
    assert PythonProbe(call="os:getcwd").run(timeout=5)[0]
    assert PythonProbe(call="os:nothing_here").run(timeout=5) == (
        False, "AttributeError: module 'os' has no attribute 'nothing_here'")


class _Service(http.server.BaseHTTPRequestHandler):
    """A service that answers by path: /ok 200 "count 3", /down 503, /slow after 2 s; POSTs echo."""

    def do_GET(self) -> None:
        if self.path == "/slow":
            threading.Event().wait(2.0)  # longer than the probe's timeout
        code, body = {"/ok": (200, b"count 3"), "/down": (503, b"draining")}.get(self.path, (200, b""))
        self.send_response(code)
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        data = self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(201 if self.headers.get("X-Token") == "t" else 401)
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def service() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Service)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    thread.join(timeout=10)


def test_an_http_probe_judges_status_body_and_time(service: str) -> None:
    ok, said = HttpProbe(url=f"{service}/ok", body="count").run(timeout=5)
    assert ok and said.startswith("200 in "), said
    ok, said = HttpProbe(url=f"{service}/ok", body="total").run(timeout=5)
    assert not ok and "body without 'total'" in said, said
    ok, said = HttpProbe(url=f"{service}/down").run(timeout=5)
    assert not ok and "expected 200: draining" in said, said
    assert HttpProbe(url=f"{service}/down", status=503).run(timeout=5)[0]
    ok, said = HttpProbe(url=f"{service}/slow").run(timeout=0.3)
    assert not ok and said.startswith("no answer: TimeoutError"), said
    assert HttpProbe(url=f"{service}/x", method="POST", data="hi", status=201, body="hi",
                     headers={"X-Token": "t"}).run(timeout=5)[0]
    assert not HttpProbe(url=f"{service}/x", method="POST", data="hi", status=201).run(timeout=5)[0]
    ok, said = HttpProbe(url=f"http://127.0.0.1:{_free_port()}/").run(timeout=5)
    assert not ok and said.startswith("no answer: ") and "refused" in said, said


def test_the_command_line_wins_over_the_file_field_by_field(tmp_path: Path) -> None:
    path = tmp_path / "attack.toml"
    path.write_text('kind = "attack"\nprobe_every = 2\nprobe_timeout = 4\nrecovery_within = 20\n' + SCHEDULE
                    + '[[probes]]\nkind = "http"\nurl = "http://127.0.0.1:1/"\n', encoding="utf-8")
    from_file = load_attack(str(path))
    assert (from_file.duration, from_file.recovery_within) == (8.0, 20.0)
    assert {k: from_file.params[k] for k in ("every", "probe_timeout", "recover_within")} == {
        "every": 2.0, "probe_timeout": 4.0, "recover_within": 20.0}
    assert from_file.params["probes"] == [{"kind": "http", "url": "http://127.0.0.1:1/"}]
    given = Overrides(probes=({"kind": "command", "command": "true"},), probe_every=5.0, probe_timeout=1.0,
                      recovery_within=12.0, duration=9.0)
    overridden = load_attack(str(path), overrides=given)
    assert (overridden.duration, overridden.recovery_within) == (9.0, 12.0)
    assert {k: overridden.params[k] for k in ("every", "probe_timeout", "recover_within")} == {
        "every": 5.0, "probe_timeout": 1.0, "recover_within": 12.0}
    assert overridden.params["probes"] == [{"kind": "command", "command": "true"}]  # replaced, not added to


def test_the_attack_options_map_onto_the_files_fields() -> None:
    from scenarios.cli import _overrides

    assert _overrides((), (), (), every=None, probe_timeout=None, recover_within=None, duration=None) == Overrides()
    given = _overrides(("true",), ("m:f",), ("http://h/",), every=2.0, probe_timeout=3.0, recover_within=4.0,
                       duration=5.0)
    assert given == Overrides(probes=({"kind": "command", "command": "true"}, {"kind": "python", "call": "m:f"},
                                      {"kind": "http", "url": "http://h/"}),
                              probe_every=2.0, probe_timeout=3.0, recovery_within=4.0, duration=5.0)


def test_a_failed_probe_must_pass_again_within_the_bound() -> None:
    runs = [ProbeRun(1.0, "p", False, "exit 1"), ProbeRun(2.0, "p", True, "exit 0"),
            ProbeRun(3.0, "p", False, "exit 1"), ProbeRun(9.0, "p", True, "exit 0")]
    assert recovered(runs[:2], within=5) == []
    assert recovered(runs, within=5) == ["p failed at 3.0 s (exit 1) and did not pass again within 5 s"]


# -- against a real program on a `ray start --head` cluster ----------------------------------------

PROGRAM = textwrap.dedent("""\
    import os, sys, time
    import ray

    address, progress, restarts = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ray.init(address=address, namespace="app", log_to_driver=False)

    @ray.remote(max_restarts=restarts, max_task_retries=-1 if restarts else 0, num_cpus=0)
    class Worker:
        def __init__(self):
            self.n = 0
        def incr(self):
            self.n += 1
            return self.n

    worker = Worker.options(name="worker").remote()
    end = time.monotonic() + 120
    while time.monotonic() < end:
        try:
            ray.get(worker.incr.remote(), timeout=10)
            with open(progress + ".tmp", "w") as f:
                f.write(str(time.time()))
            os.replace(progress + ".tmp", progress)  # a probe never reads a half-written file
        except Exception as exc:
            print("call failed:", type(exc).__name__, flush=True)
        time.sleep(0.1)
""")
#: Passes while the program wrote progress in the last second (it writes every 0.1 s).
FRESH = "python3 -c \"import sys, time; sys.exit(time.time() - float(open('{0}').read()) > 1)\""


@dataclass(frozen=True)
class Head:
    address: str  #: the GCS's
    dashboard: str  #: the job API's


@pytest.fixture(scope="module")
def head(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Head]:
    """A cluster someone else started: `ray start --head --block`, stopped with its process.
    Its dashboard agent gets a free port too: Ray's default (52365) is taken by any other
    cluster on the machine (this session's own), and then the agent serves no HTTP and every
    `ray job submit` fails with "No available agent to submit job"."""
    port, dashboard, agent, temp = _free_port(), _free_port(), _free_port(), tmp_path_factory.mktemp("ray-head")
    proc = subprocess.Popen([RAY, "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
                             f"--temp-dir={temp}", "--disable-usage-stats", "--include-dashboard=true",
                             f"--dashboard-port={dashboard}", f"--dashboard-agent-listen-port={agent}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                            env=TOKEN_ENV)  # the mode its clients use: Ray 2.52-2.58 fail a mixed one
    address = f"127.0.0.1:{port}"
    try:
        wait_for_ray_start_head(address, env=TOKEN_ENV, what="`ray start --head` to list its node")
        yield Head(address, f"http://127.0.0.1:{dashboard}")
    finally:
        stop_ray_start(proc)  # --block: its exit stops the cluster's processes


def _program(address: str, tmp_path: Path, *, restarts: int) -> tuple[subprocess.Popen[bytes], Path]:
    script, progress = tmp_path / "program.py", tmp_path / "progress"
    script.write_text(PROGRAM)
    proc = subprocess.Popen([sys.executable, str(script), address, str(progress), str(restarts)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=TOKEN_ENV)
    wait_until(progress.exists, timeout=90, interval=0.2, what="the program's first progress")
    return proc, progress


def _attack(address: str, tmp_path: Path, progress: Path, *,
            submit_to: str | None = None) -> tuple[subprocess.CompletedProcess[str], dict]:
    """`raychaos attack`, from this process, or as a Ray job submitted to ``submit_to``."""
    schedule = tmp_path / "attack.toml"
    schedule.write_text(SCHEDULE)
    command = [RAYCHAOS, "attack", str(schedule), "--address", address, "--probe",
               FRESH.format(progress), "--recover-within", "4", "--report", str(tmp_path / "r")]
    if submit_to:  # the job's driver runs on the head, RAY_ADDRESS set: --address auto
        command = [RAY, "job", "submit", f"--address={submit_to}", "--", *command]
        command[command.index(address)] = "auto"
    out = subprocess.run(command, capture_output=True, text=True, timeout=240, check=False, env=TOKEN_ENV)
    assert (tmp_path / "r" / "summary.json").exists(), out.stdout[-3000:] + out.stderr[-3000:]
    return out, json.loads((tmp_path / "r" / "summary.json").read_text())["runs"][-1]


def _assert_every_fault_confirmed(out: subprocess.CompletedProcess[str], run: dict, report: Path) -> None:
    assert out.returncode == 0, out.stdout[-3000:]
    assert [f["status"] for f in run["faults"]] == ["injected", "injected"]
    assert all(v["held"] for v in run["verdicts"]), run["verdicts"]
    events = [json.loads(line) for line in (report / "journal.jsonl").read_text().splitlines()]
    # A kill journals its inject only once its process is confirmed gone (else it raises).
    assert sum(e["kind"] == "inject" and e["fault"]["kind"] == "kill" and bool(e["pid"]) for e in events) == 2


@pytest.mark.slow
def test_an_attack_on_a_program_raychaos_did_not_start(head: Head, tmp_path: Path) -> None:
    program, progress = _program(head.address, tmp_path, restarts=-1)
    try:
        out, run = _attack(head.address, tmp_path, progress)
    finally:
        program.kill()
    _assert_every_fault_confirmed(out, run, tmp_path / "r")


@pytest.mark.slow
@pytest.mark.deep  # CI's budget: make slow attacks a program raychaos did not start
def test_an_attack_submitted_as_a_ray_job(head: Head, tmp_path: Path) -> None:
    # A CI pipeline with no shell on the head: the attack is itself a job of the cluster.
    program, progress = _program(head.address, tmp_path, restarts=-1)
    try:
        out, run = _attack(head.address, tmp_path, progress, submit_to=head.dashboard)
    finally:
        program.kill()
    assert "succeeded" in out.stdout, out.stdout[-3000:]
    _assert_every_fault_confirmed(out, run, tmp_path / "r")


@pytest.mark.slow
def test_an_attack_fails_a_program_that_does_not_recover(head: Head, tmp_path: Path) -> None:
    program, progress = _program(head.address, tmp_path, restarts=0)  # its actor dies with the first kill
    try:
        out, run = _attack(head.address, tmp_path, progress)
    finally:
        program.kill()
    broken = {v["name"] for v in run["verdicts"] if not v["held"]}
    assert out.returncode == 1 and {"probes_pass_after_heal", "probes_recover"} <= broken, run["verdicts"]
