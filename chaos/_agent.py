"""The chaos agent: one small actor per node that acts on that node's processes via psutil.

Pinned with ``NodeAffinitySchedulingStrategy`` so a fault on a remote node is injected
by a process on that node (no SSH, no shared PID namespace needed). Every signal is
checked by :func:`chaos._safety.check_target` first. Pauses are also guarded by a
separate healer process with its own deadline, so a pause never outlives its bound even
if the agent or the driver dies.
"""

from __future__ import annotations

import os
import signal as signals
import subprocess
import sys
import threading
import time
from typing import Any

import psutil

from chaos._errors import HangError
from chaos._safety import check_target, raylet_of
from chaos._wait import wait_until

__all__ = ["ChaosAgent", "agent_for", "stop_agents"]

AGENT_NAMESPACE = "raychaos-agents"
STOP_TIMEOUT = 5.0
_STOPPED = (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP, psutil.STATUS_ZOMBIE,
            psutil.STATUS_DEAD)
_HOG = "import time, sys\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass\n"


class ChaosAgent:
    """Runs on one node; every method acts on that node only."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._paused: dict[int, float] = {}  # pid -> create_time
        self._hogs: list[subprocess.Popen[bytes]] = []
        self._held: list[Any] = []

    def where(self) -> tuple[int, str]:
        import ray

        return os.getpid(), ray.get_runtime_context().get_node_id()

    def status(self, pid: int) -> str | None:
        try:
            return psutil.Process(pid).status()
        except psutil.NoSuchProcess:
            return None

    def signal(self, pid: int, signum: int, *, driver_pids: tuple[int, ...] = ()) -> int:
        """Send ``signum`` to ``pid`` after the safety check; return the pid signalled."""
        proc = check_target(pid, agent_pid=os.getpid(), driver_pids=driver_pids)
        proc.send_signal(signum)
        return pid

    def kill_node(self, *, driver_pids: tuple[int, ...] = ()) -> tuple[int, int]:
        """SIGKILL this node's raylet and every process under it, this agent last: a node that
        dies takes all its processes with it (a worker busy in Python would otherwise not
        notice its raylet is gone, and finish its task as if nothing happened). Replies
        first; returns the raylet's pid and how many other processes die with it."""
        raylet = raylet_of(os.getpid())
        check_target(raylet.pid, agent_pid=os.getpid(), driver_pids=driver_pids, allow_raylet=True)
        others = [p for p in raylet.children(recursive=True)
                  if p.pid != os.getpid() and p.pid not in driver_pids]
        threading.Timer(0.2, _kill_all, args=([raylet, *others],)).start()
        return raylet.pid, len(others)

    def pause(self, pid: int, seconds: float, *, driver_pids: tuple[int, ...] = ()) -> float:
        """SIGSTOP ``pid`` for ``seconds``; resumed by a timer here and a healer process."""
        proc = check_target(pid, agent_pid=os.getpid(), driver_pids=driver_pids)
        deadline = time.time() + seconds
        created = proc.create_time()
        # posix_spawn, not fork: forking this multithreaded worker can deadlock the child.
        os.posix_spawn(sys.executable, [sys.executable, "-m", "chaos._healer", str(pid),
                                        repr(created), repr(deadline)], dict(os.environ),
                       setsid=True)
        proc.send_signal(signals.SIGSTOP)
        with self._lock:
            self._paused[pid] = created
        threading.Timer(seconds, self.resume, args=(pid,)).start()
        # The stop is delivered asynchronously: return only once it has taken effect, so the
        # caller's next step sees a paused process (replays then behave alike).
        try:
            wait_until(lambda: self._stop_took_effect(proc), timeout=STOP_TIMEOUT,
                       interval=0.005, what=f"process {pid} to stop after SIGSTOP")
        except HangError:
            self.resume(pid)
            raise
        return deadline

    def _stop_took_effect(self, proc: psutil.Process) -> bool:
        # A short pause can end (timer or healer) between two polls: a resumed pid counts too.
        with self._lock:
            if proc.pid not in self._paused:
                return True
        try:
            return proc.status() in _STOPPED
        except psutil.NoSuchProcess:
            return True

    def resume(self, pid: int) -> bool:
        """SIGCONT ``pid`` if this agent paused it (and it is still that process)."""
        with self._lock:
            created = self._paused.pop(pid, None)
        if created is None:
            return False
        try:
            proc = psutil.Process(pid)
            if abs(proc.create_time() - created) < 1.0:  # same process, not a reused pid
                proc.send_signal(signals.SIGCONT)
        except psutil.NoSuchProcess:
            pass
        return True

    def cpu_hog(self, cores: int, seconds: float) -> list[int]:
        """Start ``cores`` busy-looping processes for at most ``seconds``; return their pids."""
        procs = [subprocess.Popen([sys.executable, "-c", _HOG, repr(seconds)],
                                  stdin=subprocess.DEVNULL) for _ in range(cores)]
        with self._lock:
            self._hogs.extend(procs)
        return [p.pid for p in procs]

    def stop_hogs(self) -> int:
        with self._lock:
            hogs, self._hogs = self._hogs, []
        for proc in hogs:
            proc.kill()
            proc.wait(timeout=10)
        return len(hogs)

    def heal_all(self) -> int:
        """Resume every process this agent paused and stop every hog; return how many."""
        with self._lock:
            paused = list(self._paused)
        return sum(self.resume(pid) for pid in paused) + self.stop_hogs()


_AGENTS: dict[tuple[str, str], Any] = {}


def _kill_all(processes: list[psutil.Process]) -> None:
    for proc in processes:
        try:
            proc.kill()
        except psutil.Error:
            pass  # already gone
    os._exit(1)  # this agent, last


def agent_for(node_id: str) -> Any:
    """The agent on ``node_id``, started on first use.

    Agents are detached, named actors: a pause's resume timer must survive the driver
    that asked for it, and the handle is cached because Ray ends an actor when its last
    handle goes. :func:`stop_agents` removes them from a cluster this process did not start.
    """
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    key = (ray.get_runtime_context().gcs_address, node_id)
    if key not in _AGENTS:
        _AGENTS[key] = ray.remote(ChaosAgent).options(
            name=f"agent-{node_id[:16]}", namespace=AGENT_NAMESPACE, get_if_exists=True,
            lifetime="detached", num_cpus=0, max_concurrency=8, max_restarts=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
        ).remote()
    return _AGENTS[key]


def stop_agents(*, timeout: float = 30.0) -> int:
    """Heal everything the agents of this cluster hold, then kill them; return how many."""
    import ray

    gcs = ray.get_runtime_context().gcs_address
    mine = [(k, a) for k, a in _AGENTS.items() if k[0] == gcs]
    for key, agent in mine:
        try:
            ray.get(agent.heal_all.remote(), timeout=timeout)
        except Exception:  # noqa: BLE001 - a dead node's agent has nothing left to heal
            pass
        ray.kill(agent)
        del _AGENTS[key]
    return len(mine)
