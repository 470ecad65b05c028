"""``pip install raychaos`` without the ``rl`` extra: no torch, no gymnasium. chaos, actors
(but the parameter server) and scenarios import, a kill scenario runs, and what needs torch
says which extra brings it. The child processes (Ray's workers included, through
PYTHONPATH) cannot import either package, as on a machine where they were never installed."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKER = '''
import importlib.abc, sys

class _NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("torch", "gymnasium"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name.partition(".")[0])
        return None

sys.meta_path.insert(0, _NotInstalled())
'''


def without_rl(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "sitecustomize.py").write_text(BLOCKER, encoding="utf-8")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}


def test_torch_and_gymnasium_are_not_base_requirements() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    base = " ".join(project["dependencies"])
    assert "torch" not in base and "gymnasium" not in base
    assert {"torch>=2.1", "gymnasium>=1.0"} <= set(project["optional-dependencies"]["rl"])


def test_the_packages_import_and_the_parameter_server_names_its_extra(tmp_path: Path) -> None:
    code = """
import sys
import chaos, actors, scenarios
from scenarios import known_workloads
from actors import ParameterServer, PrioritizedReplayBuffer
from chaos.errors import MissingExtra
assert len(known_workloads()) > 10 and "torch" not in sys.modules and "gymnasium" not in sys.modules
PrioritizedReplayBuffer(8, seed=0)
try:
    ParameterServer(lambda: None, checkpoint=actors.CheckpointConfig(storage="memory://no-rl"))
except MissingExtra as exc:
    assert isinstance(exc, ImportError)
    print(exc)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=without_rl(tmp_path), timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ("the parameter server needs torch, which is not installed; install "
                                  "it with pip install 'raychaos[rl]'")


@pytest.mark.slow
def test_a_kill_scenario_runs_without_torch(tmp_path: Path) -> None:
    exe = Path(sys.executable).parent / "raychaos"
    out = subprocess.run([str(exe), "run", "replay-crash-loop", "--report", str(tmp_path / "report")],
                         capture_output=True, text=True, env=without_rl(tmp_path), timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "torch" not in out.stderr


def test_the_wheel_carries_the_builtin_scenarios(tmp_path: Path) -> None:
    # An editable install reads them from the checkout; a plain `pip install raychaos` has only
    # what the wheel carries (without them `raychaos run <builtin>` crashes listing them).
    import zipfile

    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                          "-w", str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    (wheel,) = tmp_path.glob("raychaos-*.whl")
    names = {n.removeprefix("scenarios/builtin/") for n in zipfile.ZipFile(wheel).namelist()
             if n.startswith("scenarios/builtin/")}
    assert names == {p.name for p in (ROOT / "scenarios" / "builtin").glob("*.toml")} and len(names) > 20
