"""A network lab on this host: a bridge, and a network namespace per worker node with its own
veth link and address, so that Ray's nodes talk over links that faults can cut, thin or slow.

Everything it makes is named with one prefix, :data:`PREFIX` (namespaces, links, the bridge,
nftables tables), so the leak check finds whatever a crash left behind. It needs root and the
``nft``, ``ip`` and ``tc`` commands (Debian's ``nftables`` and ``iproute2``); without them it
refuses with :class:`NetworkUnavailable` before it changes anything.

The head stays in the host's namespace, on the bridge's address: this driver, which runs on
the head, reaches every node, and a cut always lands between a worker's namespace and the rest.
"""

from __future__ import annotations

import ctypes
import json
import os
import secrets
import selectors
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from chaos._errors import ChaosError, InvalidConfig, InvalidFaultSpec

__all__ = ["PREFIX", "NetLab", "NetNode", "NetworkUnavailable", "lab_of", "network_lab",
           "network_leftovers", "network_missing", "require_network"]

T = TypeVar("T")

#: Every kernel object the lab makes starts with this: the leak check looks for it.
PREFIX = "rc-"
#: What the lab needs, as the refusal says it.
NEEDS = ("root and the nft, ip and tc commands (Debian packages nftables and iproute2; "
         "`make net` installs them)")
_TOOLS = ("nft", "ip", "tc")
_CLONE_NEWNET = 0x40000000
#: Seconds one ``ip``/``nft``/``tc`` command may take (they answer in milliseconds).
COMMAND_TIMEOUT = 15.0
_LABS: dict[str, NetLab] = {}  # cluster address -> its lab, for the network faults


class NetworkUnavailable(InvalidConfig):
    """A network lab was asked for where it cannot be made: not root, or ``nft``/``ip``/``tc``
    missing. Nothing was changed; the message names what is missing."""


class NetCommandFailed(ChaosError, RuntimeError):
    """An ``ip``, ``nft`` or ``tc`` command of the lab failed; the message has its output."""


def network_missing() -> list[str]:
    """What this host lacks for a network lab: ``"root"`` and each missing command."""
    missing = [] if os.geteuid() == 0 else ["root"]
    return missing + [tool for tool in _TOOLS if shutil.which(tool) is None]


def require_network(where: str = "network=True") -> None:
    """Refuse, in one line, when the lab cannot be made here.

    Raises:
        NetworkUnavailable: not root, or a command missing (each one named).
    """
    missing = network_missing()
    if missing:
        raise NetworkUnavailable(f"{where} needs {NEEDS}; missing here: {', '.join(missing)}")


# -- namespaces and commands --------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)


def _enter(namespace: str) -> None:
    """Move the calling thread (or a forked child before exec) into ``namespace``."""
    fd = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
    try:
        if _libc.setns(fd, _CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns into {namespace}: {os.strerror(err)}")
    finally:
        os.close(fd)


def in_namespace(namespace: str, make: Callable[[], T]) -> T:
    """Call ``make`` in a fresh thread that lives in ``namespace`` and return its result.

    A network namespace belongs to a thread, and a socket to the namespace it was made in:
    a socket made here keeps talking from ``namespace`` wherever it is used after. The thread
    ends with the call, so no thread of this process is left in another namespace."""
    box: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            _enter(namespace)
            box.append(make())
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=run, name=f"raychaos-netns-{namespace}")
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return box[0]


def run(args: Sequence[str], *, namespace: str | None = None, stdin: str | None = None,
        check: bool = True) -> str:
    """Run one lab command (in ``namespace`` when given, through ``ip netns exec``: half the
    cost of a ``preexec_fn`` setns here, which forks the whole driver) and return its output.

    Raises:
        NetCommandFailed: it exited non-zero (with ``check``) or outlived ``COMMAND_TIMEOUT``.
    """
    command = ["ip", "netns", "exec", namespace, *args] if namespace else list(args)
    try:
        done = subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=COMMAND_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise NetCommandFailed(f"`{' '.join(command)}` did not finish in {COMMAND_TIMEOUT:g} s") from None
    if check and done.returncode != 0:
        raise NetCommandFailed(f"`{' '.join(command)}` failed ({done.returncode}): "
                               f"{done.stderr.strip() or done.stdout.strip()}")
    return done.stdout


# -- the lab --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NetNode:
    """One node of the lab: its index (0 the head), namespace (None for the head, which stays
    in the host's), address, and links (the bridge port on the host, the interface inside)."""

    index: int
    address: str
    namespace: str | None = None
    host_link: str | None = None
    link: str | None = None

    @property
    def label(self) -> str:
        return "the head" if self.namespace is None else f"{self.namespace} ({self.address})"


@dataclass
class NetLab:
    """A bridge and the namespaces of the worker nodes on it, with a probe listener per node
    (a TCP port the kernel answers on, used to confirm that a cut took and that it healed).

    ``node_ids`` maps each Ray node id to its lab node once the cluster is up."""

    name: str
    bridge: str
    head: NetNode
    workers: tuple[NetNode, ...]
    node_ids: dict[str, NetNode] = field(default_factory=dict)
    probe_ports: dict[int, int] = field(default_factory=dict)
    _listeners: list[socket.socket] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _next_table: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    #: How each worker node was started (its ``ray start`` command and environment), so that
    #: a node Ray declared dead can start again as a new node (``rejoin``).
    started_with: dict[int, tuple[list[str], dict[str, str]]] = field(default_factory=dict)

    @property
    def nodes(self) -> tuple[NetNode, ...]:
        return (self.head, *self.workers)

    def node_of(self, node_id: str) -> NetNode:
        return self.node_ids[node_id]

    def id_of(self, node: NetNode) -> str:
        return next((nid for nid, n in self.node_ids.items() if n == node), "")

    def table_name(self) -> str:
        """A fresh nftables table name for one fault (each fault has its own, healed alone)."""
        with self._lock:
            self._next_table += 1
            return f"{PREFIX}{self.name}-f{self._next_table}"

    def namespace_pids(self, node: NetNode) -> list[int]:
        """The processes in ``node``'s namespace (all of them are that node's)."""
        if node.namespace is None:
            return []
        return [int(p) for p in run(["ip", "netns", "pids", node.namespace], check=False).split()]


def _plan(workers: int) -> NetLab:
    """Names and addresses for a new lab: a random id and a /24 that no host route uses."""
    used = run(["ip", "-4", "route", "show"])
    for _ in range(64):
        lab_id, octet = secrets.token_hex(2), 200 + secrets.randbelow(50)
        if f"10.{octet}." not in used:
            break
    else:
        raise NetCommandFailed("no free 10.200-249.x /24 for the lab's bridge; the host's routes use all")
    name, base = f"{lab_id}", f"10.{octet}.{secrets.randbelow(250)}"
    head = NetNode(0, f"{base}.1")
    nodes = tuple(NetNode(i, f"{base}.{10 + i}", f"{PREFIX}{name}-n{i}", f"{PREFIX}{name}-n{i}h",
                          f"{PREFIX}{name}-n{i}p") for i in range(1, workers + 1))
    return NetLab(name=name, bridge=f"{PREFIX}{name}-br", head=head, workers=nodes)


def _create(lab: NetLab) -> None:
    run(["ip", "link", "add", lab.bridge, "type", "bridge"])
    run(["ip", "addr", "add", f"{lab.head.address}/24", "dev", lab.bridge])
    run(["ip", "link", "set", lab.bridge, "up"])
    for node in lab.workers:
        assert node.namespace and node.host_link and node.link
        run(["ip", "netns", "add", node.namespace])
        run(["ip", "link", "add", node.host_link, "type", "veth", "peer", "name", node.link,
             "netns", node.namespace])
        run(["ip", "link", "set", node.host_link, "master", lab.bridge, "up"])
        run(["ip", "-n", node.namespace, "addr", "add", f"{node.address}/24", "dev", node.link])
        run(["ip", "-n", node.namespace, "link", "set", node.link, "up"])
        run(["ip", "-n", node.namespace, "link", "set", "lo", "up"])
        run(["ip", "-n", node.namespace, "route", "add", "default", "via", lab.head.address])


def _destroy(lab: NetLab) -> None:
    """Kill whatever runs in the namespaces, then delete links, namespaces and the bridge, each
    explicitly (a namespace's peer veth may outlive the namespace a moment). Every step runs
    even when one fails; the first failure is raised after."""
    errors: list[BaseException] = []
    for node in lab.workers:
        for step in (lambda n=node: _kill_namespace(lab, n),
                     lambda n=node: run(["ip", "link", "del", n.host_link], check=False),
                     lambda n=node: run(["ip", "netns", "del", n.namespace], check=False)):
            try:
                step()
            except Exception as exc:  # noqa: BLE001 - delete the rest first
                errors.append(exc)
    run(["ip", "link", "del", lab.bridge], check=False)
    if errors:
        raise errors[0]


def _kill_namespace(lab: NetLab, node: NetNode) -> None:
    """SIGCONT and SIGKILL every process in the node's namespace, and wait for them to go."""
    import psutil

    procs = []
    for pid in lab.namespace_pids(node):
        try:
            proc = psutil.Process(pid)
            proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGKILL)
            procs.append(proc)
        except psutil.NoSuchProcess:
            continue
    psutil.wait_procs(procs, timeout=10.0)


# -- probe listeners ------------------------------------------------------------------------------


def _listen(lab: NetLab) -> None:
    """One TCP listener per node, in its namespace, and a thread that accepts and drains them:
    a probe connection to a node succeeds exactly when the network lets it through."""
    for node in lab.nodes:
        def make(address: str = node.address) -> socket.socket:
            return socket.create_server((address, 0), backlog=64)
        sock = make() if node.namespace is None else in_namespace(node.namespace, make)
        lab.probe_ports[node.index] = sock.getsockname()[1]
        lab._listeners.append(sock)
    threading.Thread(target=_serve, args=(lab,), name=f"raychaos-netlab-{lab.name}", daemon=True).start()


def _serve(lab: NetLab) -> None:
    selector = selectors.DefaultSelector()
    for listener in lab._listeners:
        listener.setblocking(False)
        selector.register(listener, selectors.EVENT_READ, "listener")
    while not lab._stop.is_set():
        for key, _ in selector.select(timeout=0.2):  # the stop flag's poll interval
            if not isinstance(key.fileobj, socket.socket):
                continue
            sock = key.fileobj
            try:
                if key.data == "listener":
                    conn, _ = sock.accept()
                    conn.setblocking(False)
                    selector.register(conn, selectors.EVENT_READ, "conn")
                elif not sock.recv(1 << 16):
                    selector.unregister(sock)
                    sock.close()
            except OSError:
                selector.unregister(sock)
                sock.close()
    for key in list(selector.get_map().values()):
        key.fileobj.close()  # type: ignore[union-attr]
    selector.close()


# -- the lab's life -------------------------------------------------------------------------------


@contextmanager
def network_lab(workers: int) -> Iterator[NetLab]:
    """Make a bridge and ``workers`` namespaces on it, yield the lab, and delete it all (and
    kill whatever still runs in its namespaces) when the block ends, also on error or Ctrl-C.

    Raises:
        NetworkUnavailable: not root, or a command missing (nothing changed).
        InvalidConfig: ``workers`` is not a whole number in [1, 16].
    """
    require_network()
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= 16:
        raise InvalidConfig(f"`workers` must be a whole number in [1, 16], got {workers!r}")
    lab = _plan(workers)
    try:
        _create(lab)
        _listen(lab)
        yield lab
    finally:
        lab._stop.set()
        _destroy(lab)


@contextmanager
def registered(address: str, lab: NetLab) -> Iterator[None]:
    """Make ``lab`` the network of the cluster at ``address`` while the block runs."""
    _LABS[address] = lab
    try:
        yield
    finally:
        _LABS.pop(address, None)


def lab_of(address: str) -> NetLab:
    """The network lab of the cluster at ``address``.

    Raises:
        InvalidFaultSpec: that cluster's nodes are not in a lab (no network to cut).
    """
    if address not in _LABS:
        raise InvalidFaultSpec(f"the cluster at {address} has no network of its own to fault: network "
                               "faults need a cluster from chaos.local_cluster(nodes>=2, network=True) "
                               "(`network = true` in a scenario file)")
    return _LABS[address]


# -- what is left behind --------------------------------------------------------------------------


def network_leftovers() -> list[str]:
    """Every namespace, link, bridge and (host) nftables table named with :data:`PREFIX`, one
    line each ("namespace rc-…"); empty where the commands are missing (nothing can be made).
    A listing command that fails is a line too: what cannot be listed is not known clean."""
    found: list[str] = []
    if shutil.which("ip"):
        found += [f"namespace {n.split()[0]}" for n in _listing(found, ["ip", "netns", "list"]).splitlines()
                  if n.startswith(PREFIX)]
        bridges = {link["ifname"] for link in _json(_listing(found, ["ip", "-j", "link", "show", "type", "bridge"]))}
        for link in _json(_listing(found, ["ip", "-j", "link", "show"])):
            if str(link.get("ifname", "")).startswith(PREFIX):
                found.append(f"{'bridge' if link['ifname'] in bridges else 'link'} {link['ifname']}")
    if shutil.which("nft") and os.geteuid() == 0:
        for item in _json(_listing(found, ["nft", "-j", "list", "tables"]), key="nftables"):
            table = item.get("table")
            if isinstance(table, dict) and str(table.get("name", "")).startswith(PREFIX):
                found.append(f"nftables table {table['family']} {table['name']}")
    return found


def _listing(found: list[str], args: list[str]) -> str:
    """The output of one listing command; on failure, a line in ``found`` saying so, and ''."""
    try:
        return run(args)
    except NetCommandFailed as exc:
        found.append(f"unlisted: {exc}")
        return ""


def _json(text: str, *, key: str | None = None) -> list[dict[str, object]]:
    try:
        data = json.loads(text) if text.strip() else []
    except json.JSONDecodeError:
        return []
    items = data.get(key, []) if key and isinstance(data, dict) else data
    return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []
