"""Users' own workloads: registered in code, installed through the ``raychaos.workloads``
entry-point group, or named ``module:Class``; their ``[params]`` validated when the scenario
loads, before anything starts."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from chaos.errors import InvalidConfig
from scenarios import Params, ScenarioError, Workload, known_workloads, load_scenario, register_workload
from scenarios.cli import main
from scenarios.workloads._registry import ENTRY_POINT_GROUP, _registered

USER_MODULE = Path(__file__).parent / "userpkg" / "spin_workload.py"
SCENARIO = """
name = "spin"
workload = "{workload}"
duration = 6
invariants = ["answers_after_kills", "was_killed"]

[params]
{params}

[[faults]]
at = 2
kind = "kill"
target = {{ kind = "actor", name = "spin", namespace = "raychaos" }}
"""


class Idle(Workload):
    class IdleParams(Params):
        rounds: int = 1

    Params = IdleParams

    def step(self) -> bool:
        return False


@pytest.fixture
def registry() -> Iterator[None]:
    saved = dict(_registered)
    yield
    _registered.clear()
    _registered.update(saved)


def scenario_file(tmp_path: Path, *, workload: str, params: str) -> Path:
    path = tmp_path / "spin.toml"
    path.write_text(SCENARIO.format(workload=workload, params=params), encoding="utf-8")
    return path


def test_misspelled_and_mistyped_params_each_get_one_problem(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('name = "bad"\nworkload = "sampling"\nduration = 5\nstrict_faults = false\n[params]\n'
                    'max_retires = 0\nwidth = "4"\nwait_timeout = true\nsteps = 10\n', encoding="utf-8")
    with pytest.raises(ScenarioError) as caught:
        load_scenario(str(path))
    problems = {p.field: p for p in caught.value.problems}
    assert sorted(problems) == ["params.max_retires", "params.wait_timeout", "params.width"]
    assert problems["params.max_retires"].value == 0
    assert problems["params.max_retires"].fix.endswith(
        "it takes block_slack, drain_timeout, max_retries, steps, wait_timeout, width")
    assert problems["params.width"].value == "4" and problems["params.width"].fix.startswith("must be int")


def test_the_cli_exits_2_naming_the_misspelled_param_and_starts_nothing(tmp_path: Path) -> None:
    path = scenario_file(tmp_path, workload="sampling", params="max_retires = 0")
    result = CliRunner().invoke(main, ["run", str(path)])
    assert result.exit_code == 2, result.output
    assert "params.max_retires = 0: not a parameter of this workload" in result.output


def test_register_workload_makes_a_name_loadable_with_its_params_checked(registry: None) -> None:
    assert register_workload("idle", Idle) is Idle
    assert known_workloads()["idle"] is Idle
    with pytest.raises(InvalidConfig, match="already taken"):
        register_workload("idle", Idle)
    register_workload("idle", Idle, replace=True)
    with pytest.raises(InvalidConfig, match="already taken"):
        register_workload("sampling", Idle, replace=True)  # a built-in name never


@pytest.mark.parametrize(("name", "cls", "fix"), [
    ("", Idle, "non-empty string without ':'"),
    ("a:b", Idle, "non-empty string without ':'"),
    ("x", dict, "is not a scenarios.Workload subclass"),
])
def test_register_workload_refuses_bad_input_and_registers_nothing(
        registry: None, name: str, cls: type, fix: str) -> None:
    before = dict(_registered)
    with pytest.raises(InvalidConfig, match=fix):
        register_workload(name, cls)
    assert _registered == before


def install(site: Path) -> dict[str, str]:
    """The user's workload as an installed distribution: its module and a dist-info declaring
    it under the entry-point group, on a directory the child process has on its path."""
    shutil.copy(USER_MODULE, site / "spin_workload.py")
    info = site / "spin_workload-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: spin-workload\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\nspin = spin_workload:Spin\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}


def test_an_installed_entry_point_is_a_known_workload_with_its_params(tmp_path: Path) -> None:
    env = install(tmp_path)
    code = ("from scenarios import known_workloads; w = known_workloads()['spin']; "
            "print(w.__module__, sorted(w.Params.model_fields))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["spin_workload", "['calls']"]


def test_a_broken_entry_point_is_named_with_the_fix(tmp_path: Path) -> None:
    env = install(tmp_path)
    points = tmp_path / "spin_workload-1.0.dist-info" / "entry_points.txt"
    points.write_text(f"[{ENTRY_POINT_GROUP}]\nspin = no_such_module:Spin\n")
    code = ("from chaos.errors import InvalidConfig\nfrom scenarios import known_workloads\n"
            "try:\n    known_workloads()\nexcept InvalidConfig as exc:\n    print(exc)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("entry point spin = 'no_such_module:Spin' in group 'raychaos.workloads' "
                                 "cannot be loaded (ModuleNotFoundError")
    assert out.stdout.rstrip().endswith("fix or uninstall the package that declares it")


@pytest.mark.parametrize(("points", "whose"), [
    ("sampling = spin_workload:Spin\n", "a built-in workload"),
    ("spin = spin_workload:Spin\nspin = spin_workload:SpinParams\n", "another installed entry point")])
def test_an_entry_point_may_not_replace_another_workload(tmp_path: Path, points: str, whose: str) -> None:
    # Silently, a package's "sampling" replaced the built-in every scenario file names.
    env = install(tmp_path)
    (tmp_path / "spin_workload-1.0.dist-info" / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{points}")
    code = ("from chaos.errors import InvalidConfig\nfrom scenarios import known_workloads\n"
            "try:\n    print(sorted(known_workloads()))\nexcept InvalidConfig as exc:\n    print(exc)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr
    name = points.split(" = ")[0]
    assert out.stdout.startswith(f"entry point {name} = 'spin_workload:Spin") and (
        f"takes the name of {whose}, which it would silently replace" in out.stdout), out.stdout


@pytest.mark.slow
def test_an_installed_workload_runs_through_raychaos_run_with_its_params(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    env = install(site)
    path = scenario_file(tmp_path, workload="spin", params="calls = 3")
    exe = Path(sys.executable).parent / "raychaos"
    out = subprocess.run([str(exe), "run", str(path), "--report", str(tmp_path / "report")],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    run = json.loads((tmp_path / "report" / "summary.json").read_text())["runs"][-1]
    held = {v["name"]: v["held"] for v in run["verdicts"]}
    assert held["answers_after_kills"] and held["was_killed"], run["verdicts"]
    assert run["metrics"]["calls_per_step"] == 3  # the scenario's params reached the workload
    assert [f["status"] for f in run["faults"]] == ["injected"]
