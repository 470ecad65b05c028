"""The shape of the cluster a pytest test runs on, decided at collection.

A shape comes from three places, the later overriding the earlier option by option: the ini
options (``raychaos_nodes``, ``raychaos_cpus``, ...: the suite's default), the fixture the test
asks for (``ray_multinode_cluster``: three nodes), and the closest ``@pytest.mark.ray_cluster``
(the function's over its class's over its module's). The plugin parametrizes its cluster fixture
with the shape, hidden from test ids, so pytest groups the tests of one shape and tears a
cluster (and every fixture built on it) down before it starts one of another shape.

Nothing here imports ``ray``, pydantic or the engine: collection stays cheap.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from chaos._errors import InvalidConfig

if TYPE_CHECKING:
    from chaos._kinds import Need

__all__ = ["CHAOS_MARKER_HELP", "CLUSTER_MARKER_HELP", "INI_OPTIONS", "MACHINE_PROFILE", "MULTINODE", "ClusterShape",
           "Profile", "Scope", "fix_for", "profile_for", "scope_of", "shape_for", "unmet"]


class Scope(StrEnum):
    """How long one cluster lives (``raychaos_cluster_scope``)."""

    SESSION = "session"
    MODULE = "module"


class Profile(StrEnum):
    """How deep :class:`chaos.testing.ActorChaosMachine` searches by default."""

    CI = "ci"
    THOROUGH = "thorough"


#: The profile in force (the plugin sets it with :func:`profile_for`; outside pytest,
#: ``RAYCHAOS_PROFILE``).
MACHINE_PROFILE = os.environ.get("RAYCHAOS_PROFILE", "ci")


def profile_for(*, option: str | None, hypothesis_profile: str | None, env: str | None, ini: str) -> Profile:
    """The machines' profile, the nearest setting first: ``--chaos-profile``, then
    ``--hypothesis-profile=thorough``, then ``RAYCHAOS_PROFILE`` (a nightly job's), then the
    ``raychaos_profile`` ini option (the suite's own), else ``ci``.

    Raises:
        InvalidConfig: the environment's or the ini's value is not a profile; the message names
            where it came from, the value and the fix.
    """
    if option:
        return Profile(option)  # pytest checked it against the choices
    if hypothesis_profile == Profile.THOROUGH:
        return Profile.THOROUGH
    for where, value in (("environment variable RAYCHAOS_PROFILE", env), ("ini option raychaos_profile", ini)):
        if value is not None and value.strip():
            try:
                return Profile(value.strip())
            except ValueError:
                raise InvalidConfig(f"{where} = {value!r} is not a raychaos profile; use "
                                    f"{' or '.join(p.value for p in Profile)}") from None
    return Profile.CI

CHAOS_MARKER_HELP = (
    "chaos(seed=None, faults=(), menu=(), rate=0.5, duration=5.0, strict=True): run the test "
    "under a seeded fault schedule that starts with the test body: `faults` as faults or "
    "(at, fault) pairs, and/or a random schedule drawn from `menu` at `rate` faults a second "
    "for `duration` seconds (the seed draws it). A fault whose target is not found, that is "
    "refused, ineffective, or not reached before the body ends fails the test, and so does a "
    "test that ran without any fault, unless strict=False. "
    "Example: @pytest.mark.chaos(seed=7, faults=[(0.5, Kill(ActorTarget(name='victim')))])"
)
CLUSTER_MARKER_HELP = (
    "ray_cluster(nodes=1, cpus=4, object_store_mb=200, resources=None, redis=False, network=False): "
    "the shape of the cluster the test's ray_cluster, ray_multinode_cluster and chaos fixtures "
    "give (the ini options raychaos_nodes, raychaos_cpus, ... set the suite's default); tests "
    "of one shape share a cluster. Example: @pytest.mark.ray_cluster(nodes=3, resources={'worker': 100})"
)

#: Each ini option: its name, its help (with the default) and its default.
INI_OPTIONS: tuple[tuple[str, str, str], ...] = (
    ("raychaos_cluster_scope", "how long one test cluster lives: session (default) or module", "session"),
    ("raychaos_profile", "how deep ActorChaosMachine searches unless given settings: ci (default) or thorough; "
     "--chaos-profile and RAYCHAOS_PROFILE override it", ""),
    ("raychaos_nodes", "nodes of the ray_cluster fixture's cluster, head included (default 1)", "1"),
    ("raychaos_cpus", "logical CPUs per node of the ray_cluster fixture's cluster (default 4)", "4"),
    ("raychaos_object_store_mb", "object store per node, in MiB (default 200)", "200"),
    ("raychaos_resources", "custom resources on each worker node, as name=amount words (default none)", ""),
    ("raychaos_redis", "keep the GCS's tables in a Redis raychaos starts: GCS fault tolerance (default false)",
     "false"),
    ("raychaos_network", "put each worker node in its own network namespace, for network faults "
     "(needs root; default false)", "false"),
)
_MARKER_OPTIONS = ("nodes", "cpus", "object_store_mb", "resources", "redis", "network")


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterShape:
    """What a test's cluster is made of; equal shapes share one cluster."""

    nodes: int = 1
    cpus: int = 4
    object_store_mb: int = 200
    #: Custom resources on each worker node, sorted by name (hashable: the shape is a parameter).
    resources: tuple[tuple[str, float], ...] = field(default=())
    redis: bool = False
    network: bool = False

    def __post_init__(self) -> None:
        for name, low in (("nodes", 1), ("cpus", 1), ("object_store_mb", 80)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InvalidConfig(f"cluster `{name}` must be a whole number >= {low}, got {value!r}")
        for name in ("redis", "network"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidConfig(f"cluster `{name}` must be True or False, got {getattr(self, name)!r}")
        if self.resources and self.nodes < 2:
            raise InvalidConfig(f"cluster resources {dict(self.resources)} go on worker nodes, and nodes=1 has "
                                "none; ask for nodes >= 2 (the head keeps its CPUs and an rc_head resource)")
        if self.network and self.nodes < 2:
            raise InvalidConfig("a network cluster puts worker nodes in namespaces, and nodes=1 has none; "
                                "ask for nodes >= 2")

    def describe(self) -> str:
        """``3 nodes x 1 CPU, worker=100, Redis`` (a pytest header line, an error message)."""
        parts = [f"{self.nodes} node{'s' * (self.nodes > 1)} x {self.cpus} CPU{'s' * (self.cpus > 1)}"]
        parts += [f"{name}={amount:g}" for name, amount in self.resources]
        parts += [word for word, on in (("Redis", self.redis), ("network", self.network)) if on]
        return ", ".join(parts)


#: ``ray_multinode_cluster``'s shape before any marker: a head and two 1-CPU workers, each with
#: a ``worker`` resource (``resources={"worker": 1}`` keeps an actor off the head).
MULTINODE = {"nodes": 3, "cpus": 1, "resources": (("worker", 100.0),)}


def scope_of(value: str) -> Scope:
    """The ``raychaos_cluster_scope`` ini option, checked."""
    try:
        return Scope(value.strip())
    except ValueError:
        raise InvalidConfig(f"ini option raychaos_cluster_scope = {value!r} is not a scope; use "
                            f"{' or '.join(s.value for s in Scope)}") from None


def shape_for(ini: Mapping[str, str], *, multinode: bool, markers: Iterable[Mapping[str, Any]]) -> ClusterShape:
    """The shape of one test's cluster: ``ini`` (option name → text), then the multi-node
    fixture's, then ``markers``' keyword arguments (farthest first, so the closest wins).

    Raises:
        InvalidConfig: an ini value or a marker argument is wrong; the message names it, its
            value and the fix.
    """
    options: dict[str, Any] = _from_ini(ini)
    if multinode:
        options.update(MULTINODE)
    for kwargs in markers:
        options.update(_from_marker(kwargs))
    if multinode and options["nodes"] in (0, 1):
        raise InvalidConfig(f"the test asks for ray_multinode_cluster but its @pytest.mark.ray_cluster says "
                            f"nodes={options['nodes']}; give nodes >= 2, or ask for ray_cluster")
    return ClusterShape(**options)


def _from_ini(ini: Mapping[str, str]) -> dict[str, Any]:
    whole = {name: _whole(f"raychaos_{name}", ini.get(f"raychaos_{name}", default))
             for name, default in (("nodes", "1"), ("cpus", "4"), ("object_store_mb", "200"))}
    return {**whole, "resources": _resources_text(ini.get("raychaos_resources", "")),
            "redis": _flag("raychaos_redis", ini.get("raychaos_redis", "false")),
            "network": _flag("raychaos_network", ini.get("raychaos_network", "false"))}


def _whole(name: str, text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise InvalidConfig(f"ini option {name} = {text!r} is not a whole number; give one, e.g. {name} = 2") from None


def _flag(name: str, text: str) -> bool:
    word = text.strip().lower()
    if word not in {"true", "false", "1", "0", "yes", "no"}:
        raise InvalidConfig(f"ini option {name} = {text!r} is not true or false; give {name} = true or false")
    return word in {"true", "1", "yes"}


def _resources_text(text: str) -> tuple[tuple[str, float], ...]:
    pairs: dict[str, object] = {}
    for word in text.split():
        name, sep, amount = word.partition("=")
        if not sep:
            raise InvalidConfig(f"ini option raychaos_resources: {word!r} is not name=amount; e.g. "
                                "raychaos_resources = worker=100 accelerator=1")
        pairs[name] = _amount(f"raychaos_resources {name}", amount)
    return _resources(pairs)


def _amount(name: str, text: object) -> float:
    try:
        value = float(text)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(text, bool) or not math.isfinite(value) or value <= 0:
        raise InvalidConfig(f"{name} = {text!r} is not an amount; give a positive number")
    return value


def _resources(pairs: Mapping[str, object]) -> tuple[tuple[str, float], ...]:
    return tuple(sorted((str(name), _amount(f"resource {name}", amount)) for name, amount in pairs.items()))


def _from_marker(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(kwargs) - set(_MARKER_OPTIONS))
    if unknown:
        raise InvalidConfig(f"@pytest.mark.ray_cluster got unknown argument(s) {unknown}; use "
                            f"{', '.join(_MARKER_OPTIONS)}")
    options = dict(kwargs)
    if "resources" in options:
        if not isinstance(options["resources"], Mapping):
            raise InvalidConfig(f"@pytest.mark.ray_cluster resources must be a dict of name to amount, got "
                                f"{options['resources']!r}; e.g. resources={{'worker': 100}}")
        options["resources"] = _resources(options["resources"])
    return options


def unmet(shape: ClusterShape, needs: Iterable[Need]) -> list[Need]:
    """What of ``needs`` (a fault kind's) the cluster of ``shape`` lacks, in ``Need``'s order."""
    from chaos._kinds import Need

    has = {Need.WORKER_NODE: shape.nodes >= 2, Need.NETWORK: shape.network, Need.REDIS: shape.redis}
    wanted = set(needs)
    return [need for need in Need if need in has and need in wanted and not has[need]]


def fix_for(shape: ClusterShape, needs: Iterable[Need], *, multinode: bool) -> str:
    """How to give a test the shape its faults need: the fixture to ask for, or the marker."""
    from chaos._kinds import Need

    needs = set(needs)
    wants: dict[str, object] = {}
    if needs & {Need.WORKER_NODE, Need.NETWORK}:
        wants["nodes"] = max(shape.nodes, 3)
    wants |= {"network": True} if Need.NETWORK in needs else {}
    wants |= {"redis": True} if Need.REDIS in needs else {}
    marker = f"@pytest.mark.ray_cluster({', '.join(f'{k}={v!r}' for k, v in wants.items())})"
    if needs == {Need.WORKER_NODE} and not multinode:
        return f"ask for the ray_multinode_cluster fixture, or mark the test {marker}"
    return f"mark the test {marker}"
