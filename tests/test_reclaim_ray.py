"""A driver SIGKILLed while it holds a network cluster leaves nothing behind: its reaper kills the
`ray start` daemons in the lab's namespaces and deletes the lab, and the head's processes (an
embedded ``ray.cluster_utils.Cluster``) end through Ray's own fate sharing (PR_SET_PDEATHSIG)."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import textwrap

import psutil
import pytest

from chaos._errors import HangError
from chaos._reclaim._owner import Owner, kill_all
from chaos._wait import wait_until
from chaos.net._lab import PREFIX, network_leftovers, network_missing

pytestmark = [pytest.mark.ray, pytest.mark.slow,
              pytest.mark.skipif(bool(network_missing()), reason="the network lab needs root, nft, ip and tc")]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Seconds the cluster's start may take on a busy 2-core host.
START_BOUND = 180.0
#: Seconds everything the killed driver started may take to be gone.
GONE_BOUND = 30.0

_DRIVER = """
    import json, time
    import psutil, ray
    from chaos import local_cluster

    with local_cluster(nodes=2, num_cpus=1, network=True, log_to_driver=False) as cluster:
        lab = cluster.lab
        # A worker process on each node, as a test's would be.
        ray.get([ray.remote(num_cpus=0.5, resources={r: 0.1})(lambda: 1).remote() for r in ("rc_head", "rc_node1")])
        pids = [p.pid for p in psutil.Process().children(recursive=True)]
        pids += [pid for node in lab.workers for pid in lab.namespace_pids(node)]
        print(json.dumps({"lab": lab.name, "temp": cluster.temp_dir, "pids": pids}), flush=True)
        time.sleep(600)  # until the test kills this driver
"""


def _running(pid: int) -> bool:
    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.NoSuchProcess:
        return False


def _left(driver: int, lab: str, temp: str, pids: list[int]) -> list[str]:
    """What the killed driver started that is still there."""
    left = [f"pid {pid} {' '.join(psutil.Process(pid).cmdline())[:80]}" for pid in pids if _running(pid)]
    left += [line for line in network_leftovers() if f"{PREFIX}{lab}-" in line]
    for proc in psutil.process_iter(["cmdline"]):
        owner = Owner.of_process(proc.pid)
        mentions = any(temp in arg for arg in proc.info["cmdline"] or [])
        if ((owner is not None and owner.pid == driver) or mentions) and _running(proc.pid):
            left.append(f"pid {proc.pid} {' '.join(proc.info['cmdline'] or [])[:80]}")
    return left


def _first_line(child: subprocess.Popen[str]) -> str:
    assert child.stdout is not None
    ready, _, _ = select.select([child.stdout], [], [], START_BOUND)
    assert ready, f"the driver's cluster did not start within {START_BOUND:g} s"
    line = child.stdout.readline()
    assert line, f"the driver exited ({child.wait(30)}) before its cluster was up"
    return line


def test_a_killed_driver_leaves_no_network_cluster(no_shared_cluster: None) -> None:
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(_DRIVER)], stdout=subprocess.PIPE, text=True,
                             cwd=ROOT)
    lab, pids = "", []
    try:
        made = json.loads(_first_line(child))
        lab, temp, pids = str(made["lab"]), str(made["temp"]), [int(p) for p in made["pids"]]
        assert len(pids) > 5, pids  # the head's processes and a node's daemons, at least
        child.send_signal(signal.SIGKILL)
        child.wait(30)
        try:
            wait_until(lambda: not _left(child.pid, lab, temp, pids), timeout=GONE_BOUND, interval=0.5,
                       what="everything the killed driver started gone")
        except HangError:
            left = _left(child.pid, lab, temp, pids)
            pytest.fail(f"{GONE_BOUND:g} s after the driver's SIGKILL, still there: {left}")
    finally:
        child.kill()
        child.wait(30)
        if lab:  # what a failure left: not for the next test
            from chaos.net._lab import destroy_lab

            kill_all(pids)
            destroy_lab(lab, 1)
