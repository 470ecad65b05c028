"""Process and node faults, each kind whole: kill, kill a node, pause, freeze a node, drain a node,
kill the GCS (their records, their injectors, their specs), inject → confirm → ``yield`` → heal
in ``finally`` against a :class:`chaos.engine.FaultContext`."""

from __future__ import annotations

import random
import signal as signals
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from chaos._context import (
    CALL_TIMEOUT,
    FaultContext,
    Injection,
    each_resolved,
    signal_resolved,
)
from chaos._errors import FaultIneffective, HangError, InvalidFaultSpec
from chaos._json import JsonValue
from chaos._kinds import ON_PROCESSES, Fault, FaultKind, FaultSpec, Need, duration, register
from chaos._observed import Observed
from chaos._ray_state import node_states, short
from chaos._targets import NodeTarget, RayProcess, Target, resolve
from chaos._wait import wait_until
from chaos.agents._agent import agent_for, driver_token
from chaos.cluster._cluster import head_of

__all__ = ["NODE_DEATH_CONFIRM", "DrainNode", "FreezeNode", "Kill", "KillGcs", "KillNode", "Pause"]

#: How long Ray may take to declare a killed node dead (its health check; default settings
#: need about 5 misses of 3 s, the test settings about 3 of 1 s).
NODE_DEATH_CONFIRM = 60.0


Signal = Literal["SIGKILL", "SIGTERM"]


@dataclass(frozen=True, slots=True)
class Kill(Fault):
    """Signal the target's process: SIGKILL (crash) or SIGTERM (polite)."""

    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind] = FaultKind.KILL
    #: Carried out by the chaos agent on the target's node (see :func:`chaos.agents.start_agents`).
    USES_AGENT: ClassVar[bool] = True

    target: Target
    signal: Signal = "SIGKILL"

    def __post_init__(self) -> None:
        if self.signal not in ("SIGKILL", "SIGTERM"):
            raise InvalidFaultSpec(f"unknown signal {self.signal!r}; use 'SIGKILL' or 'SIGTERM'", field="signal")


@dataclass(frozen=True, slots=True)
class KillNode(Fault):
    """SIGKILL a node's raylet and every process under it: the whole node dies at once, as a
    machine that fails would. Never the head unless asked.

    Confirmed in milliseconds by the node's agent (raylet stopped, every process under it
    gone); it counts as injected only once Ray has also declared the node dead (its health
    check: seconds), which its heal waits for."""

    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind] = FaultKind.KILL_NODE
    #: Carried out by the chaos agent on the target's node (see :func:`chaos.agents.start_agents`).
    USES_AGENT: ClassVar[bool] = True

    target: NodeTarget = field(default_factory=NodeTarget)


@dataclass(frozen=True, slots=True)
class Pause(Fault):
    """SIGSTOP the target's process for ``seconds``, then SIGCONT: a true straggler."""

    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind] = FaultKind.PAUSE
    #: Carried out by the chaos agent on the target's node (see :func:`chaos.agents.start_agents`).
    USES_AGENT: ClassVar[bool] = True

    target: Target
    seconds: float

    def __post_init__(self) -> None:
        duration("seconds", self.seconds)


class PauseObserved(Observed):
    """A pause as observed: when the agent's own timer resumes the process if no heal does."""

    resume_by: float | None = None  #: the pause's deadline on the agent's clock


@dataclass(frozen=True, slots=True)
class FreezeNode(Fault):
    """SIGSTOP a node's raylet (with ``workers``, its workers too) for ``seconds``: a node that
    stops answering without dying, as a long swap storm or a hung kernel does. Ray's health
    check declares it dead after about ``failure_threshold × (period + timeout)``; once
    thawed, a raylet Ray declared dead must exit rather than rejoin."""

    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind] = FaultKind.FREEZE_NODE
    #: Carried out by the chaos agent on the target's node (see :func:`chaos.agents.start_agents`).
    USES_AGENT: ClassVar[bool] = True

    seconds: float
    target: NodeTarget = field(default_factory=NodeTarget)
    workers: bool = False

    def __post_init__(self) -> None:
        duration("seconds", self.seconds)
        if self.target.allow_head:
            raise InvalidFaultSpec("freezing the head freezes the GCS's node: use KillGcs for the "
                                   "head, FreezeNode for worker nodes", field="target.allow_head")


DrainReason = Literal["preemption", "idle_termination"]


@dataclass(frozen=True, slots=True)
class DrainNode(Fault):
    """Drain a node through Ray's autoscaler API with a deadline, as a spot instance's
    preemption notice does, then at the deadline SIGTERM its processes, wait ``grace_s``, and
    SIGKILL what is left (the instance going away). ``kill_at_deadline=False`` only drains."""

    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind] = FaultKind.DRAIN_NODE
    #: Carried out by the chaos agent on the target's node (see :func:`chaos.agents.start_agents`).
    USES_AGENT: ClassVar[bool] = True

    deadline_s: float
    target: NodeTarget = field(default_factory=NodeTarget)
    reason: DrainReason = "preemption"
    grace_s: float = 2.0
    kill_at_deadline: bool = True

    def __post_init__(self) -> None:
        duration("deadline_s", self.deadline_s)
        duration("grace_s", self.grace_s)
        if self.reason not in ("preemption", "idle_termination"):
            raise InvalidFaultSpec(f"unknown drain reason {self.reason!r}; use 'preemption' or "
                                   "'idle_termination'", field="reason")
        if self.target.allow_head:
            raise InvalidFaultSpec("Ray refuses to drain the head node; target a worker node",
                                   field="target.allow_head")


@dataclass(frozen=True, slots=True)
class KillGcs(Fault):
    """SIGKILL the GCS server (on the head) and, with ``restart``, start it again after
    ``seconds`` on the same address. With GCS fault tolerance (an external Redis) the
    cluster carries on; without it, this is the head's loss: raylets and workers give up after
    ``gcs_rpc_server_reconnect_timeout_s``. Needs the cluster this process started."""

    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind] = FaultKind.KILL_GCS
    #: Carried out by this driver, which owns the head's processes (see the class docstring).
    USES_AGENT: ClassVar[bool] = False

    seconds: float = 1.0
    restart: bool = True

    def __post_init__(self) -> None:
        duration("seconds", self.seconds)


class GcsRestartObserved(Observed):
    """A GCS kill's heal as observed: the restarted server's pid."""

    new_pid: int | None = None  #: the restarted GCS's pid


@contextmanager
def _kill(ctx: FaultContext, fault: Kill, at: float | None, rng: random.Random) -> Iterator[Injection]:
    done = signal_resolved(ctx, fault.target, int(getattr(signals, fault.signal)), rng,
                            ctx.kill_confirm)
    for proc, took in done:
        ctx.record("inject", fault, at, proc, f"{fault.signal} sent; process gone after {took:.3f} s")
    try:
        yield Injection(fault, tuple(proc for proc, _ in done))
    finally:
        for proc, _ in done:
            ctx.record("heal", fault, at, proc, "nothing to heal: Ray restarts what it may")


@contextmanager
def _kill_node(ctx: FaultContext, fault: KillNode, at: float | None,
               rng: random.Random) -> Iterator[Injection]:
    (node,) = resolve(fault.target, address=ctx.address, rng=rng)
    agent = agent_for(node.node_id)
    raylet, others = ctx.call(agent.kill_node.remote(driver_pids=ctx.driver_pids))
    # Confirmed only once Ray has declared the node dead (its health check, seconds): what
    # the run's verdicts read about a lost node is Ray's view, and until then Ray still
    # schedules on it. A node whose processes died but that Ray never calls dead is ineffective.
    took = _confirm_node_dead(ctx, node.node_id, since=time.monotonic())
    proc = RayProcess(raylet, node.node_id, f"raylet of node {short(node.node_id)}")
    ctx.record("inject", fault, at, proc, f"raylet stopped and the {others} processes under it "
                                          "SIGKILLed, each confirmed; the raylet SIGKILLed next; "
                                          f"Ray declared the node dead {took:.1f} s later")
    try:
        yield Injection(fault, (proc,))
    finally:
        ctx.record("heal", fault, at, proc, "nothing to heal: the node stays dead")


def _node_states(address: str, node_id: str) -> list[str]:
    """The GCS's state of each row for ``node_id`` (empty if it lists none)."""
    return [found.state for found in node_states(address, node_id=node_id).values()]


def _confirm_node_dead(ctx: FaultContext, node_id: str, *, since: float) -> float:
    """Wait until the GCS lists ``node_id`` DEAD; seconds from ``since`` until it did.

    Raises:
        FaultIneffective: it was not listed DEAD within ``NODE_DEATH_CONFIRM`` seconds.
    """
    seen: list[list[str]] = []

    def dead() -> bool:
        seen.append(states := _node_states(ctx.address, node_id))
        return bool(states) and all(state == "DEAD" for state in states)

    try:
        wait_until(dead, timeout=NODE_DEATH_CONFIRM, interval=0.1, what=f"node {short(node_id)} dead")
    except HangError:
        last = seen[-1] if seen else "no answer"
        raise FaultIneffective(f"node {short(node_id)} was not DEAD in the GCS {NODE_DEATH_CONFIRM:g} s after "
                               f"its raylet was killed (last seen: {last!r}); Ray never declared it "
                               "dead, so the node loss did not happen as Ray sees it") from None
    return time.monotonic() - since


@contextmanager
def _pause(ctx: FaultContext, fault: Pause, at: float | None, rng: random.Random) -> Iterator[Injection]:
    paused: list[tuple[RayProcess, int]] = []  # with each pause's own token: its heal resumes that pause only

    def heal() -> None:
        for proc, token in paused:
            _resume_one(ctx, fault, at, proc, token)

    def pause(proc: RayProcess) -> None:
        paused.append((proc, _pause_one(ctx, fault, at, proc)))

    with ctx.on_heal(heal):  # every process paused so far is resumed, whatever happens
        each_resolved(ctx, fault.target, rng, pause)
        yield Injection(fault, tuple(proc for proc, _ in paused))


def _pause_one(ctx: FaultContext, fault: Pause, at: float | None, proc: RayProcess) -> int:
    """Pause ``proc``; returns the pause's token, which its heal must give."""
    agent = agent_for(proc.node_id)
    ticket = ctx.call(agent.pause.remote(proc.pid, fault.seconds, driver_pids=ctx.driver_pids,
                                         owner=driver_token()))
    ctx.record("inject", fault, at, proc, "SIGSTOP; seen in state T", PauseObserved(resume_by=ticket.deadline))
    return int(ticket.token)


def _resume_one(ctx: FaultContext, fault: Pause, at: float | None, proc: RayProcess, token: int) -> None:
    # This pause's own token: healing an earlier pause of the same process must not resume a
    # later one that overlaps it (that later pause would never be confirmed).
    resumed = ctx.call(agent_for(proc.node_id).resume.remote(proc.pid, token=token))
    ctx.record("heal", fault, at, proc, "SIGCONT" if resumed else
               "already resumed by its own timer, or held on by a later pause of the same process")


@contextmanager
def _freeze_node(ctx: FaultContext, fault: FreezeNode, at: float | None,
                 rng: random.Random) -> Iterator[Injection]:
    (node,) = resolve(fault.target, address=ctx.address, rng=rng)
    agent = agent_for(node.node_id)
    pids = ctx.call(agent.freeze_node.remote(fault.seconds, workers=fault.workers,
                                             driver_pids=ctx.driver_pids, owner=driver_token()))
    proc = RayProcess(pids[0], node.node_id, f"raylet of node {short(node.node_id)}")
    ctx.record("inject", fault, at, proc, f"raylet and {len(pids) - 1} workers SIGSTOPped; "
                                          "each seen in state T", Observed(pids=tuple(pids)))

    def heal() -> None:
        ctx.record("heal", fault, at, proc, _thaw(ctx, agent, pids))

    with ctx.on_heal(heal):
        yield Injection(fault, (proc,), pids=tuple(pids))


def _thaw(ctx: FaultContext, agent: Any, pids: list[int]) -> str:
    """Resume a frozen node through its agent. Once Ray has declared the node dead its agent
    is dead to Ray too, though its process runs on: its own timer resumed the raylet at the
    same deadline (a healer process guards it as well), and that is what is said."""
    from ray.exceptions import RayActorError

    try:
        resumed = ctx.call(agent.resume_all.remote(pids), timeout=10.0)
    except (RayActorError, TimeoutError) as exc:
        return (f"the agent is unreachable ({type(exc).__name__}: Ray declared the node dead); its "
                "timer resumed the raylet at the deadline")
    return f"SIGCONT to {resumed} of {len(pids)} processes (the rest had exited)"


@contextmanager
def _drain_node(ctx: FaultContext, fault: DrainNode, at: float | None,
                rng: random.Random) -> Iterator[Injection]:
    (node,) = resolve(fault.target, address=ctx.address, rng=rng)
    agent = agent_for(node.node_id)
    ctx.call(agent.where.remote())  # up before the drain: a draining node takes no new actor
    deadline = time.monotonic() + fault.deadline_s
    _request_drain(ctx, node.node_id, fault)
    ctx.record("inject", fault, at, node, f"drain accepted by the GCS ({fault.reason}); "
                                          f"deadline in {fault.deadline_s:g} s")
    if fault.kill_at_deadline:
        threading.Event().wait(max(0.0, deadline - time.monotonic()))  # the notice's length
        raylet, others = ctx.call(agent.kill_node.remote(
            driver_pids=ctx.driver_pids, grace_s=fault.grace_s), timeout=CALL_TIMEOUT + fault.grace_s)
        took = _confirm_node_dead(ctx, node.node_id, since=time.monotonic())
        ctx.record("inject", fault, at, RayProcess(raylet, node.node_id, node.label),
                   f"deadline reached: SIGTERM, {fault.grace_s:g} s grace, SIGKILL to the raylet "
                   f"and {others} processes; Ray declared the node dead after {took:.1f} s")
    try:
        yield Injection(fault, (node,))
    finally:
        ctx.record("heal", fault, at, node, "nothing to heal: the node is gone"
                   if fault.kill_at_deadline else "nothing to heal: the node stays drained")


def _request_drain(ctx: FaultContext, node_id: str, fault: DrainNode) -> None:
    import ray
    from ray.core.generated import autoscaler_pb2

    reason = {"preemption": "DRAIN_NODE_REASON_PREEMPTION",
              "idle_termination": "DRAIN_NODE_REASON_IDLE_TERMINATION"}[fault.reason]
    client = ray._raylet.GcsClient(address=ctx.address)
    deadline_ms = time.time_ns() // 1_000_000 + int(fault.deadline_s * 1000)
    accepted, why = client.drain_node(node_id, autoscaler_pb2.DrainNodeReason.Value(reason),
                                      "raychaos DrainNode", deadline_ms)
    if not accepted:
        raise FaultIneffective(f"the GCS refused to drain node {short(node_id)}: {why}")


@contextmanager
def _kill_gcs(ctx: FaultContext, fault: KillGcs, at: float | None,
              rng: random.Random) -> Iterator[Injection]:
    head = head_of(ctx.address)
    pid = head.kill_gcs()
    proc = RayProcess(pid, head.node_id, f"gcs_server pid {pid}")
    ctx.record("inject", fault, at, proc, "gcs_server SIGKILLed; process gone")

    def heal() -> None:
        if not fault.restart:
            ctx.record("heal", fault, at, proc, "not restarted, as asked: the head is lost")
            return
        new_pid, took = head.restart_gcs(ctx.address)
        ctx.record("heal", fault, at, proc, f"gcs_server restarted as pid {new_pid}; it answered "
                                            f"after {took:.2f} s", GcsRestartObserved(new_pid=new_pid))

    with ctx.on_heal(heal):
        yield Injection(fault, (proc,))


#: A node kind needs, as well, a worker node to hit (never the head unless its target asks).
ON_NODE_PROCESSES = ON_PROCESSES | {Need.WORKER_NODE}
_TARGETS: dict[str, JsonValue] = {"actor": {"kind": "actor", "class_name": "EnvWorker"}, "node": {"kind": "node"},
            "replay": {"kind": "actor", "name": "replay", "namespace": "raychaos"}}
register(
    FaultSpec(record=Kill, inject=_kill, needs=ON_PROCESSES, colour="#e4572e",
              example={"target": _TARGETS["actor"], "signal": "SIGKILL"}),
    FaultSpec(record=KillNode, inject=_kill_node, needs=ON_NODE_PROCESSES, colour="#a4031f",
              example={"target": _TARGETS["node"]}),
    FaultSpec(record=Pause, inject=_pause, needs=ON_PROCESSES, colour="#f3a712",
              example={"seconds": 3, "target": _TARGETS["replay"]}, observed=PauseObserved),
    FaultSpec(record=FreezeNode, inject=_freeze_node, needs=ON_NODE_PROCESSES, colour="#0b6e4f",
              example={"seconds": 12, "workers": False}),
    FaultSpec(record=DrainNode, inject=_drain_node, needs=ON_NODE_PROCESSES, colour="#3a506b",
              example={"deadline_s": 2, "reason": "preemption", "grace_s": 2}),
    FaultSpec(record=KillGcs, inject=_kill_gcs, needs=frozenset({Need.GCS}), colour="#c5283d",
              example={"seconds": 1, "restart": True}, observed=GcsRestartObserved, forgets_task_events=True),
)
