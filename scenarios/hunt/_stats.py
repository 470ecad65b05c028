"""The features and faults a program exercised, as labels for Hypothesis's event() and the
hunt's statistics table."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from scenarios.hunt._model import Actor, Call, Cancel, Drop, Fault, FaultKind, Naming, Program, Put, Stream, Task, Wait
from scenarios.hunt._run import ProgramVerdict


def features(program: Program) -> set[str]:
    """What the program's steps use (one label per feature, however often it is used)."""
    labels: set[str] = set()
    for index, step in enumerate(program.steps):
        labels.add(f"step: {step.kind.value}")
        labels |= {"ref nested in a list (borrowed)" for a in getattr(step, "args", ()) if a.nested}
        labels |= _step_features(step)
        if size := program.size(index):
            labels.add(f"size: {step.kind.value} of {_size_label(size)} (in the object store)")
        if isinstance(step, Drop):
            labels |= _drop_features(program, index, step)
    return labels


def _size_label(size: int) -> str:
    return f"{size // (1 << 20)} MiB" if size >= 1 << 20 else f"{size // 1024} KiB"


def _drop_features(program: Program, index: int, step: Drop) -> set[str]:
    """What a dropped value was still needed by, and whether a fault came after the drop."""
    uses = [(s, a) for s in program.steps for a in getattr(s, "args", ()) if a.source == step.source]
    labels = {label for label, on in (
        ("drop: an actor's constructor argument", any(isinstance(s, Actor) for s, _ in uses)),
        ("drop: a borrowed ref", any(a.nested for _, a in uses)),
        ("drop: a value of the object store", program.size(step.source) > 0
         or isinstance(program.steps[step.source], Put)),
        ("drop: before a fault", any(f.after >= index for f in program.faults))) if on}
    return labels or {"drop: a value nothing else needs"}


def _step_features(step: object) -> set[str]:
    if isinstance(step, Task):
        return {label for label, on in (("task: max_retries > 0", step.max_retries > 0),
                                        ("task: runs away on the removable node (the smallest store)", step.away),
                                        ("task: retry_exceptions", step.retry_exceptions),
                                        ("task: raises on its first attempt", step.flaky),
                                        ("task: returns a ref it put", step.boxed)) if on}
    if isinstance(step, Actor):
        return {label for label, on in (("actor: refs as constructor arguments", bool(step.args)),
                                        ("actor: max_restarts != 0", step.max_restarts != 0),
                                        ("actor: max_task_retries != 0", step.max_task_retries != 0),
                                        ("actor: named (called through ray.get_actor)", step.naming is Naming.NAMED),
                                        ("actor: detached (and named)", step.naming is Naming.DETACHED),
                                        ("actor: restarts slowly (its constructor takes seconds)",
                                         step.slow_restart > 0),
                                        ("actor: async (its calls run concurrently)", step.asynchronous),
                                        ("actor: in a placement group's bundle", step.grouped),
                                        ("actor: made by another driver job, which ended", step.by_job)) if on}
    if isinstance(step, Call):
        return {"call: returns a ref the actor put"} if step.boxed else set()
    if isinstance(step, Stream):
        return {"stream: consumed fully" if step.take == step.count else "stream: consumed partly",
                *(["stream: non-deterministic (a run after the first yields another count)"] if step.varying else [])}
    if isinstance(step, Wait):
        timeout = "none" if step.timeout is None else f"{step.timeout:g}"
        return {f"wait: timeout={timeout}", *(["wait: fetch_local=False"] if not step.fetch_local else [])}
    if isinstance(step, Cancel):
        return {f"cancel: force={step.force}"}
    return set()


def fault_labels(verdict: ProgramVerdict) -> set[str]:
    """Each fault kind that landed or missed, and calls in flight while their actor restarted."""
    labels = {f"fault landed: {f.kind.value}" for f in verdict.landed}
    labels |= {f"fault missed: {f.kind.value}" for f in verdict.missed}
    labels |= {"size: bigger than the store of the node it went to or was made on (seen)"} if verdict.beyond else set()
    program = verdict.program
    jobs = [i for i, s in enumerate(program.steps) if isinstance(s, Actor) and s.by_job]
    if any(f.kind.restarts_gcs and f.after >= min(jobs) for f in verdict.landed if jobs):
        labels.add("GCS fault: after another driver job made an actor and ended (across two jobs)")
    for fault in verdict.landed:
        if isinstance(stream := program.steps[fault.victim], Stream):
            labels |= _stream_labels(stream, fault)
    for fault in verdict.landed:
        actor = program.steps[program.actor_of(fault)] if fault.kind.kills_actor else None
        if isinstance(actor, Actor) and actor.max_restarts != 0 and any(
                isinstance(s, Call) and (i > fault.after or i == fault.victim)
                for i, s in enumerate(program.steps)):
            labels.add("calls in flight while their actor restarts")
    for fault in (f for f in verdict.landed if f.kind.cancels):
        victim = program.steps[fault.victim]
        if isinstance(victim, Task) and victim.max_retries > 0:
            labels.add("cancel fault: a task with retries left")
        if isinstance(victim, Call):
            actor = program.steps[victim.actor]
            asynchronous = isinstance(actor, Actor) and actor.asynchronous
            labels.add("cancel fault: an async actor's call (its asyncio task)" if asynchronous
                       else "cancel fault: an actor call (flagged)")
        if any(fault.victim in program.depends(i) for i in range(fault.victim + 1, fault.after + 1)):
            labels.add("cancel fault: after its dependents were submitted")
        if fault.repeats > 1:
            labels.add("cancel fault: repeated (ray.cancel called again at once)")
    return labels | _lifecycle_labels(verdict) or {"no fault"}


def _stream_labels(stream: Stream, fault: Fault) -> set[str]:
    """A stream as a fault's victim: killed mid-stream, or its items lost and rebuilt; run again
    by a non-deterministic generator."""
    again = "retried" if stream.max_retries else "no retries"
    if fault.kind is FaultKind.KILL_WORKER:
        labels = {f"stream: its worker killed mid-stream, {again}"}
    elif fault.kind is FaultKind.OBJECT_NODE_REMOVAL:
        labels = {"stream: its items lost with their node, " + ("rebuilt" if stream.max_retries else "no retries")}
    else:
        return set()
    return labels | ({"stream: a non-deterministic one run again"} if stream.varying and stream.max_retries else set())


def _lifecycle_labels(verdict: ProgramVerdict) -> set[str]:
    """A late replacement of a removed node, a removal's victim pinned to it, the loss of a
    placement group bundle's node, of a value spilled on the node first, and several GCS restarts
    (a Redis fault's too) in one program."""
    program, landed = verdict.program, verdict.landed
    late = any(f.kind.removes_node and f.replace_after > 0 for f in landed)
    pinned = any(f.pinned for f in landed)
    spilled = any(f.spilled for f in landed)
    bundle = any(f.kind is FaultKind.ACTOR_NODE_REMOVAL and isinstance(a := program.steps[program.actor_of(f)], Actor)
                 and a.grouped for f in landed)
    restarts = sum(f.kind.restarts_gcs for f in landed)
    return {label for label, on in (("node removal: its replacement joined late", late),
                                    ("node removal: its victim pinned to it (no node for a retry)", pinned),
                                    ("node removal: a placement group bundle's node", bundle),
                                    ("node removal: its lost value spilled on it first", spilled),
                                    ("gcs_restart: several in one program", restarts > 1)) if on}


@dataclass(frozen=True, slots=True, kw_only=True)
class Progress:
    """Where a timed hunt is: for its progress line, printed as it goes."""

    elapsed: float  # seconds since the hunt started
    total: float  # seconds it runs for
    ran: int  # programs run
    classes: int  # failure classes found
    stats: Mapping[str, int]  # label -> programs

    def line(self, *, width: int = 20) -> str:
        """``hunt [██████░░░░] 31% 20.6 min left · 84 programs, 4.1/min · 1 class · landed: ...``:
        the bar and the time left by the clock (the hunt stops at its time), the rate so far,
        and each fault kind's landed count, most first."""
        share = min(1.0, self.elapsed / self.total) if self.total > 0 else 1.0
        filled = round(share * width)
        rate = self.ran / (self.elapsed / 60) if self.elapsed > 0 else 0.0
        landed = sorted(((label.removeprefix("fault landed: "), n) for label, n in self.stats.items()
                         if label.startswith("fault landed: ")), key=lambda kv: (-kv[1], kv[0]))
        kinds = ", ".join(f"{kind} {n}" for kind, n in landed) or "none yet"
        left = max(0.0, self.total - self.elapsed) / 60
        return (f"hunt [{'█' * filled}{'░' * (width - filled)}] {share:.0%} {left:.1f} min left · "
                f"{self.ran} programs, {rate:.1f}/min · {self.classes} class{'es' * (self.classes != 1)} · "
                f"landed: {kinds}")
