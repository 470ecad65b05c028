"""A command run the way a test may leave it: in its own session, so past its bound it is
interrupted as Ctrl-C would (a ``raychaos run`` then heals, stops its job and its embedded
cluster, freeing the agent's port for the next test) and killed whole only after a grace."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from conftest import default_sigint


@dataclass(frozen=True, slots=True)
class Finished:
    """How the command ended: its exit code, what it printed, whether it was past its bound."""

    returncode: int
    stdout: str
    stderr: str
    timed_out: bool = False


def run_bounded(args: Sequence[str], *, bound: float, grace: float, cwd: Path | None = None,
                env: dict[str, str] | None = None) -> Finished:
    """``args`` run for at most ``bound`` seconds; past it SIGINT to its process group, up to
    ``grace`` seconds to clean up, then SIGKILL to the group."""
    with subprocess.Popen(list(args), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, start_new_session=True,
                          preexec_fn=default_sigint) as cmd:  # a background job's SIGINT is ignored
        try:
            out, err = cmd.communicate(timeout=bound)
            return Finished(cmd.returncode, out, err)
        except subprocess.TimeoutExpired:
            out, err = _interrupt(cmd, grace=grace)
            return Finished(cmd.returncode, out, err, timed_out=True)


def _interrupt(cmd: subprocess.Popen[str], *, grace: float) -> tuple[str, str]:
    os.killpg(cmd.pid, signal.SIGINT)
    try:
        return cmd.communicate(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(cmd.pid, signal.SIGKILL)
        return cmd.communicate()
