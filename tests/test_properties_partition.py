"""Partition schedules against the checkpointed counter, on a real network cluster.

Hypothesis draws schedules of cuts (the counter's node from the other nodes or from the head
only, both ways or one way, shorter or longer than Ray's health check, healed or held to the
end) while the driver adds to a counter (WAL durability, idempotent adds) and the counter also
adds on its own from a thread, as a process cut off by a partition goes on doing. After the
heal and a forced restore, every acknowledged add is stored, none is counted twice, and none
was applied by an incarnation after its replacement had started. The incarnation fence is what
makes the last true on Ray 2.60, which does not stop the old process: the planted counter
without it is caught, and its schedule shrunk to one cut.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, event, example, given, settings
from hypothesis import strategies as st
from ray import cloudpickle

from actors import CheckpointConfig, CheckpointedCounter
from actors.checkpoint import Superseded
from chaos import Chaos, NodeTarget, Partition, wait_until
from chaos.cluster import TEST_SYSTEM_CONFIG, ClusterHandle, local_cluster
from chaos.errors import TargetNotFound
from chaos.history import History, OpStatus, check_set
from chaos.net._cluster import rejoin
from chaos.net._lab import network_missing
from conftest import scaled
from scenarios.workloads.net._partition_worker import LogLine, read_log, superseded_writes

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.usefixtures("no_shared_cluster"),
              pytest.mark.skipif(bool(network_missing()), reason="the network lab needs root, nft, ip and tc")]

#: Ray's health check, faster than the suite's: a cut node is declared dead after about
#: threshold × (period + timeout) = 3 s, so a "long" cut of 5 s always outlasts it.
HEALTH = {**TEST_SYSTEM_CONFIG, "health_check_initial_delay_ms": 500, "health_check_period_ms": 500,
          "health_check_timeout_ms": 1000, "health_check_failure_threshold": 2}
SHORT, LONG = 1.0, 5.0
#: Seconds a driver's add may wait (a call into a cut node waits until the heal or a restart).
CALL = 3.0
#: Seconds the counter may take to answer after the last heal (a restart on another node).
SETTLE = 45.0


class FencedCounter(CheckpointedCounter):
    """The counter under partitions: each add logged (after it was acknowledged) with the
    time it was asked and the pid that applied it, each incarnation's start logged once it
    holds the storage, and a thread adding on its own every 50 ms until told to stop."""

    FENCE = True

    def __init__(self, storage: str) -> None:
        self._guard = threading.Lock()  # the driver's calls and the thread's adds, one at a time
        self.storage, self._bg_seq = storage, 0
        super().__init__(storage, durability="wal", every_n=5, restore="auto")
        self._log("start", -1, time.time())
        threading.Thread(target=self._background, daemon=True).start()

    def enable_checkpointing(self, config: CheckpointConfig, **options: Any) -> Any:
        return super().enable_checkpointing(dataclasses.replace(config, fence=self.FENCE), **options)

    def _log(self, kind: str, seq: int, at: float) -> None:
        with open(f"{self.storage}/incarnations.log", "a", encoding="utf-8") as log:
            log.write(f"{kind} {os.getpid()} {seq} {at:.6f}\n")

    def write(self, writer: str, seq: int) -> int:
        asked = time.time()  # before the add: under the fence it precedes any later start
        with self._guard:
            self.add(writer_id=writer, seq=seq)
        self._log(f"write:{writer}", seq, asked)
        return os.getpid()

    def _background(self) -> None:
        stop = threading.Event()
        while not os.path.exists(f"{self.storage}/stop") and not stop.wait(0.05):  # its own pace
            try:
                self.write("bg", int(time.time() * 1000))
            except Superseded:
                self._log("refused", -1, time.time())  # the fence at work, for the statistics
                return  # a later incarnation holds the storage: this one has nothing left to do

    def stop_background(self) -> None:
        open(f"{self.storage}/stop", "w").close()

    def adds_applied(self) -> int:
        return self.adds


class UnfencedCounter(FencedCounter):
    """The planted split brain: the same counter without the incarnation fence."""

    FENCE = False


@dataclasses.dataclass(frozen=True)
class Cut:
    """One cut of the counter's node: after ``after`` s, ``long`` (past the health check) or
    short, its ``direction``, from the other nodes or the head only, and healed after its
    seconds or held to the end of the writes."""

    after: float
    long: bool
    direction: str
    peers: str
    healed: bool


LONG_CUT = Cut(after=0.3, long=True, direction="both", peers="rest", healed=True)
CUTS = st.lists(st.builds(Cut, after=st.sampled_from([0.3, 1.0]), long=st.booleans(),
                          direction=st.sampled_from(["both", "outgoing", "incoming"]),
                          peers=st.sampled_from(["rest", "head"]), healed=st.booleans()),
                min_size=1, max_size=2)


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterHandle]:
    with local_cluster(nodes=3, num_cpus=1, network=True, system_config=HEALTH, log_to_driver=False,
                       worker_resources={"worker": 1.0}) as handle:
        yield handle


@dataclasses.dataclass
class Example:
    """One schedule's run: the counter, its storage, the driver's history, what happened."""

    actor: Any
    storage: str
    history: History = dataclasses.field(default_factory=History)
    seq: int = 0
    node: str = ""
    events: list[str] = dataclasses.field(default_factory=list)


def _start(cls: type[FencedCounter]) -> Example:
    import ray

    storage = tempfile.mkdtemp(prefix="rc-partition-", dir="/tmp")
    remote = ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0, resources={"worker": 0.01})(cls)
    example = Example(remote.remote(storage), storage)
    example.node = ray.get(example.actor.node_id.remote(), timeout=60)
    return example


def _writes(example: Example, stop: threading.Event) -> None:
    import ray

    while not stop.is_set():
        key = ("d", example.seq)
        example.seq += 1
        example.history.invoke(key, "driver")
        try:
            ray.get(example.actor.write.remote("d", key[1]), timeout=CALL)
            example.history.complete(key, OpStatus.OK)
        except Exception:  # noqa: BLE001 - a timeout or an error reply: it may still land
            example.history.complete(key, OpStatus.INFO)


def _where(example: Example) -> str:
    """The counter's node now (the last one known while it does not answer)."""
    import ray

    with contextlib.suppress(Exception):
        example.node = ray.get(example.actor.node_id.remote(), timeout=1.0)
    return example.node


def _run_schedule(chaos: Chaos, example: Example, schedule: list[Cut]) -> None:
    """Each cut in turn on the counter's node; one not healed is held until the last ends. A cut
    of a node a held cut already isolates is not applied: its heal could not be confirmed (the
    held cut still drops the probe), and the node is cut already."""
    with contextlib.ExitStack() as held:
        isolated: set[str] = set()
        for cut in schedule:
            threading.Event().wait(cut.after)  # the schedule's own gap, not a synchronisation
            node = _where(example)
            if node in isolated:
                example.events.append(f"{cut} not applied: a held cut isolates its node already")
                continue
            fault = Partition(seconds=LONG if cut.long else SHORT, target=NodeTarget(node_id=node),
                              peers=cut.peers, direction=cut.direction)  # type: ignore[arg-type]
            try:
                with contextlib.ExitStack() as this:
                    (this if cut.healed else held).enter_context(chaos.inject(fault))
                    isolated |= set() if cut.healed else {node}
                    example.events.append(f"{cut} on {fault.target.label()}")
                    threading.Event().wait(fault.seconds)  # the cut's length: the fault itself
            except TargetNotFound:  # the counter's last node is dead and it answers from none yet
                example.events.append(f"{cut} not applied: the counter is on no live worker node")
        example.events.append("all healed")


def _settle(example: Example) -> None:
    import ray

    def answers() -> bool:
        with contextlib.suppress(Exception):
            ray.get(example.actor.write.remote("settle", 0), timeout=CALL)
            return True
        return False

    wait_until(answers, timeout=SETTLE, interval=0.1, what="the counter to answer after the heal")


def _restored(example: Example) -> dict[str, Any]:
    """Stop the writer thread, SIGKILL the counter and read what its restored incarnation holds."""
    import ray

    ray.get(example.actor.stop_background.remote(), timeout=CALL)
    pid = ray.get(example.actor.pid.remote(), timeout=CALL)
    ray.kill(example.actor, no_restart=False)

    def restored() -> bool:
        with contextlib.suppress(Exception):
            return bool(ray.get(example.actor.pid.remote(), timeout=CALL) != pid)
        return False

    wait_until(restored, timeout=SETTLE, interval=0.1, what="the counter restored after a kill")
    return {name: ray.get(example.actor.applied_seqs.remote(name), timeout=CALL) for name in ("d", "bg", "settle")} | \
        {"adds": ray.get(example.actor.adds_applied.remote(), timeout=CALL)}


def _judge(example: Example, state: dict[str, Any]) -> list[str]:
    """What broke (empty when the three properties hold)."""
    found = check_set(example.history.ops(), [("d", seq) for seq in state["d"]])
    lines: list[LogLine] = read_log(f"{example.storage}/incarnations.log")
    late = superseded_writes([line for line in lines if line.kind != "refused"])
    distinct = len(state["d"]) + len(state["bg"]) + len(state["settle"])
    adds = state["adds"]
    broken = []
    if found.lost:
        broken.append(f"acknowledged adds lost: {list(found.lost)[:8]} ({found.explain()})")
    if adds != distinct:
        broken.append(f"adds counted {adds} times for {distinct} distinct adds")
    if late:
        broken.append(f"{len(late)} adds applied by a superseded incarnation after its replacement started "
                      f"(first: pid {late[0].pid}, {late[0].kind} of seq {late[0].seq}, asked at {late[0].at:.3f})")
    return broken


def _a_worker_alive(cluster: ClusterHandle) -> None:
    """The counter needs a worker node: when every one was declared dead, start them again."""
    import ray

    assert cluster.lab is not None
    alive = {str(n["NodeID"]) for n in ray.nodes() if n.get("Alive")}
    if not any(cluster.lab.id_of(node) in alive for node in cluster.lab.workers):
        _heal_cluster(cluster)


def _heal_cluster(cluster: ClusterHandle) -> None:
    """Bring back every worker node Ray declared dead (and kill what the old one left)."""
    import ray

    assert cluster.lab is not None
    alive = {str(n["NodeID"]) for n in ray.nodes() if n.get("Alive")}
    for node in cluster.lab.workers:
        if cluster.lab.id_of(node) not in alive:
            rejoin(cluster.lab, node)


def check_schedule(cluster: ClusterHandle, cls: type[FencedCounter], schedule: list[Cut], *,
                   must_refuse: bool = False) -> None:
    import ray

    chaos = Chaos(address=cluster.address)
    example = _start(cls)
    stop = threading.Event()
    writer = threading.Thread(target=_writes, args=(example, stop), daemon=True)
    writer.start()
    try:
        _run_schedule(chaos, example, schedule)
        stop.set()
        writer.join(timeout=CALL + 5)
        _a_worker_alive(cluster)
        _settle(example)
        broken = _judge(example, _restored(example))
        kinds = [line.kind for line in read_log(f"{example.storage}/incarnations.log")]
        # Hypothesis's statistics (--hypothesis-show-statistics): how many examples met a
        # replacement (the starts less the first and the forced restore's), and the fence.
        event(f"replacements Ray started during the cuts: {kinds.count('start') - 2}")
        event(f"old incarnations the fence refused: {kinds.count('refused')}")
        if must_refuse:  # fail closed: a run where no old incarnation met the fence checked nothing of it
            assert kinds.count("start") >= 3 and kinds.count("refused") >= 1, (kinds, example.events)
        assert not broken, f"schedule {schedule}: " + "; ".join(broken) + f" (events: {example.events})"
    finally:
        stop.set()
        with contextlib.suppress(Exception):
            ray.kill(example.actor)
        _heal_cluster(cluster)
        shutil.rmtree(example.storage, ignore_errors=True)


@pytest.mark.property
@pytest.mark.timeout(900)
@given(schedule=CUTS)
# Always tried first: one cut that outlasts the health check, so Ray starts a replacement while
# the old incarnation runs on (the split brain the fence is for).
@example(schedule=[LONG_CUT])
@scaled(2, phases=[Phase.explicit, Phase.generate])
@pytest.mark.deep  # CI's budget: make slow partitions a worker (partition-worker) beside its twin
def test_acknowledged_adds_survive_partitions_once_each_and_never_from_a_superseded_incarnation(
        cluster: ClusterHandle, schedule: list[Cut]) -> None:
    check_schedule(cluster, FencedCounter, schedule, must_refuse=schedule == [LONG_CUT])


# Each example is a real counter under real cuts (and a node to start again after a long one):
# no explain phase, and a fixed search.
BREAK = settings(max_examples=6, deadline=None, derandomize=True, phases=[Phase.generate, Phase.shrink],
                 suppress_health_check=list(HealthCheck))


@pytest.mark.deep  # minutes of real partitions: make slow runs the property, this shows it can fail
@pytest.mark.timeout(1800)
def test_a_counter_without_the_fence_is_caught_and_its_schedule_shrunk(cluster: ClusterHandle) -> None:
    failing: list[list[Cut]] = []

    @BREAK
    @given(schedule=CUTS)
    def planted(schedule: list[Cut]) -> None:
        try:
            check_schedule(cluster, UnfencedCounter, schedule)
        except AssertionError:
            failing.append(schedule)
            raise

    with pytest.raises(AssertionError, match="superseded incarnation") as excinfo:
        planted()
    # Shrunk to one long cut: a short one never makes Ray start a replacement.
    assert len(failing[-1]) == 1 and failing[-1][0].long, (failing, excinfo.value)
    assert len(failing[0]) >= len(failing[-1]), failing
    print(f"first failing schedule: {failing[0]}\nshrunk to: {failing[-1]}\n{excinfo.value}")  # for -s
