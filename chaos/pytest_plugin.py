"""The raychaos pytest plugin: a leak-free Ray harness, the ``chaos`` fixture and marker.

Registered under ``pytest11``, so it loads in every pytest run once raychaos is installed.
It is a guest there: it never imports ``ray`` at import time, loads no Hypothesis profile
and changes no setting of tests that do not use it (it only *registers* a ``thorough``
profile, which ``--hypothesis-profile=thorough`` loads).

Fixtures:
    ray_cluster: a single-node embedded cluster (shared by the whole session).
    ray_multinode_cluster: a head plus two worker nodes on ``ray.cluster_utils.Cluster``.
    chaos: a :class:`chaos.Chaos` engine on ``ray_cluster``, seeded by the test's
        ``@pytest.mark.chaos(seed=...)``, else ``--chaos-seed``, else a random seed. The
        marker's faults run in the background from the start of the test body; a fault
        not found, refused, ineffective or not reached before the body ends fails the test
        (unless ``strict=False``). A failing test prints its journal and the command that
        replays it.

Both yield a :class:`chaos.cluster.ClusterHandle`; pass its ``address`` explicitly everywhere.
Only one cluster is up at a time (one driver connection per process), so tests that
use the multi-node fixture are moved to the end of the run.
"""

from __future__ import annotations

import random
import signal
from collections.abc import Generator, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import HealthCheck, settings

from chaos._marker import MARKER_HELP, NO_FAULT_NO_FIXTURE, NO_FAULT_RAN, ChaosRun, ChaosSpec, parse_marker

if TYPE_CHECKING:
    from chaos._driver import FaultOutcome
    from chaos.cluster._cluster import ClusterHandle

#: Registered, never loaded unless asked: ten times Hypothesis's default examples and steps.
settings.register_profile(
    "thorough", max_examples=1000, stateful_step_count=500, deadline=None, print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

MARKERS = (
    "multinode: the test needs the 3-node cluster (head + 2 workers); run last. "
    "Example: @pytest.mark.multinode",
    "ray: the test starts real Ray processes (deselect with -m 'not ray'). Example: @pytest.mark.ray",
    MARKER_HELP,
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

        from chaos.cluster._cluster import local_cluster

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

    def lost_head(self) -> str | None:
        """What of this cluster's head has exited or is stopped (its GCS or raylet), with the last severe
        lines of the head's logs; then the cluster is closed, for the next test to start
        another. None while the head runs (or no cluster is up)."""
        if self.handle is None:
            return None
        from chaos.cluster._cluster import head_down
        from chaos.postmortem import report

        if not (down := head_down(self.handle.address)):
            return None
        logs = report(self.handle.temp_dir, last=5)[1:]
        self.close()
        return "; ".join(down) + ("\n" + "\n".join(logs) if logs else "")

    def close(self) -> None:
        stack, self._stack, self.handle = self._stack, None, None
        if stack is not None:
            with _sigint_deferred():  # a second Ctrl-C must not leave Ray half torn down
                stack.close()


@contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Ignore SIGINT while the block runs (it is bounded), then restore the handler."""
    try:
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    except ValueError:  # not the main thread: nothing to defer
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


_HARNESS = pytest.StashKey[RayHarness]()
_SPEC = pytest.StashKey["ChaosSpec | Exception"]()
_RUN = pytest.StashKey[ChaosRun]()


@dataclass(frozen=True)
class _TestFaults:
    """One chaos test's scheduled faults as they went, for the terminal summary."""

    nodeid: str
    lines: tuple[str, ...]
    injected: int


_SUMMARY = pytest.StashKey[list[_TestFaults]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("raychaos")
    group.addoption("--chaos-seed", type=int, default=None,
                    help="seed for the fault schedules (targets and timing) of "
                         "@pytest.mark.chaos tests without a seed of their own (default: random)")


def pytest_configure(config: pytest.Config) -> None:
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)
    config.stash[_HARNESS] = RayHarness()
    config.stash[_SUMMARY] = []


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
        if item.get_closest_marker("chaos") is not None:
            item.stash[_SPEC] = _spec_of(item)
    # Switching cluster size costs a shutdown and a start: group multinode tests at the end.
    items.sort(key=lambda item: "ray_multinode_cluster" in getattr(item, "fixturenames", ()))


def _spec_of(item: pytest.Item) -> ChaosSpec | Exception:
    """The validated marker, or the error to fail the test with (the session goes on)."""
    from chaos._errors import InvalidFaultSpec

    kwargs: dict[str, Any] = {}
    args: list[Any] = []
    for marker in reversed(list(item.iter_markers("chaos"))):  # the closest marker wins
        kwargs.update(marker.kwargs)
        args.extend(marker.args)
    try:
        spec = parse_marker(args, kwargs)
    except InvalidFaultSpec as exc:
        return exc
    if "chaos" in getattr(item, "fixturenames", ()):
        return spec
    if not spec.schedules_nothing:
        return InvalidFaultSpec("the test has @pytest.mark.chaos faults but does not use the "
                                "`chaos` fixture, so they would never run; add `chaos` to its arguments")
    return InvalidFaultSpec(NO_FAULT_NO_FIXTURE) if spec.strict else spec


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """The marker's schedule starts with the test body; after it, a fault that did not
    happen fails the test, and so does a marked test that ran without any fault (unless the
    marker says ``strict=False``)."""
    spec = item.stash.get(_SPEC, None)
    if isinstance(spec, Exception):
        pytest.fail(f"raychaos usage error: {spec}", pytrace=False)
    run = item.stash.get(_RUN, None)
    if run is None:
        return (yield)
    if run.strict and isinstance(spec, ChaosSpec) and spec.drew_nothing(run.schedule):
        pytest.fail(f"raychaos: {spec.nothing_drawn(run.engine.seed)}", pytrace=False)
    run.start()
    try:
        result = yield
    except BaseException:
        _remember(item, run.finish())
        raise
    _fail_unless_applied(run, _remember(item, run.finish()))
    if isinstance(spec, ChaosSpec) and run.strict and not run.schedule.entries and not run.injected():
        pytest.fail(f"raychaos: {NO_FAULT_RAN}", pytrace=False)  # a marker, yet no fault
    return result


def _remember(item: pytest.Item, outcomes: list[FaultOutcome]) -> list[FaultOutcome]:
    """Keep what each scheduled fault did, so a passing test shows it too (the terminal
    summary, ``-rA``, and a ``raychaos_faults`` property in JUnit XML)."""
    lines = tuple(fault_line(outcome) for outcome in outcomes)
    item.config.stash[_SUMMARY].append(_TestFaults(item.nodeid, lines, sum(o.ok for o in outcomes)))
    item.user_properties.append(("raychaos_faults", "; ".join(lines) or "none scheduled"))
    return outcomes


def fault_line(outcome: FaultOutcome) -> str:
    """One fault as it went: ``kill of actor 'ledger' at 1 s: injected, confirmed at 1.01 s``."""
    line = outcome.describe()
    if outcome.ok and outcome.confirmed is not None:
        line += f", confirmed at {outcome.confirmed:.2f} s"
    return line


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """One line over the session's chaos tests; with ``-v``, each test's faults."""
    runs = config.stash.get(_SUMMARY, [])
    if not runs:
        return
    scheduled, injected = sum(len(r.lines) for r in runs), sum(r.injected for r in runs)
    terminalreporter.write_line(f"raychaos: {len(runs)} chaos test(s), {scheduled} scheduled fault(s), "
                                f"{injected} injected and confirmed")
    if config.get_verbosity() > 0:
        for run in runs:
            for line in run.lines or ("no scheduled fault",):
                terminalreporter.write_line(f"  {run.nodeid}: {line}")


def _fail_unless_applied(run: ChaosRun, outcomes: list[Any]) -> None:
    from chaos._driver import FaultsNotApplied, check_applied

    if not run.strict:
        return
    try:
        check_applied(outcomes, where="this test")
    except FaultsNotApplied as exc:
        pytest.fail(f"{exc}\nLengthen the test body, fix the target, or pass strict=False to "
                    "@pytest.mark.chaos to accept faults that did not happen.", pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, None, None]:
    """Fail the test during which the shared cluster's GCS or head raylet died, naming what
    exited: else the driver (this process) would exit 60 s later, mid-way through another test,
    with nothing printed. The next test gets a fresh cluster."""
    yield
    harness = item.config.stash.get(_HARNESS, None)
    if harness is not None and (lost := harness.lost_head()):
        pytest.fail(f"raychaos: the shared Ray cluster's head died during this test: {lost}", pytrace=False)


@pytest.fixture
def ray_cluster(request: pytest.FixtureRequest) -> Iterator[ClusterHandle]:
    """A single-node embedded Ray cluster, shared by the session; its address is explicit."""
    yield request.config.stash[_HARNESS].get(nodes=1)


@pytest.fixture
def ray_multinode_cluster(request: pytest.FixtureRequest) -> Iterator[ClusterHandle]:
    """Head plus 2 worker nodes (1 CPU each, a ``worker`` resource on the workers)."""
    yield request.config.stash[_HARNESS].get(nodes=3)


@pytest.fixture(scope="module")
def no_shared_cluster(request: pytest.FixtureRequest) -> None:
    """For a module whose tests start Ray clusters of their own (``local_cluster``, a scenario run
    without an address): the session's shared cluster stops first, since one process holds one
    driver connection. A later ``ray_cluster`` user starts it again."""
    request.config.stash[_HARNESS].close()


def _seed_for(request: pytest.FixtureRequest, spec: ChaosSpec) -> int:
    if spec.seed is not None:
        return spec.seed
    option = request.config.getoption("chaos_seed")
    return int(option) if option is not None else random.SystemRandom().randrange(2**31)


@pytest.fixture
def chaos(request: pytest.FixtureRequest, ray_cluster: ClusterHandle) -> Iterator[object]:
    """A seeded chaos engine on ``ray_cluster``; the marker's faults run during the test body."""
    from chaos._engine import Chaos

    spec = request.node.stash.get(_SPEC, None)
    spec = spec if isinstance(spec, ChaosSpec) else ChaosSpec()
    seed = _seed_for(request, spec)
    engine = Chaos(address=ray_cluster.address, seed=seed)
    schedule = spec.schedule(seed)
    engine.warm_up(schedule)  # agents and the State API, before time zero: no fault is late
    run = ChaosRun(engine, schedule, strict=spec.strict, nodeid=request.node.nodeid)
    request.node.stash[_RUN] = run
    try:
        yield engine
    finally:
        run.finish()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    run = item.stash.get(_RUN, None)
    if run is None or not report.failed or report.when != "call":
        return
    from chaos._journal import dump_event

    seed, journal = run.engine.seed, run.engine.journal
    lines = [dump_event(e) for e in journal.events]
    report.sections.append((
        "raychaos journal",
        f"chaos seed {seed}; replay this test with: pytest {item.nodeid!r} --chaos-seed={seed}\n"
        f"{len(lines)} events (Schedule.from_journal rebuilds the schedule):\n" + "\n".join(lines)))
