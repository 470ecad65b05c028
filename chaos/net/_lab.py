"""A network lab on this host: a bridge, and a network namespace per worker node with its own
veth link and address, so that Ray's nodes talk over links that faults can cut, thin or slow.

Everything it makes is named with one prefix, :data:`PREFIX` (namespaces, links, the bridge,
nftables tables), so the leak check finds whatever a crash left behind, and labelled with the
driver that made it: a driver killed before its teardown leaves the lab to its reaper
(:mod:`chaos._reclaim._reaper`), or to ``raychaos cleanup``. It needs root and the
``nft``, ``ip`` and ``tc`` commands (Debian's ``nftables`` and ``iproute2``); without them it
refuses with :class:`NetworkUnavailable` before it changes anything.

The head stays in the host's namespace, on the bridge's address: this driver, which runs on
the head, reaches every node, and a cut always lands between a worker's namespace and the rest.
"""

from __future__ import annotations

import ctypes
import enum
import functools
import json
import os
import secrets
import selectors
import shutil
import socket
import subprocess
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from chaos._errors import ChaosError, InvalidConfig, InvalidFaultSpec
from chaos._reclaim._owner import Owner, kill_all, me, undo_all
from chaos._reclaim._reaper import Claim, ClaimKind, claim, release

__all__ = ["PREFIX", "LabObject", "LabObjectKind", "NetLab", "NetNode", "NetworkUnavailable", "destroy_lab",
           "lab_objects", "lab_of", "network_lab", "network_leftovers", "network_missing", "require_network"]

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
    nodes = tuple(NetNode(i, f"{base}.{10 + i}", *_node_names(name, i)) for i in range(1, workers + 1))
    return NetLab(name=name, bridge=_bridge_name(name), head=head, workers=nodes)


def _node_names(name: str, index: int) -> tuple[str, str, str]:
    """Worker ``index``'s namespace, its bridge port on the host and its interface inside."""
    return f"{PREFIX}{name}-n{index}", f"{PREFIX}{name}-n{index}h", f"{PREFIX}{name}-n{index}p"


def _bridge_name(name: str) -> str:
    return f"{PREFIX}{name}-br"


#: A lab's bridge, host links and namespaces (on their loopback) carry this alias, with the
#: driver that made them: ``raychaos cleanup`` removes a lab whose driver has ended.
_LABEL = "raychaos owner="


def _owner_of(alias: object) -> Owner | None:
    """The driver named in a link's alias; None for a link raychaos did not label."""
    text = str(alias or "")
    return Owner.parse(text[len(_LABEL):]) if text.startswith(_LABEL) else None


def _create(lab: NetLab) -> None:
    label = f"{_LABEL}{me()}"
    run(["ip", "link", "add", lab.bridge, "type", "bridge"])
    run(["ip", "addr", "add", f"{lab.head.address}/24", "dev", lab.bridge])
    run(["ip", "link", "set", lab.bridge, "up", "alias", label])
    for node in lab.workers:
        assert node.namespace and node.host_link and node.link
        run(["ip", "netns", "add", node.namespace])
        run(["ip", "-n", node.namespace, "link", "set", "lo", "up", "alias", label])
        run(["ip", "link", "add", node.host_link, "type", "veth", "peer", "name", node.link,
             "netns", node.namespace])
        run(["ip", "link", "set", node.host_link, "master", lab.bridge, "up", "alias", label])
        run(["ip", "-n", node.namespace, "addr", "add", f"{node.address}/24", "dev", node.link])
        run(["ip", "-n", node.namespace, "link", "set", node.link, "up"])
        run(["ip", "-n", node.namespace, "route", "add", "default", "via", lab.head.address])


def _destroy(lab: NetLab) -> None:
    """Delete ``lab`` whole: see :func:`destroy_lab`."""
    destroy_lab(lab.name, len(lab.workers))


def destroy_lab(name: str, workers: int) -> None:
    """Kill whatever runs in lab ``name``'s namespaces, then delete its links, namespaces, the
    host's nftables tables of its faults and its bridge, each explicitly (a namespace's peer
    veth may outlive the namespace a moment). Every step runs even when some fail; what is
    gone already is not a failure, so the driver, its reaper and ``raychaos cleanup`` may
    each run it.

    Raises:
        TeardownFailed: some steps failed (each one is in it, naming what is left).
    """
    steps: list[Callable[[], object]] = []
    for index in range(1, workers + 1):
        namespace, host_link, _ = _node_names(name, index)
        steps += [functools.partial(kill_namespace, namespace), functools.partial(delete_link, host_link),
                  functools.partial(delete_namespace, namespace)]
    steps += [functools.partial(_delete_tables, f"{PREFIX}{name}-"), functools.partial(delete_link, _bridge_name(name))]
    undo_all(f"the teardown of the network lab {PREFIX}{name}", steps)


def _link_exists(link: str) -> bool:
    return os.path.exists(f"/sys/class/net/{link}")


def _namespace_exists(namespace: str) -> bool:
    return os.path.exists(f"/run/netns/{namespace}")


def delete_link(link: str) -> None:
    """Delete a link (a bridge, a veth) of the host's namespace; nothing if it is gone.

    Raises:
        NetCommandFailed: it is still there (``ip``'s output is in the message).
    """
    _delete(["ip", "link", "del", link], lambda: _link_exists(link))


def delete_namespace(namespace: str) -> None:
    """Delete a network namespace (whatever still runs in it keeps it alive, unnamed: kill that
    first); nothing if it is gone.

    Raises:
        NetCommandFailed: it is still there.
    """
    _delete(["ip", "netns", "del", namespace], lambda: _namespace_exists(namespace))


def delete_table(family: str, table: str) -> None:
    """Delete an nftables table of the host's namespace; nothing if it is gone.

    Raises:
        NetCommandFailed: it is still there.
    """
    _delete(["nft", "delete", "table", family, table], lambda: (family, table) in _host_tables(table))


def _delete_tables(prefix: str) -> None:
    """Delete every host nftables table whose name starts with ``prefix`` (a lab's faults' tables
    in the host's namespace: the head's, when a fault cut the head).

    Raises:
        TeardownFailed: some are still there, or the tables could not be listed.
    """
    undo_all(f"the nftables tables {prefix}*", [functools.partial(delete_table, family, table)
                                                for family, table in _host_tables(prefix)])


def _delete(args: list[str], exists: Callable[[], bool]) -> None:
    """Run a deletion when the thing exists; a failure that left it gone anyway (another
    teardown deleted it first) is none."""
    if not exists():
        return
    try:
        run(args)
    except NetCommandFailed:
        if exists():
            raise


def _host_tables(prefix: str) -> list[tuple[str, str]]:
    """The host namespace's nftables tables (family, name) whose names start with ``prefix``."""
    if not shutil.which("nft") or os.geteuid() != 0:
        return []
    return [(str(t["family"]), str(t["name"])) for item in _json(run(["nft", "-j", "list", "tables"]), key="nftables")
            if isinstance(t := item.get("table"), dict) and str(t.get("name", "")).startswith(prefix)]


def kill_node_processes(lab: NetLab, node: NetNode) -> None:
    """SIGCONT and SIGKILL every process in the node's namespace, and wait for them to go."""
    if node.namespace is not None:
        _kill_in(node.namespace)


def kill_namespace(namespace: str) -> None:
    """SIGCONT and SIGKILL every process in ``namespace``, and wait for them to go.

    Raises:
        NetCommandFailed: some outlived the signal by 10 s (each pid named).
    """
    left = _kill_in(namespace)
    if left:
        raise NetCommandFailed(f"processes {', '.join(map(str, left))} in the namespace {namespace} outlived "
                               f"SIGKILL by 10 s (stuck in the kernel?); kill them, then `ip netns del {namespace}`")


def _kill_in(namespace: str) -> list[int]:
    """SIGCONT and SIGKILL every process in ``namespace``; the pids still there 10 s later."""
    return kill_all(int(pid) for pid in run(["ip", "netns", "pids", namespace], check=False).split())


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
    # Claimed before it is made: a driver killed from here on leaves it to its reaper.
    claimed = Claim(ClaimKind.NETLAB, (lab.name, str(workers)))
    claim(claimed)
    try:
        _create(lab)
        _listen(lab)
        yield lab
    finally:
        lab._stop.set()
        _destroy(lab)
        release(claimed)  # not after a failed teardown: the reaper tries again when the driver ends


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


class LabObjectKind(enum.Enum):
    """A kind of kernel object the lab makes."""

    NAMESPACE = "namespace"
    LINK = "link"
    BRIDGE = "bridge"
    TABLE = "nftables table"


@dataclass(frozen=True, slots=True)
class LabObject:
    """A kernel object named with :data:`PREFIX` (a table with its family: ``inet rc-…``) and
    the driver its label names (None: unlabelled, made by an older raychaos or by hand)."""

    kind: LabObjectKind
    name: str
    owner: Owner | None

    def __str__(self) -> str:
        return f"{self.kind.value} {self.name}"

    def delete(self) -> None:
        """Delete it (a namespace's processes first); nothing if it is gone.

        Raises:
            NetCommandFailed: it, or a process in it, is still there.
        """
        if self.kind is LabObjectKind.NAMESPACE:
            kill_namespace(self.name)
            delete_namespace(self.name)
        elif self.kind is LabObjectKind.TABLE:
            delete_table(*self.name.split(" ", 1))
        else:
            delete_link(self.name)


def lab_objects() -> list[LabObject]:
    """Every namespace, link, bridge and host nftables table named with :data:`PREFIX`, with
    the driver its label names. A host table is its lab's (``rc-<lab>-f<n>``): it has the owner
    that the lab's labelled objects have, if any does.

    Raises:
        NetCommandFailed: a listing command failed (what cannot be listed is not known clean).
    """
    bridges = {link["ifname"] for link in _json(run(["ip", "-j", "link", "show", "type", "bridge"]))}
    found = [LabObject(LabObjectKind.BRIDGE if link["ifname"] in bridges else LabObjectKind.LINK,
                       str(link["ifname"]), _owner_of(link.get("ifalias")))
             for link in _json(run(["ip", "-j", "link", "show"])) if str(link.get("ifname", "")).startswith(PREFIX)]
    for line in run(["ip", "netns", "list"]).splitlines():
        if line.startswith(PREFIX):
            namespace = line.split()[0]
            lo = _json(run(["ip", "-n", namespace, "-j", "link", "show", "lo"], check=False))
            found.append(LabObject(LabObjectKind.NAMESPACE, namespace, _owner_of(lo[0].get("ifalias") if lo else None)))
    owners = {_lab_of(o.name): o.owner for o in found if o.owner is not None}
    return found + [LabObject(LabObjectKind.TABLE, f"{family} {table}", owners.get(_lab_of(table)))
                    for family, table in _host_tables(PREFIX)]


def _lab_of(name: str) -> str:
    """The lab an object's name says it belongs to: ``rc-<lab>-…`` (the whole name if none)."""
    return name[len(PREFIX):].split("-", 1)[0]


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
