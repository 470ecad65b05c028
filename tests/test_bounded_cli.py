"""The examples' bounded CLI run: past its bound the command is interrupted and may clean up;
one that does not end in its grace is killed with everything it started. Ray-free."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import psutil

from tests.bounded_cli import run_bounded

#: A command that outlives its bound with a child of its own (as the CLI's cluster is), and on
#: SIGINT, unless told to ignore it, stops that child and writes what it did.
SCRIPT = """
import signal, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
print(child.pid, flush=True)
def cleanup(*_):
    child.terminate(); child.wait(); open(sys.argv[1], "w").write("cleaned"); sys.exit(130)
signal.signal(signal.SIGINT, signal.SIG_IGN if sys.argv[2] == "ignore" else cleanup)
time.sleep(600)
"""


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_past_its_bound_the_command_is_interrupted_and_cleans_up(tmp_path: Path) -> None:
    marker = tmp_path / "cleaned"
    done = run_bounded([sys.executable, "-c", SCRIPT, str(marker), "clean"], bound=2.0, grace=10.0)
    assert done.timed_out and done.returncode == 130, done
    assert marker.read_text(encoding="utf-8") == "cleaned"
    assert _gone(int(done.stdout.split()[0]))


def test_a_command_deaf_to_the_interrupt_is_killed_with_what_it_started(tmp_path: Path) -> None:
    done = run_bounded([sys.executable, "-c", SCRIPT, str(tmp_path / "m"), "ignore"], bound=2.0, grace=1.0)
    child = int(done.stdout.split()[0])
    assert done.timed_out and done.returncode < 0 and _gone(child), (done, os.getpid())


def test_a_suite_started_with_sigint_ignored_still_interrupts_its_command(tmp_path: Path) -> None:
    """A background job (`make test &`) or a CI runner ignores SIGINT, and a child would inherit
    that: Python then installs no KeyboardInterrupt handler and the interrupt does nothing."""
    marker = tmp_path / "interrupted"
    script = ("import sys, time\ntry:\n    time.sleep(600)\nexcept KeyboardInterrupt:\n"
              "    open(sys.argv[1], 'w').write('interrupted')\n")
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        done = run_bounded([sys.executable, "-c", script, str(marker)], bound=1.0, grace=10.0)
    finally:
        signal.signal(signal.SIGINT, before)
    assert done.timed_out and marker.exists(), done
