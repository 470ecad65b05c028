"""Ray's object spilling directory on a fault filesystem (``spill_faultfs = true``), and the disk
faults of ``mount = "$SPILL"`` aimed at it: mounted before the embedded cluster starts (Ray reads
its spilling config once, at start-up) and unmounted after it is down.

Ray 2.60 takes the filesystem spilling config from ``_system_config["object_spilling_config"]``
(``ray/_private/node.py``) and uses its first ``directory_path`` as the fallback directory too:
past a full store, objects are allocated in files there, so faults on the mount reach those
allocations as well as the spilled files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from chaos.disks import fault_filesystem
from chaos.errors import InvalidConfig
from scenarios.model._scenario import Scenario
from scenarios.model._spill import aim_spill_faults

__all__ = ["spill_config", "spill_on_faultfs"]


def spill_config(directory: str) -> dict[str, Any]:
    """The ``_system_config`` entries that make Ray spill objects to ``directory``."""
    return {"object_spilling_config": json.dumps({"type": "filesystem", "params": {"directory_path": directory}})}


@contextmanager
def spill_on_faultfs(scenario: Scenario, address: str | None) -> Iterator[tuple[Scenario, dict[str, Any]]]:
    """The scenario with its ``mount = "$SPILL"`` faults aimed, and the system config to start
    the embedded cluster with: a fresh directory mounted through a fault filesystem when the
    scenario asks (unmounted on the way out, whatever happened), nothing otherwise.

    Raises:
        InvalidConfig: the scenario asks for it on a cluster given by address (its raylets
            already spill where they were started to).
    """
    if not scenario.spill_faultfs:
        yield scenario, {}
        return
    if address is not None:
        raise InvalidConfig(f"scenario {scenario.name!r} points Ray's object spilling at a fault filesystem "
                            "(spill_faultfs), which only an embedded cluster can be started with: run it "
                            "without --address")
    with fault_filesystem() as fs:
        yield replace(scenario, schedule=aim_spill_faults(scenario.schedule, fs.mount)), spill_config(fs.mount)
