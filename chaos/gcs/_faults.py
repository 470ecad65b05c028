"""Faults of the Redis behind Ray's GCS (GCS fault tolerance): the server killed and started
again, the GCS's connections dropped by the server (``CLIENT KILL``), and a server-side idle
``timeout`` that closes connections left idle.

Each is a fault kind like any other: its record, scheduled in a scenario's ``[[faults]]`` or
given to ``Chaos.inject``, acts on the Redis of the cluster at the engine's address (a cluster
this process started with ``gcs_fault_tolerance``), under the fail-closed rules of every fault.
Each step is confirmed (a fault whose effect was not seen raises
:class:`~chaos.errors.FaultIneffective`) and its heal confirmed the same way. The GCS's pid tells
which of the server's connections are the GCS's. :func:`inject_redis_fault` injects one into a
Redis this process started without a cluster.
"""

from __future__ import annotations

import random
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import ClassVar, Literal

import psutil

from chaos._context import FaultContext, Injection
from chaos._errors import FaultIneffective, HangError, InvalidFaultSpec
from chaos._kinds import Fault, FaultKind, FaultSpec, Need, duration, register
from chaos._targets import RayProcess
from chaos._wait import wait_until
from chaos.cluster._cluster import head_of
from chaos.gcs._redis import RedisServer, redis_of

__all__ = ["KillRedis", "RedisClientKill", "RedisEvent", "RedisFault", "RedisIdleTimeout", "gcs_connections",
           "inject_redis_fault", "redis_behind"]

#: The longest a Redis fault may be held or a Redis idle timeout set, in seconds.
MAX_REDIS_SECONDS = 600.0


@dataclass(frozen=True, slots=True)
class KillRedis(Fault):
    """SIGKILL the redis-server behind the GCS for ``seconds``; the heal starts it again on the
    same port, with the data it had fsynced (``keep_data``) or empty (a Redis that lost what it
    held). Needs a cluster this process started with GCS fault tolerance."""

    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind] = FaultKind.KILL_REDIS
    #: Carried out by this driver, which started the Redis.
    USES_AGENT: ClassVar[bool] = False

    keep_data: bool = True
    seconds: float = 5.0

    def __post_init__(self) -> None:
        if not isinstance(self.keep_data, bool):
            raise InvalidFaultSpec(f"`keep_data` must be true or false, got {self.keep_data!r}", field="keep_data")
        duration("seconds", self.seconds, most=MAX_REDIS_SECONDS)


@dataclass(frozen=True, slots=True)
class RedisClientKill(Fault):
    """``CLIENT KILL ID`` every connection the GCS holds to its Redis, which stays up: what a
    proxy restart, a failover behind a stable address or an operator's kill does. Instant:
    connecting again is the GCS's part."""

    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind] = FaultKind.REDIS_CLIENT_KILL
    #: Carried out by this driver, which started the Redis.
    USES_AGENT: ClassVar[bool] = False


@dataclass(frozen=True, slots=True)
class RedisIdleTimeout(Fault):
    """Set the GCS's Redis's ``timeout`` (seconds a client may stay idle before the server closes
    its connection; Redis's default 0 never does) for ``seconds``; the heal sets the old value
    back."""

    #: The name scenario files and journals use for this fault.
    KIND: ClassVar[FaultKind] = FaultKind.REDIS_IDLE_TIMEOUT
    #: Carried out by this driver, which started the Redis.
    USES_AGENT: ClassVar[bool] = False

    timeout: int = 1
    seconds: float = 10.0

    def __post_init__(self) -> None:
        if isinstance(self.timeout, bool) or not isinstance(self.timeout, int):
            raise InvalidFaultSpec(f"`timeout` must be whole seconds (Redis's unit), got {self.timeout!r}",
                                   field="timeout")
        duration("timeout", self.timeout, most=MAX_REDIS_SECONDS)
        duration("seconds", self.seconds, most=MAX_REDIS_SECONDS)


RedisFault = KillRedis | RedisClientKill | RedisIdleTimeout


@dataclass(frozen=True, slots=True)
class RedisEvent:
    """One step of a Redis fault, as a journal line: injected (effect confirmed) or healed
    (heal confirmed), when (``time.monotonic()``), and what was seen."""

    step: Literal["inject", "heal"]
    kind: FaultKind
    at: float
    detail: str


def gcs_connections(server: RedisServer, gcs_pid: int) -> set[int]:
    """The ids (``CLIENT LIST``) of the server's clients that are connections of process
    ``gcs_pid``: matched by the local port of each of its TCP sockets to the server's port."""
    ports = {c.laddr.port for c in psutil.Process(gcs_pid).net_connections(kind="tcp")
             if c.raddr and c.raddr.port == server.port}
    return {cid for cid, port in _clients(server).items() if port in ports}


def _clients(server: RedisServer) -> dict[int, int]:
    """Every client of the server: its id -> the port it connects from."""
    listing = server.command("CLIENT", "LIST")
    assert isinstance(listing, bytes)
    out = {}
    for line in listing.decode().splitlines():
        fields = dict(f.split("=", 1) for f in line.split() if "=" in f)
        out[int(fields["id"])] = int(fields["addr"].rpartition(":")[2])
    return out


#: A started Redis fault: its confirmed injection, and the heal that ends it (confirmed too).
Started = tuple[RedisEvent, Callable[[], None]]


@contextmanager
def inject_redis_fault(fault: RedisFault, server: RedisServer, *, gcs_pid: int,
                       journal: Callable[[RedisEvent], None]) -> Iterator[RedisEvent]:
    """Inject ``fault`` into ``server`` (a Redis this process started, with or without a
    cluster), yield its confirmed injection, heal it when the block ends (on error and Ctrl-C
    too), each step passed to ``journal``. On a cluster, schedule the fault instead.

    Raises:
        FaultIneffective: the fault's effect (or its heal's) was not seen: a server still
            answering, no connection of the GCS to kill, a connection idle past the timeout
            still open, data that did not come back.
        InvalidFaultSpec: ``fault`` is not a Redis fault.
    """
    event, heal = _start(fault, server, gcs_pid, journal)
    try:
        yield event
    finally:
        heal()


def _start(fault: RedisFault, server: RedisServer, gcs_pid: int, journal: Callable[[RedisEvent], None]) -> Started:
    starts: dict[type, Callable[..., Started]] = {
        KillRedis: _kill, RedisClientKill: _client_kill, RedisIdleTimeout: _idle_timeout}
    if type(fault) not in starts:
        raise InvalidFaultSpec(f"{fault!r} is not a Redis fault; use KillRedis, RedisClientKill or RedisIdleTimeout")
    return starts[type(fault)](fault, server, gcs_pid, journal)


def _kill(fault: KillRedis, server: RedisServer, gcs_pid: int, journal: Callable[[RedisEvent], None]) -> Started:
    # The GCS keeps each table as one hash, so a key count would miss lost entries: count the
    # entries, and write a sentinel last, which a Redis that lost anything written loses first.
    sentinel = f"raychaos:sentinel:{uuid.uuid4().hex}"
    server.command("SET", sentinel, "1")
    entries = _entries(server)
    pid = server.kill()
    event = RedisEvent(step="inject", kind=fault.KIND, at=time.monotonic(),
                       detail=f"redis-server pid {pid} SIGKILLed holding {entries} entries; {server.address} refuses "
                       "connections")
    journal(event)

    def heal() -> None:
        new = server.start(keep_data=fault.keep_data)
        kept, back = server.command("EXISTS", sentinel) == 1, _entries(server)
        if fault.keep_data and (not kept or back < entries):
            raise FaultIneffective(f"redis-server restarted as pid {new} holds {back} entries, not the {entries} "
                                   f"it held when killed{'' if kept else ', nor the sentinel written last'}: "
                                   "its append-only file did not keep them")
        server.command("DEL", sentinel)
        journal(RedisEvent(step="heal", kind=fault.KIND, at=time.monotonic(),
                           detail=f"redis-server restarted as pid {new} {'with' if fault.keep_data else 'without'} "
                           f"its data: {back - kept} entries"))
    return event, heal


def _entries(server: RedisServer) -> int:
    """Every entry the server holds: a hash's fields each, any other key as one."""
    keys = server.command("KEYS", "*")
    names = keys if isinstance(keys, list) else []
    return sum(_int(server.command("HLEN", k)) if server.command("TYPE", k) == b"hash" else 1
               for k in names if isinstance(k, bytes))


def _client_kill(fault: RedisClientKill, server: RedisServer, gcs_pid: int,
                 journal: Callable[[RedisEvent], None]) -> Started:
    ids = gcs_connections(server, gcs_pid)
    if not ids:
        raise FaultIneffective(f"gcs_server pid {gcs_pid} holds no connection to {server.address}: nothing to kill")
    killed = sum(_int(server.command("CLIENT", "KILL", "ID", cid)) for cid in sorted(ids))
    left = ids & set(_clients(server))
    if killed != len(ids) or left:
        raise FaultIneffective(f"CLIENT KILL closed {killed} of the GCS's {len(ids)} connections; still open: "
                               f"{sorted(left)}")
    event = RedisEvent(step="inject", kind=fault.KIND, at=time.monotonic(),
                       detail=f"CLIENT KILL closed all {killed} connections of gcs_server pid {gcs_pid}; the server "
                              "stays up")
    journal(event)

    def heal() -> None:
        journal(RedisEvent(step="heal", kind=fault.KIND, at=time.monotonic(),
                           detail="nothing to heal: the server is up; connecting again is the GCS's part"))
    return event, heal


def _idle_timeout(fault: RedisIdleTimeout, server: RedisServer, gcs_pid: int,
                  journal: Callable[[RedisEvent], None]) -> Started:
    old, held = _config_timeout(server), gcs_connections(server, gcs_pid)

    def heal() -> None:
        server.command("CONFIG", "SET", "timeout", old)
        now = _config_timeout(server)
        if now != old:
            raise FaultIneffective(f"CONFIG SET timeout {old} left the server's timeout at {now}")
        journal(RedisEvent(step="heal", kind=fault.KIND, at=time.monotonic(),
                           detail=f"timeout set back to {old}; {_closed_text(server, gcs_pid, held)}"))

    with socket.create_connection(("127.0.0.1", server.port), timeout=1.0) as idle:
        server.command("CONFIG", "SET", "timeout", fault.timeout)
        try:
            took = _closed_by_server(idle, within=fault.timeout + 5.0)
        except BaseException:
            heal()  # set, but not confirmed: set back before the fault is reported ineffective
            raise
    event = RedisEvent(step="inject", kind=fault.KIND, at=time.monotonic(),
                       detail=f"timeout {old} -> {fault.timeout} s; an idle connection was closed by the server "
                       f"{took:.1f} s later")
    journal(event)
    return event, heal


def _closed_text(server: RedisServer, gcs_pid: int, held: set[int]) -> str:
    """How many of the GCS's connections ``held`` before the fault are gone now."""
    try:
        if psutil.Process(gcs_pid).status() != psutil.STATUS_ZOMBIE:
            return (f"{len(held - gcs_connections(server, gcs_pid))} of the GCS's {len(held)} connections "
                    "were closed meanwhile")
    except psutil.NoSuchProcess:
        pass
    return f"gcs_server pid {gcs_pid} had exited"


def _closed_by_server(sock: socket.socket, *, within: float) -> float:
    """Seconds until the server closed ``sock`` (an idle connection), polled; raises when it
    is still open after ``within`` s: the timeout did not take."""
    start = time.monotonic()
    sock.settimeout(0.1)

    def closed() -> bool:
        try:
            return sock.recv(1) == b""
        except TimeoutError:
            return False

    try:
        wait_until(closed, timeout=within, interval=0.05, what="the server to close an idle connection")
    except HangError as exc:
        raise FaultIneffective(f"an idle connection was still open {within:g} s after the timeout was set") from exc
    return time.monotonic() - start


def _int(reply: object) -> int:
    """An integer reply, or a number sent as a bulk string (``CONFIG GET``'s values)."""
    if isinstance(reply, int):
        return reply
    if isinstance(reply, bytes) and reply.isdigit():
        return int(reply)
    raise FaultIneffective(f"redis-server replied {reply!r} where a number was expected")


def _config_timeout(server: RedisServer) -> int:
    reply = server.command("CONFIG", "GET", "timeout")
    return _int(reply[1] if isinstance(reply, list) and len(reply) == 2 else reply)


def redis_behind(address: str) -> RedisServer:
    """The Redis holding the GCS's tables of the cluster at ``address``, both started by this process.

    Raises:
        InvalidFaultSpec: another process started the cluster or its Redis, or its GCS keeps no Redis.
    """
    head = head_of(address)
    if not head.node.redis_address:
        raise InvalidFaultSpec(f"the cluster at {address} keeps its GCS's tables in memory, not in a Redis; "
                               "start it with a Redis (local_cluster(redis_address=...), or the "
                               "ray_cluster marker's redis=True)")
    return redis_of(head.node.redis_address)


@contextmanager
def _inject(ctx: FaultContext, fault: RedisFault, at: float | None, rng: random.Random) -> Iterator[Injection]:
    """A Redis fault on the cluster at the engine's address: its Redis, and its GCS's pid now."""
    head = head_of(ctx.address)
    server = redis_behind(ctx.address)
    proc = RayProcess(0, head.node_id, f"redis-server at {server.address}")

    def journal(event: RedisEvent) -> None:
        ctx.record(event.step, fault, at, proc, event.detail)

    event, heal = _start(fault, server, head.gcs_pid(), journal)
    with ctx.on_heal(heal):
        yield Injection(fault, (proc,), found=event)


_ON_ITS_GCS = frozenset({Need.GCS, Need.REDIS})
register(
    FaultSpec(record=KillRedis, inject=_inject, needs=_ON_ITS_GCS, colour="#9d0208",
              example={"seconds": 5, "keep_data": True}, forgets_task_events=True),
    FaultSpec(record=RedisClientKill, inject=_inject, needs=_ON_ITS_GCS, colour="#f48c06", example={},
              forgets_task_events=True),
    FaultSpec(record=RedisIdleTimeout, inject=_inject, needs=_ON_ITS_GCS, colour="#588157",
              example={"timeout": 1, "seconds": 11}, forgets_task_events=True),
)
