"""What a scenario needs of the machine beyond ``pip install raychaos``, derived from its facts.

A need is one of: the raychaos extra its workload imports (``raychaos[rl]``), ``redis-server``
(GCS fault tolerance starts one), ``root`` (a capped checkpoint storage is a tmpfs it mounts;
nodes in network namespaces), ``nftables, iproute2`` (the network faults' tools),
``raychaos[disk]`` and FUSE 3 (checkpoint storage or Ray's spill directory on a fault filesystem), and several
embedded nodes (each is a raylet and its workers on this machine).

Each is one :class:`Need` record in one list (:func:`needs_of`): ``raychaos list`` says their
words (:func:`scenario_needs`) and ``raychaos run`` checks them before it starts anything
(:func:`missing_needs`), so what is listed and what is checked cannot drift apart.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from scenarios.model._scenario import Scenario
from scenarios.model._workload import Extra, Workload

__all__ = ["EXTRA_MODULES", "Host", "Need", "missing_needs", "needs_of", "scenario_needs"]

#: The modules each extra brings that its workloads import (``chaos._extras.import_extra``).
EXTRA_MODULES: Mapping[Extra, tuple[str, ...]] = {"rl": ("torch", "gymnasium"), "apps": ("torch", "starlette")}


#: How each tool a need names is got (the Makefile's recipe of a checkout does it too).
REDIS_FIX = "install it with apt-get install redis-server (`make redis` in a checkout)"
NET_FIX = "install them with apt-get install nftables iproute2 (`make net` in a checkout)"
FUSE_FIX = ("install FUSE 3 with apt-get install fuse3 (`make fuse` in a checkout; a container also needs "
            "--device /dev/fuse)")
ROOT_FIX = "run raychaos as root (e.g. with sudo)"


@dataclass(frozen=True, slots=True)
class Need:
    """One thing a scenario needs of this machine: what ``raychaos list`` calls it (``words``),
    what in the scenario asks for it (``why``), how it is checked here without importing or
    starting anything (``modules`` found by ``find_spec``, ``commands`` on ``PATH``, ``files``
    that exist, ``root``: euid 0), and how to get it (``fix``). A need with nothing to check
    (several embedded nodes) is only said."""

    words: str
    why: str
    fix: str = ""
    modules: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()
    files: tuple[str, ...] = ()
    root: bool = False
    #: Only a cluster raychaos starts asks for it (a run given ``--address`` does not).
    embedded_only: bool = False


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ModuleNotFoundError, ValueError):  # a finder that refuses the name outright: not installed either
        return False


def _which(command: str) -> str | None:
    return shutil.which(command)


def _exists(path: str) -> bool:
    return os.path.exists(path)


def _euid() -> int:
    return os.geteuid()


@dataclass(frozen=True, slots=True)
class Host:
    """How this machine is asked about a need (each looked up when asked); a test passes its own."""

    has_module: Callable[[str], bool] = _installed
    which: Callable[[str], str | None] = _which
    exists: Callable[[str], bool] = _exists
    euid: Callable[[], int] = _euid


def needs_of(scenario: Scenario, workload: type[Workload]) -> tuple[Need, ...]:
    """Every need of ``scenario`` (run with ``workload``), in the order ``raychaos list`` says them."""
    needs = [_extra(scenario, workload.EXTRA)] if workload.EXTRA else []
    if scenario.gcs_fault_tolerance:
        needs.append(Need("redis-server", "gcs_fault_tolerance = true (a Redis it starts for the head's GCS)",
                          REDIS_FIX, commands=("redis-server",), embedded_only=True))
    needs += _root(scenario)
    if scenario.network:
        needs.append(Need("nftables, iproute2", "network = true (nodes in network namespaces)", NET_FIX,
                          commands=("nft", "ip", "tc"), embedded_only=True))
    needs += _faultfs(scenario)
    if scenario.nodes > 1:
        needs.append(Need(f"{scenario.nodes} nodes", f"nodes = {scenario.nodes} (each a raylet and its workers "
                          "on this machine)"))
    return tuple(needs)


def _extra(scenario: Scenario, extra: Extra) -> Need:
    return Need(f"raychaos[{extra}]", f"its workload {scenario.workload!r}", f"install it with pip install "
                f"'raychaos[{extra}]'", modules=EXTRA_MODULES[extra])


def _root(scenario: Scenario) -> list[Need]:
    """Root, once, for a capped storage (a tmpfs it mounts) and for nodes in network namespaces."""
    why = [f"storage_mb = {scenario.storage_mb} (a tmpfs it mounts)"] if scenario.storage_mb is not None else []
    why += ["network = true (nodes in network namespaces)"] if scenario.network else []
    return [Need("root", " and ".join(why), ROOT_FIX, root=True, embedded_only=scenario.storage_mb is None)] \
        if why else []


def _faultfs(scenario: Scenario) -> list[Need]:
    """mfusepy and FUSE 3, for the checkpoint storage or Ray's spill directory on a fault filesystem."""
    why = ["storage_faultfs = true (its checkpoint storage on a fault filesystem)"] if scenario.storage_faultfs else []
    why += ["spill_faultfs = true (Ray's spill directory on a fault filesystem)"] if scenario.spill_faultfs else []
    if not why:
        return []
    said, embedded = " and ".join(why), not scenario.storage_faultfs  # a spill directory is the cluster's own
    return [Need("raychaos[disk]", said, "install it with pip install 'raychaos[disk]'", modules=("mfusepy",),
                 embedded_only=embedded),
            Need("FUSE 3 (fuse3)", said, FUSE_FIX, commands=("fusermount3",), files=("/dev/fuse",),
                 embedded_only=embedded)]


def scenario_needs(scenario: Scenario, workload: type[Workload]) -> tuple[str, ...]:
    """What ``scenario`` needs, in words a user can act on, e.g. ``("raychaos[rl]", "2 nodes")``."""
    return tuple(need.words for need in needs_of(scenario, workload))


def missing_needs(scenario: Scenario, workload: type[Workload], *, host: Host | None = None,
                  embedded: bool = True) -> list[str]:
    """One line per need of ``scenario`` this machine lacks: what asks for it, what is missing
    and how to get it. Nothing is imported or started. ``embedded``: raychaos starts the cluster
    (False: ``--address``, whose cluster has what it has)."""
    host = host or Host()
    lines = []
    for need in needs_of(scenario, workload):
        lacking = _lacking(need, host) if embedded or not need.embedded_only else []
        if lacking:
            lines.append(f"scenario {scenario.name!r}: {need.why} needs {' and '.join(lacking)}; {need.fix}")
    return lines


def _lacking(need: Need, host: Host) -> list[str]:
    """What of ``need`` this machine lacks, each said with how it was found missing."""
    said = []
    for names, verdict in (([m for m in need.modules if not host.has_module(m)], "not installed"),
                           ([c for c in need.commands if host.which(c) is None], "not on PATH")):
        if names:
            said.append(f"{', '.join(names)}, which {'is' if len(names) == 1 else 'are'} {verdict}")
    absent = [f for f in need.files if not host.exists(f)]
    if absent:
        said.append(f"{', '.join(absent)}, which {'does' if len(absent) == 1 else 'do'} not exist")
    if need.root and (uid := host.euid()) != 0:
        said.append(f"root, and this process runs as uid {uid}")
    return said
