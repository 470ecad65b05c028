"""One typed view of what Ray says about its cluster: its nodes (alive or not, their addresses
and resources; their states and when the GCS declared them dead) and a short form of its ids.

Two sources, each used for what only it has: ``ray.nodes()`` (the connected driver's GCS:
resources and addresses, no dashboard needed) and the State API's ``list_nodes`` (a node's
state and its death time; it needs the dashboard, and the cluster's address given explicitly,
since several clusters may run on one machine).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["STATE_TIMEOUT", "NodeRow", "NodeState", "live_nodes", "node_states", "short"]

#: Seconds one State API listing may take.
STATE_TIMEOUT = 30.0
#: Hex digits of an id people read: Ray's own shortened ids are as long.
SHORT = 12


def short(identifier: str) -> str:
    """A node's, actor's or task's id as people read it (its first :data:`SHORT` hex digits)."""
    return identifier[:SHORT]


@dataclass(frozen=True, slots=True)
class NodeRow:
    """A live node as the connected driver's GCS lists it: its id, its address and what it has."""

    node_id: str
    address: str
    resources: Mapping[str, float] = field(default_factory=dict)

    @property
    def is_head(self) -> bool:
        """Ray gives the head, and only the head, the ``node:__internal_head__`` resource."""
        return "node:__internal_head__" in self.resources

    def label(self) -> str:
        """``node <short id> (<address>)``, for people."""
        return f"node {short(self.node_id)} ({self.address})"


def live_nodes(*, having: str | None = None) -> list[NodeRow]:
    """The cluster's live nodes (the connected driver's), ``having`` a resource when given
    (``"worker"``: the worker nodes of a raychaos cluster), sorted by id."""
    import ray

    rows = [NodeRow(str(n["NodeID"]), str(n.get("NodeManagerAddress", "")), dict(n.get("Resources") or {}))
            for n in ray.nodes() if n.get("Alive")]
    return sorted((r for r in rows if having is None or having in r.resources), key=lambda r: r.node_id)


@dataclass(frozen=True, slots=True)
class NodeState:
    """A node as the State API lists it: ``ALIVE`` or ``DEAD``, and when the GCS declared it dead
    (ms since the epoch; 0 while alive or when unknown)."""

    state: str
    ended_ms: int = 0

    @property
    def dead(self) -> bool:
        return self.state == "DEAD"


def node_states(address: str, *, node_id: str | None = None) -> dict[str, NodeState]:
    """Every node the cluster at ``address`` knows, dead ones included, by id (only ``node_id``'s
    when given: empty while the GCS lists no such node)."""
    from ray.util.state import list_nodes

    filters: list[tuple[str, str, str]] = [] if node_id is None else [("node_id", "=", node_id)]
    rows = list_nodes(address=address, filters=filters, limit=1000, raise_on_missing_output=False,
                      timeout=STATE_TIMEOUT)
    return {str(n.node_id): NodeState(str(n.state), int(n.end_time_ms or 0)) for n in rows}
