"""``raychaos run`` checks every need of a scenario before it starts anything (a cluster, a
mount, a Redis): an extra, a Debian package's tool, root. What it lacks is one line each,
naming what is missing and how to get it, exit 2; never a traceback from halfway through
setup. The needs it checks are the ones ``raychaos list`` says: one list of typed records.
Ray-free: every path that could start something is made to fail the test instead."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from scenarios import builtin_names, load_scenario
from scenarios.cli import EXIT_BAD_INPUT, main
from scenarios.model._needs import FUSE_FIX, NET_FIX, REDIS_FIX, ROOT_FIX, Host, missing_needs, needs_of, scenario_needs
from scenarios.model._scenario import resolve_workload

ROOT = Path(__file__).resolve().parents[1]
#: A machine that has everything: the checks' answers when nothing is missing.
EVERYTHING = Host(has_module=lambda m: True, which=lambda c: f"/usr/bin/{c}", exists=lambda p: True, euid=lambda: 0)
#: A machine that has nothing a need asks for.
NOTHING = Host(has_module=lambda m: False, which=lambda c: None, exists=lambda p: False, euid=lambda: 1000)


def _missing(name: str, host: Host, *, embedded: bool = True) -> list[str]:
    scenario = load_scenario(name)
    return missing_needs(scenario, resolve_workload(scenario.workload), host=host, embedded=embedded)


def _starts_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any start of a run, a cluster, a fault filesystem or a Redis fails the test."""
    import ray

    import chaos
    import chaos.cluster
    import chaos.disks._fusefs
    import scenarios.runner._run
    import scenarios.workloads.user._job

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("started something: the needs must be checked before anything starts")

    for owner, name in ((ray, "init"), (chaos, "local_cluster"), (scenarios.runner._run, "run_scenario"),
                        (chaos.disks._fusefs, "fault_filesystem"), (chaos.cluster, "redis_server"),
                        (scenarios.workloads.user._job, "agent_port_taken")):
        monkeypatch.setattr(owner, name, refuse)


# -- what each need says, and that list and check are one list --------------------------------------

def test_power_loss_without_the_disk_extra_says_the_extra_and_its_fix() -> None:
    host = Host(has_module=lambda m: m != "mfusepy", which=EVERYTHING.which, exists=EVERYTHING.exists,
                euid=EVERYTHING.euid)
    assert _missing("power-loss", host) == [
        "scenario 'power-loss': storage_faultfs = true (its checkpoint storage on a fault filesystem) needs "
        "mfusepy, which is not installed; install it with pip install 'raychaos[disk]'"]


@pytest.mark.parametrize(("name", "host", "said"), [
    ("power-loss", Host(which=lambda c: None if c == "fusermount3" else "/x", exists=lambda p: p != "/dev/fuse",
                        has_module=lambda m: True, euid=lambda: 0),
     [f"scenario 'power-loss': storage_faultfs = true (its checkpoint storage on a fault filesystem) needs "
      f"fusermount3, which is not on PATH and /dev/fuse, which does not exist; {FUSE_FIX}"]),
    ("gcs-restart", Host(which=lambda c: None, has_module=lambda m: True, exists=lambda p: True, euid=lambda: 0),
     ["scenario 'gcs-restart': gcs_fault_tolerance = true (a Redis it starts for the head's GCS) needs "
      f"redis-server, which is not on PATH; {REDIS_FIX}"]),
    ("full-disk", Host(euid=lambda: 1000, has_module=lambda m: True, which=lambda c: "/x", exists=lambda p: True),
     [f"scenario 'full-disk': storage_mb = 8 (a tmpfs it mounts) needs root, and this process runs as uid 1000; "
      f"{ROOT_FIX}"]),
    ("partition-worker", Host(euid=lambda: 1000, which=lambda c: None if c == "tc" else "/x",
                              has_module=lambda m: True, exists=lambda p: True),
     ["scenario 'partition-worker': network = true (nodes in network namespaces) needs root, and this process "
      f"runs as uid 1000; {ROOT_FIX}",
      f"scenario 'partition-worker': network = true (nodes in network namespaces) needs tc, which is not on PATH; "
      f"{NET_FIX}"]),
    ("dqn-cartpole", Host(has_module=lambda m: m != "torch", which=lambda c: "/x", exists=lambda p: True,
                          euid=lambda: 0),
     ["scenario 'dqn-cartpole': its workload 'dqn-cartpole' needs torch, which is not installed; install it with "
      "pip install 'raychaos[rl]'"]),
])
def test_each_missing_need_is_one_line_naming_it_and_its_fix(name: str, host: Host, said: list[str]) -> None:
    assert _missing(name, host) == said


def test_every_need_list_says_is_checked_and_each_is_found_missing_on_a_bare_machine() -> None:
    for name in builtin_names():
        scenario = load_scenario(name)
        workload = resolve_workload(scenario.workload)
        needs = needs_of(scenario, workload)
        assert scenario_needs(scenario, workload) == tuple(n.words for n in needs), name
        assert _missing(name, EVERYTHING) == [], name
        checked = [n for n in needs if n.modules or n.commands or n.files or n.root]
        lines = _missing(name, NOTHING)
        assert len(lines) == len(checked), (name, lines)
        for need, line in zip(checked, lines):
            assert line.startswith(f"scenario {name!r}: {need.why} needs ") and line.endswith(f"; {need.fix}"), line
        unchecked = [n.words for n in needs if n not in checked]
        assert all(w.endswith(" nodes") for w in unchecked), (name, unchecked)  # several nodes: nothing to check


def test_with_an_address_only_what_this_machine_itself_needs_is_checked() -> None:
    assert _missing("partition-worker", NOTHING, embedded=False) == []  # the given cluster has its network
    assert _missing("gcs-restart", NOTHING, embedded=False) == []
    assert [line.split(" needs ")[1].split(",")[0] for line in _missing("full-disk", NOTHING, embedded=False)] \
        == ["root"]  # the checkpoint storage is this machine's tmpfs
    assert len(_missing("power-loss", NOTHING, embedded=False)) == 3  # rl extra, disk extra, FUSE 3 here


# -- through the CLI: refused before anything starts -------------------------------------------------

def _hide_module(monkeypatch: pytest.MonkeyPatch, hidden: str) -> None:
    """``find_spec`` says ``hidden`` is not installed (as on a machine without the extra)."""
    import importlib.util

    real = importlib.util.find_spec

    def find_spec(name: str, *args: object, **kwargs: object) -> object:
        return None if name.partition(".")[0] == hidden else real(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_run_power_loss_without_the_disk_extra_exits_2_before_the_runner(monkeypatch: pytest.MonkeyPatch) -> None:
    _hide_module(monkeypatch, "mfusepy")
    _starts_nothing(monkeypatch)
    result = CliRunner().invoke(main, ["run", "power-loss"], catch_exceptions=False)
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    assert result.stdout == ""
    assert result.stderr == ("error: scenario 'power-loss': storage_faultfs = true (its checkpoint storage on a "
                             "fault filesystem) needs mfusepy, which is not installed; install it with "
                             "pip install 'raychaos[disk]'\n")


def test_a_missing_extra_the_checks_did_not_foresee_is_still_one_line_and_exit_2(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import scenarios.runner._run
    from chaos.errors import MissingExtra

    said = "the fault filesystem needs mfusepy, which is not installed; install it with pip install 'raychaos[disk]'"

    def setup_fails(*args: object, **kwargs: object) -> None:
        raise MissingExtra(said)

    monkeypatch.setattr(scenarios.runner._run, "run_scenario", setup_fails)
    result = CliRunner().invoke(main, ["run", "straggler"], catch_exceptions=False)
    assert result.exit_code == EXIT_BAD_INPUT and result.stderr.endswith(f"error: {said}\n"), result.output


def test_run_says_every_missing_need_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    _hide_module(monkeypatch, "mfusepy")
    monkeypatch.setattr(shutil, "which", lambda command, *a, **k: None)
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    _starts_nothing(monkeypatch)
    result = CliRunner().invoke(main, ["run", "power-loss"], catch_exceptions=False)
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    lines = result.stderr.splitlines()
    assert [line.split(" needs ")[1].split(",")[0] for line in lines] == ["mfusepy", "fusermount3"], lines
    assert all(line.startswith("error: scenario 'power-loss': ") for line in lines)


def test_run_job_checks_the_needs_before_it_waits_for_the_agents_port(monkeypatch: pytest.MonkeyPatch) -> None:
    import scenarios.model._needs

    _starts_nothing(monkeypatch)
    monkeypatch.setattr(scenarios.model._needs, "missing_needs",
                        lambda scenario, workload, **kw: [f"scenario {scenario.name!r}: it needs x; get x"])
    schedule = str(ROOT / "examples" / "train" / "schedule.toml")
    result = CliRunner().invoke(main, ["run", "--job", "python t.py", schedule], catch_exceptions=False)
    assert result.exit_code == EXIT_BAD_INPUT, result.output
    assert result.stderr == "error: scenario 'job-schedule': it needs x; get x\n"


def test_attack_checks_the_needs_before_anything_starts(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import scenarios.model._needs

    _starts_nothing(monkeypatch)
    seen: list[bool] = []

    def missing(scenario: object, workload: object, *, embedded: bool = True, **kw: object) -> list[str]:
        seen.append(embedded)
        return ["scenario 'attack-a': it needs x; get x"]

    monkeypatch.setattr(scenarios.model._needs, "missing_needs", missing)
    path = tmp_path / "a.toml"
    path.write_text('duration = 5\n[[faults]]\nat = 1\nkind = "kill"\ntarget = { kind = "actor", name = "w" }\n',
                    encoding="utf-8")
    result = CliRunner().invoke(main, ["attack", str(path), "--address", "127.0.0.1:1", "--probe", "true"],
                                catch_exceptions=False)
    assert result.exit_code == EXIT_BAD_INPUT and result.stderr == "error: scenario 'attack-a': it needs x; get x\n"
    assert seen == [False]  # a cluster given by address: only what this machine itself needs


# -- in a process of its own, the extra or the tool truly absent ---------------------------------------

#: Hides mfusepy from every import in the process, as on a machine where it was never installed.
HIDE_MFUSEPY = '''
import importlib.abc, sys

class _NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "mfusepy":
            raise ModuleNotFoundError(f"No module named {name!r}", name="mfusepy")
        return None

sys.meta_path.insert(0, _NotInstalled())
'''
#: ``raychaos run power-loss``, its runner replaced so that nothing can start even if the check failed.
RUN = '''
import sys
import scenarios.runner._run as run
def started(*args, **kwargs):
    print("STARTED")
    sys.exit(99)
run.run_scenario = started
from scenarios.cli import main
main(["run", "power-loss"], prog_name="raychaos")
'''


@pytest.mark.parametrize("missing", ["mfusepy", "fusermount3"])
def test_a_missing_extra_or_tool_in_a_fresh_process_is_one_line_and_exit_2(missing: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH", "")])}
    if missing == "mfusepy":
        (tmp_path / "sitecustomize.py").write_text(HIDE_MFUSEPY, encoding="utf-8")
        fix = "which is not installed; install it with pip install 'raychaos[disk]'"
    else:
        env["PATH"] = str(tmp_path / "empty")  # no fusermount3 (nor anything else) on PATH
        fix = f"which is not on PATH; {FUSE_FIX}"
    out = subprocess.run([sys.executable, "-c", RUN], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=120)
    assert out.returncode == EXIT_BAD_INPUT, out.stdout + out.stderr
    assert out.stdout == "" and "Traceback" not in out.stderr
    assert out.stderr == (f"error: scenario 'power-loss': storage_faultfs = true (its checkpoint storage on a fault "
                          f"filesystem) needs {missing}, {fix}\n")
