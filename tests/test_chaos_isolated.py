"""Faults that need their own driver or cluster: heal after driver death, memory pressure → OOM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
import ray

from chaos import HangError, wait_until
from chaos.cluster import ClusterHandle
from chaos.leakcheck import paused_processes
from conftest import CALL_TIMEOUT

ROOT = str(Path(__file__).resolve().parents[1])


@ray.remote
class Sleeper:
    def pid(self) -> int:
        return os.getpid()


def test_a_pause_heals_even_when_its_driver_is_sigkilled(ray_cluster: ClusterHandle, tmp_path: Path) -> None:
    victim = Sleeper.remote()
    pid = ray.get(victim.pid.remote(), timeout=CALL_TIMEOUT)
    script = textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {ROOT!r})
        import ray
        from chaos import ActorTarget, Chaos, Pause
        ray.init(address={ray_cluster.address!r}, logging_level="ERROR", log_to_driver=False)
        chaos = Chaos(address={ray_cluster.address!r})
        with chaos.inject(Pause(ActorTarget(actor_id={victim._actor_id.hex()!r}), seconds=4.0)):
            print("paused", flush=True)
            end = time.monotonic() + 120
            while time.monotonic() < end:  # the driver is SIGKILLed in here
                time.sleep(0.1)
    """)
    driver = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert driver.stdout is not None and driver.stdout.readline().strip() == "paused"
        wait_until(lambda: psutil.Process(pid).status() == psutil.STATUS_STOPPED, timeout=10,
                   what="the victim to be paused")
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait(timeout=30)
    finally:
        if driver.poll() is None:
            driver.kill()
    try:
        wait_until(lambda: psutil.Process(pid).status() != psutil.STATUS_STOPPED, timeout=20,
                   what="the agent to resume the victim on its own deadline")
    except HangError as exc:
        raise AssertionError(f"{exc}; {resumers(pid)}") from exc
    assert paused_processes() == []
    ray.kill(victim)


def resumers(pid: int) -> str:
    """What could have resumed ``pid``: the node's agents and the pause's healer, and their states."""
    seen = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        line = " ".join(proc.info["cmdline"] or [])
        if ("chaos.agents._healer" in line and str(pid) in line.split()) or "ChaosAgent" in line:
            seen.append(f"pid {proc.info['pid']} {proc.info['status']}: {line[:160]}")
    return "; ".join(seen) or "no agent and no healer process left"


@pytest.mark.slow
def test_memory_pressure_makes_ray_raise_out_of_memory(tmp_path: Path) -> None:
    # Its own cluster, with a memory threshold just above what the machine uses now.
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {ROOT!r})
        import psutil
        from chaos import Chaos, MemoryPressure, local_cluster
        from chaos.cluster import TEST_SYSTEM_CONFIG
        vm = psutil.virtual_memory()
        threshold = round((vm.total - vm.available + 1.5 * 2**30) / vm.total, 3)
        config = {{**TEST_SYSTEM_CONFIG, "memory_usage_threshold": threshold,
                  "memory_monitor_refresh_ms": 100}}
        with local_cluster(num_cpus=2, system_config=config, log_to_driver=False) as cluster:
            chaos = Chaos(address=cluster.address)
            fault = MemoryPressure(fraction=min(threshold + 0.05, 0.9), seconds=60,
                                   host_cap=min(threshold + 0.1, 0.95))
            import ray

            @ray.remote(max_retries=0)
            def dependent(value):
                return value

            with chaos.inject(fault) as injection:
                ref = injection.found.ref
                after = dependent.remote(ref)
                ready, _ = ray.wait([ref, after], num_returns=2, timeout=60)
            print("OUTCOME", injection.found.result.outcome.value, flush=True)
            print("READY", len(ready), flush=True)  # a killed task and its dependent: both ready
            try:
                ray.get(after, timeout=30)
            except ray.exceptions.OutOfMemoryError as exc:
                print("DEPENDENT RAISES", type(exc).__name__, flush=True)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "OUTCOME oom_killed" in out.stdout, out.stdout  # MemoryOutcome.OOM_KILLED
    # The failure reaches a dependent unchanged, and ray.wait reports both refs ready.
    assert "READY 2" in out.stdout and "DEPENDENT RAISES" in out.stdout, out.stdout


@pytest.mark.slow
def test_another_sessions_worker_is_refused(ray_cluster: ClusterHandle) -> None:
    from chaos.agents import agent_for
    from chaos.errors import UnsafeTarget

    # A second, separate Ray session on this machine, with one actor whose pid we learn.
    script = textwrap.dedent(f"""
        import os, sys, time
        sys.path.insert(0, {ROOT!r})
        import ray
        from chaos import local_cluster
        with local_cluster(num_cpus=1, log_to_driver=False):
            @ray.remote
            class Other:
                def pid(self):
                    return os.getpid()
            other = Other.remote()
            print(ray.get(other.pid.remote(), timeout=60), flush=True)
            sys.stdin.readline()  # hold the session until the test is done
    """)
    session = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    try:
        assert session.stdout is not None
        other_pid = int(session.stdout.readline())
        agent = agent_for(ray.get_runtime_context().get_node_id())
        with pytest.raises(UnsafeTarget, match="it is not a worker of this Ray session on this node"):
            ray.get(agent.signal.remote(other_pid, signal.SIGKILL), timeout=CALL_TIMEOUT)
        assert psutil.pid_exists(other_pid)
    finally:
        assert session.stdin is not None
        session.stdin.write("\n")
        session.stdin.flush()
        session.wait(timeout=120)


@pytest.mark.slow
def test_a_cluster_whose_gcs_died_before_the_drivers_first_read_still_tears_down() -> None:
    """Ray's error-listener thread reads from the GCS once, without a deadline, when it starts;
    a GCS that died before that read (a loaded machine schedules the thread late: held here)
    left ``ray.shutdown`` joining the thread until Ray ended the driver, exit 1, 60 s after the
    loss. The teardown starts the GCS again first, so the read ends and the driver lives."""
    script = textwrap.dedent(f"""
        import sys, threading, time
        sys.path.insert(0, {ROOT!r})
        import ray._private.worker as worker
        from chaos import local_cluster
        from chaos.cluster._cluster import head_of

        held = threading.Event()
        first_read = worker._internal_kv_get
        def late_read(*args, **kwargs):
            if threading.current_thread().name == "ray_listen_error_messages":
                held.wait(timeout=30)
            return first_read(*args, **kwargs)
        worker._internal_kv_get = late_read
        with local_cluster(nodes=1, log_to_driver=False) as cluster:
            head_of(cluster.address).kill_gcs()
            killed = time.monotonic()
            held.set()
        print(f"TORN DOWN {{time.monotonic() - killed:.1f}}", flush=True)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=150)
    assert out.returncode == 0, out.stderr[-3000:]
    assert float(out.stdout.split("TORN DOWN ")[1]) < 50, out.stdout  # well before Ray's 60 s end
