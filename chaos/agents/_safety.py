"""Before any signal: is this PID one we may touch? Checked on the target's node."""

from __future__ import annotations

import psutil

from chaos._errors import TargetNotFound, UnsafeTarget


def raylet_of(pid: int) -> psutil.Process:
    """The raylet that spawned worker ``pid`` (every worker is a raylet's child)."""
    parent = psutil.Process(pid).parent()
    if parent is None or "raylet" not in parent.name():
        raise UnsafeTarget(f"process {pid} is not a Ray worker: its parent is "
                           f"{parent.name() if parent else 'none'!r}, not a raylet")
    return parent


def check_target(pid: int, *, agent_pid: int, driver_pids: tuple[int, ...] = (),
                 allow_raylet: bool = False) -> psutil.Process:
    """Return the process when it belongs to this agent's Ray session and node; else raise.

    Refused: PID 0 or 1, the agent itself, a driver, any process that is not a worker of
    the agent's own raylet (a non-Ray process, another session's or another node's), and
    the raylet unless ``allow_raylet`` (node kill).

    Raises:
        UnsafeTarget: the process may not be signalled.
        TargetNotFound: there is no such process, or it has exited (a zombie while its threads
            tear down: the State API still shows it ALIVE, and a signal to it changes nothing,
            so a kill of it was "confirmed" at once and a pause of it never stopped it).
    """
    if pid in (0, 1):
        raise UnsafeTarget(f"refusing to signal PID {pid}: it is the init process")
    if pid == agent_pid:
        raise UnsafeTarget(f"refusing to signal PID {pid}: it is the chaos agent itself")
    if pid in driver_pids:
        raise UnsafeTarget(f"refusing to signal PID {pid}: it is the driver of this run")
    try:
        proc = psutil.Process(pid)
        raylet = raylet_of(agent_pid)
        if allow_raylet and pid == raylet.pid:
            return proc
        if proc.ppid() != raylet.pid:
            raise UnsafeTarget(
                f"refusing to signal PID {pid} ({proc.name()!r}): it is not a worker of this "
                f"Ray session on this node (its parent is {proc.ppid()}, this node's raylet is "
                f"{raylet.pid}); target an actor, task, worker or node of the cluster under test")
        if proc.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
            raise TargetNotFound(f"process {pid} has exited: it is not reaped yet")
        return proc
    except psutil.NoSuchProcess as exc:
        raise TargetNotFound(f"process {pid} no longer exists") from exc
