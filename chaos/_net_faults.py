"""Network faults on a lab cluster: cuts, packet loss and bandwidth caps as nftables tables and
``tc tbf`` queues in the worker nodes' namespaces, each confirmed across the link and healed in
``finally`` (see :mod:`chaos._net`).

A cut is confirmed by a probe connection from each cut node to the head that the cut's own
rule dropped (its counter moved and the connection never completed), and its heal by a probe
connection that completes; a cut that no packet met raises :class:`FaultIneffective`.
"""

from __future__ import annotations

import errno
import json
import math
import random
import select
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Literal, Protocol

from chaos._errors import FaultIneffective, HangError, TargetNotFound
from chaos._faults import Bandwidth, Direction, FlappingLink, PacketLoss, Partition, PartitionPeers
from chaos._net import NetLab, NetNode, in_namespace, lab_of, run
from chaos._targets import NodeTarget, RayProcess
from chaos._wait import wait_until


class Chaos(Protocol):
    """What the injectors use of :class:`chaos.Chaos` (which wraps what they yield in an
    ``Injection``): its address, its journal and its heal registry."""

    address: str

    def _record(self, kind: Literal["inject", "heal"], fault: Any, at: float | None, proc: RayProcess | None,
                outcome: str) -> None: ...

    def _active_heal(self, heal: Callable[[], None]) -> AbstractContextManager[None]: ...

__all__ = ["INJECTORS"]

#: Seconds a cut's probe may take to meet the cut's rule (it meets it within a millisecond).
CUT_CONFIRM = 2.0
#: Seconds a healed link may take to carry a probe connection again.
HEAL_CONFIRM = 10.0
#: What an injector hit: the nodes, as processes of pid 0 (the engine wraps them in an Injection).
Hit = tuple[RayProcess, ...]
#: A loss is confirmed when this many probe datagrams would all pass by chance less often.
_LOSS_MISS = 1e-9


# -- which nodes ----------------------------------------------------------------------------------


def _alive() -> set[str]:
    import ray

    return {str(n["NodeID"]) for n in ray.nodes() if n.get("Alive")}


def pick(lab: NetLab, target: NodeTarget, count: int, rng: random.Random,
         alive: set[str] | None = None) -> list[NetNode]:
    """``count`` live worker nodes of the lab that ``target`` names, chosen with ``rng``.

    Raises:
        TargetNotFound: fewer live worker nodes match than ``count``.
    """
    alive = _alive() if alive is None else alive
    found = [n for n in lab.workers if lab.id_of(n) in alive]
    if target.node_id is not None:
        found = [n for n in found if lab.id_of(n) == target.node_id]
    if len(found) < count:
        raise TargetNotFound(f"{count} live worker node(s) of the network cluster needed for "
                             f"{target.label()}, {len(found)} found")
    return sorted(rng.sample(found, count), key=lambda n: n.index)


def _process(lab: NetLab, node: NetNode) -> RayProcess:
    node_id = lab.id_of(node)
    return RayProcess(0, node_id, f"node {node_id[:12]} ({node.namespace}, {node.address})")


def peer_addresses(lab: NetLab, group: Sequence[NetNode], peers: PartitionPeers) -> list[str]:
    """The addresses ``group`` is cut from: the head's, or every node's outside the group."""
    if peers == "head":
        return [lab.head.address]
    return [n.address for n in lab.nodes if n not in group]


# -- nftables -------------------------------------------------------------------------------------


def drop_table(name: str, addresses: Sequence[str], direction: Direction, *,
               percent: float | None = None, hooked: bool = True) -> str:
    """An nftables table that drops traffic to (``output``) and from (``input``) ``addresses``:
    all of it, or ``percent`` of it at random. ``hooked=False`` makes chains no hook consults
    (a cut that does not take: the tests' ineffective fault)."""
    chance = "" if percent is None else f"numgen random mod 10000 < {round(percent * 100)} "
    where = "{ " + ", ".join(addresses) + " }"
    chains = []
    for chain, field, wanted in (("output", "daddr", ("both", "outgoing")), ("input", "saddr", ("both", "incoming"))):
        if direction in wanted:
            hook = f"type filter hook {chain} priority 0; policy accept;" if hooked else ""
            chains.append(f"chain {chain} {{\n{hook}\nip {field} {where} {chance}counter drop\n}}")
    return f"table inet {name} {{\n" + "\n".join(chains) + "\n}\n"


def add_table(node: NetNode, text: str) -> None:
    run(["nft", "-f", "-"], namespace=node.namespace, stdin=text)


def delete_table(node: NetNode, name: str) -> None:
    run(["nft", "delete", "table", "inet", name], namespace=node.namespace, check=False)


def table_present(node: NetNode, name: str) -> bool:
    """Whether the table ``name`` is in ``node``'s namespace (read back: a heal must see it gone,
    since a probe connection can get through a loss rule still in place)."""
    return bool(run(["nft", "list", "table", "inet", name], namespace=node.namespace, check=False).strip())


def dropped(node: NetNode, name: str, chain: str | None = None) -> int:
    """Packets the table ``name`` dropped in ``node``'s namespace (in ``chain``, or all)."""
    text = run(["nft", "-j", "list", "table", "inet", name], namespace=node.namespace, check=False)
    total = 0
    for item in json.loads(text).get("nftables", []) if text.strip() else []:
        rule = item.get("rule")
        if rule and (chain is None or rule.get("chain") == chain):
            total += sum(e["counter"]["packets"] for e in rule.get("expr", []) if "counter" in e)
    return total


# -- probes ---------------------------------------------------------------------------------------


def _socket(node: NetNode, kind: int = socket.SOCK_STREAM) -> socket.socket:
    assert node.namespace is not None
    return in_namespace(node.namespace, lambda: socket.socket(socket.AF_INET, kind))


def _connected(sock: socket.socket) -> bool:
    """Whether a non-blocking connect has completed (False while it is pending)."""
    _, writable, _ = select.select([], [sock], [], 0)
    return bool(writable) and sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0


def confirm_cut(lab: NetLab, node: NetNode, table: str) -> float:
    """A probe connection from ``node`` to the head that the cut's rule drops: seconds until
    the rule's counter moved.

    Raises:
        FaultIneffective: the connection completed, or the rule met no packet in ``CUT_CONFIRM``.
    """
    start = time.monotonic()
    with _socket(node) as sock:
        sock.setblocking(False)
        code = sock.connect_ex((lab.head.address, lab.probe_ports[0]))
        if code not in (0, errno.EINPROGRESS):
            raise FaultIneffective(f"the probe from {node.label} failed at once ({errno.errorcode.get(code)}), "
                                   "not by the cut: the link is broken otherwise")

        def met() -> bool:
            if _connected(sock):
                raise FaultIneffective(f"a connection from {node.label} to the head completed through the "
                                       f"cut {table}: the cut did not take")
            return dropped(node, table) > 0

        try:
            wait_until(met, timeout=CUT_CONFIRM, interval=0.002, what=f"the cut of {node.label}")
        except HangError as exc:
            if isinstance(exc.__cause__, FaultIneffective):
                raise exc.__cause__ from None
            raise FaultIneffective(f"no packet from {node.label} met the cut {table} in {CUT_CONFIRM:g} s "
                                   "(the probe neither completed nor was dropped by it)") from None
    return time.monotonic() - start


def confirm_open(lab: NetLab, node: NetNode) -> float:
    """Seconds until a probe connection from ``node`` to the head completes (the link healed).

    Raises:
        FaultIneffective: none completed within ``HEAL_CONFIRM`` (the heal did not take).
    """
    start = time.monotonic()

    def opens() -> bool:
        with _socket(node) as sock:
            sock.settimeout(0.5)
            sock.connect((lab.head.address, lab.probe_ports[0]))
        return True

    try:
        wait_until(opens, timeout=HEAL_CONFIRM, interval=0.01, what=f"the link of {node.label}")
    except HangError as exc:
        raise FaultIneffective(f"the link of {node.label} carried no connection {HEAL_CONFIRM:g} s after "
                               f"its heal: {exc}") from None
    return time.monotonic() - start


# -- the injectors --------------------------------------------------------------------------------


@contextmanager
def _tables(chaos: Chaos, fault: Partition | PacketLoss | FlappingLink, at: float | None,
            group: Sequence[NetNode], table: str, text: str) -> Iterator[list[NetNode]]:
    """Add ``text`` (table ``table``) in each node of ``group``; in ``finally`` delete it from
    each and confirm each link carries a connection again, journaling each heal."""
    lab = lab_of(chaos.address)
    added: list[NetNode] = []

    def heal() -> None:
        for node in added:
            delete_table(node, table)
            if table_present(node, table):
                raise FaultIneffective(f"the nftables table {table} of {node.label} is still there after its "
                                       f"deletion: delete it with `ip netns exec {node.namespace} nft delete table "
                                       f"inet {table}`")
            took = confirm_open(lab, node)
            chaos._record("heal", fault, at, _process(lab, node), f"nftables table {table} deleted; a "
                          f"connection to the head completed {took * 1000:.0f} ms later")

    with chaos._active_heal(heal):
        for node in group:
            add_table(node, text)
            added.append(node)
        yield added


@contextmanager
def _partition(chaos: Chaos, fault: Partition, at: float | None, rng: random.Random) -> Iterator[Hit]:
    lab = lab_of(chaos.address)
    group = pick(lab, fault.target, fault.count, rng)
    table = lab.table_name()
    cut_from = peer_addresses(lab, group, fault.peers)
    with _tables(chaos, fault, at, group, table, drop_table(table, cut_from, fault.direction)):
        for node in group:
            took = confirm_cut(lab, node, table)
            chaos._record("inject", fault, at, _process(lab, node), f"cut from {', '.join(cut_from)} "
                          f"({fault.direction}); a probe to the head was dropped by the cut's rule within "
                          f"{took * 1000:.1f} ms")
        yield tuple(_process(lab, n) for n in group)


def loss_probes(percent: float) -> int:
    """Datagrams to send so that none is dropped with probability below ``_LOSS_MISS``."""
    p = percent / 100
    return 1 if p >= 1 else min(20_000, math.ceil(math.log(_LOSS_MISS) / math.log(1 - p)))


def confirm_loss(lab: NetLab, node: NetNode, table: str, percent: float) -> tuple[int, int]:
    """Send datagrams from ``node`` to the head; returns (dropped by the rule, sent).

    Raises:
        FaultIneffective: the rule dropped none of them.
    """
    sent = loss_probes(percent)
    with _socket(node, socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        for _ in range(sent):
            try:
                sock.sendto(b"raychaos", (lab.head.address, lab.probe_ports[0]))
            except OSError:  # an ICMP error of an earlier datagram, reported on this send
                continue
    lost = dropped(node, table, "output")
    if lost == 0:
        raise FaultIneffective(f"none of {sent} datagrams from {node.label} met the loss rule of {table}: "
                               f"at {percent:g} % that happens with probability below {_LOSS_MISS:g}")
    return lost, sent


@contextmanager
def _packet_loss(chaos: Chaos, fault: PacketLoss, at: float | None, rng: random.Random) -> Iterator[Hit]:
    lab = lab_of(chaos.address)
    group = pick(lab, fault.target, fault.count, rng)
    table = lab.table_name()
    text = drop_table(table, peer_addresses(lab, group, "rest"), "both", percent=fault.percent)
    with _tables(chaos, fault, at, group, table, text):
        for node in group:
            lost, sent = confirm_loss(lab, node, table, fault.percent)
            chaos._record("inject", fault, at, _process(lab, node), f"{fault.percent:g} % of packets to and "
                          f"from the other nodes dropped at random; {lost} of {sent} probe datagrams dropped")
        yield tuple(_process(lab, n) for n in group)


def _links(node: NetNode) -> list[tuple[str | None, str]]:
    """(namespace, link) of each side of a node's veth: the node's uploads, then its downloads."""
    assert node.link is not None and node.host_link is not None
    return [(node.namespace, node.link), (None, node.host_link)]


def _qdisc(namespace: str | None, link: str) -> dict[str, object]:
    text = run(["tc", "-s", "-j", "qdisc", "show", "dev", link] if namespace is None
               else ["tc", "-n", namespace, "-s", "-j", "qdisc", "show", "dev", link])
    rows = json.loads(text) if text.strip() else []
    return next((r for r in rows if r.get("root")), {})


def burst_bytes(mbit: float) -> int:
    """The token bucket's depth: 20 ms at the rate, and at least 16 KiB (one TSO burst fits)."""
    return max(16 * 1024, int(mbit * 1e6 / 8 / 50))


def confirm_capped(lab: NetLab, node: NetNode, mbit: float) -> int:
    """Push more than the bucket holds from ``node`` to the head and return how often the
    bucket held packets back (``overlimits``).

    Raises:
        FaultIneffective: the node's queue is not a token bucket, or held nothing back.
    """
    namespace, link = _links(node)[0]
    if _qdisc(namespace, link).get("kind") != "tbf":
        raise FaultIneffective(f"the link of {node.label} has no token bucket after `tc qdisc replace`")
    with _socket(node) as sock:
        sock.settimeout(2.0)
        sock.connect((lab.head.address, lab.probe_ports[0]))
        sock.setblocking(False)
        payload = b"\0" * (8 * burst_bytes(mbit))
        try:
            sock.send(payload)
        except BlockingIOError:
            pass

        def held() -> int:
            return int(str(_qdisc(namespace, link).get("overlimits", 0)))

        try:
            return wait_until(held, timeout=CUT_CONFIRM, interval=0.005, what="the token bucket to hold")
        except HangError:
            raise FaultIneffective(f"the token bucket of {node.label} held nothing back from "
                                   f"{len(payload)} bytes at {mbit:g} Mbit/s") from None


@contextmanager
def _bandwidth(chaos: Chaos, fault: Bandwidth, at: float | None, rng: random.Random) -> Iterator[Hit]:
    lab = lab_of(chaos.address)
    group = pick(lab, fault.target, fault.count, rng)
    capped: list[tuple[NetNode, str | None, str]] = []

    def heal() -> None:
        for node, namespace, link in capped:
            run(["tc", "qdisc", "del", "dev", link, "root"] if namespace is None
                else ["tc", "-n", namespace, "qdisc", "del", "dev", link, "root"], check=False)
            if _qdisc(namespace, link).get("kind") == "tbf":
                raise FaultIneffective(f"the token bucket on {link} of {node.label} outlived its deletion")
        for node in dict.fromkeys(n for n, _, _ in capped):
            took = confirm_open(lab, node)
            chaos._record("heal", fault, at, _process(lab, node), f"token buckets deleted (read back); a "
                          f"connection to the head completed {took * 1000:.0f} ms later")

    tbf = ["tbf", "rate", f"{fault.mbit}mbit", "burst", str(burst_bytes(fault.mbit)), "latency", "200ms"]
    with chaos._active_heal(heal):
        for node in group:
            for namespace, link in _links(node):
                run(["tc", "qdisc", "replace", "dev", link, "root", *tbf] if namespace is None
                    else ["tc", "-n", namespace, "qdisc", "replace", "dev", link, "root", *tbf])
                capped.append((node, namespace, link))
        for node in group:
            held = confirm_capped(lab, node, fault.mbit)
            chaos._record("inject", fault, at, _process(lab, node), f"links capped at {fault.mbit:g} Mbit/s "
                          f"each way (tc tbf, read back); the bucket held a probe transfer back {held} times")
        yield tuple(_process(lab, n) for n in group)


@contextmanager
def _flapping_link(chaos: Chaos, fault: FlappingLink, at: float | None,
                   rng: random.Random) -> Iterator[Hit]:
    lab = lab_of(chaos.address)
    (node,) = pick(lab, fault.target, 1, rng)
    table = lab.table_name()
    text = drop_table(table, peer_addresses(lab, [node], "rest"), "both")
    stop, flaps = threading.Event(), [0]
    with _tables(chaos, fault, at, [node], table, text):
        took = confirm_cut(lab, node, table)
        chaos._record("inject", fault, at, _process(lab, node), f"link down (cut from every other node), "
                      f"confirmed within {took * 1000:.1f} ms; it flaps every {fault.period / 2:g} s")
        errors: list[BaseException] = []
        flapper = threading.Thread(target=_flap, args=(node, table, text, fault.period / 2, stop, flaps, errors),
                                   name="raychaos-flapping-link", daemon=True)
        began = time.monotonic()
        flapper.start()
        try:
            yield (_process(lab, node),)
        finally:
            stop.set()
            flapper.join(timeout=fault.period + 10.0)
            delete_table(node, table)
            add_table(node, text)  # the heal deletes it once, whichever half the flapper ended in
        _flapped(fault, errors, flaps[0], time.monotonic() - began)


def _flapped(fault: FlappingLink, errors: list[BaseException], flaps: int, held: float) -> None:
    """Fail the fault whose link did not flap as recorded: the flapper failed, or fell behind."""
    expected = int(held // (fault.period / 2)) - 1
    if errors or flaps < expected:
        why = f"its flapper failed: {errors[0]!r}" if errors else f"it flapped {flaps} times in {held:.1f} s"
        raise FaultIneffective(f"the link did not flap every {fault.period / 2:g} s: {why} "
                               f"(at least {expected} expected)")


def _flap(node: NetNode, table: str, text: str, half: float, stop: threading.Event, flaps: list[int],
          errors: list[BaseException]) -> None:
    """Bring the link up and down every ``half`` seconds until ``stop``; an error ends it, kept."""
    down = True
    try:
        while not stop.wait(half):  # the flapping period: the fault's own rhythm, not a synchronisation
            if down:
                delete_table(node, table)
            else:
                add_table(node, text)
            down, flaps[0] = not down, flaps[0] + 1
    except Exception as exc:  # noqa: BLE001 - kept for the heal, which fails the fault with it
        errors.append(exc)


INJECTORS: dict[type, Callable[..., object]] = {
    Partition: _partition, PacketLoss: _packet_loss, Bandwidth: _bandwidth, FlappingLink: _flapping_link,
}
