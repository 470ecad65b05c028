"""The chaos agent: one small actor per node that acts on that node's processes via psutil.

Pinned with ``NodeAffinitySchedulingStrategy`` so a fault on a remote node is injected
by a process on that node (no SSH, no shared PID namespace needed). Every signal is
checked by :func:`chaos.agents._safety.check_target` first. Pauses are also guarded by a
separate healer process with its own deadline, so a pause never outlives its bound even
if the agent or the driver dies.

An agent's identity is its :data:`PROTOCOL` and the hash of its code (:func:`code_hash`), and its
name holds that hash: a driver finds and uses only an agent of its own code. It records the
driver process that started it (:func:`driver_token`), and each fault it holds the driver that
asked for it: a driver heals only its own faults, and kills only the agents it started.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import select
import signal as signals
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil

from chaos._errors import ChaosError, FaultIneffective, HangError, TargetNotFound
from chaos._wait import wait_until
from chaos.agents._disk import Filled, fill, unfill
from chaos.agents._identity import SHIPPED, code_hash
from chaos.agents._memory import MemoryProgress, read_progress
from chaos.agents._safety import check_target, raylet_of

__all__ = ["AGENT_START_TIMEOUT", "PROTOCOL", "SHIPPED", "AgentIdentity", "AgentMismatch", "AgentUnavailable",
           "ChaosAgent", "NodeFacts", "PauseTicket", "agent_for", "check_agents", "code_hash", "driver_token",
           "start_agents", "stop_agents", "worker_title"]

AGENT_NAMESPACE = "raychaos-agents"
#: The agent's protocol: its methods, their arguments and results. Change it with any of them
#: (the code's hash changes with every byte anyway; the number says what kind of change it was).
PROTOCOL = 2
#: Seconds a node's agent has to start and answer: the node unpacks the agent's package and
#: starts a worker process for it first (about 1 s here).
AGENT_START_TIMEOUT = 30.0
#: What a refused agent's error says before this driver's own identity, for tests to match.
MISMATCH = "this raychaos's agent is"
#: Hex digits of the code's hash in an agent's name: agents of different code never share a name.
NAME_HASH = 12
STOP_TIMEOUT = 5.0
_REPLY_S = 0.2  # a kill_node reply's head start over the raylet's SIGKILL, which ends this agent
_STOPPED = (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
_ENDED = ("gone", psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
#: A signal no process survives: once it is sent, the process is exiting (one that may be
#: handled, as SIGTERM, leaves it a target).
_FATAL = frozenset({signals.SIGKILL})
#: A busy process: it says when its loop begins (its start, Python's own, costs CPU too), then burns.
_HOG = ("import time, sys\nend = time.monotonic() + float(sys.argv[1])\nsys.stdout.write('burning\\n')\n"
        "sys.stdout.flush()\nwhile time.monotonic() < end:\n    pass\n")
#: CPU seconds a hog must burn after its loop began to count as burning: two of the kernel's
#: 10 ms ticks. A process that sleeps instead gains none.
HOG_PROOF_CPU = 0.02
#: How long a hog may take to start its loop and burn ``HOG_PROOF_CPU`` (a loaded node is slow).
HOG_CONFIRM = 10.0


@dataclass(slots=True)
class _Pause:
    """One pause of one process: its identity, and what resumes it (this pause only)."""

    created: float  # the process's creation time: a reused pid is never signalled
    token: int
    healer: int  # pid of the healer process guarding the deadline
    owner: str = ""  # the driver that asked for it (driver_token): its heal_all resumes it
    timer: threading.Timer | None = None


@dataclass(frozen=True, slots=True)
class PauseTicket:
    """A confirmed pause: when its own timer resumes it, and the token that names it, so a heal
    resumes this pause only (``resume(pid, token=...)``), never a later one of the same process."""

    deadline: float  # wall clock
    token: int


@dataclass(frozen=True, slots=True)
class AgentIdentity:
    """Who an agent is: its :data:`PROTOCOL`, the hash of its code (:func:`code_hash`), and the
    token of the driver process that started it (:func:`driver_token`; "" for none). A driver
    uses an agent whose protocol and code are its own, whoever started it."""

    protocol: int
    code: str
    owner: str = ""

    def describe(self) -> str:
        return f"protocol {self.protocol}, code {self.code[:NAME_HASH]}"


class AgentMismatch(ChaosError, RuntimeError):
    """The agent on a node runs other code than this driver's (another raychaos version, or a
    changed checkout, started it; or the actor holding its name is not an agent): it is refused
    before any use, and left alone (an attack of that code may be using it)."""

    def __init__(self, message: str, *, node_id: str) -> None:
        super().__init__(message)
        self.node_id = node_id


class AgentUnavailable(ChaosError, RuntimeError):
    """No agent started and answered on a node within its bound (one this driver started is
    killed again)."""

    def __init__(self, message: str, *, node_id: str) -> None:
        super().__init__(message)
        self.node_id = node_id


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """What a node lets its agent do, as the agent found it there."""

    euid: int
    #: "" when the node's Ray processes can be read in ``/proc`` (status, children, descriptors).
    proc: str
    #: "" when the agent may signal and limit the node's Ray processes (their user, or root).
    control: str


class ChaosAgent:
    """Runs on one node; every method acts on that node only.

    Args:
        owner: the token of the driver process that starts it (:func:`driver_token`): only that
            driver kills it. The faults it holds each keep the token of the driver that asked.
    """

    def __init__(self, owner: str = "") -> None:
        self._owner = owner
        self._lock = threading.Lock()
        self._paused: dict[int, _Pause] = {}
        self._tokens = itertools.count(1)
        self._hogs: dict[subprocess.Popen[bytes], str] = {}  # each busy process, and who asked for it
        self._held: list[Any] = []
        #: Each process (pid, start time) this agent sent SIGKILL: it is exiting.
        self._doomed: set[tuple[int, float]] = set()

    def protocol(self) -> int:
        """This agent's :data:`PROTOCOL`: the one method every version keeps as it is."""
        return PROTOCOL

    def identity(self) -> AgentIdentity:
        """This agent's protocol, the hash of the code it runs, and the driver that started it."""
        return AgentIdentity(protocol=PROTOCOL, code=code_hash(), owner=self._owner)

    def facts(self) -> NodeFacts:
        """What this node lets the agent do (see :class:`NodeFacts`)."""
        return NodeFacts(os.geteuid(), _proc_problem(), _control_problem())

    def where(self) -> tuple[int, str]:
        import ray

        return os.getpid(), ray.get_runtime_context().get_node_id()

    def status(self, pid: int) -> str | None:
        try:
            return str(psutil.Process(pid).status())
        except psutil.NoSuchProcess:
            return None

    def signal(self, pid: int, signum: int, *, driver_pids: tuple[int, ...] = (),
               confirm_within: float = 0.0, running: str | None = None) -> float:
        """Send ``signum`` to ``pid`` after the safety check. With ``confirm_within`` > 0, wait
        that long for the process to be gone and return how long it took. With ``running``,
        not while the worker runs another task than that one (its title says so) right now.

        Raises:
            TargetNotFound: the process exited, or runs another task than ``running`` now
                (the State API lags by a second: the task may have ended, the worker moved on).
            FaultIneffective: the process was still running ``confirm_within`` s later (it
                ignores or handles the signal).
        """
        proc = check_target(pid, agent_pid=os.getpid(), driver_pids=driver_pids)
        if running is not None:
            _check_running(proc, running)
        with self._lock:  # two faults at once on one process: the second must not count the first's kill
            self._refuse_exiting(proc)
            if signum in _FATAL:
                self._doomed.add((proc.pid, proc.create_time()))
        sent = time.monotonic()
        proc.send_signal(signum)
        if confirm_within <= 0:
            return 0.0
        try:
            wait_until(lambda: _gone(proc), timeout=confirm_within, interval=0.002,
                       what=f"process {pid} to exit after signal {signum}")
        except HangError:
            raise FaultIneffective(
                f"process {pid} was still running {confirm_within:g} s after signal {signum}: it "
                "ignores or handles the signal; use SIGKILL to be sure it dies") from None
        return time.monotonic() - sent

    def kill_node(self, *, driver_pids: tuple[int, ...] = (), grace_s: float = 0.0) -> tuple[int, int]:
        """Kill this node, confirmed before replying: the raylet stopped (state T: it can
        neither serve, nor report, nor start a worker) and every process under it, this agent
        aside, SIGKILLed and seen gone. A node that dies takes all its processes with it (a
        worker busy in Python would otherwise not notice its raylet is gone, and finish its
        task as if nothing happened). With ``grace_s``, the workers first get SIGTERM and that
        long to exit, their raylet still running, as an instance that shuts down does.

        The raylet and this agent are SIGKILLed just after the reply (a reply goes straight to
        the caller, without the raylet; SIGKILL ends a stopped process). Returns the raylet's
        pid and how many other processes died.

        Raises:
            FaultIneffective: the raylet did not stop, or a process survived SIGKILL past
                ``STOP_TIMEOUT``; the raylet is resumed, the node left running.
        """
        raylet = raylet_of(os.getpid())
        check_target(raylet.pid, agent_pid=os.getpid(), driver_pids=driver_pids, allow_raylet=True)
        if grace_s > 0:
            _terminate_workers(_under(raylet, driver_pids), grace_s)
        killed = _stop_and_kill_under(raylet, driver_pids)
        threading.Timer(_REPLY_S, _end_node, args=(raylet,)).start()
        return raylet.pid, killed

    def freeze_node(self, seconds: float, *, workers: bool = False, driver_pids: tuple[int, ...] = (),
                    owner: str = "") -> list[int]:
        """SIGSTOP this node's raylet (and with ``workers`` every worker under it, this agent
        aside) for ``seconds``, each confirmed in state T and resumed by this agent's timer and
        its healer alike; returns the pids, the raylet first. This agent keeps running: it is
        what resumes them, though Ray may declare this node, and so this agent, dead. Each
        pause is ``owner``'s (see :meth:`pause`)."""
        raylet = raylet_of(os.getpid())
        others = [p.pid for p in raylet.children() if workers and p.pid != os.getpid()
                  and p.pid not in driver_pids and _status(p) not in _ENDED]
        frozen: list[int] = []
        try:
            for pid in (raylet.pid, *others):
                self.pause(pid, seconds, driver_pids=driver_pids, allow_raylet=True, owner=owner)
                frozen.append(pid)
        except BaseException:
            for pid in frozen:
                self.resume(pid)
            raise
        return frozen

    def limit_open_files(self, pid: int, headroom: int, *,
                         driver_pids: tuple[int, ...] = ()) -> tuple[int, int, int]:
        """Lower ``pid``'s soft ``RLIMIT_NOFILE`` so that it can open ``headroom`` more descriptors
        and no more, and read it back; returns the old soft and hard limits and the new soft one.

        Raises:
            FaultIneffective: the process's limit did not read back as set.
        """
        proc = check_target(pid, agent_pid=os.getpid(), driver_pids=driver_pids)
        soft, hard = proc.rlimit(psutil.RLIMIT_NOFILE)
        low = _limit_leaving(_open_fds(pid), headroom)
        proc.rlimit(psutil.RLIMIT_NOFILE, (low, hard))
        if proc.rlimit(psutil.RLIMIT_NOFILE) != (low, hard):
            raise FaultIneffective(f"process {pid}'s open-file limit read back as "
                                   f"{proc.rlimit(psutil.RLIMIT_NOFILE)}, not ({low}, {hard})")
        return soft, hard, low

    def restore_open_files(self, pid: int, soft: int, hard: int) -> bool:
        """Give ``pid`` back its open-file limit; False when it has exited since (nothing to heal).

        Raises:
            FaultIneffective: the limit did not read back as restored.
        """
        try:
            proc = psutil.Process(pid)
            proc.rlimit(psutil.RLIMIT_NOFILE, (soft, hard))
            now = proc.rlimit(psutil.RLIMIT_NOFILE)
        except psutil.NoSuchProcess:
            return False
        if now != (soft, hard):
            raise FaultIneffective(f"process {pid}'s open-file limit read back as {now}, not ({soft}, {hard})")
        return True

    def fill_disk(self, path: str) -> Filled:
        """Fill the (small tmpfs) filesystem of ``path`` on this node; see :func:`chaos.agents._disk.fill`."""
        return fill(path)

    def free_disk(self, ballast: str) -> int:
        """Delete a ballast written by :meth:`fill_disk`; returns the free bytes now."""
        return unfill(ballast)

    def pause(self, pid: int, seconds: float, *, driver_pids: tuple[int, ...] = (),
              allow_raylet: bool = False, owner: str = "") -> PauseTicket:
        """SIGSTOP ``pid`` for ``seconds``; returns once the process is seen stopped (state T).

        Its ``seconds`` count from that moment: this agent's timer resumes it then, and a
        separate healer process guards the same deadline (plus the confirmation's bound) in
        case this agent dies. Both belong to this pause only: resuming it retires them, so a
        stale timer or healer can never cut a later pause of the same process short; and a
        heal given the returned ticket's token cannot either. Returns that ticket. The pause
        is ``owner``'s, the driver that asked: ``heal_all(owner=...)`` resumes only its own.

        Raises:
            FaultIneffective: the process exited, or was not seen stopped within
                ``STOP_TIMEOUT`` seconds (it is resumed at once).
        """
        proc = check_target(pid, agent_pid=os.getpid(), driver_pids=driver_pids,
                            allow_raylet=allow_raylet)
        with self._lock:
            self._refuse_exiting(proc)
        entry = _Pause(created=proc.create_time(), token=next(self._tokens),
                       healer=_spawn_healer(pid, proc.create_time(), time.time() + seconds + STOP_TIMEOUT), owner=owner)
        with self._lock:  # signals are sent under the lock: a resume's SIGCONT cannot overtake
            earlier, self._paused[pid] = self._paused.get(pid), entry
            proc.send_signal(signals.SIGSTOP)
        if earlier is not None:
            _retire(earlier)
        self._confirm_stopped(proc, entry.token)
        self._arm(pid, entry.token, seconds)
        return PauseTicket(time.time() + seconds, entry.token)

    def _refuse_exiting(self, proc: psutil.Process) -> None:
        """A process a fault before this one sent SIGKILL, or one already exiting, is no
        target: the State API lists a killed actor's old process ALIVE for a second, and a kill
        sent to it again would be confirmed by the first kill's effect (a fault that did
        nothing). TargetNotFound: the engine resolves the target again, without this process.
        Called under the lock."""
        status = _status(proc)
        try:
            killed = (proc.pid, proc.create_time()) in self._doomed
        except psutil.NoSuchProcess:
            killed, status = False, "gone"
        if killed:
            raise TargetNotFound(f"process {proc.pid} is exiting: an earlier fault sent it SIGKILL (its state is "
                                 f"{status!r}); its actor or task runs in another process, if anywhere")
        if status in _ENDED:
            raise TargetNotFound(f"process {proc.pid} has exited (its state is {status!r})")

    def _arm(self, pid: int, token: int, seconds: float) -> None:
        """Start the resume timer of pause ``token``, unless it was resumed meanwhile."""
        timer = threading.Timer(seconds, self.resume, args=(pid,), kwargs={"token": token})
        with self._lock:
            entry = self._paused.get(pid)
            if entry is None or entry.token != token:
                return
            entry.timer = timer
        timer.start()

    def _confirm_stopped(self, proc: psutil.Process, token: int) -> None:
        # The stop is delivered asynchronously: return only once the kernel shows state T, so
        # the caller's next step sees a paused process (and a pause is never merely "sent").
        try:
            wait_until(lambda: _status(proc) in _STOPPED or _gone(proc), timeout=STOP_TIMEOUT, interval=0.002,
                       what=f"process {proc.pid} to stop after SIGSTOP")
        except HangError:
            self.resume(proc.pid, token=token)
            raise FaultIneffective(f"process {proc.pid} was not seen stopped within {STOP_TIMEOUT:g} s of "
                                   f"SIGSTOP: its state stayed {_status(proc)!r}") from None
        if _status(proc) not in _STOPPED:  # killed meanwhile (a kill at the same moment): its successor is looked for
            self.resume(proc.pid, token=token)
            raise TargetNotFound(f"process {proc.pid} exited before it was seen stopped after SIGSTOP; its actor "
                                 "or task runs in another process, if anywhere")

    def resume(self, pid: int, *, token: int | None = None) -> bool:
        """SIGCONT ``pid`` if this agent paused it (and it is still that process). With
        ``token``, only if that pause is still the current one (a timer's own pause)."""
        with self._lock:
            entry = self._paused.get(pid)
            if entry is None or (token is not None and entry.token != token):
                return False
            del self._paused[pid]
            _sigcont(pid, entry.created)
        _retire(entry)
        return True

    def progress(self, path: str) -> MemoryProgress | None:
        """A memory fault's last progress report on this node, or None before its first."""
        return read_progress(path)

    def resume_all(self, pids: list[int]) -> int:
        """Resume each of ``pids`` this agent paused; returns how many it resumed."""
        return sum(self.resume(pid) for pid in pids)

    def cpu_hog(self, cores: int, seconds: float, *, owner: str = "") -> list[int]:
        """Start ``cores`` busy-looping processes for at most ``seconds``; return their pids once
        each is seen burning CPU (its CPU time advancing, measured). They are ``owner``'s, the
        driver that asked: ``stop_hogs(owner=...)`` stops only its own.

        Raises:
            FaultIneffective: a process did not start its loop, or burned no CPU, within
                ``HOG_CONFIRM`` seconds (they are all stopped).
        """
        procs = [subprocess.Popen([sys.executable, "-c", _HOG, repr(seconds)],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE) for _ in range(cores)]
        with self._lock:
            self._hogs.update(dict.fromkeys(procs, owner))
        try:
            deadline = time.monotonic() + HOG_CONFIRM
            for proc in procs:
                _confirm_burning(proc, deadline)
        except FaultIneffective:
            self._stop(procs)
            raise
        return [p.pid for p in procs]

    def stop_hogs(self, *, owner: str | None = None) -> int:
        """Stop the busy processes ``owner`` asked for (every one without it); return how many."""
        with self._lock:
            hogs = [p for p, asked in self._hogs.items() if owner is None or asked == owner]
        return self._stop(hogs)

    def _stop(self, hogs: list[subprocess.Popen[bytes]]) -> int:
        with self._lock:
            for proc in hogs:
                self._hogs.pop(proc, None)
        for proc in hogs:
            proc.kill()
            proc.wait(timeout=10)
            if proc.stdout is not None:
                proc.stdout.close()
        return len(hogs)

    def heal_all(self, *, owner: str | None = None) -> int:
        """Resume the processes this agent paused and stop its hogs, for ``owner`` (the driver
        that asked for them) or, without it, for everyone; return how many. Another driver's
        faults are left to that driver's heal and to their own deadlines."""
        with self._lock:
            paused = [(pid, e.token) for pid, e in self._paused.items() if owner is None or e.owner == owner]
        # Each pause by its token: one another driver made of the same process since is not ours.
        return sum(self.resume(pid, token=token) for pid, token in paused) + self.stop_hogs(owner=owner)


@dataclass(frozen=True, slots=True)
class _Known:
    """An agent this driver checked: its handle, and whether this driver started it (then it kills it)."""

    handle: Any
    ours: bool


_AGENTS: dict[tuple[str, str], _Known] = {}


def driver_token() -> str:
    """This process's token, made once per process: an agent records it as the driver that
    started it, and each fault it holds as the driver that asked for it."""
    return _token_of(os.getpid())


@functools.cache
def _token_of(pid: int) -> str:
    # Keyed by pid: a forked child is another driver, never its parent's namesake.
    return f"{pid}-{uuid.uuid4().hex}"


def _confirm_burning(proc: subprocess.Popen[bytes], deadline: float) -> None:
    """Return once ``proc`` began its loop and then burned ``HOG_PROOF_CPU`` seconds of CPU
    (user + system, as the kernel counts it), before ``deadline`` (``time.monotonic``).

    Raises:
        FaultIneffective: it did not, within the deadline.
    """
    assert proc.stdout is not None  # started with stdout=PIPE
    ready, _, _ = select.select([proc.stdout], [], [], max(0.0, deadline - time.monotonic()))
    if not ready or proc.stdout.readline() != b"burning\n":
        raise FaultIneffective(f"busy process {proc.pid} did not begin its loop within {HOG_CONFIRM:g} s "
                               f"(exit code {proc.poll()!r})")
    base = _cpu_seconds(proc.pid)
    used = 0.0

    def burned() -> bool:
        nonlocal used
        used = _cpu_seconds(proc.pid) - base
        return used >= HOG_PROOF_CPU

    try:
        wait_until(burned, timeout=max(0.0, deadline - time.monotonic()), interval=0.005,
                   what=f"busy process {proc.pid} to burn CPU")
    except HangError:
        raise FaultIneffective(f"busy process {proc.pid} burned {used:.3f} s of CPU after its loop began, "
                               f"not {HOG_PROOF_CPU:g} s, within {HOG_CONFIRM:g} s: it is not busy "
                               "(sleeping, stopped, or starved of every core)") from None


def _cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return float(times.user + times.system)


def _spawn_healer(pid: int, created: float, deadline: float) -> int:
    """The process that resumes ``pid`` at ``deadline`` whatever happens to this agent."""
    # posix_spawn, not fork: forking this multithreaded worker can deadlock the child.
    return os.posix_spawn(sys.executable, [sys.executable, "-m", "chaos.agents._healer", str(pid),
                                           repr(created), repr(deadline)], dict(os.environ),
                          setsid=True)


def _sigcont(pid: int, created: float) -> None:
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - created) < 1.0:  # same process, not a reused pid
            proc.send_signal(signals.SIGCONT)
    except psutil.NoSuchProcess:
        pass


def _retire(entry: _Pause) -> None:
    """A pause is over: its timer and its healer must not fire into a later pause."""
    if entry.timer is not None:
        entry.timer.cancel()
    try:
        os.kill(entry.healer, signals.SIGKILL)
        os.waitpid(entry.healer, 0)  # our child: reap it
    except (ProcessLookupError, ChildProcessError):
        pass  # it already fired and exited


def worker_title(proc: psutil.Process) -> str:
    """A Ray worker's title, e.g. ``ray::sample_env`` (read whole: psutil splits a rewritten
    title on spaces or NULs, and a task's name may hold spaces)."""
    return " ".join(proc.cmdline()).strip()


def _check_running(proc: psutil.Process, task: str) -> None:
    """Refuse a worker whose title names another task than ``task``: Ray titles it
    ``ray::<task>`` while it runs one. ``ray::IDLE`` passes: a task the State API calls
    RUNNING shows it for seconds while its worker still imports the task's module."""
    try:
        title = worker_title(proc)
    except psutil.NoSuchProcess:
        raise TargetNotFound(f"process {proc.pid} no longer exists") from None
    if title.startswith("ray::") and title not in ("ray::IDLE", f"ray::{task}"):
        raise TargetNotFound(f"process {proc.pid} runs {title!r} now, not task {task!r}")


def _status(proc: psutil.Process) -> str:
    try:
        return str(proc.status())
    except psutil.NoSuchProcess:
        return "gone"


def _gone(proc: psutil.Process) -> bool:
    """The process has exited (a zombie waiting for its raylet to reap it counts; a reused
    pid does not fool ``is_running``, which compares creation times)."""
    return not proc.is_running() or _status(proc) in _ENDED


#: Processes under a raylet that are not workers: the raylet fate-shares with them (it exits
#: at once when one ends), so a graceful shutdown leaves them to the final SIGKILL.
_RAYLET_AGENTS = ("ray::DashboardAgent", "ray::RuntimeEnvAgent", "dashboard/agent.py",
                  "runtime_env/agent")


def _is_raylet_agent(proc: psutil.Process) -> bool:
    try:
        text = proc.name() + " " + " ".join(proc.cmdline())
    except psutil.Error:
        return False
    return any(marker in text for marker in _RAYLET_AGENTS)


def _under(raylet: psutil.Process, driver_pids: tuple[int, ...]) -> list[psutil.Process]:
    """Every live process under ``raylet`` but this agent and the drivers."""
    return [p for p in raylet.children(recursive=True)
            if p.pid != os.getpid() and p.pid not in driver_pids and not _gone(p)]


def _terminate_workers(processes: list[psutil.Process], grace_s: float) -> None:
    # The raylet and its agents stay up while the workers shut down: the raylet fate-shares
    # with its agents, and the workers may still need it (a checkpoint on SIGTERM).
    workers = [p for p in processes if not _is_raylet_agent(p)]
    for proc in workers:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    psutil.wait_procs(workers, timeout=grace_s)


def _stop_and_kill_under(raylet: psutil.Process, driver_pids: tuple[int, ...]) -> int:
    """Stop ``raylet``, then SIGKILL everything under it, each confirmed; how many died. On
    failure the raylet is resumed."""
    raylet.send_signal(signals.SIGSTOP)
    try:
        others = _under(raylet, driver_pids)  # listed once stopped: no worker starts after
        _confirm(lambda: _status(raylet) in _STOPPED, f"raylet {raylet.pid} to stop")
        for proc in others:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        _confirm(lambda: all(_gone(p) for p in others),
                 f"the {len(others)} processes under raylet {raylet.pid} to exit after SIGKILL")
    except FaultIneffective:
        _sigcont(raylet.pid, raylet.create_time())
        raise
    return len(others)


def _confirm(done: Callable[[], bool], what: str) -> None:
    try:
        wait_until(done, timeout=STOP_TIMEOUT, interval=0.002, what=what)
    except HangError:
        raise FaultIneffective(f"waited {STOP_TIMEOUT:g} s for {what}; it did not happen") from None


def _end_node(raylet: psutil.Process) -> None:
    with contextlib.suppress(psutil.Error):  # already gone
        raylet.kill()
    os._exit(1)  # this agent, last


def _open_fds(pid: int) -> set[int]:
    try:
        return {int(fd) for fd in os.listdir(f"/proc/{pid}/fd")}
    except FileNotFoundError as exc:
        raise TargetNotFound(f"process {pid} no longer exists") from exc


def _limit_leaving(held: set[int], headroom: int) -> int:
    """The open-file limit under which exactly ``headroom`` more descriptors can be opened. A
    new descriptor takes the lowest free number and must be below the limit; descriptors
    already open above it stay usable. So the limit is the number of the free slot after the
    first ``headroom`` free ones."""
    free, slot = 0, 0
    while True:
        if slot not in held:
            if free == headroom:
                return slot
            free += 1
        slot += 1


def _proc_problem() -> str:
    """Why this node's Ray processes cannot be read in ``/proc``, or "" (a target is found,
    checked and confirmed gone there: the raylet's children, their state, their descriptors)."""
    try:
        raylet = raylet_of(os.getpid())
        raylet.status()
        raylet.children()
        os.listdir(f"/proc/{raylet.pid}/fd")
    except (psutil.Error, OSError, ChaosError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return ""


def _control_problem() -> str:
    """Why this agent may not signal or limit this node's Ray processes, or "" (it runs as
    their user, or as root)."""
    try:
        raylet = raylet_of(os.getpid())
        os.kill(raylet.pid, 0)  # signal 0: the permission check alone
        raylet.rlimit(psutil.RLIMIT_NOFILE)
    except (psutil.Error, OSError, ChaosError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return ""


def agent_name(node_id: str) -> str:
    """The name of this code's agent on ``node_id``. It holds the code's hash, so agents of
    different code (another raychaos version, a changed checkout) never share a name: each
    driver finds only an agent of its own code, and none fights another over a name."""
    return f"agent-{node_id[:16]}-{code_hash()[:NAME_HASH]}"


@functools.cache
def _agent_class() -> Any:
    """The agent's actor class, made remote once (each ``ray.remote`` would export it anew)."""
    import ray

    return ray.remote(ChaosAgent)


def _launch(node_id: str) -> tuple[Any, bool]:
    """The agent of ``node_id``: one found there, or one started now, owned by this driver; and
    whether this driver started it (then the handle is that very actor, and only that one)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from chaos._ray_compat import actor_exists_error
    from chaos.agents._ship import agent_runtime_env

    name = agent_name(node_id)
    try:
        return ray.get_actor(name, namespace=AGENT_NAMESPACE), False
    except ValueError:  # none there yet
        pass
    try:  # not get_if_exists: it hides whether the handle is the actor this driver started
        return _agent_class().options(
            name=name, namespace=AGENT_NAMESPACE, lifetime="detached", num_cpus=0, max_concurrency=8,
            max_restarts=0, runtime_env=agent_runtime_env(),
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node_id, soft=False),
        ).remote(owner=driver_token()), True
    except actor_exists_error():  # another driver started it just now
        return ray.get_actor(name, namespace=AGENT_NAMESPACE), False


def _answer(node_id: str, handle: Any, new: bool, deadline: float, bound: float) -> AgentIdentity:
    """The agent's identity, once it answered with this driver's protocol and code.

    Raises:
        AgentMismatch: it answered another identity, or has no ``identity()`` (left alone).
        AgentUnavailable: it did not start, died, or did not answer by ``deadline`` (the end of
            its ``bound``; killed if new): an OutOfMemoryError of Ray's memory monitor among them.
    """
    import ray
    from ray.exceptions import GetTimeoutError, RayError

    from chaos._ray_state import short  # driver-side: the agent's package does not carry it

    try:
        theirs: object = ray.get(handle.identity.remote(), timeout=max(0.1, deadline - time.monotonic()))
    except AttributeError:  # an actor of that name without our identity() method
        theirs = None
    except RayError as exc:  # it timed out, never started, or died (Ray's memory monitor included)
        if new:
            ray.kill(handle)  # never left to start later, unchecked and unowned
        why = (f"did not answer within {bound:g} s (an overloaded or frozen node, or one that cannot "
               "start a worker process)" if isinstance(exc, GetTimeoutError)
               else f"did not answer: {type(exc).__name__}: {exc}")
        raise AgentUnavailable(f"node {short(node_id)}: the chaos agent {why}"[:900], node_id=node_id) from None
    return _checked(node_id, theirs)


def _checked(node_id: str, theirs: object) -> AgentIdentity:
    """The identity an agent answered (``theirs``; None: it has no ``identity()``), once it is
    this driver's protocol and code, whichever driver started the agent.

    Raises:
        AgentMismatch: it is another identity, or none; naming both and the fix.
    """
    from chaos._ray_state import short  # driver-side: the agent's package does not carry it

    mine = AgentIdentity(protocol=PROTOCOL, code=code_hash())
    if isinstance(theirs, AgentIdentity) and (theirs.protocol, theirs.code) == (mine.protocol, mine.code):
        return theirs
    said = (theirs.describe() if isinstance(theirs, AgentIdentity) else
            "none (it has no identity() method: a raychaos from before code identities, or not an agent)"
            if theirs is None else f"unreadable ({theirs!r:.80})")
    name = agent_name(node_id)
    raise AgentMismatch(
        f"node {short(node_id)}: the chaos agent there (actor {name!r}, namespace {AGENT_NAMESPACE!r}) is "
        f"{said}; {MISMATCH} {mine.describe()}: it runs other code than this driver ships, so it is not "
        f"used. Once no attack of that code runs, remove it: "
        f"ray.kill(ray.get_actor({name!r}, namespace={AGENT_NAMESPACE!r}))", node_id=node_id)


def check_agents(node_ids: list[str], *, timeout: float = AGENT_START_TIMEOUT
                 ) -> dict[str, AgentMismatch | AgentUnavailable | None]:
    """Start (or find) the agent of each node at once, and check each answers with this
    driver's protocol and code within ``timeout``; returns each node's problem, or None. An
    agent that answered is cached for :func:`agent_for` (and left by :func:`stop_agents`), with
    whether this driver started it."""
    import ray

    gcs, deadline = ray.get_runtime_context().gcs_address, time.monotonic() + timeout
    launched = {node: _launch(node) for node in node_ids if (gcs, node) not in _AGENTS}
    problems: dict[str, AgentMismatch | AgentUnavailable | None] = dict.fromkeys(node_ids)
    for node, (handle, new) in launched.items():
        try:
            identity = _answer(node, handle, new, deadline, timeout)
            _AGENTS[(gcs, node)] = _Known(handle=handle, ours=identity.owner == driver_token())
        except (AgentMismatch, AgentUnavailable) as exc:
            problems[node] = exc
    return problems


def agent_for(node_id: str, *, timeout: float = AGENT_START_TIMEOUT) -> Any:
    """The agent on ``node_id``, found or started on first use and checked to run this driver's
    protocol and code (:class:`AgentIdentity`).

    Agents are detached, named actors: a pause's resume timer must survive the driver
    that asked for it, and the handle is cached because Ray ends an actor when its last
    handle goes. :func:`stop_agents` removes those this process started from a cluster it did
    not start. The node needs nothing installed: the agent's package travels with it (``chaos.agents._ship``).

    Raises:
        AgentMismatch: the actor under this code's agent's name runs other code.
        AgentUnavailable: no agent started and answered within ``timeout``.
    """
    import ray

    key = (ray.get_runtime_context().gcs_address, node_id)
    if key not in _AGENTS:
        problem = check_agents([node_id], timeout=timeout)[node_id]
        if problem is not None:
            raise problem
    return _AGENTS[key].handle


def start_agents(*, timeout: float = AGENT_START_TIMEOUT) -> int:
    """Start (or find) the agent of every live node and wait until each answers; return how
    many. Call it before a schedule's time zero, so no fault is late by an agent's start
    (about 0.8 s here).

    Raises:
        AgentMismatch: the actor under a node's agent's name runs other code (the first such).
        AgentUnavailable: a node's agent did not start and answer within ``timeout``.
    """
    from chaos._ray_state import live_nodes  # driver-side: the agent's package does not carry it

    nodes = [row.node_id for row in live_nodes()]
    problems = [p for p in check_agents(nodes, timeout=timeout).values() if p is not None]
    if problems:
        raise problems[0]
    return len(nodes)


def stop_agents(*, timeout: float = 30.0) -> int:
    """Heal what this driver injected through the agents it used on this cluster, then kill those
    it started; return how many it killed. An agent it found running (another driver's) runs on,
    as do the faults other drivers hold through it: their drivers heal them, their deadlines end them."""
    import ray

    gcs = ray.get_runtime_context().gcs_address
    used = [(k, known) for k, known in _AGENTS.items() if k[0] == gcs]
    for key, known in used:
        try:
            ray.get(known.handle.heal_all.remote(owner=driver_token()), timeout=timeout)
        except Exception:  # noqa: BLE001 - a dead node's agent has nothing left to heal
            pass
        if known.ours:
            ray.kill(known.handle)
        del _AGENTS[key]
    return sum(known.ours for _, known in used)
