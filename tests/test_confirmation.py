"""A fault counts as injected only once its effect is seen: memory resident, a hog burning CPU,
a node Ray calls dead. Each confirmation is shown false by a plant whose effect never comes."""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psutil
import pytest

import chaos._process_faults as process_faults
import chaos._resource_faults as resource_faults
import chaos.agents._agent as agent_module
from chaos import Chaos, KillNode, MemoryPressure, NodeTarget
from chaos._targets import RayProcess
from chaos.agents._agent import ChaosAgent
from chaos.agents._memory import STEP, MemoryOutcome, MemoryProgress, _report
from chaos.cluster import ClusterHandle
from chaos.errors import FaultIneffective

STARTED = MemoryProgress(0, 0.3, cannot=False)  # the allocator's first report: before any block
HOLDING = MemoryProgress(STEP, 0.35, cannot=False, blocks=1, seconds=0.02, slowest=0.02)


def fake_clock(step: float = 0.1) -> Callable[[], float]:
    """A clock that moves ``step`` seconds each time it is read: a wait ends without sleeping out."""
    ticks = itertools.count()
    return lambda: next(ticks) * step


def stream(*reports: MemoryProgress | None) -> Callable[[], MemoryProgress | None]:
    """Each call the next report; the last one again once they run out."""
    it = iter(reports)
    last: list[MemoryProgress | None] = [None]

    def read() -> MemoryProgress | None:
        last[0] = next(it, last[0])
        return last[0]
    return read


def running() -> MemoryOutcome | None:
    return None


# -- memory: resident bytes, not the first report ------------------------------------------------


def test_memory_is_confirmed_once_a_block_is_resident() -> None:
    note = resource_faults.confirm_resident(stream(None, STARTED, STARTED, HOLDING), running, clock=fake_clock())
    assert note.startswith("64 MiB resident (1 blocks of 64 MiB")


def test_an_allocator_that_reports_but_never_holds_memory_is_ineffective() -> None:
    # Its first report (resident 0, no block) once counted as injected.
    with pytest.raises(FaultIneffective, match=r"held no resident memory within 2 s \(last report: "
                                               r"MemoryProgress\(resident=0"):
        resource_faults.confirm_resident(stream(None, STARTED), running, timeout=2.0, clock=fake_clock())


@pytest.mark.parametrize(("ended", "confirmed"), [(MemoryOutcome.OOM_KILLED, True), (MemoryOutcome.HELD, False),
                                                  (MemoryOutcome.CRASHED, False)])
def test_a_task_that_ended_before_holding_memory_counts_only_if_ray_oom_killed_it(
        ended: MemoryOutcome, confirmed: bool) -> None:
    def confirm() -> str:
        return resource_faults.confirm_resident(stream(STARTED), lambda: ended, clock=fake_clock())
    if confirmed:
        assert confirm() == "Ray's memory monitor killed the allocating task at once"
    else:
        with pytest.raises(FaultIneffective, match=f"task ended \\({ended}\\) holding no resident memory"):
            confirm()


def test_a_task_that_held_memory_then_ended_is_confirmed_by_its_last_report() -> None:
    # Read before its end showed nothing yet; its last report, read after, shows the block.
    assert resource_faults.confirm_resident(stream(STARTED, HOLDING), lambda: MemoryOutcome.HELD,
                                   clock=fake_clock()).startswith("64 MiB resident")


def test_a_host_already_past_the_target_is_ineffective_at_once() -> None:
    full = MemoryProgress(0, 0.92, cannot=True)
    with pytest.raises(FaultIneffective, match="allocated nothing: the host already used 92%, past its target"):
        resource_faults.confirm_resident(stream(full), running, clock=fake_clock())


# -- CPU: the hog's measured CPU time, not its existence ----------------------------------------


def test_a_cpu_hog_is_confirmed_by_its_cpu_time() -> None:
    agent = ChaosAgent()
    pids = agent.cpu_hog(1, 30.0)
    try:
        (pid,) = pids
        times = psutil.Process(pid).cpu_times()
        assert times.user + times.system >= agent_module.HOG_PROOF_CPU
    finally:
        assert agent.stop_hogs() == 1


def test_a_hog_that_sleeps_instead_of_burning_is_ineffective(monkeypatch: pytest.MonkeyPatch) -> None:
    # It starts, says its loop began, and sleeps: a hog that merely exists once counted.
    monkeypatch.setattr(agent_module, "_HOG", agent_module._HOG.replace(
        "while time.monotonic() < end:\n    pass", "time.sleep(float(sys.argv[1]))"))
    monkeypatch.setattr(agent_module, "HOG_CONFIRM", 1.0)
    agent = ChaosAgent()
    with pytest.raises(FaultIneffective, match=r"burned 0\.0\d\d s of CPU after its loop began, not 0\.02 s"):
        agent.cpu_hog(1, 30.0)
    assert agent.stop_hogs() == 0  # the failed hog was stopped, not left for a heal


# -- KillNode: Ray's own word that the node is dead ----------------------------------------------


class FakeAgent:
    """An agent whose kill_node "kills" (the engine's _call returns what ``remote`` gives)."""

    class _Method:
        def remote(self, **_: Any) -> tuple[int, int]:
            return 4242, 3

    kill_node = _Method()


@pytest.fixture
def fake_node(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A node whose GCS states come from the returned list, one a poll (the last one repeats),
    with no Ray at all: the target resolves to it, its agent answers at once."""
    states: list[str] = []
    node = RayProcess(0, "n" * 56, "node nnnnnnnnnnnn")
    polls = iter(itertools.count())

    def node_states(address: str, node_id: str) -> list[str]:
        return [states[min(next(polls), len(states) - 1)]]

    monkeypatch.setattr(process_faults, "resolve", lambda target, **_: [node])
    monkeypatch.setattr(process_faults, "agent_for", lambda node_id: FakeAgent())
    monkeypatch.setattr(process_faults, "_node_states", node_states)
    monkeypatch.setattr(process_faults, "NODE_DEATH_CONFIRM", 0.5)
    monkeypatch.setattr(Chaos, "call", lambda self, ref, timeout=0.0: ref)
    yield states


@contextmanager
def kill_node(chaos: Chaos) -> Iterator[None]:
    with chaos.inject(KillNode(NodeTarget("n" * 56)), rng=random.Random(0)):
        yield


def test_a_killed_node_is_injected_only_once_ray_declares_it_dead(fake_node: list[str]) -> None:
    fake_node.extend(["ALIVE", "ALIVE", "DEAD"])
    chaos = Chaos(address="fake:6379")
    with kill_node(chaos):
        # Confirmed before the block runs: what it (and the run's verdicts) read is a dead node.
        assert process_faults._node_states("fake:6379", "n" * 56) == ["DEAD"]
        (event,) = chaos.journal.events
        assert event.kind == "inject" and "Ray declared the node dead" in event.outcome
    assert [e.kind for e in chaos.journal.events] == ["inject", "heal"]


def test_a_node_kill_that_ray_never_sees_is_ineffective(fake_node: list[str]) -> None:
    fake_node.append("ALIVE")  # its processes "died", but the GCS keeps it ALIVE
    chaos = Chaos(address="fake:6379")
    with pytest.raises(FaultIneffective, match=r"was not DEAD in the GCS 0\.5 s after its raylet was killed "
                                               r"\(last seen: \['ALIVE'\]\)"), kill_node(chaos):
        pytest.fail("a node Ray still calls alive was reported killed")
    assert [e.kind for e in chaos.journal.events] == ["ineffective"]


# -- memory on real Ray: the shared test cluster --------------------------------------------------


def reports_only() -> Callable[[float, float, float, str], int]:
    """A plant allocator: its first report, then nothing made resident until its deadline.
    Made here, so Ray ships it by value (workers cannot import a test module)."""
    def allocate(fraction: float, host_cap: float, seconds: float, path: str) -> int:
        import time

        _report(path, MemoryProgress(0, 0.1, cannot=False))
        time.sleep(seconds)  # the plant's idleness itself: nothing waits on it
        return 0
    return allocate


def a_little_memory() -> MemoryPressure:
    """A fault that asks for about 512 MiB more than the host uses now."""
    vm = psutil.virtual_memory()
    fraction = round((vm.total - vm.available + 512 * 2**20) / vm.total, 4)
    return MemoryPressure(fraction=fraction, seconds=30, host_cap=min(0.95, fraction + 0.05))


@pytest.mark.ray
def test_memory_on_ray_is_confirmed_resident(ray_cluster: ClusterHandle) -> None:
    chaos = Chaos(address=ray_cluster.address)
    with chaos.inject(a_little_memory()):
        (event,) = chaos.journal.events
        assert event.kind == "inject" and re.fullmatch(r"\d+ MiB resident \(\d+ blocks of 64 MiB.*", event.outcome)


@pytest.mark.ray
def test_an_allocator_on_ray_that_never_holds_memory_is_ineffective(
        ray_cluster: ClusterHandle, monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    monkeypatch.setattr(resource_faults, "_allocator", lambda: ray.remote(reports_only()))
    monkeypatch.setattr(resource_faults, "MEMORY_CONFIRM", 3.0)
    chaos = Chaos(address=ray_cluster.address)
    with pytest.raises(FaultIneffective, match=r"held no resident memory within 3 s"), \
            chaos.inject(a_little_memory()):
        pytest.fail("an allocator that holds nothing was reported injected")
    assert [e.kind for e in chaos.journal.events] == ["heal", "ineffective"]
