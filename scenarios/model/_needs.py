"""What a scenario needs of the machine beyond ``pip install raychaos``, derived from its facts.

A need is one of: the raychaos extra its workload imports (``raychaos[rl]``), ``redis-server``
(GCS fault tolerance starts one), ``root`` (a capped checkpoint storage is a tmpfs it mounts;
nodes in network namespaces), ``nftables, iproute2`` (the network faults' tools),
``raychaos[disk]`` and FUSE 3 (checkpoint storage or Ray's spill directory on a fault filesystem), and several
embedded nodes (each is a raylet and its workers on this machine).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping

from scenarios.model._scenario import Scenario
from scenarios.model._workload import Extra, Workload

__all__ = ["EXTRA_MODULES", "missing_extra", "scenario_needs"]

#: The modules each extra brings that its workloads import (``chaos._extras.import_extra``).
EXTRA_MODULES: Mapping[Extra, tuple[str, ...]] = {"rl": ("torch", "gymnasium"), "apps": ("torch", "starlette")}


def scenario_needs(scenario: Scenario, workload: type[Workload]) -> tuple[str, ...]:
    """What ``scenario`` needs, in words a user can act on, e.g. ``("raychaos[rl]", "2 nodes")``."""
    needs = [f"raychaos[{workload.EXTRA}]"] if workload.EXTRA else []
    needs += ["redis-server"] if scenario.gcs_fault_tolerance else []
    needs += ["root"] if scenario.storage_mb is not None or scenario.network else []
    needs += ["nftables, iproute2"] if scenario.network else []
    needs += ["raychaos[disk]", "FUSE 3 (fuse3)"] if scenario.storage_faultfs or scenario.spill_faultfs else []
    needs += [f"{scenario.nodes} nodes"] if scenario.nodes > 1 else []
    return tuple(needs)


def missing_extra(scenario: Scenario, workload: type[Workload]) -> str | None:
    """Why ``scenario`` cannot run here for want of its workload's extra, or None.

    Checked with ``importlib.util.find_spec``: nothing is imported, nothing started.
    """
    if workload.EXTRA is None:
        return None
    missing = [m for m in EXTRA_MODULES[workload.EXTRA] if not _installed(m)]
    if not missing:
        return None
    return (f"scenario {scenario.name!r}: its workload {scenario.workload!r} needs {', '.join(missing)}, "
            f"which {'is' if len(missing) == 1 else 'are'} not installed; install it with "
            f"pip install 'raychaos[{workload.EXTRA}]'")


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a finder that refuses the name outright: not installed either
        return False
