"""Each fault on real Ray processes: it does what it says, it is healed, and it is journaled."""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import random
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
import ray
from ray.exceptions import WorkerCrashedError
from ray.util.state import list_tasks

import chaos._targets as chaos_targets
from chaos import (
    ActorTarget,
    Chaos,
    CpuHog,
    FaultKind,
    FillObjectStore,
    Kill,
    Pause,
    Schedule,
    ScheduledFault,
    Starve,
    TaskTarget,
    WorkerTarget,
    wait_until,
)
from chaos._targets import resolve
from chaos.agents import agent_for
from chaos.agents._agent import worker_title
from chaos.cluster import ClusterHandle
from chaos.engine import FaultStatus, StoreFill, run_schedule
from chaos.errors import FaultIneffective, TargetNotFound, UnsafeTarget
from conftest import CALL_TIMEOUT

PTRACE_SEIZE = 0x4206  # <sys/ptrace.h>: trace without stopping the process


@ray.remote(max_restarts=2, max_task_retries=-1)
class Victim:
    def __init__(self) -> None:
        self.calls = 0

    def pid(self) -> int:
        return os.getpid()

    def call(self) -> int:
        self.calls += 1
        return self.calls


@pytest.fixture
def chaos(ray_cluster: ClusterHandle) -> Any:
    engine = Chaos(address=ray_cluster.address, seed=1)
    yield engine
    engine.heal_all()


def pid_of(actor: Any) -> int:
    return ray.get(actor.pid.remote(), timeout=CALL_TIMEOUT)


def gone(pid: int) -> bool:
    return not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_kill_by_handle_and_observe_the_restart(chaos: Chaos) -> None:
    victim = Victim.remote()
    old = pid_of(victim)
    injection = chaos.kill(Kill(ActorTarget.of(victim)))
    assert injection.processes[0].pid == old
    wait_until(lambda: gone(old), timeout=10, what="the killed process to exit")
    mttr = chaos.wait_restarted(injection.processes[0])
    assert pid_of(victim) != old and mttr < 30
    assert [e.kind for e in chaos.journal.events] == ["inject", "heal", "recover"]
    ray.kill(victim)


def test_sigterm_by_name_and_namespace(chaos: Chaos) -> None:
    victim = Victim.options(name="victim-by-name", namespace="chaos-tests").remote()
    old = pid_of(victim)
    chaos.kill(Kill(ActorTarget(name="victim-by-name", namespace="chaos-tests"), signal="SIGTERM"))
    wait_until(lambda: pid_of(victim) != old, timeout=30, what="restart after SIGTERM")
    ray.kill(victim)


def test_every_live_actor_of_a_class(chaos: Chaos) -> None:
    @ray.remote(max_restarts=1, max_task_retries=-1)
    class Flock:
        def pid(self) -> int:
            return os.getpid()

    flock = [Flock.remote() for _ in range(2)]
    old = {pid_of(a) for a in flock}
    injection = chaos.kill(Kill(ActorTarget(class_name="Flock", pick="all")))
    assert {p.pid for p in injection.processes} == old
    wait_until(lambda: not old & {pid_of(a) for a in flock}, timeout=30, what="both restarted")
    for a in flock:
        ray.kill(a)


def test_a_class_with_no_live_actors_is_refused_and_journaled(chaos: Chaos) -> None:
    with pytest.raises(TargetNotFound, match="no live process matches one actor"):
        chaos.kill(Kill(ActorTarget(class_name="NoSuchClass")))
    assert [e.kind for e in chaos.journal.events] == ["refuse"]


@ray.remote(max_retries=0)
def long_task(seconds: float) -> str:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.05)
    return "finished"


@ray.remote(max_restarts=1, max_task_retries=-1)
class SlowToRestart:
    """Takes 2 s to come back from a kill: a fault right after the kill finds it RESTARTING."""

    def __init__(self) -> None:
        if ray.get_runtime_context().was_current_actor_reconstructed:
            time.sleep(2.0)  # the restart's own work, being simulated; nothing waits on it

    def pid(self) -> int:
        return os.getpid()


def test_a_fault_right_after_a_kill_waits_for_the_actor_to_come_back(chaos: Chaos) -> None:
    """async-actor's pause, 2 s after its kill, once found the actor restarting: not_found."""
    victim = SlowToRestart.remote()
    first = pid_of(victim)
    chaos.kill(Kill(ActorTarget.of(victim)))
    with chaos.inject(Pause(ActorTarget.of(victim), seconds=0.5)) as injection:
        paused = injection.processes[0].pid
        assert paused != first and psutil.Process(paused).status() == psutil.STATUS_STOPPED
    assert pid_of(victim) == paused
    ray.kill(victim)


def test_a_target_whose_only_match_just_exited_is_looked_for_again(
        chaos: Chaos, ray_cluster: ClusterHandle, monkeypatch: pytest.MonkeyPatch) -> None:
    """Right after a kill the State API still shows the dead pid ALIVE (CI's pause found it so):
    with every match gone, the target is looked for within the patience, then refused."""
    victim = Victim.remote()
    pid = pid_of(victim)
    monkeypatch.setattr(chaos_targets, "PATIENCE", 0.5)
    with pytest.raises(TargetNotFound, match=r"within 0\.5 s") as refused:
        resolve(ActorTarget.of(victim), address=ray_cluster.address, rng=random.Random(0),
                exclude_pids=frozenset({pid}))
    assert "has exited, or moved on" in str(refused.value.__cause__.__cause__)
    ray.kill(victim)


@contextlib.contextmanager
def killed_but_unreaped(pid: int) -> Iterator[None]:
    """SIGKILL ``pid`` and hold it a zombie until the block ends. A raylet ignores SIGCHLD (its
    workers are reaped by the kernel), so the zombie is held by tracing it: a tracee that dies
    waits for its tracer to collect it."""
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.ptrace(PTRACE_SEIZE, pid, None, None) == 0, os.strerror(ctypes.get_errno())
    os.kill(pid, 9)
    try:
        wait_until(lambda: psutil.Process(pid).status() == psutil.STATUS_ZOMBIE, timeout=10,
                   what=f"the killed worker {pid} to be a zombie")
        yield
    finally:
        # Collected (the kernel then lets it go); bounded, as the kill may not have landed.
        wait_until(lambda: os.waitpid(pid, os.WNOHANG)[0] == pid, timeout=10,
                   what=f"the traced worker {pid} to be collected")


def test_a_killed_worker_not_yet_reaped_is_no_target(chaos: Chaos) -> None:
    """A SIGKILLed worker is a zombie while its threads tear down (12-25 ms here, longer on a busy
    machine), and the State API shows it ALIVE for longer still. A kill of it was "confirmed" at
    once (the restarted actor never killed), a pause of it failed as ineffective (make test,
    once): the agent refuses it as gone, so the engine looks for the target again."""
    victim = Victim.options(max_restarts=0).remote()
    pid = pid_of(victim)
    agent = agent_for(ray.get_runtime_context().get_node_id())
    with killed_but_unreaped(pid):
        for call in (agent.signal.remote(pid, 9, confirm_within=1.0), agent.pause.remote(pid, 0.5)):
            with pytest.raises(TargetNotFound, match="has exited: it is not reaped yet"):
                ray.get(call, timeout=CALL_TIMEOUT)


@pytest.mark.parametrize("second", ["kill", "pause"])
def test_two_faults_at_once_on_one_actor_each_hit_a_process_of_its_own(chaos: Chaos, second: str) -> None:
    """Two faults on one actor at the same moment found the same process (the State API lists a
    killed actor's old process ALIVE for a second): the second kill was "confirmed" by the first
    one's effect, a fault that did nothing (1 round in 4), and a pause failed as ineffective. The
    agent refuses a process it has SIGKILLed, so the engine finds the restarted process."""
    victim = Victim.options(max_restarts=-1).remote()
    pid_of(victim)
    # Two kills at once; a pause 10 ms after a kill (either may land first). A pause whose process
    # the kill ends before it is seen stopped pauses the restarted process instead (the agent says
    # the target is gone, the engine looks again); one seen stopped first was paused, then killed.
    follow = ScheduledFault(0.0, Kill(ActorTarget.of(victim))) if second == "kill" else \
        ScheduledFault(0.01, Pause(ActorTarget.of(victim), seconds=0.2))
    for _ in range(3):
        before = len(chaos.journal.events)
        outcomes = run_schedule(chaos, Schedule((ScheduledFault(0.0, Kill(ActorTarget.of(victim))), follow)))
        assert [o.status for o in outcomes] == [FaultStatus.INJECTED] * 2, [o.error for o in outcomes]
        injects = [e for e in chaos.journal.events[before:] if e.kind == "inject"]
        assert len(injects) == 2, injects
        if second == "kill":  # the second kill's process is never the first one's (nor "confirmed" by it)
            assert injects[0].pid != injects[1].pid, injects
        elif injects[0].pid == injects[1].pid:  # one process: paused, its stop confirmed, then killed
            assert [e.fault.KIND for e in injects] == [FaultKind.PAUSE, FaultKind.KILL], injects
        pid_of(victim)  # up again before the next round
    ray.kill(victim)


def test_kill_the_worker_running_a_named_task(chaos: Chaos, ray_cluster: ClusterHandle) -> None:
    ref = long_task.options(name="doomed").remote(60)
    wait_until(lambda: list_tasks(address=ray_cluster.address,
                                  filters=[("name", "=", "doomed"), ("state", "=", "RUNNING")]),
               timeout=30, what="the task to run")
    chaos.kill(Kill(TaskTarget("doomed")))
    with pytest.raises(WorkerCrashedError):
        ray.get(ref, timeout=CALL_TIMEOUT)


def test_a_task_kill_spares_a_worker_that_moved_on_to_another_task(chaos: Chaos,
                                                                   ray_cluster: ClusterHandle) -> None:
    """The State API's RUNNING lags by a second: the worker it names may run another task by
    now (once, the scenario's own probe). The agent looks at the worker's title first."""
    ref = long_task.options(name="other work").remote(60)  # a name may hold spaces
    (row,) = wait_until(lambda: list_tasks(address=ray_cluster.address, filters=[
        ("name", "=", "other work"), ("state", "=", "RUNNING")]), timeout=30, what="the task to run")
    wait_until(lambda: worker_title(psutil.Process(row.worker_pid)) == "ray::other work",
               timeout=30, what="the worker to run the task (it shows ray::IDLE while it imports)")
    agent = agent_for(row.node_id)
    assert ray.get(agent.signal.remote(row.worker_pid, 0, running="other work"), timeout=CALL_TIMEOUT) == 0
    with pytest.raises(TargetNotFound, match="runs 'ray::other work' now, not task 'doomed'"):
        ray.get(agent.signal.remote(row.worker_pid, 9, driver_pids=(os.getpid(),), running="doomed"),
                timeout=CALL_TIMEOUT)
    assert not gone(row.worker_pid)
    ray.cancel(ref, force=True)


def test_kill_a_random_busy_worker(chaos: Chaos) -> None:
    victim = Victim.remote()
    pid_of(victim)
    injection = chaos.kill(Kill(WorkerTarget()))
    pid = injection.processes[0].pid
    wait_until(lambda: gone(pid), timeout=10, what=f"worker {pid} to exit")
    ray.kill(victim)


def test_pause_is_a_true_straggler_then_heals(chaos: Chaos) -> None:
    victim = Victim.remote()
    pid = pid_of(victim)
    with chaos.inject(Pause(ActorTarget.of(victim), seconds=20)):
        assert psutil.Process(pid).status() == psutil.STATUS_STOPPED
        pending = victim.call.remote()
        ready, _ = ray.wait([pending], timeout=1.0)
        assert not ready  # the call waits; nothing restarts
    assert psutil.Process(pid).status() != psutil.STATUS_STOPPED
    assert ray.get(pending, timeout=CALL_TIMEOUT) == 1 and pid_of(victim) == pid
    assert [e.outcome for e in chaos.journal.events] == ["SIGSTOP; seen in state T", "SIGCONT"]
    ray.kill(victim)


def test_the_agent_resumes_on_its_own_deadline(chaos: Chaos) -> None:
    victim = Victim.remote()
    pid = pid_of(victim)
    ticket = ray.get(agent_for(ray.get_runtime_context().get_node_id()).pause.remote(pid, 0.5),
                     timeout=CALL_TIMEOUT)
    assert ticket.deadline > time.time()
    wait_until(lambda: psutil.Process(pid).status() != psutil.STATUS_STOPPED, timeout=10,
               what="the agent's timer to resume the process")
    ray.kill(victim)


def test_a_pause_shorter_than_one_poll_still_returns(chaos: Chaos) -> None:
    # The stop can be over (timer, healer) before the agent first sees it: that is not a hang.
    victim = Victim.remote()
    pid = pid_of(victim)
    agent = agent_for(ray.get_runtime_context().get_node_id())
    for _ in range(20):
        ray.get(agent.pause.remote(pid, 0.001), timeout=CALL_TIMEOUT)
    wait_until(lambda: psutil.Process(pid).status() != psutil.STATUS_STOPPED, timeout=10,
               what="the last short pause to end")
    assert ray.get(victim.call.remote(), timeout=CALL_TIMEOUT) >= 1
    ray.kill(victim)


def test_an_earlier_pauses_timer_cannot_end_a_later_pause(chaos: Chaos) -> None:
    # Found by the pause's confirmation: a pause healed early left its timer (and healer)
    # armed, and they resumed the next pause of the same process, unseen.
    victim = Victim.remote()
    pid = pid_of(victim)
    agent = agent_for(ray.get_runtime_context().get_node_id())
    ray.get(agent.pause.remote(pid, 0.3), timeout=CALL_TIMEOUT)
    ray.get(agent.resume.remote(pid), timeout=CALL_TIMEOUT)  # healed before its time, as a heal does
    ray.get(agent.pause.remote(pid, 30.0), timeout=CALL_TIMEOUT)
    end = time.monotonic() + 1.0  # past the first pause's timer: the second must hold throughout
    while time.monotonic() < end:
        assert psutil.Process(pid).status() == psutil.STATUS_STOPPED
        time.sleep(0.02)  # observing a state over a window, not waiting for one
    assert ray.get(agent.resume.remote(pid), timeout=CALL_TIMEOUT)
    assert ray.get(victim.call.remote(), timeout=CALL_TIMEOUT) == 1
    ray.kill(victim)


def test_healing_an_earlier_pause_leaves_a_later_overlapping_one_held(chaos: Chaos) -> None:
    # Found by a seeded plugin run: two pauses of one actor overlapped, the first's heal
    # resumed the process under the second, which was then never seen stopped (ineffective).
    victim = Victim.remote()
    pid = pid_of(victim)
    first = chaos.inject(Pause(ActorTarget.of(victim), seconds=20))
    first.__enter__()
    with chaos.inject(Pause(ActorTarget.of(victim), seconds=20)):
        first.__exit__(None, None, None)  # the first heals while the second holds
        assert psutil.Process(pid).status() == psutil.STATUS_STOPPED
    assert psutil.Process(pid).status() != psutil.STATUS_STOPPED
    assert [e.outcome for e in chaos.journal.events] == [
        "SIGSTOP; seen in state T", "SIGSTOP; seen in state T",
        "already resumed by its own timer, or held on by a later pause of the same process", "SIGCONT"]
    assert ray.get(victim.call.remote(), timeout=CALL_TIMEOUT) == 1
    ray.kill(victim)


def test_safety_refuses_what_is_not_this_sessions_worker(chaos: Chaos) -> None:
    agent = agent_for(ray.get_runtime_context().get_node_id())
    agent_pid = ray.get(agent.where.remote(), timeout=CALL_TIMEOUT)[0]
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        cases = [(1, "it is the init process"), (agent_pid, "it is the chaos agent itself"),
                 (os.getpid(), "it is the driver of this run"),
                 (stranger.pid, "it is not a worker of this Ray session on this node")]
        for pid, why in cases:
            with pytest.raises(UnsafeTarget, match=why):
                ray.get(agent.signal.remote(pid, 9, driver_pids=(os.getpid(),)), timeout=CALL_TIMEOUT)
        assert stranger.poll() is None  # untouched
    finally:
        stranger.kill()
        stranger.wait(timeout=10)


def test_cpu_hog_burns_then_stops(chaos: Chaos) -> None:
    with chaos.inject(CpuHog(cores=1, seconds=30)) as injection:
        (pid,) = injection.pids
        proc = psutil.Process(pid)
        proc.cpu_percent()
        wait_until(lambda: proc.cpu_percent(interval=0.2) > 50, timeout=10, what="a busy hog")
    wait_until(lambda: gone(pid), timeout=10, what="the hog to stop")


def test_fill_the_object_store_until_it_spills(chaos: Chaos, ray_cluster: ClusterHandle) -> None:
    with chaos.inject(FillObjectStore(fraction=1.5, seconds=30, chunk_mb=16)) as injection:
        store = injection.found
        assert isinstance(store, StoreFill) and (store.held_bytes >= store.capacity_bytes or store.full)
        spilled = glob.glob(f"{ray_cluster.temp_dir}/**/ray_spilled_objects*/*", recursive=True)
        assert spilled or store.full


def test_starvation_keeps_new_work_pending_until_healed(chaos: Chaos, ray_cluster: ClusterHandle) -> None:
    cpus = ray.cluster_resources()["CPU"]
    with chaos.inject(Starve(seconds=30, cpus=cpus)):
        ref = long_task.options(name="starved").remote(0.01)
        wait_until(lambda: list_tasks(address=ray_cluster.address, filters=[
            ("name", "=", "starved"), ("state", "=", "PENDING_NODE_ASSIGNMENT")]),
            timeout=15, what="the task to be seen pending")
        assert not ray.wait([ref], timeout=0.5)[0]
    assert ray.get(ref, timeout=CALL_TIMEOUT) == "finished"


def test_a_schedule_runs_heals_and_journals(chaos: Chaos) -> None:
    victim = Victim.remote()
    pid = pid_of(victim)
    target = ActorTarget.of(victim)
    schedule = Schedule.explicit([(0.0, Pause(target, seconds=0.5)), (1.0, Kill(target))])
    outcomes = run_schedule(chaos, schedule)
    assert [o.status for o in outcomes] == [FaultStatus.INJECTED, FaultStatus.INJECTED]
    kinds = [(e.kind, e.at) for e in chaos.journal.events]
    assert kinds == [("inject", 0.0), ("heal", 0.0), ("inject", 1.0), ("heal", 1.0)]
    wait_until(lambda: pid_of(victim) != pid, timeout=30, what="restart after the scheduled kill")
    ray.kill(victim)


@ray.remote(max_restarts=1, max_task_retries=-1)
class Deaf:
    """Ignores SIGTERM: a polite kill has no effect on it."""

    def __init__(self) -> None:
        import signal

        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    def pid(self) -> int:
        return os.getpid()


def test_a_kill_the_target_ignores_is_ineffective_and_journaled(ray_cluster: ClusterHandle) -> None:
    chaos = Chaos(address=ray_cluster.address, kill_confirm=2.0)
    deaf = Deaf.remote()
    pid = pid_of(deaf)
    with pytest.raises(FaultIneffective, match=f"process {pid} was still running 2 s after signal 15"):
        chaos.kill(Kill(ActorTarget.of(deaf), signal="SIGTERM"))
    assert [e.kind for e in chaos.journal.events] == ["ineffective"]
    assert psutil.pid_exists(pid) and pid_of(deaf) == pid  # it really ignored it
    ray.kill(deaf)


def test_pick_all_pauses_every_actor_of_the_class(chaos: Chaos) -> None:
    @ray.remote
    class Herd:
        def pid(self) -> int:
            return os.getpid()

    herd = [Herd.remote() for _ in range(2)]
    pids = {pid_of(a) for a in herd}
    with chaos.inject(Pause(ActorTarget(class_name="Herd", pick="all"), seconds=20)) as injection:
        assert {p.pid for p in injection.processes} == pids
        assert all(psutil.Process(p).status() == psutil.STATUS_STOPPED for p in pids)
    assert all(psutil.Process(p).status() != psutil.STATUS_STOPPED for p in pids)
    assert [e.kind for e in chaos.journal.events] == ["inject", "inject", "heal", "heal"]
    for a in herd:
        ray.kill(a)
