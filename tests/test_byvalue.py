"""Functions shipped to Ray by value (chaos._byvalue): what a worker must import to run them,
and the scenario probe built on it (a task apart from the workload's, in name and in imports)."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from ray import cloudpickle

from chaos._byvalue import by_value
from chaos.errors import InvalidConfig
from scenarios.workloads._builtin import PROBE_TASK, sample_env


def ours_imported_by(function: Callable[[], Any], cwd: Path) -> list[str]:
    """Which of this project's packages a fresh interpreter imports to unpickle and call ``function``."""
    code = ("import json, sys, pickle; f = pickle.loads(bytes.fromhex(sys.argv[1])); f(); "
            "print(json.dumps(sorted({'actors', 'chaos', 'scenarios'} & set(sys.modules))))")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    out = subprocess.run([sys.executable, "-c", code, cloudpickle.dumps(function).hex()], capture_output=True,
                         text=True, timeout=120, cwd=cwd, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    return list(json.loads(out.stdout))


def test_the_probe_task_runs_the_workloads_code_under_its_own_name() -> None:
    probe = by_value(sample_env, PROBE_TASK)
    assert sample_env.__name__ != PROBE_TASK and probe.__qualname__ == probe.__module__ == PROBE_TASK
    assert probe(3, 1000) == sample_env(3, 1000)


def test_a_copy_by_value_runs_without_importing_the_package_it_came_from(tmp_path: Path) -> None:
    """The probe's fresh worker, on a node the workload keeps busy, would import ``scenarios`` first."""
    args = (1, 10)
    copy = by_value(sample_env, PROBE_TASK)
    assert ours_imported_by(lambda: copy(*args), tmp_path) == []
    assert "scenarios" in ours_imported_by(lambda: sample_env(*args), tmp_path)


def _names_a_global() -> float:
    return math.pi


def test_a_function_naming_anything_beyond_builtins_is_refused() -> None:
    limit = 3

    def closure() -> int:
        return limit

    for function, named in ((_names_a_global, "['math']"), (closure, "['limit']")):
        with pytest.raises(InvalidConfig, match=rf"names {re.escape(named)} from outside itself"):
            by_value(function, "x")
    with pytest.raises(InvalidConfig, match="not a Python function"):
        by_value(len, "x")  # type: ignore[arg-type]
