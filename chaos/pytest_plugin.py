"""The raychaos pytest plugin: a leak-free Ray harness and Hypothesis profiles.

Registered under ``pytest11``, so it loads in every pytest run once raychaos is
installed. It is deliberately thin and never imports ``ray`` at import time: only the
fixtures do, when a test asks for a cluster.

Fixtures:
    ray_cluster: a single-node embedded cluster (shared by the whole session).
    ray_multinode_cluster: a head plus two worker nodes on ``ray.cluster_utils.Cluster``.
    chaos: a :class:`chaos.Chaos` engine on ``ray_cluster``, seeded by the test's
        ``@pytest.mark.chaos(seed=...)``, else ``--chaos-seed``, else a random seed (shown
        when the test fails); the marker's ``faults`` run in the background during the test.
        Everything is healed at teardown; a failing test's journal is printed as JSON lines,
        replayable with ``Schedule.from_journal``.

Both yield a :class:`chaos.ClusterHandle`; pass its ``address`` explicitly everywhere.
Only one cluster is up at a time (one driver connection per process), so tests that
use the multi-node fixture are moved to the end of the run.
"""

from __future__ import annotations

import json
import os
import random
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings

if TYPE_CHECKING:
    from chaos._cluster import ClusterHandle

PROFILES = ("dev", "ci", "thorough")
_SLOW = [HealthCheck.too_slow, HealthCheck.data_too_large]
settings.register_profile("dev", max_examples=10, deadline=None, suppress_health_check=_SLOW)
settings.register_profile(
    "ci", max_examples=10, derandomize=True, deadline=None, print_blob=True,
    suppress_health_check=_SLOW,
)
settings.register_profile("thorough", max_examples=300, deadline=None, suppress_health_check=_SLOW)

MARKERS = (
    "multinode: the test needs the 3-node cluster (head + 2 workers); run last. "
    "Example: @pytest.mark.multinode",
    "ray: the test starts real Ray processes (deselect with -m 'not ray'). Example: @pytest.mark.ray",
    "chaos(seed=None, faults=()): run the test under a seeded fault schedule. "
    "Example: @pytest.mark.chaos(seed=7, faults=('kill',))",
)
SINGLE_NODE_CPUS = 4
MULTI_NODE_WORKER_RESOURCES = {"worker": 100.0}


class RayHarness:
    """Owns the one embedded cluster of this pytest process; switches size on demand."""

    def __init__(self) -> None:
        self._stack: ExitStack | None = None
        self.handle: ClusterHandle | None = None

    def get(self, nodes: int) -> ClusterHandle:
        import ray

        from chaos._cluster import local_cluster

        if self.handle is not None and self.handle.nodes == nodes and ray.is_initialized():
            return self.handle
        self.close()
        stack = ExitStack()
        resources = MULTI_NODE_WORKER_RESOURCES if nodes > 1 else None
        cpus = SINGLE_NODE_CPUS if nodes == 1 else 1
        self.handle = stack.enter_context(
            local_cluster(nodes=nodes, num_cpus=cpus, worker_resources=resources)
        )
        self._stack = stack
        return self.handle

    def close(self) -> None:
        stack, self._stack, self.handle = self._stack, None, None
        if stack is not None:
            stack.close()


_HARNESS = pytest.StashKey[RayHarness]()
_JOURNAL = pytest.StashKey[list]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("raychaos")
    group.addoption("--chaos-seed", type=int, default=None,
                    help="seed for fault schedules of @pytest.mark.chaos tests (default: random)")


def pytest_configure(config: pytest.Config) -> None:
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)
    config.stash[_HARNESS] = RayHarness()
    if getattr(config.option, "hypothesis_profile", None) is None:
        settings.load_profile("ci" if os.environ.get("CI") else "dev")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    # After fixture teardown, before the summary: the cluster goes down inside the run.
    harness = session.config.stash.get(_HARNESS, None)
    if harness is not None:
        harness.close()


def pytest_unconfigure(config: pytest.Config) -> None:
    harness = config.stash.get(_HARNESS, None)
    if harness is not None:
        harness.close()


def pytest_report_header(config: pytest.Config) -> list[str]:
    seed = config.getoption("chaos_seed")
    return [
        f"raychaos: hypothesis profile {settings.get_current_profile_name()!r}, "
        f"chaos seed {'random' if seed is None else seed}, "
        f"single node {SINGLE_NODE_CPUS} CPUs, multinode 3 nodes"
    ]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if {"ray_cluster", "ray_multinode_cluster"} & set(getattr(item, "fixturenames", ())):
            item.add_marker("ray")
    # Switching cluster size costs a shutdown and a start: group multinode tests at the end.
    items.sort(key=lambda item: "ray_multinode_cluster" in getattr(item, "fixturenames", ()))


@pytest.fixture
def ray_cluster(request: pytest.FixtureRequest) -> Iterator[ClusterHandle]:
    """A single-node embedded Ray cluster, shared by the session; its address is explicit."""
    yield request.config.stash[_HARNESS].get(nodes=1)


@pytest.fixture
def ray_multinode_cluster(request: pytest.FixtureRequest) -> Iterator[ClusterHandle]:
    """Head plus 2 worker nodes (1 CPU each, a ``worker`` resource on the workers)."""
    yield request.config.stash[_HARNESS].get(nodes=3)


def _seed_for(request: pytest.FixtureRequest) -> int:
    marker = request.node.get_closest_marker("chaos")
    if marker is not None and marker.kwargs.get("seed") is not None:
        return int(marker.kwargs["seed"])
    option = request.config.getoption("chaos_seed")
    return int(option) if option is not None else random.SystemRandom().randrange(2**31)


def _schedule_for(request: pytest.FixtureRequest) -> object:
    from chaos._schedule import Schedule

    marker = request.node.get_closest_marker("chaos")
    faults = marker.kwargs.get("faults", ()) if marker is not None else ()
    if isinstance(faults, Schedule):
        return faults
    return Schedule.explicit([f if isinstance(f, tuple) else (0.0, f) for f in faults])


@pytest.fixture
def chaos(request: pytest.FixtureRequest, ray_cluster: ClusterHandle) -> Iterator[object]:
    """A seeded chaos engine on ``ray_cluster``; the marker's faults run during the test."""
    from chaos._engine import Chaos
    from chaos._schedule import run_schedule

    seed = _seed_for(request)
    engine = Chaos(address=ray_cluster.address, seed=seed)
    request.node.stash[_JOURNAL] = [seed, engine.journal]
    stop = threading.Event()
    runner = threading.Thread(target=run_schedule, args=(engine, _schedule_for(request)),
                              kwargs={"stop": stop}, name="raychaos-schedule", daemon=True)
    runner.start()
    try:
        yield engine
    finally:
        stop.set()
        runner.join(timeout=60)
        engine.heal_all()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    recorded = item.stash.get(_JOURNAL, None)
    if recorded is None or not report.failed or report.when != "call":
        return
    from dataclasses import asdict

    seed, journal = recorded
    lines = [json.dumps(asdict(e), sort_keys=True) for e in journal.events]
    report.sections.append((
        "raychaos journal",
        f"chaos seed {seed} (rerun with --chaos-seed={seed}); {len(lines)} events, replay with "
        "Schedule.from_journal:\n" + "\n".join(lines)))
