"""The raychaos command: version, commands, and the demo end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from scenarios.cli import main


def test_bare_command_prints_version_and_commands() -> None:
    result = CliRunner().invoke(main, [])
    assert result.exit_code == 0
    assert result.output.startswith("raychaos 0.1.0")
    assert "run" in result.output and "Commands:" in result.output


def test_bad_option_exits_2_with_the_reason() -> None:
    result = CliRunner().invoke(main, ["demo", "--adds", "0"])
    assert result.exit_code == 2
    assert "Invalid value for '--adds': 0 is not in the range 1<=x<=10000" in result.output


@pytest.mark.ray
@pytest.mark.slow
def test_demo_kills_and_restores_in_both_modes() -> None:
    # A subprocess: the demo starts its own embedded cluster, and a process can drive only one.
    exe = Path(sys.executable).parent / "raychaos"
    assert exe.exists(), f"raychaos console script is not installed next to {sys.executable}"
    out = subprocess.run([str(exe), "demo", "--adds", "7"], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = {line.split("│")[1].strip(): line for line in out.stdout.splitlines()
            if line.startswith("│")}
    policy, wal = (rows[m].split("│") for m in ("policy", "wal"))
    assert [c.strip() for c in policy[2:6]] == ["7", "7", "5", "2"]  # checkpoint at 5 adds
    assert [c.strip() for c in wal[2:6]] == ["7", "7", "7", "0"]
