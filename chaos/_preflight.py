"""Before the first fault: can every node of the cluster take each kind of fault the schedule has?

A fault that cannot be carried out on a cluster someone else runs would abort the run halfway,
after other faults already hit the program. So the attack checks first, per node and fault kind,
what each kind needs (its spec's :attr:`~chaos.engine.FaultSpec.needs`): a chaos agent that
starts there and answers this raychaos's protocol, the State API (targets are found through
it), ``/proc`` readable there, permission over the node's Ray processes (their user, or root),
a GCS this driver may restart, for a memory fault a node whose workers import raychaos, and
for a network fault links raychaos made (a cluster this process started; never one someone
else runs). What is missing is raised at once, one line per node, fault kinds and need
(:class:`ClusterUnfit`); nothing was injected.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from chaos._byvalue import by_value
from chaos._errors import ChaosError
from chaos._kinds import FaultKind, Need, fault_specs
from chaos._ray_state import live_nodes, short
from chaos._schedule import Schedule
from chaos._scope import check_scope
from chaos.agents._agent import AGENT_START_TIMEOUT, NodeFacts, agent_for, check_agents

__all__ = ["CHECKED_BY", "ClusterUnfit", "Missing", "Need", "find_missing", "needs_of", "needs_table", "preflight"]

CALL_TIMEOUT = 30.0


def needs_of(kind: FaultKind) -> frozenset[Need]:
    """What ``kind`` needs on every node it may hit (its spec's; Ray's RPC failure knob, set at
    the nodes' start, needs nothing more)."""
    return frozenset() if kind is FaultKind.RPC_FAILURE else fault_specs()[kind].needs


#: How the preflight checks each need, for people (the attack how-to's table, :func:`needs_table`).
CHECKED_BY: dict[Need, str] = {
    Need.AGENT: "starting it on each node (within `--agent-timeout`, 30 s)",
    Need.STATE_API: "one call through the dashboard",
    Need.PROC: "the agent reads the raylet, its children and descriptors",
    Need.CONTROL: "the agent checks it may signal the raylet and read its limits: it runs as the raylet's user "
                  "(Ray starts it so), or as root",
    Need.GCS: "the head is one this process started (so not on a cluster someone else runs)",
    Need.RAYCHAOS: "a task on each node (the allocating task is a Ray task, not the agent)",
    Need.NETWORK: "the cluster is one this process started with `network=True`",
    Need.WORKER_NODE: "a live node that is not the head",
    Need.REDIS: "the GCS keeps its tables in a Redis this process started",
}


def needs_table() -> str:
    """The needs of every scheduled kind as a Markdown table: need, how it is checked, the kinds
    that need it (from each kind's spec: the docs cannot drift from the code)."""
    rows = ["| need | checked by | needed by |", "|---|---|---|"]
    for need in Need:
        kinds = [kind for kind, spec in fault_specs().items() if need in spec.needs]
        rows.append(f"| {need.value} | {CHECKED_BY[need]} | {', '.join(f'`{k}`' for k in kinds) or 'none'} |")
    return "\n".join(rows) + "\n"


#: Where a need of the whole cluster is said to be missing.
CLUSTER = "the cluster"


@dataclass(frozen=True, slots=True)
class Missing:
    """One need missing on one node (or the whole cluster), and the fault kinds that need it."""

    where: str
    kinds: tuple[FaultKind, ...]
    need: Need
    detail: str

    def line(self) -> str:
        return f"{self.where}: {', '.join(self.kinds)}: needs {self.need.value}: {self.detail}"


class ClusterUnfit(ChaosError, RuntimeError):
    """The cluster lacks what the schedule's faults need; nothing was injected."""

    def __init__(self, missing: Iterable[Missing]) -> None:
        self.missing = tuple(missing)
        super().__init__("the cluster cannot take this schedule's faults, so none was injected; fix "
                         "each line, or leave out the faults it names:\n  "
                         + "\n  ".join(m.line() for m in self.missing))


def preflight(schedule: Schedule, *, address: str, timeout: float = AGENT_START_TIMEOUT) -> None:
    """Check the cluster at ``address`` (this process is its driver, and did not start it) can
    take ``schedule``.

    Raises:
        Unscoped: a target would reach more than one running job (checked first).
        ClusterUnfit: something a fault needs is missing, named per node and fault kind.
    """
    import ray

    check_scope(schedule, address=address, own=ray.get_runtime_context().get_job_id())
    missing = find_missing(schedule, address=address, timeout=timeout)
    if missing:
        raise ClusterUnfit(missing)


def find_missing(schedule: Schedule, *, address: str, timeout: float = AGENT_START_TIMEOUT,
                 skip: frozenset[Need] = frozenset()) -> list[Missing]:
    """What the cluster lacks for ``schedule``'s faults, per node and need (empty: nothing);
    ``skip``: needs left unchecked (a dry run's: those whose check starts something)."""
    needs = {n: k for n, k in _kinds_by_need({e.kind for e in schedule.entries}).items() if n not in skip}
    found: list[Missing] = []
    if Need.STATE_API in needs:
        found += _state_api(address, needs[Need.STATE_API])
    if Need.GCS in needs:
        found += _gcs(address, needs[Need.GCS])
    if Need.NETWORK in needs:
        found += _network(address, needs[Need.NETWORK])
    if Need.WORKER_NODE in needs:
        found += _worker_node(needs[Need.WORKER_NODE])
    if Need.REDIS in needs:
        found += _redis(address, needs[Need.REDIS])
    if Need.AGENT in needs:
        found += _agents(_alive_nodes(), needs, timeout)
    if Need.RAYCHAOS in needs:
        found += _raychaos_on_nodes(_alive_nodes(), needs[Need.RAYCHAOS])
    return found


def _kinds_by_need(kinds: Iterable[FaultKind]) -> dict[Need, tuple[FaultKind, ...]]:
    out: dict[Need, tuple[FaultKind, ...]] = {}
    for kind in sorted(kinds):
        for need in needs_of(kind):
            out[need] = (*out.get(need, ()), kind)
    return out


def _alive_nodes() -> dict[str, str]:
    """Each live node's id and how it is named to people: ``node <id prefix> (<ip>)``."""
    return {row.node_id: row.label() for row in live_nodes()}


def _state_api(address: str, kinds: tuple[FaultKind, ...]) -> list[Missing]:
    from ray.util.state import list_nodes

    try:
        list_nodes(address=address, limit=1, timeout=CALL_TIMEOUT)
    except Exception as exc:  # noqa: BLE001 - whatever it is, targets cannot be found
        return [Missing(where=CLUSTER, kinds=kinds, need=Need.STATE_API, detail=f"{type(exc).__name__}: {exc}"[:300]
                        + "; start the head from ray[default] with its dashboard on")]
    return []


def _owned(need: Need, kinds: tuple[FaultKind, ...], check: Callable[[], object]) -> list[Missing]:
    """``need`` of the whole cluster: ``check`` raises a ChaosError naming what is missing (a GCS,
    links or a Redis this process did not start)."""
    try:
        check()
    except ChaosError as exc:
        return [Missing(where=CLUSTER, kinds=kinds, need=need, detail=str(exc))]
    return []


def _gcs(address: str, kinds: tuple[FaultKind, ...]) -> list[Missing]:
    from chaos.cluster._cluster import head_of

    return _owned(Need.GCS, kinds, lambda: head_of(address))


def _network(address: str, kinds: tuple[FaultKind, ...]) -> list[Missing]:
    from chaos.net._lab import lab_of

    # A cluster someone else runs has no links of raychaos's to cut.
    return _owned(Need.NETWORK, kinds, lambda: lab_of(address))


def _worker_node(kinds: tuple[FaultKind, ...]) -> list[Missing]:
    """A node kind needs a live node that is not the head (it never hits the head unasked)."""
    if any(not row.is_head for row in live_nodes()):
        return []
    return [Missing(where=CLUSTER, kinds=kinds, need=Need.WORKER_NODE,
                    detail="only the head is alive; add a worker node (or leave out the node faults)")]


def _redis(address: str, kinds: tuple[FaultKind, ...]) -> list[Missing]:
    from chaos.gcs._faults import redis_behind

    return _owned(Need.REDIS, kinds, lambda: redis_behind(address))


def _agents(nodes: Mapping[str, str], needs: Mapping[Need, tuple[FaultKind, ...]],
            timeout: float) -> list[Missing]:
    """Each node's agent started and checked; then, where one answered, what it may do."""
    import ray

    problems = check_agents(list(nodes), timeout=timeout)
    found = [Missing(where=nodes[node], kinds=needs[Need.AGENT], need=Need.AGENT,
                     detail=str(p).removeprefix(f"node {short(node)}: "))
             for node, p in problems.items() if p is not None]
    ready = [node for node, p in problems.items() if p is None]
    facts = ray.get([agent_for(node).facts.remote() for node in ready], timeout=CALL_TIMEOUT)
    for node, fact in zip(ready, facts, strict=True):
        found += _facts_missing(nodes[node], fact, needs)
    return found


def _facts_missing(where: str, facts: NodeFacts, needs: Mapping[Need, tuple[FaultKind, ...]]) -> list[Missing]:
    found = []
    if Need.PROC in needs and facts.proc:
        found.append(Missing(where=where, kinds=needs[Need.PROC], need=Need.PROC, detail=facts.proc))
    if Need.CONTROL in needs and facts.control:
        found.append(Missing(where=where, kinds=needs[Need.CONTROL], need=Need.CONTROL,
                             detail=f"{facts.control} (the agent runs as uid {facts.euid})"))
    return found


def _imports_raychaos() -> str:
    """Run on a node by value: why its workers cannot import raychaos's memory task, or ""."""
    import importlib.util

    try:
        found = importlib.util.find_spec("chaos.agents._memory") is not None
    except Exception as exc:  # noqa: BLE001 - a broken or foreign package named chaos
        return f"{type(exc).__name__}: {exc}"
    return "" if found else "No module named 'chaos'"


def _raychaos_on_nodes(nodes: Mapping[str, str], kinds: tuple[FaultKind, ...]) -> list[Missing]:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    probe: Any = ray.remote(by_value(_imports_raychaos, "raychaos.preflight"))
    refs = {node: probe.options(num_cpus=0, max_retries=0, scheduling_strategy=NodeAffinitySchedulingStrategy(
        node, soft=False)).remote() for node in nodes}
    found = []
    for node, ref in refs.items():
        try:
            why = ray.get(ref, timeout=CALL_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - a node that runs no task runs no memory fault either
            why = f"{type(exc).__name__}: {exc}"[:300]
        if why:
            found.append(Missing(where=nodes[node], kinds=kinds, need=Need.RAYCHAOS,
                                 detail=f"{why}; install raychaos on it, or leave memory faults out of an attack "
                                        "on it"))
    return found
