"""Workloads for a lossy or thin network between Ray nodes, on a cluster whose worker nodes are
network namespaces (``network = true``): objects moved between every pair of nodes, round after
round, each one checksummed where it lands and timed.

Each round moves three objects at once, one over each kind of link and never two the same way
over one link: a worker's task output to the driver on the head (``ray.get``), one worker's
task output to a task on another worker, and an object the driver put to a task on a worker.
The rounds rotate the workers, so whichever node a fault hits, some transfers cross it.

Before and after each round the workload reads each worker namespace's link back (a random-drop
rule of nftables, a ``tc tbf`` rate, the kernel's count of retransmitted TCP segments): a transfer
met a loss that was on over its nodes at either read (a round at 30 % loss can outlast the fault),
and ran capped when the cap was on at both (one capped part of the way is neither). That is what the
fault-bit verdicts (``transfers_met_loss``, ``slowed_by_cap``) stand on: a run in which no
transfer met the fault does not pass for one that rode it out.

``lossy-network``: 10 % and then 30 % of a worker's packets dropped. TCP retransmits what is
lost, Ray's object manager re-requests a pull every ``object_manager_pull_timeout_ms`` (10 s) and
fails a fetch only after ``fetch_fail_timeout_milliseconds`` (10 min; Ray's ``ray_config_def.h``:
"should only be seen if there is extreme pressure on the object directory, or a bug"), and tasks
are retried on system failures (``max_retries``, 3): so every task and transfer ends, with its
value, and every value is the one sent.

``bandwidth-starved``: a worker's links capped by a token bucket. Transfers over it take about
size / rate; none may fail (no spurious ``ObjectLostError``), each ends within
size / rate x slack + overhead, and they are measurably slower than those the cap missed.
"""

from __future__ import annotations

import statistics
import threading
import time
import zlib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

import numpy as np

from chaos import FaultKind
from chaos.errors import InvalidConfig
from chaos.net import COMMAND_TIMEOUT, LinkState, NetLab, lab_of, read_link
from scenarios.model._records import Verdict
from scenarios.model._workload import Params, Workload
from scenarios.workloads._kit import worker_nodes

__all__ = ["LinkState", "Outcome", "Transfer", "cap_bound", "capped_through", "loss_met",
           "no_object_lost", "no_task_hung", "outcome_of", "results_correct", "slowed_by_cap",
           "transfers_finished", "transfers_met_loss", "within_cap_bound"]


class Outcome(StrEnum):
    """How one transfer ended, as the workload saw it."""

    OK = "ok"  #: the object arrived with the checksum it was sent with
    WRONG = "wrong"  #: an object arrived, with another checksum
    LOST = "lost"  #: Ray raised an ``ObjectLostError`` (or a subclass) for it
    FAILED = "failed"  #: another error came back (its type is kept)
    HUNG = "hung"  #: nothing came back within the bound


@dataclass(frozen=True, slots=True)
class Transfer:
    """One object moved between two nodes: route, size, when it was asked for (seconds into the
    run), how it ended and how long the move took. ``loss`` is the share of packets its nodes'
    links dropped at its start or its end (the loss it met; 0: none), ``mbit`` the cap on them
    all through it (0: none; None: the cap came or went meanwhile)."""

    route: str
    size: int
    at: float
    outcome: Outcome
    took: float | None = None
    error: str = ""
    loss: float = 0.0
    mbit: float | None = 0.0


# -- the link, read back --------------------------------------------------------------------------


def sample_links(lab: NetLab) -> dict[int, LinkState]:
    """Each worker node's link read back, by its lab index (the head's is never faulted).

    Raises:
        NetCommandFailed: a read failed; a link that cannot be read is not read as unfaulted.
    """
    return {lab.head.index: LinkState(), **{node.index: read_link(node) for node in lab.workers}}


def capped_through(route: tuple[int, int], before: Mapping[int, LinkState],
                   after: Mapping[int, LinkState]) -> float | None:
    """The cap a transfer from ``route[0]`` to ``route[1]`` met at both reads (the source's
    bucket on what it sends, the destination's on what it receives; 0: none), or None when it
    changed between: a transfer the cap met part of the way is neither capped nor free."""
    start, end = (_cap_on(route, sample) for sample in (before, after))
    return start if start == end else None


def _cap_on(route: tuple[int, int], sample: Mapping[int, LinkState]) -> float:
    """The tighter of the caps the transfer crosses (0: none)."""
    source, destination = (sample.get(i, LinkState()) for i in route)
    return min((cap for cap in (source.sends_mbit, destination.receives_mbit) if cap > 0), default=0.0)


def loss_met(route: tuple[int, int], *samples: Mapping[int, LinkState]) -> float:
    """The share of loss on the route's nodes at any read of the round (before, during, after):
    a round slower than the fault (30 % loss can stretch one past it) still met it."""
    return max((sample.get(i, LinkState()).loss for sample in samples for i in route), default=0.0)


@contextmanager
def sampling(lab: NetLab, *, every: float = 0.25) -> Iterator[list[dict[int, LinkState]]]:
    """The links read back every ``every`` seconds while the block runs (a round can begin
    before a fault and end after it, and both its end reads miss it). A failed read fails the
    block: a link that cannot be read is not read as unfaulted."""
    samples: list[dict[int, LinkState]] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def loop() -> None:
        while not stop.wait(every):
            try:
                samples.append(sample_links(lab))
            except Exception as exc:  # noqa: BLE001 - re-raised in the driver's thread below
                errors.append(exc)
                return

    thread = threading.Thread(target=loop, name="link-sampler", daemon=True)
    thread.start()
    try:
        yield samples
    finally:
        stop.set()
        thread.join(timeout=4 * COMMAND_TIMEOUT)
    if errors:
        raise errors[0]


def retransmitted_under_loss(before: Mapping[int, LinkState], after: Mapping[int, LinkState]) -> int:
    """TCP segments retransmitted between two reads in the namespaces that lost packets at either."""
    return sum(after[i].retransmitted - b.retransmitted for i, b in before.items()
               if i in after and (b.loss > 0 or after[i].loss > 0))


# -- the payloads ---------------------------------------------------------------------------------


def payload(seed: int, size: int) -> np.ndarray:
    """``size`` random bytes from ``seed``: the same on every node, and no two seeds alike."""
    return np.frombuffer(np.random.default_rng(seed).bytes(size), dtype=np.uint8)


def checksum(data: np.ndarray) -> int:
    return zlib.crc32(np.ascontiguousarray(data).tobytes())


def produce(seed: int, size: int) -> np.ndarray:
    """A task's output on its node: past Ray's inline limit, it stays in that node's store."""
    return payload(seed, size)


def consume(refs: list[Any], corrupt: bool) -> tuple[int, float]:
    """Fetch the object (a ref in a list, so the fetch happens here and is timed) and return
    its checksum and the seconds the fetch took. ``corrupt`` is the planted bug: a byte flipped
    before the checksum, as a transfer that delivered wrong data would."""
    import ray

    start = time.monotonic()
    data = ray.get(refs[0])
    took = time.monotonic() - start
    if corrupt:
        data = data.copy()
        data[len(data) // 2] ^= 0xFF
    return checksum(data), took


# -- the verdicts (pure: fed fabricated transfers in the tests) -----------------------------------


def _errors(transfers: Sequence[Transfer], outcomes: tuple[Outcome, ...]) -> str:
    found = [f"{t.route} at {t.at:.1f} s ({t.error or t.outcome.value})" for t in transfers if t.outcome in outcomes]
    return f"{len(found)}: " + ", ".join(found[:5]) + (" ..." if len(found) > 5 else "") if found else "none"


def no_task_hung(transfers: Sequence[Transfer], *, within: float) -> Verdict:
    """``no_task_hung``: every task and transfer ended (with a value or an error) within ``within``
    seconds of being asked for."""
    hung = [t for t in transfers if t.outcome is Outcome.HUNG or (t.took or 0.0) > within]
    slowest = max((t.took for t in transfers if t.took is not None), default=0.0)
    return Verdict.over("no_task_hung", len(transfers), held=not hung,
                        detail=f"{len(transfers)} transfers; unanswered or slower than {within:g} s: "
                               f"{_errors(hung, tuple(Outcome))}; slowest that ended {slowest:.2f} s")


def results_correct(transfers: Sequence[Transfer]) -> Verdict:
    """``results_correct``: every object that arrived has the checksum it was sent with."""
    arrived = [t for t in transfers if t.outcome in (Outcome.OK, Outcome.WRONG)]
    return Verdict.over("results_correct", len(arrived), held=all(t.outcome is Outcome.OK for t in arrived),
                        detail=f"{len(arrived)} objects arrived; with another checksum: "
                               f"{_errors(arrived, (Outcome.WRONG,))}")


def transfers_finished(transfers: Sequence[Transfer]) -> Verdict:
    """``transfers_finished``: no transfer ended in an error (lost or failed): Ray retries what a
    lossy link breaks, so a loss on the network is a delay, never an error."""
    return Verdict.over("transfers_finished", len(transfers),
                        held=not any(t.outcome in (Outcome.LOST, Outcome.FAILED) for t in transfers),
                        detail=f"{len(transfers)} transfers; ended in an error: "
                               f"{_errors(transfers, (Outcome.LOST, Outcome.FAILED))}")


def transfers_met_loss(transfers: Sequence[Transfer], *, faults: int, retransmitted: int) -> Verdict:
    """``transfers_met_loss``: the loss bit: for each of the run's ``faults`` packet-loss faults
    a share of loss that transfers ran under all through, and TCP segments retransmitted in the
    lossy namespaces while it was on (Ray's own traffic lost packets, not only the probe's)."""
    under = [t for t in transfers if t.loss]
    shares = sorted({t.loss for t in under})
    held = faults > 0 and len(shares) >= faults and retransmitted > 0
    seen = ", ".join(f"{s:g} %" for s in shares) or "none"
    return Verdict.over("transfers_met_loss", len(under), held=held,
                        detail=f"{len(under)} transfers ran under loss ({seen}; "
                               f"{faults} loss faults confirmed); {retransmitted} TCP segments retransmitted "
                               "in the lossy namespaces meanwhile")


def no_object_lost(transfers: Sequence[Transfer]) -> Verdict:
    """``no_object_lost``: no transfer raised an ``ObjectLostError`` (a slow link is no lost
    object), nor any other error."""
    return Verdict.over("no_object_lost", len(transfers),
                        held=not any(t.outcome in (Outcome.LOST, Outcome.FAILED) for t in transfers),
                        detail=f"{len(transfers)} transfers; ObjectLostError: {_errors(transfers, (Outcome.LOST,))}; "
                               f"other errors: {_errors(transfers, (Outcome.FAILED,))}")


def cap_bound(size: int, mbit: float, *, slack: float, overhead: float) -> float:
    """Seconds a transfer of ``size`` bytes may take through a cap of ``mbit`` Mbit/s."""
    return size * 8 / (mbit * 1e6) * slack + overhead


def within_cap_bound(transfers: Sequence[Transfer], *, slack: float, overhead: float) -> Verdict:
    """``within_cap_bound``: every transfer under the cap all through ended, with a value, within
    :func:`cap_bound` of its size and the rate read back from its link."""
    capped = [t for t in transfers if t.mbit]
    late = [t for t in capped if t.took is None or t.outcome is not Outcome.OK
            or t.took > cap_bound(t.size, t.mbit or 0.0, slack=slack, overhead=overhead)]
    worst = max(capped, key=lambda t: t.took or float("inf"), default=None)
    bound = cap_bound(worst.size, worst.mbit or 0.0, slack=slack, overhead=overhead) if worst else 0.0
    slowest = f"; slowest {worst.took or float('nan'):.2f} s of {bound:.2f} s allowed" if worst else ""
    return Verdict.over("within_cap_bound", len(capped), held=not late,
                        detail=f"{len(capped)} transfers under the cap; over the bound (size/rate x {slack:g} + "
                               f"{overhead:g} s) or unfinished: {_errors(late, tuple(Outcome))}"
                               + slowest)


def slowed_by_cap(transfers: Sequence[Transfer], *, factor: float) -> Verdict:
    """``slowed_by_cap``: the cap bit: transfers under the cap took at least ``factor`` times as
    long (median) as those of the same run that no cap touched."""
    capped = [t.took for t in transfers if t.mbit and t.took is not None and t.outcome is Outcome.OK]
    free = [t.took for t in transfers if t.mbit == 0 and t.took is not None and t.outcome is Outcome.OK]
    slow, fast = (statistics.median(capped) if capped else 0.0), (statistics.median(free) if free else 0.0)
    held = bool(capped and free) and slow >= factor * fast
    ratio = f"x{slow / fast:.1f}" if fast else "no ratio"
    return Verdict.over("slowed_by_cap", len(capped), held=held,
                        detail=f"median {slow:.2f} s under the cap ({len(capped)}), {fast:.2f} s without "
                               f"({len(free)}): {ratio}, at least x{factor:g} wanted")


# -- the workloads --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Move:
    """One transfer in flight: its route (lab indices and label), when it was asked for, the
    checksum it must arrive with, and the ref whose answer ends it."""

    route: tuple[int, int]
    label: str
    at: float
    expected: int
    ref: Any
    deadline: float


class _Mover(Workload):
    """Objects moved between every pair of nodes, round after round (see the module)."""

    BASELINE = True  # the fault-free twin: the fault-bit verdict must be red there

    def _size(self) -> int:
        raise NotImplementedError

    def _bound(self) -> float:
        raise NotImplementedError

    def _corrupt(self) -> bool:
        return False

    def setup(self) -> None:
        import ray

        self.lab = lab_of(self.ctx.address)
        self.nodes = worker_nodes()
        if len(self.nodes) < 2:
            raise InvalidConfig(f"{type(self).__name__} moves objects between worker nodes and found "
                                f"{len(self.nodes)}; set nodes >= 3 in the scenario")
        self.produce = ray.remote(num_cpus=0, resources={"worker": 0.01})(produce)
        self.consume = ray.remote(num_cpus=0, resources={"worker": 0.01})(consume)
        self.transfers: list[Transfer] = []
        self.retransmitted = 0
        self.round = 0
        self.links = sample_links(self.lab)

    def call_bounds(self) -> Mapping[str, float]:
        return {"step": 3 * self._bound() + 60.0, "probe": self._bound() + 30.0}

    def _on(self, node_id: str) -> dict[str, Any]:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        # Soft: a node Ray declares dead does not strand the task (it runs elsewhere, as retried).
        return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id, soft=True)}

    def _index(self, node_id: str) -> int:
        return self.lab.node_ids[node_id].index if node_id in self.lab.node_ids else -1

    def step(self) -> bool:
        before = self.links
        with sampling(self.lab) as during:
            ended = self._round(self.round)
        self.links = sample_links(self.lab)
        self.retransmitted += retransmitted_under_loss(before, self.links)
        self.transfers += [replace(t, loss=loss_met(r, before, *during, self.links),
                                   mbit=capped_through(r, before, self.links)) for r, t in ended]
        self.round += 1
        self.ctx.count("transfers", len(ended))
        return True

    def _round(self, n: int) -> list[tuple[tuple[int, int], Transfer]]:
        """Three transfers at once: a -> head, b -> a and head -> b, for the round's workers a, b."""
        import ray

        a, b = self.nodes[n % len(self.nodes)], self.nodes[(n + 1) % len(self.nodes)]
        ia, ib, seed, at = self._index(a), self._index(b), 3 * n + 1, self.ctx.elapsed()
        made = [self.produce.options(**self._on(node)).remote(seed + i, self._size()) for i, node in enumerate((a, b))]
        ready, _ = ray.wait(made, num_returns=2, timeout=self._bound(), fetch_local=False)
        moves = [self._consumer((0, ib), ray.put(payload(seed + 2, self._size())), b, seed + 2, at)]
        if made[1] in ready:
            moves.append(self._consumer((ib, ia), made[1], a, seed + 1, at))
        ended = [self._fetch((ia, 0), made[0], seed, at) if made[0] in ready else self._unanswered((ia, 0), at)]
        if made[1] not in ready:
            ended.append(self._unanswered((ib, ia), at))
        return ended + [self._await(move) for move in moves]

    def _label(self, route: tuple[int, int]) -> str:
        return "->".join("head" if i == 0 else f"n{i}" for i in route)

    def _unanswered(self, route: tuple[int, int], at: float) -> tuple[tuple[int, int], Transfer]:
        """A transfer whose object was never made: its producing task did not end in the bound."""
        return route, Transfer(route=self._label(route), size=self._size(), at=at, outcome=Outcome.HUNG,
                               error="producing task unanswered")

    def _consumer(self, route: tuple[int, int], ref: Any, node: str, seed: int, at: float) -> _Move:
        moved = self.consume.options(**self._on(node)).remote([ref], self._corrupt())
        return _Move(route=route, label=self._label(route), at=at, expected=checksum(payload(seed, self._size())),
                     ref=moved, deadline=time.monotonic() + self._bound())

    def _fetch(self, route: tuple[int, int], ref: Any, seed: int, at: float) -> tuple[tuple[int, int], Transfer]:
        """The driver's own fetch of a worker's object, timed here."""
        import ray

        start = time.monotonic()
        try:
            data = ray.get(ref, timeout=self._bound())
        except Exception as exc:  # noqa: BLE001 - classified: hung, lost or failed
            return route, self._failed(route, at, exc)
        took = time.monotonic() - start
        expected = checksum(payload(seed, self._size()))
        return route, Transfer(route=self._label(route), size=self._size(), at=at,
                               outcome=_judged(checksum(data), expected), took=took)

    def _await(self, move: _Move) -> tuple[tuple[int, int], Transfer]:
        import ray

        try:
            got, took = ray.get(move.ref, timeout=max(0.0, move.deadline - time.monotonic()))
        except Exception as exc:  # noqa: BLE001 - classified: hung, lost or failed
            ray.cancel(move.ref, force=True)
            return move.route, self._failed(move.route, move.at, exc)
        return move.route, Transfer(route=move.label, size=self._size(), at=move.at,
                                    outcome=_judged(got, move.expected), took=took)

    def _failed(self, route: tuple[int, int], at: float, exc: BaseException) -> Transfer:
        return Transfer(route=self._label(route), size=self._size(), at=at, outcome=outcome_of(exc),
                        error=type(exc).__name__)

    def probe(self) -> str:
        """One small object from a worker's task to the driver, within the bound."""
        import ray

        ref = self.produce.options(**self._on(self.nodes[0])).remote(0, 200 * 1024)
        data = ray.get(ref, timeout=self._bound())
        if checksum(data) != checksum(payload(0, 200 * 1024)):
            raise AssertionError("a probe object arrived with another checksum")
        return "a worker's object reached the driver intact"


def _judged(got: int, expected: int) -> Outcome:
    return Outcome.OK if got == expected else Outcome.WRONG


def outcome_of(exc: BaseException) -> Outcome:
    """How an error ends a transfer: past its bound, an object Ray lost, or another failure (a
    task's error wraps its cause, which counts)."""
    from ray.exceptions import GetTimeoutError, ObjectLostError

    cause = getattr(exc, "cause", None)
    if isinstance(exc, GetTimeoutError):
        return Outcome.HUNG
    if isinstance(exc, ObjectLostError) or isinstance(cause, ObjectLostError):
        return Outcome.LOST
    return Outcome.FAILED


class LossyNetworkParams(Params):
    #: Bytes of each object (KiB): past Ray's 100 KiB inline limit, so it moves between object
    #: stores; small, since TCP over a 30 % loss moves a few hundred KiB a second here.
    size_kib: int = 512
    #: Seconds a task or transfer may take before it counts as hung.
    hang_within: float = 45.0
    #: The planted bug: each consuming task flips a byte of what it fetched before its checksum.
    corrupt: bool = False


class LossyNetwork(_Mover):
    """Objects moved between every pair of nodes while a worker's link drops packets at random."""

    Params = LossyNetworkParams
    INVARIANTS = ("no_task_hung", "results_correct", "transfers_finished", "transfers_met_loss")
    FAULT_VERDICTS = ("transfers_met_loss",)

    def setup(self) -> None:
        self.params = self.ctx.params_as(LossyNetworkParams)
        super().setup()

    def _size(self) -> int:
        return self.params.size_kib * 1024

    def _bound(self) -> float:
        return self.params.hang_within

    def _corrupt(self) -> bool:
        return self.params.corrupt

    def _figures(self) -> None:
        """The report's figures: transfers, median and slowest seconds per share of loss met."""
        for share in sorted({t.loss for t in self.transfers}):
            took = [t.took for t in self.transfers if t.loss == share and t.took is not None]
            self.ctx.metric(f"transfers at {share:g} % loss", len(took))
            self.ctx.metric(f"median s at {share:g} % loss", statistics.median(took) if took else -1.0)
            self.ctx.metric(f"max s at {share:g} % loss", max(took, default=-1.0))
        self.ctx.metric("TCP segments retransmitted under loss", self.retransmitted)

    def invariants(self) -> list[Verdict]:
        self._figures()
        done = self.transfers
        return [no_task_hung(done, within=self.params.hang_within), results_correct(done),
                transfers_finished(done),
                transfers_met_loss(done, faults=len(self.ctx.injections(FaultKind.PACKET_LOSS)),
                                   retransmitted=self.retransmitted)]


class BandwidthStarvedParams(Params):
    #: Bytes of each object (MiB).
    size_mib: int = 24
    #: A capped transfer may take size / rate times this ...
    slack: float = 1.5
    #: ... plus these seconds (the task's start, the object's lookup, the bucket's first burst).
    overhead: float = 3.0
    #: Capped transfers must take at least this many times as long (median) as uncapped ones.
    min_slowdown: float = 2.0
    #: Seconds any transfer may take before it counts as unanswered.
    hang_within: float = 60.0


class BandwidthStarved(_Mover):
    """Large objects moved between every pair of nodes while a worker's links are capped."""

    Params = BandwidthStarvedParams
    # no_task_hung too: a transfer that hangs past the cap (not capped at both reads) is judged
    # by no other verdict.
    INVARIANTS = ("no_object_lost", "no_task_hung", "within_cap_bound", "slowed_by_cap", "results_correct")
    FAULT_VERDICTS = ("slowed_by_cap", "within_cap_bound")

    def setup(self) -> None:
        self.params = self.ctx.params_as(BandwidthStarvedParams)
        super().setup()

    def _size(self) -> int:
        return self.params.size_mib * 1024 * 1024

    def _bound(self) -> float:
        return self.params.hang_within

    def _figures(self) -> None:
        """The report's figures: transfers, median and slowest seconds, capped and not."""
        for name, capped in (("capped", True), ("uncapped", False)):
            took = [t.took for t in self.transfers if t.mbit is not None and bool(t.mbit) is capped
                    and t.took is not None]
            self.ctx.metric(f"{name} transfers", len(took))
            self.ctx.metric(f"{name} median s", statistics.median(took) if took else -1.0)
            self.ctx.metric(f"{name} max s", max(took, default=-1.0))

    def invariants(self) -> list[Verdict]:
        self._figures()
        done, p = self.transfers, self.params
        return [no_object_lost(done), no_task_hung(done, within=p.hang_within),
                within_cap_bound(done, slack=p.slack, overhead=p.overhead),
                slowed_by_cap(done, factor=p.min_slowdown), results_correct(done)]
