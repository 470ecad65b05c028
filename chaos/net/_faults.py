"""Network faults on a lab cluster: cuts, packet loss and bandwidth caps as nftables tables and
``tc tbf`` queues in the worker nodes' namespaces, each confirmed across the link and healed in
``finally`` (see :mod:`chaos.net._lab`).

A cut is confirmed by a probe connection from each cut node to the head that the cut's own
rule dropped (its counter moved and the connection never completed), and its heal by a probe
connection that completes; a cut that no packet met raises :class:`FaultIneffective`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import random
import select
import shlex
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from chaos._context import FaultContext, Injection
from chaos._errors import FaultIneffective, HangError, InvalidFaultSpec, TargetNotFound
from chaos._kinds import Fault, FaultKind, FaultSpec, Need, duration, number_in, register
from chaos._ray_state import live_nodes, short
from chaos._targets import NodeTarget, RayProcess
from chaos._wait import wait_until
from chaos.net._lab import PREFIX, NetLab, NetNode, in_namespace, lab_of, run

__all__ = ["Bandwidth", "Direction", "FlappingLink", "PacketLoss", "Partition", "PartitionPeers"]


PartitionPeers = Literal["rest", "head"]
Direction = Literal["both", "outgoing", "incoming"]


def _network_target(target: NodeTarget, count: int) -> None:
    """A network fault's nodes: ``count`` worker nodes (the head's link is every worker's)."""
    number_in("count", count, 1, 16, what="a whole number of worker nodes", whole=True)
    if target.allow_head:
        raise InvalidFaultSpec("the head has no link of its own to cut: cut the workers from it instead, "
                               "e.g. Partition(seconds=..., count=<workers>, peers='head')", field="target.allow_head")
    if target.node_id is not None and count != 1:
        raise InvalidFaultSpec(f"a target with a node_id names one node; `count` {count} needs node_id=None",
                               field="count")


@dataclass(frozen=True, slots=True)
class Partition(Fault):
    """Cut ``count`` worker nodes (a group that still reaches itself) from the other nodes
    (``peers="rest"``) or from the head only (``peers="head"``: the GCS and this driver), for
    ``seconds``, both ways or one way (``direction``: what the group sends, ``outgoing``, or
    what it receives, ``incoming``). Needs a cluster from ``local_cluster(network=True)``.

    Confirmed by a connection from each cut node to the head that the cut's own rule
    dropped, and healed by one that succeeds; a cut no packet met is ineffective."""

    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind] = FaultKind.PARTITION
    #: Carried out by this driver, as root, in the nodes' network namespaces.
    USES_AGENT: ClassVar[bool] = False

    seconds: float
    target: NodeTarget = field(default_factory=NodeTarget)
    count: int = 1
    peers: PartitionPeers = "rest"
    direction: Direction = "both"

    def __post_init__(self) -> None:
        duration("seconds", self.seconds)
        _network_target(self.target, self.count)
        if self.peers not in ("rest", "head"):
            raise InvalidFaultSpec(f"unknown `peers` {self.peers!r}; use 'rest' (every other node) or "
                                   "'head' (the GCS's node only)", field="peers")
        if self.direction not in ("both", "outgoing", "incoming"):
            raise InvalidFaultSpec(f"unknown `direction` {self.direction!r}; use 'both', 'outgoing' or "
                                   "'incoming'", field="direction")


@dataclass(frozen=True, slots=True)
class PacketLoss(Fault):
    """Drop ``percent`` of the packets ``count`` worker nodes send to and receive from the other
    nodes (nftables' random numbers), for ``seconds``. Confirmed by datagrams the rule dropped."""

    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind] = FaultKind.PACKET_LOSS
    #: Carried out by this driver, as root, in the nodes' network namespaces.
    USES_AGENT: ClassVar[bool] = False

    percent: float
    seconds: float
    target: NodeTarget = field(default_factory=NodeTarget)
    count: int = 1

    def __post_init__(self) -> None:
        duration("seconds", self.seconds)
        _network_target(self.target, self.count)
        number_in("percent", self.percent, 0.01, 100)


@dataclass(frozen=True, slots=True)
class Bandwidth(Fault):
    """Cap the links of ``count`` worker nodes at ``mbit`` megabits per second each way (a
    token bucket, ``tc tbf``) for ``seconds``. Confirmed by a transfer the bucket held back."""

    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind] = FaultKind.BANDWIDTH
    #: Carried out by this driver, as root, in the nodes' network namespaces.
    USES_AGENT: ClassVar[bool] = False

    mbit: float
    seconds: float
    target: NodeTarget = field(default_factory=NodeTarget)
    count: int = 1

    def __post_init__(self) -> None:
        duration("seconds", self.seconds)
        _network_target(self.target, self.count)
        number_in("mbit", self.mbit, 0.1, 10_000, what="megabits per second")


@dataclass(frozen=True, slots=True)
class FlappingLink(Fault):
    """Cut a worker node from every other node and restore it, again and again: down for half
    of each ``period``, up for the other half, for ``seconds``. The first cut is confirmed as a
    :class:`Partition`'s; the link is up again when it heals."""

    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind] = FaultKind.FLAPPING_LINK
    #: Carried out by this driver, as root, in the nodes' network namespaces.
    USES_AGENT: ClassVar[bool] = False

    period: float
    seconds: float
    target: NodeTarget = field(default_factory=NodeTarget)

    def __post_init__(self) -> None:
        duration("seconds", self.seconds)
        _network_target(self.target, 1)
        number_in("period", self.period, 0.2, self.seconds, what="seconds", after="(at most the fault's `seconds`)")


#: Seconds a cut's probe may take to meet the cut's rule (it meets it within a millisecond).
CUT_CONFIRM = 2.0
#: Seconds a healed link may take to carry a probe connection again.
HEAL_CONFIRM = 10.0
#: A loss is confirmed when this many probe datagrams would all pass by chance less often.
_LOSS_MISS = 1e-9


# -- which nodes ----------------------------------------------------------------------------------


def _alive() -> set[str]:
    return {row.node_id for row in live_nodes()}


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
    return RayProcess(0, node_id, f"node {short(node_id)} ({node.namespace}, {node.address})")


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
    for chain, match, wanted in (("output", "daddr", ("both", "outgoing")), ("input", "saddr", ("both", "incoming"))):
        if direction in wanted:
            hook = f"type filter hook {chain} priority 0; policy accept;" if hooked else ""
            chains.append(f"chain {chain} {{\n{hook}\nip {match} {where} {chance}counter drop\n}}")
    return f"table inet {name} {{\n" + "\n".join(chains) + "\n}\n"


def add_table(node: NetNode, text: str) -> None:
    run(["nft", "-f", "-"], namespace=node.namespace, stdin=text)


def delete_table(node: NetNode, name: str, *, check: bool = False) -> None:
    """Delete the table ``name`` from ``node``'s namespace (``check``: its deletion must succeed)."""
    run(["nft", "delete", "table", "inet", name], namespace=node.namespace, check=check)


def table_present(node: NetNode, name: str) -> bool:
    """Whether the table ``name`` is in ``node``'s namespace (read back: a heal must see it gone,
    since a probe connection can get through a loss rule still in place)."""
    return read_table(node, name) is not None


@dataclass(frozen=True, slots=True)
class DropRule:
    """One drop rule of a fault's nftables table, read back: its chain (``output``: what the
    node sends; ``input``: what it receives), whether a hook consults that chain, the addresses
    it matches, the share it drops (percent; None: all), and the packets it has dropped."""

    chain: str
    hooked: bool
    addresses: frozenset[str]
    percent: float | None
    packets: int


#: The chains each direction of a cut or a loss is written to (see :func:`drop_table`).
CHAINS: dict[Direction, tuple[str, ...]] = {"outgoing": ("output",), "incoming": ("input",),
                                             "both": ("output", "input")}


def parse_table(text: str, *, prefix: str = "") -> tuple[DropRule, ...]:
    """The drop rules of ``nft -j list table`` (or ``list ruleset``) output; none for empty output.
    ``prefix``: only the tables whose names start with it (a ruleset may hold others' rules)."""
    items = json.loads(text).get("nftables", []) if text.strip() else []
    ours = [item for item in items if _table_of(item).startswith(prefix)]
    hooked = {(c["chain"].get("table"), c["chain"]["name"]): "hook" in c["chain"] for c in ours if "chain" in c}
    return tuple(_drop_rule(item["rule"], hooked) for item in ours if "rule" in item)


def _table_of(item: dict[str, dict[str, Any]]) -> str:
    """The table an item of nft's JSON (``{"chain": {...}}``, ``{"rule": {...}}``) belongs to."""
    body = next(iter(item.values()), {})
    return str(body.get("table", "")) if isinstance(body, dict) else ""


def _drop_rule(rule: dict[str, Any], hooked: dict[tuple[str | None, str], bool]) -> DropRule:
    addresses: frozenset[str] = frozenset()
    percent, packets = None, 0
    for expr in rule.get("expr", []):
        match = expr.get("match", {})
        left, right = match.get("left", {}), match.get("right")
        if "payload" in left:  # one address reads back as a string, several as a set
            addresses = frozenset(right["set"] if isinstance(right, dict) else [right])
        elif "numgen" in left:
            percent = int(right) / 100
        elif "counter" in expr:
            packets = int(expr["counter"]["packets"])
    chain = str(rule["chain"])
    return DropRule(chain=chain, hooked=hooked.get((rule.get("table"), chain), False), addresses=addresses,
                    percent=percent, packets=packets)


def read_table(node: NetNode, name: str) -> tuple[DropRule, ...] | None:
    """The table ``name`` of ``node``'s namespace read back (None: it is not there)."""
    text = run(["nft", "-j", "list", "table", "inet", name], namespace=node.namespace, check=False)
    return parse_table(text) if text.strip() else None


def rules_problem(rules: Sequence[DropRule] | None, direction: Direction, addresses: Sequence[str],
                  percent: float | None) -> str | None:
    """What the table read back lacks of a fault that drops ``percent`` (None: all) of the
    traffic ``direction`` to and from ``addresses``: None when it holds exactly that."""
    if rules is None:
        return "its table is not there"
    wanted = CHAINS[direction]
    for chain in wanted:
        found = [r for r in rules if r.chain == chain and r.hooked]
        if len(found) != 1:
            return f"{len(found)} {chain} rules a hook consults, not one"
        if found[0].addresses != frozenset(addresses) or found[0].percent != percent:
            return (f"its {chain} rule drops {found[0].percent or 100:g} % of {sorted(found[0].addresses)}, "
                    f"not {percent or 100:g} % of {sorted(addresses)}")
    extra = sorted({r.chain for r in rules} - set(wanted))
    return f"it has {', '.join(extra)} rules it was not asked for" if extra else None


def dropped(node: NetNode, name: str, chain: str | None = None) -> int:
    """Packets the table ``name`` dropped in ``node``'s namespace (in ``chain``, or all)."""
    return sum(r.packets for r in read_table(node, name) or () if chain is None or r.chain == chain)


def confirm_rules(node: NetNode, table: str, direction: Direction, addresses: Sequence[str],
                  percent: float | None) -> None:
    """Read the table back: exactly the rules the fault asks for, in the chains a hook consults.

    Raises:
        FaultIneffective: it holds something else (named).
    """
    problem = rules_problem(read_table(node, table), direction, addresses, percent)
    if problem is not None:
        raise FaultIneffective(f"the nftables table {table} of {node.label}, read back: {problem}")


# -- probes ---------------------------------------------------------------------------------------


def _socket(node: NetNode, kind: int = socket.SOCK_STREAM) -> socket.socket:
    assert node.namespace is not None
    return in_namespace(node.namespace, lambda: socket.socket(socket.AF_INET, kind))


def _connected(sock: socket.socket) -> bool:
    """Whether a non-blocking connect has completed (False while it is pending)."""
    _, writable, _ = select.select([], [sock], [], 0)
    return bool(writable) and sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0


def _host_socket(kind: int = socket.SOCK_STREAM) -> socket.socket:
    """A socket of the head's (the host's) namespace: probes from the head to a node."""
    return socket.socket(socket.AF_INET, kind)


def confirm_cut(lab: NetLab, node: NetNode, table: str, direction: Direction) -> dict[str, float]:
    """Each way the cut is asked to drop, confirmed by a probe connection its own chain's rule
    drops: from ``node`` to the head (``output``), from the head to ``node`` (``input``). Returns
    the seconds until each chain's counter moved, by chain.

    Raises:
        FaultIneffective: a probe connection completed, or its chain's rule met no packet in
            ``CUT_CONFIRM``.
    """
    took = {}
    for chain in CHAINS[direction]:
        outgoing = chain == "output"
        sock = _socket(node) if outgoing else _host_socket()
        to = (lab.head.address, lab.probe_ports[0]) if outgoing else (node.address, lab.probe_ports[node.index])
        way = f"from {node.label} to the head" if outgoing else f"from the head to {node.label}"
        with sock:
            took[chain] = _dropped_probe(sock, to, way, node, table, chain)
    return took


def _dropped_probe(sock: socket.socket, to: tuple[str, int], way: str, node: NetNode, table: str,
                   chain: str) -> float:
    """Seconds until a connection ``sock`` starts to ``to`` moved ``chain``'s counter of ``table``."""
    start, before = time.monotonic(), dropped(node, table, chain)
    sock.setblocking(False)
    code = sock.connect_ex(to)
    if code not in (0, errno.EINPROGRESS):
        raise FaultIneffective(f"the probe {way} failed at once ({errno.errorcode.get(code)}), not by the "
                               "cut: the link is broken otherwise")

    def met() -> bool:
        if _connected(sock):
            raise FaultIneffective(f"a connection {way} completed through the cut {table}: the cut did not take")
        return dropped(node, table, chain) > before

    try:
        wait_until(met, timeout=CUT_CONFIRM, interval=0.002, what=f"the cut {way}")
    except HangError as exc:
        if isinstance(exc.__cause__, FaultIneffective):
            raise exc.__cause__ from None
        raise FaultIneffective(f"no packet {way} met the cut's {chain} rule of {table} in {CUT_CONFIRM:g} s "
                               "(the probe neither completed nor was dropped by it)") from None
    return time.monotonic() - start


def _ways(took: dict[str, float]) -> str:
    """``{"output": 0.001, "input": 0.002}`` for people: each way a probe was dropped, and when."""
    names = {"output": "a probe out", "input": "a probe in"}
    return ", ".join(f"{names[c]} within {t * 1000:.1f} ms" for c, t in took.items())


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
def _tables(ctx: FaultContext, fault: Partition | PacketLoss | FlappingLink, at: float | None,
            group: Sequence[NetNode], table: str, text: str) -> Iterator[list[NetNode]]:
    """Add ``text`` (table ``table``) in each node of ``group``; in ``finally`` delete it from
    each and confirm each link carries a connection again, journaling each heal. Every node is
    healed, whatever another's heal raised; each failure is named after."""
    lab = lab_of(ctx.address)
    added: list[NetNode] = []

    def heal_one(node: NetNode) -> None:
        delete_table(node, table)
        if table_present(node, table):
            raise FaultIneffective(f"the nftables table {table} of {node.label} is still there after its "
                                   f"deletion: delete it with `ip netns exec {node.namespace} nft delete table "
                                   f"inet {table}`")
        took = confirm_open(lab, node)
        ctx.record("heal", fault, at, _process(lab, node), f"nftables table {table} deleted (read back: "
                   f"gone); a connection to the head completed {took * 1000:.0f} ms later")

    with ctx.on_heal(lambda: heal_each(added, heal_one, what=f"the heal of {type(fault).__name__}")):
        for node in group:
            add_table(node, text)
            added.append(node)
        yield added


def heal_each(nodes: Sequence[NetNode], heal: Callable[[NetNode], None], *, what: str) -> None:
    """``heal`` every one of ``nodes``, each whatever another raised.

    Raises:
        FaultIneffective: a node's heal failed; every failure is named, one per line.
    """
    failures = []
    for node in nodes:
        try:
            heal(node)
        except Exception as exc:  # noqa: BLE001 - heal the rest first, then name each failure
            failures.append(f"{node.label}: {type(exc).__name__}: {exc}")
    if failures:
        raise FaultIneffective(f"{what} failed on {len(failures)} of {len(nodes)} nodes:\n" + "\n".join(failures))


@contextmanager
def _partition(ctx: FaultContext, fault: Partition, at: float | None, rng: random.Random) -> Iterator[Injection]:
    lab = lab_of(ctx.address)
    group = pick(lab, fault.target, fault.count, rng)
    table = lab.table_name()
    cut_from = peer_addresses(lab, group, fault.peers)
    with _tables(ctx, fault, at, group, table, drop_table(table, cut_from, fault.direction)):
        for node in group:
            took = confirm_cut(lab, node, table, fault.direction)
            confirm_rules(node, table, fault.direction, cut_from, None)
            ctx.record("inject", fault, at, _process(lab, node), f"cut from {', '.join(cut_from)} "
                       f"({_DIRECTION[fault.direction]}; rules read back): dropped by the cut's rules: "
                       f"{_ways(took)}")
        yield Injection(fault, tuple(_process(lab, n) for n in group))


#: What each direction is, in a record.
_DIRECTION: dict[Direction, str] = {"both": "each way", "outgoing": "what it sends only",
                                    "incoming": "what it receives only"}


def loss_probes(percent: float) -> int:
    """Datagrams to send so that none is dropped with probability below ``_LOSS_MISS``."""
    p = percent / 100
    return 1 if p >= 1 else min(20_000, math.ceil(math.log(_LOSS_MISS) / math.log(1 - p)))


def confirm_loss(lab: NetLab, node: NetNode, table: str, percent: float,
                 chain: str = "output") -> tuple[int, int]:
    """Send datagrams from ``node`` to the head (``output``) or from the head to ``node``
    (``input``); returns (dropped by that chain's rule, sent).

    Raises:
        FaultIneffective: the rule dropped none of them.
    """
    sent, before = loss_probes(percent), dropped(node, table, chain)
    outgoing = chain == "output"
    to = (lab.head.address, lab.probe_ports[0]) if outgoing else (node.address, lab.probe_ports[node.index])
    with _socket(node, socket.SOCK_DGRAM) if outgoing else _host_socket(socket.SOCK_DGRAM) as sock:
        sock.setblocking(False)
        for _ in range(sent):
            try:
                sock.sendto(b"raychaos", to)
            except OSError:  # an ICMP error of an earlier datagram, or a full buffer: reported here
                continue
    lost = dropped(node, table, chain) - before
    if lost <= 0:
        way = f"from {node.label} to the head" if outgoing else f"from the head to {node.label}"
        raise FaultIneffective(f"none of {sent} datagrams {way} met the loss rule of {table} ({chain}): at "
                               f"{percent:g} % that happens with probability below {_LOSS_MISS:g}")
    return lost, sent


@contextmanager
def _packet_loss(ctx: FaultContext, fault: PacketLoss, at: float | None, rng: random.Random) -> Iterator[Injection]:
    lab = lab_of(ctx.address)
    group = pick(lab, fault.target, fault.count, rng)
    table = lab.table_name()
    others = peer_addresses(lab, group, "rest")
    text = drop_table(table, others, "both", percent=fault.percent)
    with _tables(ctx, fault, at, group, table, text):
        for node in group:
            out, into = (confirm_loss(lab, node, table, fault.percent, chain) for chain in CHAINS["both"])
            confirm_rules(node, table, "both", others, fault.percent)
            ctx.record("inject", fault, at, _process(lab, node), f"{fault.percent:g} % of packets to and "
                       f"from the other nodes dropped at random (rules read back); probe datagrams dropped: "
                       f"{out[0]} of {out[1]} sent out, {into[0]} of {into[1]} sent in")
        yield Injection(fault, tuple(_process(lab, n) for n in group))


def _links(node: NetNode) -> list[tuple[str | None, str]]:
    """(namespace, link) of each side of a node's veth: the node's uploads, then its downloads."""
    assert node.link is not None and node.host_link is not None
    return [(node.namespace, node.link), (None, node.host_link)]


def _tc(namespace: str | None, *args: str, check: bool = True) -> str:
    """``tc`` on a link of the host (``namespace`` None) or of a node's namespace."""
    return run(["tc", *args] if namespace is None else ["tc", "-n", namespace, *args], check=check)


def _qdisc(namespace: str | None, link: str) -> dict[str, Any]:
    return parse_qdisc(_tc(namespace, "-s", "-j", "qdisc", "show", "dev", link))


def parse_qdisc(text: str) -> dict[str, Any]:
    """The root queue of ``tc -j qdisc show`` output (empty: none)."""
    rows = json.loads(text) if text.strip() else []
    return next((r for r in rows if r.get("root")), {})


def bucket_mbit(queue: dict[str, Any]) -> float:
    """The rate of a root queue that is a token bucket, in Mbit/s (0: it is not one)."""
    return int(queue.get("options", {}).get("rate", 0)) * 8 / 1e6 if queue.get("kind") == "tbf" else 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkState:
    """A worker node's link read back: the largest share a fault table's hooked rule drops at
    random (percent; 0: none), the rate of the token bucket on what the node sends and on what
    it receives (Mbit/s; 0: none), and the TCP segments its namespace retransmitted so far.
    The defaults are a link with no fault on it."""

    loss: float = 0.0
    sends_mbit: float = 0.0
    receives_mbit: float = 0.0
    retransmitted: int = 0


_SEPARATOR = "--raychaos--"


def read_link(node: NetNode) -> LinkState:
    """``node``'s link read back: its nftables ruleset, the queues on both sides of its veth,
    the kernel's TCP counters.

    Raises:
        NetCommandFailed: a read failed; a link that cannot be read is not read as unfaulted.
    """
    (namespace, link), (_, host_link) = _links(node)
    script = f"set -e; nft -j list ruleset; echo {_SEPARATOR}; tc -j qdisc show dev {shlex.quote(link)}; " \
             f"echo {_SEPARATOR}; cat /proc/net/snmp"
    ruleset, sends, snmp = [*run(["sh", "-c", script], namespace=namespace).split(_SEPARATOR), "", ""][:3]
    receives = _tc(None, "-j", "qdisc", "show", "dev", host_link)
    return parse_link(ruleset=ruleset, sends=sends, receives=receives, snmp=snmp)


def parse_link(*, ruleset: str, sends: str, receives: str, snmp: str) -> LinkState:
    """A :class:`LinkState` from ``nft -j list ruleset``, ``tc -j qdisc show`` of each side of
    the link, and ``/proc/net/snmp`` (each may be empty: nothing there)."""
    shares = [rule.percent for rule in parse_table(ruleset, prefix=PREFIX) if rule.hooked and rule.percent is not None]
    return LinkState(loss=max(shares, default=0.0), sends_mbit=bucket_mbit(parse_qdisc(sends)),
                     receives_mbit=bucket_mbit(parse_qdisc(receives)), retransmitted=_retransmitted(snmp))


def _retransmitted(snmp: str) -> int:
    """``Tcp: RetransSegs`` of ``/proc/net/snmp`` (its header line, then its values line)."""
    rows = [line.split()[1:] for line in snmp.splitlines() if line.startswith("Tcp:")]
    if len(rows) < 2 or "RetransSegs" not in rows[0]:
        return 0
    return int(rows[1][rows[0].index("RetransSegs")])


def burst_bytes(mbit: float) -> int:
    """The token bucket's depth: 20 ms at the rate, and at least 16 KiB (one TSO burst fits)."""
    return max(16 * 1024, int(mbit * 1e6 / 8 / 50))


def confirm_capped(lab: NetLab, node: NetNode, mbit: float, *, upload: bool) -> int:
    """Read back the token bucket of one way of ``node``'s link (``upload``: the namespace's
    side, what the node sends; else the host's side, what it receives) and push more than it
    holds that way; return how often it held packets back (its ``overlimits`` rise).

    Raises:
        FaultIneffective: that side's queue is not a token bucket at ``mbit``, or held nothing back.
    """
    namespace, link = _links(node)[0 if upload else 1]
    way = "sends" if upload else "receives"
    before = _bucket_at(node, namespace, link, mbit, way)
    to = (lab.head.address, lab.probe_ports[0]) if upload else (node.address, lab.probe_ports[node.index])
    payload = b"\0" * (8 * burst_bytes(mbit))
    with _socket(node) if upload else _host_socket() as sock:
        sock.settimeout(2.0)
        sock.connect(to)
        sock.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            sock.send(payload)

        def held() -> int:
            return max(0, int(str(_qdisc(namespace, link).get("overlimits", 0))) - before)

        try:
            return wait_until(held, timeout=CUT_CONFIRM, interval=0.005, what="the token bucket to hold")
        except HangError:
            raise FaultIneffective(f"the token bucket of {node.label} held nothing back of {len(payload)} bytes it "
                                   f"{way} at {mbit:g} Mbit/s") from None


def _bucket_at(node: NetNode, namespace: str | None, link: str, mbit: float, way: str) -> int:
    """The ``overlimits`` so far of ``link``'s token bucket, read back at ``mbit``.

    Raises:
        FaultIneffective: the link's queue is not a token bucket at that rate.
    """
    queue = _qdisc(namespace, link)
    rate = bucket_mbit(queue)
    if abs(rate - mbit) > 0.01 * mbit:
        raise FaultIneffective(f"the link of {node.label} has no token bucket at {mbit:g} Mbit/s for what it {way} "
                               f"after `tc qdisc replace` (read back: {queue.get('kind', 'none')}, {rate:g} Mbit/s)")
    return int(str(queue.get("overlimits", 0)))


@contextmanager
def _bandwidth(ctx: FaultContext, fault: Bandwidth, at: float | None, rng: random.Random) -> Iterator[Injection]:
    lab = lab_of(ctx.address)
    group = pick(lab, fault.target, fault.count, rng)
    capped: list[NetNode] = []

    def heal_one(node: NetNode) -> None:
        for namespace, link in _links(node):
            _tc(namespace, "qdisc", "del", "dev", link, "root", check=False)
            if _qdisc(namespace, link).get("kind") == "tbf":
                raise FaultIneffective(f"the token bucket on {link} of {node.label} outlived its deletion")
        took = confirm_open(lab, node)
        ctx.record("heal", fault, at, _process(lab, node), f"token buckets deleted on both sides of the link "
                   f"(read back); a connection to the head completed {took * 1000:.0f} ms later")

    tbf = ["tbf", "rate", f"{fault.mbit}mbit", "burst", str(burst_bytes(fault.mbit)), "latency", "200ms"]
    with ctx.on_heal(lambda: heal_each(capped, heal_one, what="the heal of Bandwidth")):
        for node in group:
            capped.append(node)
            for namespace, link in _links(node):
                _tc(namespace, "qdisc", "replace", "dev", link, "root", *tbf)
        for node in group:
            up, down = (confirm_capped(lab, node, fault.mbit, upload=upload) for upload in (True, False))
            ctx.record("inject", fault, at, _process(lab, node), f"links capped at {fault.mbit:g} Mbit/s each "
                       f"way (tc tbf on both sides, read back); the buckets held probe transfers back {up} "
                       f"times sending, {down} times receiving")
        yield Injection(fault, tuple(_process(lab, n) for n in group))


@dataclass
class Flaps:
    """A flapping link's halves so far, each confirmed as it came: ``ups`` (its table deleted,
    read back gone, and a connection to the head completed), ``downs`` (its rules added and a
    probe dropped each way); ``errors``: what ended the flapping early."""

    ups: int = 0
    downs: int = 0
    errors: list[BaseException] = field(default_factory=list)

    @property
    def flaps(self) -> int:
        return self.ups + self.downs


@contextmanager
def _flapping_link(ctx: FaultContext, fault: FlappingLink, at: float | None,
                   rng: random.Random) -> Iterator[Injection]:
    lab = lab_of(ctx.address)
    (node,) = pick(lab, fault.target, 1, rng)
    table = lab.table_name()
    others = peer_addresses(lab, [node], "rest")
    text = drop_table(table, others, "both")
    stop, flaps = threading.Event(), Flaps()
    with _tables(ctx, fault, at, [node], table, text):
        took = confirm_cut(lab, node, table, "both")
        confirm_rules(node, table, "both", others, None)
        ctx.record("inject", fault, at, _process(lab, node), f"link down (cut from every other node each way, "
                   f"rules read back): {_ways(took)}; each half of its flapping every {fault.period / 2:g} s "
                   "is confirmed as it comes")
        flapper = threading.Thread(target=_flap, args=(lab, node, table, text, fault.period / 2, stop, flaps),
                                   name="raychaos-flapping-link", daemon=True)
        began = time.monotonic()
        flapper.start()
        try:
            yield Injection(fault, (_process(lab, node),))
        finally:
            stop.set()
            flapper.join(timeout=fault.period + 2 * HEAL_CONFIRM)
            delete_table(node, table)
            add_table(node, text)  # the heal deletes it once, whichever half the flapper ended in
        _flapped(fault, flaps, time.monotonic() - began)


def _flapped(fault: FlappingLink, flaps: Flaps, held: float) -> None:
    """Fail the fault whose link did not flap as recorded: a half not confirmed (the flapper
    failed), or fewer halves than its period asks (it fell behind)."""
    expected = int(held // (fault.period / 2)) - 1
    if flaps.errors or flaps.flaps < expected:
        why = (f"its flapper failed after {flaps.ups} up and {flaps.downs} down halves confirmed: "
               f"{flaps.errors[0]!r}" if flaps.errors else f"it flapped {flaps.flaps} times in {held:.1f} s")
        raise FaultIneffective(f"the link did not flap every {fault.period / 2:g} s: {why} "
                               f"(at least {expected} expected)")


def _flap(lab: NetLab, node: NetNode, table: str, text: str, half: float, stop: threading.Event,
          flaps: Flaps) -> None:
    """Bring the link up and down every ``half`` seconds until ``stop``, confirming each half:
    up, the table read back gone and a connection through; down, a probe dropped each way. A
    half that is not confirmed ends it, kept for the heal (which fails the fault with it)."""
    down = True
    try:
        while not stop.wait(half):  # the flapping period: the fault's own rhythm, not a synchronisation
            if down:
                delete_table(node, table, check=True)
                if table_present(node, table):
                    raise FaultIneffective(f"the table {table} of {node.label} is still there after its deletion")
                confirm_open(lab, node)
                flaps.ups += 1
            else:
                add_table(node, text)
                confirm_cut(lab, node, table, "both")
                flaps.downs += 1
            down = not down
    except Exception as exc:  # noqa: BLE001 - kept for the heal, which fails the fault with it
        flaps.errors.append(exc)


_ON_LINKS = frozenset({Need.NETWORK})
register(
    FaultSpec(record=Partition, inject=_partition, needs=_ON_LINKS, colour="#d81159",
              example={"seconds": 8, "target": {"kind": "node"}, "count": 1, "peers": "rest", "direction": "both"}),
    FaultSpec(record=PacketLoss, inject=_packet_loss, needs=_ON_LINKS, colour="#ff8c42",
              example={"percent": 10, "seconds": 10, "count": 2}),
    FaultSpec(record=Bandwidth, inject=_bandwidth, needs=_ON_LINKS, colour="#3bb273",
              example={"mbit": 20, "seconds": 10}),
    FaultSpec(record=FlappingLink, inject=_flapping_link, needs=_ON_LINKS, colour="#7768ae",
              example={"period": 2, "seconds": 8}),
)
