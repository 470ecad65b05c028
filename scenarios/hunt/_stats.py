"""The features and faults a program exercised, as labels for Hypothesis's event() and the
hunt's statistics table."""

from __future__ import annotations

from scenarios.hunt._model import Actor, Call, Cancel, Naming, Program, Stream, Task, Wait
from scenarios.hunt._run import ProgramVerdict


def features(program: Program) -> set[str]:
    """What the program's steps use (one label per feature, however often it is used)."""
    labels: set[str] = set()
    for step in program.steps:
        labels.add(f"step: {step.kind.value}")
        labels |= {"ref nested in a list (borrowed)" for a in getattr(step, "args", ()) if a.nested}
        labels |= _step_features(step)
    return labels


def _step_features(step: object) -> set[str]:
    if isinstance(step, Task):
        return {label for label, on in (("task: max_retries > 0", step.max_retries > 0),
                                        ("task: retry_exceptions", step.retry_exceptions),
                                        ("task: raises on its first attempt", step.flaky),
                                        ("task: returns a ref it put", step.boxed)) if on}
    if isinstance(step, Actor):
        return {label for label, on in (("actor: refs as constructor arguments", bool(step.args)),
                                        ("actor: max_restarts != 0", step.max_restarts != 0),
                                        ("actor: max_task_retries != 0", step.max_task_retries != 0),
                                        ("actor: named (called through ray.get_actor)", step.naming is Naming.NAMED),
                                        ("actor: detached (and named)", step.naming is Naming.DETACHED)) if on}
    if isinstance(step, Call):
        return {"call: returns a ref the actor put"} if step.boxed else set()
    if isinstance(step, Stream):
        return {"stream: consumed fully" if step.take == step.count else "stream: consumed partly"}
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
    program = verdict.program
    for fault in verdict.landed:
        actor = program.steps[program.actor_of(fault)] if fault.kind.kills_actor else None
        if isinstance(actor, Actor) and actor.max_restarts != 0 and any(
                isinstance(s, Call) and (i > fault.after or i == fault.victim)
                for i, s in enumerate(program.steps)):
            labels.add("calls in flight while their actor restarts")
    return labels or {"no fault"}
