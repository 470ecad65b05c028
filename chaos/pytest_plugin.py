"""The raychaos pytest plugin: Ray cluster fixtures a suite builds on, the ``chaos`` fixture and marker.

Registered under ``pytest11``, so it loads in every pytest run once raychaos is installed.
It is a guest there: at import it loads neither ``ray`` nor Hypothesis nor the engine (a suite
that never uses raychaos pays a few milliseconds), loads no Hypothesis profile and changes no
setting of tests that do not use it (it only *registers* profiles, which
``--hypothesis-profile=...`` loads).

Fixtures:
    ray_cluster: an embedded Ray cluster, one per shape for the session (or per module, with the
        ini option ``raychaos_cluster_scope = module``), so a suite's own session- and
        module-scoped fixtures can start their actors on it. Its shape comes from the ini options
        (``raychaos_nodes``, ``raychaos_cpus``, ...), overridden by the closest
        ``@pytest.mark.ray_cluster(nodes=..., cpus=..., resources=..., redis=..., network=...)``.
    ray_multinode_cluster: the same fixture with a head and two 1-CPU worker nodes (each with a
        ``worker`` resource) before any marker.
    chaos: a :class:`chaos.Chaos` engine on the test's cluster, whichever fixture gave it, seeded
        by the test's ``@pytest.mark.chaos(seed=...)``, else ``--chaos-seed``, else a random seed.
        The marker's faults run in the background from the start of the test body; a fault not
        found, refused, ineffective or not reached before the body ends fails the test (unless
        ``strict=False``). A fault the test's cluster cannot take (a node fault on one node, a
        partition without network namespaces) fails at collection, naming the fixture or marker
        to use. A failing test prints its journal and the command that replays it.

Every cluster fixture yields a :class:`chaos.cluster.ClusterHandle`; pass its ``address``
explicitly everywhere. One process drives one cluster at a time (one driver connection), so the
plugin parametrizes its cluster fixture with the test's shape, hidden from test ids: pytest then
runs the tests of one shape together and tears that cluster down, with every fixture built on
it, before it starts the next. Under pytest-xdist each worker starts its own clusters, on ports
of their own.
"""

from __future__ import annotations

import os
import random
import signal
from collections.abc import Generator, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import pytest

from chaos._suite import (
    CHAOS_MARKER_HELP,
    CLUSTER_MARKER_HELP,
    INI_OPTIONS,
    ClusterShape,
    Scope,
    profile_for,
    scope_of,
    shape_for,
)

if TYPE_CHECKING:
    from chaos._driver import FaultOutcome
    from chaos._marker import ChaosRun, ChaosSpec
    from chaos.cluster._cluster import ClusterHandle

MARKERS = (
    "multinode: the test needs the 3-node cluster (head + 2 workers). Example: @pytest.mark.multinode",
    "ray: the test starts real Ray processes (deselect with -m 'not ray'). Example: @pytest.mark.ray",
    CLUSTER_MARKER_HELP,
    CHAOS_MARKER_HELP,
)
#: The fixture every cluster fixture and ``chaos`` stand on; parametrized with the test's shape.
CLUSTER_FIXTURE = "_raychaos_cluster"
#: The cluster fixtures a user asks for.
USER_FIXTURES = ("ray_cluster", "ray_multinode_cluster")


class Unmendable(Exception):
    """The cluster lost what the harness cannot put back (a network cluster's node)."""


class RayHarness:
    """Owns the one embedded cluster of this pytest process (one driver connection per process)."""

    def __init__(self) -> None:
        self._stack: ExitStack | None = None
        self.handle: ClusterHandle | None = None
        self.shape: ClusterShape | None = None
        #: Every cluster folder this process started, for the leak check at the session's end.
        self.temp_dirs: list[str] = []

    def get(self, shape: ClusterShape) -> ClusterHandle:
        """The cluster of ``shape``, started (after closing another) unless it is up."""
        import ray

        if self.handle is not None and self.shape == shape and ray.is_initialized():
            return self.handle
        self.close()
        with ExitStack() as stack:
            self.handle = stack.enter_context(_started(shape))
            self.shape, self._stack = shape, stack.pop_all()
        self.temp_dirs.append(self.handle.temp_dir)
        return self.handle

    def lost_head(self) -> str | None:
        """What of this cluster's head has exited or is stopped (its GCS or raylet), with the last severe
        lines of the head's logs (the caller tears the cluster down, fixtures built on it first).
        None while the head runs (or no cluster is up)."""
        if self.handle is None:
            return None
        from chaos.cluster._cluster import head_down
        from chaos.postmortem import report

        if not (down := head_down(self.handle.address)):
            return None
        logs = report(self.handle.temp_dir, last=5)[1:]
        return "; ".join(down) + ("\n" + "\n".join(logs) if logs else "")

    def restore(self) -> list[str]:
        """Put the cluster back in its shape after a test: each worker node that died (killed,
        frozen past its health checks, drained) is dropped and a node like it added, so that the
        next test of this shape finds every node. Returns the short ids of the nodes replaced.
        A network cluster's nodes live in namespaces this cannot rejoin: :class:`Unmendable` is
        raised, and the caller tears the cluster down for the next test to start another."""
        cluster = None if self.handle is None else self.handle.cluster
        if cluster is None or self.shape is None or self.handle is None:
            return []
        from chaos._ray_compat import shared_host_worker_args
        from chaos._ray_state import live_nodes, node_states, short

        # Dead as the GCS says: a node just added and not yet registered is not dead.
        states = node_states(self.handle.address)
        dead = [node for node in list(cluster.worker_nodes)
                if node.node_id in states and states[node.node_id].dead]
        if not dead:
            return []
        rows = live_nodes()
        if self.handle.lab is not None:
            raise Unmendable(f"worker node(s) {', '.join(short(n.node_id) for n in dead)} of a network cluster died")
        # Each worker node i carries an rc_node<i> resource (local_cluster): a replacement takes a
        # missing index, so that what pins to a node by it finds one again.
        held = {name for row in rows for name in row.resources if name.startswith("rc_node")}
        missing = [i for i in range(1, self.shape.nodes + len(dead)) if f"rc_node{i}" not in held]
        for node, index in zip(dead, missing):
            cluster.remove_node(node, allow_graceful=False)  # only its bookkeeping is left
            cluster.add_node(num_cpus=self.shape.cpus, object_store_memory=self.shape.object_store_mb * 1024 * 1024,
                             resources={f"rc_node{index}": 1.0, **dict(self.shape.resources)},
                             **shared_host_worker_args())
        cluster.wait_for_nodes(timeout=60)
        return [short(node.node_id) for node in dead]

    def close(self) -> None:
        stack, self._stack, self.handle, self.shape = self._stack, None, None, None
        if stack is not None:
            with _sigint_deferred():  # a second Ctrl-C must not leave Ray half torn down
                stack.close()

    def leftovers(self) -> list[str]:
        """Processes still running that belong to a cluster this process started (after
        :meth:`close`, none: its teardown reaps them), each as ``pid name``."""
        from chaos.cluster._cluster import ray_processes

        found = []
        for proc in ray_processes():
            try:
                line, name = " ".join(proc.cmdline()), proc.name()
            except Exception:  # noqa: BLE001 - gone since it was listed: not left over
                continue
            if any(folder in line for folder in self.temp_dirs):
                found.append(f"{proc.pid} {name}")
        return found


@contextmanager
def _started(shape: ClusterShape) -> Iterator[ClusterHandle]:
    """A cluster of ``shape``, with its Redis first when it has one."""
    from chaos.cluster._cluster import local_cluster
    from chaos.gcs._redis import redis_server

    with ExitStack() as stack:
        redis = stack.enter_context(redis_server()) if shape.redis else None
        yield stack.enter_context(local_cluster(
            nodes=shape.nodes, num_cpus=shape.cpus, object_store_mb=shape.object_store_mb,
            worker_resources=dict(shape.resources) or None, redis_address=redis, network=shape.network,
            # pytest-xdist: every worker starts its clusters, and Ray's dashboard agent would take
            # the same fixed port on each worker's head.
            own_ports="PYTEST_XDIST_WORKER" in os.environ))


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
_RUN = pytest.StashKey["ChaosRun"]()


@dataclass(frozen=True)
class _TestFaults:
    """One chaos test's scheduled faults as they went, for the terminal summary."""

    nodeid: str
    lines: tuple[str, ...]
    injected: int


_SUMMARY = pytest.StashKey[list[_TestFaults]]()
#: Processes of this process's clusters still running after the session's teardown.
_LEFT = pytest.StashKey[list[str]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("raychaos")
    group.addoption("--chaos-seed", type=int, default=None,
                    help="seed for the fault schedules (targets and timing) of "
                         "@pytest.mark.chaos tests without a seed of their own (default: random)")
    group.addoption("--chaos-profile", choices=("ci", "thorough"), default=None,
                    help="how deep chaos.testing.ActorChaosMachine searches by default: ci (a few "
                         "examples) or thorough (default: thorough under --hypothesis-profile=thorough, else "
                         "RAYCHAOS_PROFILE, else the ini option raychaos_profile, else ci)")
    group.addoption("--chaos-journals", metavar="DIR", default=None,
                    help="write each chaos test's journal (JSON lines, passing tests too) into DIR, "
                         "as <test id>.jsonl: a CI artifact that Schedule.from_journal replays")
    for name, help_text, default in INI_OPTIONS:
        parser.addini(name, help_text, default=default)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # First: Hypothesis's own plugin loads --hypothesis-profile in its pytest_configure.
    for marker in MARKERS:
        config.addinivalue_line("markers", marker)
    _scope(config)  # a wrong scope stops the run here, named (pytest reads it when fixtures are defined)
    config.stash[_HARNESS] = RayHarness()
    config.stash[_SUMMARY] = []
    profile = config.getoption("hypothesis_profile", None)
    if profile == "thorough":  # registered only when asked for: Hypothesis costs 0.2 s to import
        from chaos._profiles import register_profiles

        register_profiles()
    from chaos import _suite

    _suite.MACHINE_PROFILE = _machine_profile(config, profile)


def _machine_profile(config: pytest.Config, hypothesis_profile: str | None) -> str:
    from chaos._errors import InvalidConfig

    try:
        return profile_for(option=config.getoption("chaos_profile"), hypothesis_profile=hypothesis_profile,
                           env=os.environ.get("RAYCHAOS_PROFILE"), ini=str(config.getini("raychaos_profile"))).value
    except InvalidConfig as exc:
        raise pytest.UsageError(str(exc)) from None


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    # After fixture teardown, before the summary: the cluster goes down inside the run.
    harness = session.config.stash.get(_HARNESS, None)
    if harness is None:
        return
    harness.close()
    if harness.temp_dirs and (left := harness.leftovers()):
        session.config.stash[_LEFT] = left
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: pytest.Config) -> None:
    harness = config.stash.get(_HARNESS, None)
    if harness is not None:
        harness.close()


def pytest_report_header(config: pytest.Config) -> list[str]:
    seed = config.getoption("chaos_seed")
    try:
        shape = _default_shape(config).describe()
    except Exception as exc:  # noqa: BLE001 - a bad ini value is reported where a test needs the shape
        shape = f"unusable ({exc})"
    from chaos import _suite

    profile = config.getoption("hypothesis_profile", None)
    loaded = f"hypothesis profile {profile!r}, " if profile else ""
    return [f"raychaos: {loaded}machine profile {_suite.MACHINE_PROFILE!r}, chaos seed "
            f"{'random' if seed is None else seed}, clusters per {_scope(config).value}, ray_cluster {shape}"]


def _ini(config: pytest.Config) -> dict[str, str]:
    return {name: str(config.getini(name)) for name, _, _ in INI_OPTIONS}


def _scope(config: pytest.Config) -> Scope:
    from chaos._errors import InvalidConfig

    try:
        return scope_of(str(config.getini("raychaos_cluster_scope")))
    except InvalidConfig as exc:
        raise pytest.UsageError(str(exc)) from None


def _default_shape(config: pytest.Config) -> ClusterShape:
    return shape_for(_ini(config), multinode=False, markers=())


def _cluster_scope(fixture_name: str, config: pytest.Config) -> Literal["session", "module"]:
    return "module" if _scope(config) is Scope.MODULE else "session"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A test on a cluster gets its shape as a hidden parameter of the cluster fixture: pytest
    groups the tests of one shape (per session, or per module) and tears a cluster down before
    it starts another, each fixture built on it first."""
    if CLUSTER_FIXTURE not in metafunc.fixturenames:
        return
    from chaos._errors import ChaosError, InvalidConfig

    multinode = "ray_multinode_cluster" in metafunc.fixturenames
    marks = list(metafunc.definition.iter_markers("ray_cluster"))
    markers = [m.kwargs for m in reversed(marks)]
    try:
        if args := [m.args for m in marks if m.args]:
            raise InvalidConfig(f"@pytest.mark.ray_cluster takes keyword arguments only, got positional "
                                f"{args[0]!r}; e.g. @pytest.mark.ray_cluster(nodes=3)")
        shape = shape_for(_ini(metafunc.config), multinode=multinode, markers=markers)
        if "chaos" in metafunc.fixturenames:
            _check_faults_fit(metafunc, shape, multinode=multinode)
    except ChaosError as exc:  # InvalidConfig (the shape), InvalidFaultSpec (a fault it cannot take)
        raise pytest.Collector.CollectError(f"{metafunc.definition.nodeid}: raychaos: {exc}") from None
    metafunc.parametrize(CLUSTER_FIXTURE, [shape], indirect=True, ids=[pytest.HIDDEN_PARAM],
                         scope=_cluster_scope(CLUSTER_FIXTURE, metafunc.config))


def _check_faults_fit(metafunc: pytest.Metafunc, shape: ClusterShape, *, multinode: bool) -> None:
    """A fault the marker schedules that this test's cluster cannot take fails the collection,
    naming what it lacks and the fixture or marker that gives it."""
    from chaos._errors import InvalidFaultSpec
    from chaos._kinds import spec_of
    from chaos._suite import fix_for, unmet

    try:
        spec = _merged_spec(metafunc.definition)
    except InvalidFaultSpec:
        return  # the test fails with the marker's own usage error when it runs
    for fault in (*(e.fault for e in spec.explicit), *spec.menu):
        if lacking := unmet(shape, spec_of(fault).needs):
            fixture = "ray_multinode_cluster" if multinode else "ray_cluster"
            raise InvalidFaultSpec(
                f"@pytest.mark.chaos schedules {type(fault).__name__}, which needs "
                f"{' and '.join(n.value for n in lacking)}; this test's cluster ({fixture}: {shape.describe()}) "
                f"has none: {fix_for(shape, lacking, multinode=multinode)}")


@pytest.hookimpl(trylast=True)  # after pytest's own reordering by fixture parameters
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if CLUSTER_FIXTURE in getattr(item, "fixturenames", ()):
            item.add_marker("ray")
        if item.get_closest_marker("chaos") is not None:
            item.stash[_SPEC] = _spec_of(item)
    items[:] = _grouped_by_shape(items, per_module=_scope(config) is Scope.MODULE)


def _grouped_by_shape(items: list[pytest.Item], *, per_module: bool) -> list[pytest.Item]:
    """The tests of one shape together (per module, with module scope), in the order of each
    shape's first test, each group in pytest's order. Recent pytest groups a parametrized
    fixture's tests by the parameter's value; earlier releases (the 8.4 this plugin accepts) by
    its index, and every test's shape is its only parameter (index 0): two shapes would then
    interleave, and each switch start a cluster."""
    modules: dict[str, int] = {}
    shapes: dict[ClusterShape, int] = {}

    def key(item: pytest.Item) -> tuple[int, int]:
        module = modules.setdefault(item.nodeid.split("::")[0], len(modules)) if per_module else 0
        shape = getattr(getattr(item, "callspec", None), "params", {}).get(CLUSTER_FIXTURE)
        return module, (shapes.setdefault(shape, len(shapes)) if shape is not None else 1 << 30)

    return sorted(items, key=key)


def _merged_spec(node: Any) -> ChaosSpec:
    """The node's chaos markers merged, the closest winning option by option."""
    from chaos._marker import parse_marker

    kwargs: dict[str, Any] = {}
    args: list[Any] = []
    for marker in reversed(list(node.iter_markers("chaos"))):
        kwargs.update(marker.kwargs)
        args.extend(marker.args)
    return parse_marker(args, kwargs)


def _spec_of(item: pytest.Item) -> ChaosSpec | Exception:
    """The validated marker, or the error to fail the test with (the session goes on)."""
    from chaos._errors import InvalidFaultSpec
    from chaos._marker import NO_FAULT_NO_FIXTURE

    try:
        spec = _merged_spec(item)
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
    if run.strict and spec is not None and spec.drew_nothing(run.schedule):
        pytest.fail(f"raychaos: {spec.nothing_drawn(run.engine.seed)}", pytrace=False)
    run.start()
    try:
        result = yield
    except BaseException:
        _remember(item, run.finish())
        raise
    _fail_unless_applied(run, _remember(item, run.finish()))
    if spec is not None and run.strict and not run.schedule.entries and not run.injected():
        from chaos._marker import NO_FAULT_RAN

        pytest.fail(f"raychaos: {NO_FAULT_RAN}", pytrace=False)  # a marker, yet no fault
    return result


def _remember(item: pytest.Item, outcomes: list[FaultOutcome]) -> list[FaultOutcome]:
    """Keep what each scheduled fault did, so a passing test shows it too (the terminal
    summary, ``-rA``, a ``raychaos_faults`` property in JUnit XML, the journal's file)."""
    if folder := item.config.getoption("chaos_journals"):
        _write_journal(folder, item)
    lines = tuple(fault_line(outcome) for outcome in outcomes)
    item.config.stash[_SUMMARY].append(_TestFaults(item.nodeid, lines, sum(o.ok for o in outcomes)))
    item.user_properties.append(("raychaos_faults", "; ".join(lines) or "none scheduled"))
    return outcomes


def _write_journal(folder: str, item: pytest.Item) -> None:
    """The test's journal as ``<folder>/<test id>.jsonl``, the id made a file name."""
    import re

    from chaos._journal import dump_event

    run = item.stash[_RUN]
    os.makedirs(folder, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", item.nodeid).strip("_")[:200]
    with open(os.path.join(folder, f"{name}.jsonl"), "w", encoding="utf-8") as out:
        out.writelines(dump_event(event) + "\n" for event in run.engine.journal.events)


def fault_line(outcome: FaultOutcome) -> str:
    """One fault as it went: ``kill of actor 'ledger' at 1 s: injected, confirmed at 1.01 s``."""
    line = outcome.describe()
    if outcome.ok and outcome.confirmed is not None:
        line += f", confirmed at {outcome.confirmed:.2f} s"
    return line


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """One line over the session's chaos tests; with ``-v``, each test's faults."""
    for line in config.stash.get(_LEFT, []):
        terminalreporter.write_line(f"raychaos: LEFT RUNNING after this session's clusters closed: {line}", red=True)
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
    with nothing printed. The next test gets a fresh cluster. A worker node that died is
    replaced. Checked even when a fixture's teardown failed."""
    try:
        yield
    finally:
        _after_test(item)


def _after_test(item: pytest.Item) -> None:
    harness = item.config.stash.get(_HARNESS, None)
    if harness is None or harness.handle is None:
        return
    if lost := harness.lost_head():
        pytest.fail(f"raychaos: the shared Ray cluster's head died during this test: {lost}"
                    f"{_drop_cluster(item, harness)}", pytrace=False)
    try:
        harness.restore()
    except Exception as exc:  # noqa: BLE001 - any half-mended cluster is dropped, and the test fails
        pytest.fail(f"raychaos: the cluster could not be put back in its shape after this test, so it was torn "
                    f"down for the next test to start another: {type(exc).__name__}: {exc}"
                    f"{_drop_cluster(item, harness)}", pytrace=False)


def _drop_cluster(item: pytest.Item, harness: RayHarness) -> str:
    """Tear the cluster down, fixtures built on it first. A fixture's teardown error is returned
    as a line to add to the failure, not raised: why the cluster is dropped is the error to show."""
    try:
        _forget_cluster(item._request)  # type: ignore[attr-defined]
    except BaseException as exc:  # noqa: BLE001 - reported with the failure; the cluster goes down anyway
        return f"\n(a fixture on the dropped cluster failed to tear down: {type(exc).__name__}: {exc})"
    finally:
        harness.close()
    return ""


def _forget_cluster(request: Any) -> None:
    """Tear the cluster fixture down now, each fixture built on it first, so the next test that
    asks for it starts a cluster instead of reusing a closed one. pytest has no public call for
    this: ``FixtureDef.finish`` is what pytest itself calls when a parameter changes."""
    definitions = request._fixturemanager.getfixturedefs(CLUSTER_FIXTURE, request.node) or ()
    for definition in definitions:
        definition.finish(request)


@pytest.fixture(scope=_cluster_scope)
def _raychaos_cluster(request: pytest.FixtureRequest) -> Iterator[ClusterHandle]:
    """The test's cluster, of the shape it was parametrized with (the ini's default when a test
    asked for it only at run time, with ``request.getfixturevalue``)."""
    harness = request.config.stash[_HARNESS]
    shape = getattr(request, "param", None) or shape_for(
        _ini(request.config), multinode=False,
        markers=[m.kwargs for m in reversed(list(request.node.iter_markers("ray_cluster")))])
    yield harness.get(shape)
    if harness.shape == shape:
        harness.close()


@pytest.fixture(scope=_cluster_scope)
def ray_cluster(_raychaos_cluster: ClusterHandle) -> ClusterHandle:
    """An embedded Ray cluster of the ini options' shape and the test's ``ray_cluster`` marker
    (one node with 4 CPUs by default), for the session or the module; its address is explicit."""
    return _raychaos_cluster


@pytest.fixture(scope=_cluster_scope)
def ray_multinode_cluster(_raychaos_cluster: ClusterHandle) -> ClusterHandle:
    """Head plus 2 worker nodes (1 CPU each, a ``worker`` resource on the workers) unless the
    test's ``ray_cluster`` marker says otherwise."""
    if _raychaos_cluster.nodes < 2:  # asked for at run time: collection never gave it its shape
        pytest.fail("raychaos: ray_multinode_cluster was asked for with request.getfixturevalue, and the plugin "
                    "shapes a cluster at collection: name it in the test's (or a fixture's) arguments, or mark "
                    "the test @pytest.mark.ray_cluster(nodes=3)", pytrace=False)
    return _raychaos_cluster


@pytest.fixture(scope="module")
def no_shared_cluster(request: pytest.FixtureRequest) -> None:
    """For a module whose tests start Ray clusters of their own (``local_cluster``, a scenario run
    without an address): the session's shared cluster stops first, since one process holds one
    driver connection, with every fixture built on it. A later ``ray_cluster`` user starts it again."""
    _forget_cluster(request)
    request.config.stash[_HARNESS].close()


def _seed_for(request: pytest.FixtureRequest, spec: ChaosSpec) -> int:
    if spec.seed is not None:
        return spec.seed
    option = request.config.getoption("chaos_seed")
    return int(option) if option is not None else random.SystemRandom().randrange(2**31)


@pytest.fixture
def chaos(request: pytest.FixtureRequest, _raychaos_cluster: ClusterHandle) -> Iterator[object]:
    """A seeded chaos engine on the test's cluster; the marker's faults run during the test body."""
    from chaos._engine import Chaos
    from chaos._marker import ChaosRun, ChaosSpec

    spec = request.node.stash.get(_SPEC, None)
    spec = spec if isinstance(spec, ChaosSpec) else ChaosSpec()
    seed = _seed_for(request, spec)
    engine = Chaos(address=_raychaos_cluster.address, seed=seed)
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
