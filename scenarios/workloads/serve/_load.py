"""A bounded HTTP load on loopback: a constant request rate, a timeout per request (an overall
deadline from the request's due time, not a bound on each socket read), an end time it keeps by
itself, and a record of every request (when it was due, what came back, how long it took from
its due time: a request that waited for a free thread counts the wait).

Each request opens its own connection (no keep-alive), so a proxy that stops listening shows
as refused connections rather than as errors on a connection opened before it went.

A 200 is checked against what the app must answer (:class:`Expect`), when something says what
that is: the built-in app echoes each request's own nonce; a user's app, the text its scenario
expects. Every answer's :data:`REPLICA_HEADER`, when the app sets it, names the replica that gave it.
"""

from __future__ import annotations

import http.client
import json
import random
import secrets
import socket
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from enum import StrEnum

from chaos.errors import InvalidConfig

__all__ = ["MAX_BODY", "REPLICA_HEADER", "BodyRule", "Expect", "Failure", "HttpLoad", "Request", "Route", "classify"]

#: Seconds past a request's deadline its thread may take to return (the last socket call
#: is bounded by the deadline; the record is written after it).
JOIN_SLACK = 2.0
#: Bytes read from an answer's body at a time (each read bounded by what is left of the deadline).
CHUNK = 65536
#: Bytes of a body kept for its check: the text a 200 must carry is looked for in these.
MAX_BODY = 65536
#: The header in which an app names the replica that answered: the actor id of its replica
#: (``ray.get_runtime_context().get_actor_id()``). The built-in app sets it on every answer.
REPLICA_HEADER = "x-raychaos-replica"


class Failure(StrEnum):
    """Why a request got no HTTP answer, or (``WRONG_BODY``) why its 200 is no answer."""

    TIMEOUT = "timeout"  #: no answer within the request's timeout
    REFUSED = "refused"  #: nothing listened on the port (a proxy restarting)
    RESET = "reset"  #: the connection was closed or reset before a whole answer came
    HUNG = "hung"  #: still open when the load ended, past its timeout and the slack
    OTHER = "other"  #: any other OS error (its type name is the request's ``detail``)
    WRONG_BODY = "wrong_body"  #: a 200 whose body was not what the app must answer (its status kept)


class BodyRule(StrEnum):
    """How a 200's body is checked."""

    NONE = "none"  #: not at all: nothing says what the app answers (its 200s taken as they come)
    ECHO = "echo"  #: the built-in app's: JSON naming the request's own nonce and the replica the header names
    CONTAINS = "contains"  #: a user's app's: the body holds the text its scenario expects


@dataclass(frozen=True, slots=True)
class Expect:
    """What every 200 of the load must carry in its body (build with :meth:`echo`,
    :meth:`contains`; the default checks nothing)."""

    rule: BodyRule = BodyRule.NONE
    text: str = ""  #: for ``CONTAINS``: the text the body holds

    @classmethod
    def echo(cls) -> Expect:
        return cls(BodyRule.ECHO)

    @classmethod
    def contains(cls, text: str) -> Expect:
        if not text:
            raise InvalidConfig("an expected body of '' checks nothing; give the text every 200 must carry, "
                                "or Expect() to take the 200s as they come")
        return cls(BodyRule.CONTAINS, text)

    def path(self, path: str, nonce: str) -> str:
        """The path to GET: for ``ECHO``, ``path`` with the request's ``nonce`` in its query."""
        if self.rule is not BodyRule.ECHO:
            return path
        return f"{path}{'&' if '?' in path else '?'}nonce={nonce}"

    def right(self, body: bytes, *, nonce: str, replica: str | None) -> bool:
        """``body`` is what a 200 must carry (always, when nothing says what that is)."""
        if self.rule is BodyRule.CONTAINS:
            return self.text.encode() in body
        if self.rule is BodyRule.NONE:
            return True
        try:
            found = json.loads(body)
        except ValueError:  # not JSON (UnicodeDecodeError is one too)
            return False
        return (isinstance(found, dict) and found.get("nonce") == nonce and bool(replica)
                and found.get("replica") == replica)


@dataclass(frozen=True, slots=True, kw_only=True)
class Route:
    """One kind of request of a load: its method, path, headers and body, how often it is sent
    (``weight``, against the others'), and what its 200s must carry (``expect``, "" checks none)."""

    path: str = "/"
    method: str = "GET"
    headers: tuple[tuple[str, str], ...] = ()
    data: bytes = b""
    weight: float = 1.0
    expect: str = ""

    def label(self) -> str:
        return f"{self.method} {self.path}"


@dataclass(frozen=True, slots=True)
class Request:
    """One request of the load and what came of it."""

    sent: float  #: seconds from the load's start to the request's due time
    latency: float  #: seconds from its due time until its answer or its failure
    status: int | None = None  #: the HTTP status, None when no answer came
    failure: Failure | None = None  #: why no answer came, or why its 200 is none
    detail: str = ""
    #: The replica that answered, as the answer names it (:data:`REPLICA_HEADER`); None: it names none.
    replica: str | None = None
    #: A 200 whose body was checked against what the app must answer (:class:`Expect`).
    body_checked: bool = False
    #: Which route it was (:meth:`Route.label`): "" for a load of one route.
    route: str = ""

    def ok(self, timeout: float) -> bool:
        """Answered 200, with the right body where it was checked, within ``timeout`` seconds."""
        return self.status == 200 and self.failure is None and self.latency <= timeout

    def ended(self) -> float:
        return self.sent + self.latency


def classify(exc: BaseException) -> Failure:
    """The :class:`Failure` a request's exception stands for."""
    if isinstance(exc, TimeoutError | socket.timeout):
        return Failure.TIMEOUT
    if isinstance(exc, ConnectionRefusedError):
        return Failure.REFUSED
    if isinstance(exc, ConnectionError | http.client.RemoteDisconnected | http.client.IncompleteRead):
        return Failure.RESET
    return Failure.OTHER


def _validate_positive(name: str, value: float) -> float:
    if not value > 0:
        raise InvalidConfig(f"`{name}` must be positive, got {value!r}; give seconds (or requests per second) > 0")
    return value


class HttpLoad:
    """``rate`` requests a second to ``http://host:port/path`` (GETs), or to ``routes`` drawn by
    their weights from ``seed``, for ``duration`` seconds: an open loop, each request sent at its
    due time whatever the ones before it are doing.

    :meth:`start` returns at once; the load stops sending at its end time by itself (or at
    :meth:`stop`), and :meth:`join` waits, bounded, for the requests still out. A request
    sent late because every thread was busy is recorded at its due time, and the wait counts in
    its latency and against its deadline (a constant-rate client's view: queueing is latency).
    """

    def __init__(self, host: str, port: int, *, rate: float, duration: float, timeout: float,
                 path: str = "/", expect: Expect = Expect(), clock: Callable[[], float] = time.monotonic,
                 routes: Sequence[Route] = (), seed: int = 0, tls: bool = False) -> None:
        self.host, self.port, self.path, self.expect, self.tls = host, port, path, expect, tls
        self.routes = tuple(routes)
        if any(not r.weight > 0 for r in self.routes):
            raise InvalidConfig(f"route weights {[r.weight for r in self.routes]}: each must be positive")
        self._draw = random.Random(seed)  # which route each request takes: the same for a seed
        # Each request's nonce is this load's token and its number: no other load's answer echoes it.
        self._token = secrets.token_hex(4)
        self.rate = _validate_positive("rate", rate)
        self.duration = _validate_positive("duration", duration)
        self.timeout = _validate_positive("timeout", timeout)
        self.clock = clock
        self.started = 0.0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._records: list[Request] = []
        self._out: dict[int, float] = {}  # request number -> sent, while it is out
        self._futures: list[Future[None]] = []
        # Enough threads for every request a timeout can keep out at this rate, and one more.
        self._pool = ThreadPoolExecutor(max_workers=int(rate * timeout) + 2, thread_name_prefix="serve-load")
        self._dispatcher = threading.Thread(target=self._dispatch, daemon=True, name="serve-load-dispatch")

    def start(self) -> HttpLoad:
        self.started = self.clock()
        self._dispatcher.start()
        return self

    def stop(self) -> None:
        """Send no more requests (those out finish or time out)."""
        self._stop.set()

    def done(self) -> bool:
        """The load sent its last request (its end time came, or it was stopped)."""
        return not self._dispatcher.is_alive()

    def _dispatch(self) -> None:
        n, end = 0, self.started + self.duration
        while True:
            due = self.started + n / self.rate
            if due >= end or self._stop.wait(max(0.0, due - self.clock())):
                return
            with self._lock:
                self._out[n] = due - self.started  # out from now: a request still queued at the end is hung too
            route = self._draw.choices(self.routes, [r.weight for r in self.routes])[0] if self.routes else None
            self._futures.append(self._pool.submit(self._one, n, due, route))
            n += 1

    def _one(self, n: int, due: float, route: Route | None = None) -> None:
        with self._lock:
            if n not in self._out:  # written off as hung by join while it queued: send nothing
                return
        record = self._send(due, f"{self._token}-{n}") if route is None else self._send_route(due, route)
        with self._lock:
            if self._out.pop(n, None) is not None:  # not yet written off as hung by join
                self._records.append(record)

    def _send(self, due: float, nonce: str) -> Request:
        deadline = due + self.timeout
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self._left(deadline))
        try:
            conn.connect()
            sock = conn.sock  # kept: the connection lets go of it once a closing answer starts
            conn.request("GET", self.expect.path(self.path, nonce))
            sock.settimeout(self._left(deadline))
            response = conn.getresponse()
            body = self._body(response, sock, deadline)
            self._left(deadline)  # an answer completed past the deadline is a timeout
            return self._answered(due, response.status, body, nonce=nonce, replica=response.getheader(REPLICA_HEADER))
        except Exception as exc:  # noqa: BLE001 - every failure is a record of the load
            return Request(due - self.started, self.clock() - due, failure=classify(exc), detail=type(exc).__name__)
        finally:
            conn.close()

    def _send_route(self, due: float, route: Route) -> Request:
        """One request of ``route``; its 200 checked for the route's expected text."""
        deadline = due + self.timeout
        kind = http.client.HTTPSConnection if self.tls else http.client.HTTPConnection
        conn = kind(self.host, self.port, timeout=self._left(deadline))
        try:
            conn.connect()
            sock = conn.sock
            conn.request(route.method, route.path, body=route.data or None, headers=dict(route.headers))
            sock.settimeout(self._left(deadline))
            response = conn.getresponse()
            body = self._body(response, sock, deadline)
            self._left(deadline)
            checked = response.status == 200 and bool(route.expect)
            wrong = checked and route.expect.encode() not in body
            return Request(due - self.started, self.clock() - due, status=response.status,
                           failure=Failure.WRONG_BODY if wrong else None, detail=repr(body[:80]) if wrong else "",
                           body_checked=checked, route=route.label())
        except Exception as exc:  # noqa: BLE001 - every failure is a record of the load
            return Request(due - self.started, self.clock() - due, failure=classify(exc), detail=type(exc).__name__,
                           route=route.label())
        finally:
            conn.close()

    def _body(self, response: http.client.HTTPResponse, sock: socket.socket, deadline: float) -> bytes:
        """The answer's body read to its end, its first :data:`MAX_BODY` bytes kept; chunk by
        chunk, so a body that trickles in cannot outlast the deadline."""
        kept = bytearray()
        while True:
            sock.settimeout(self._left(deadline))
            chunk = response.read1(CHUNK)  # one socket read at most
            if not chunk:
                return bytes(kept)
            kept += chunk[:MAX_BODY - len(kept)]

    def _answered(self, due: float, status: int, body: bytes, *, nonce: str, replica: str | None) -> Request:
        """The record of an answer: a 200 whose body is checked and wrong is ``WRONG_BODY``."""
        checked = status == 200 and self.expect.rule is not BodyRule.NONE
        wrong = checked and not self.expect.right(body, nonce=nonce, replica=replica)
        return Request(due - self.started, self.clock() - due, status=status,
                       failure=Failure.WRONG_BODY if wrong else None, detail=repr(body[:80]) if wrong else "",
                       replica=replica, body_checked=checked)

    def _left(self, deadline: float) -> float:
        """Seconds left before ``deadline``; raises TimeoutError when none are."""
        left = deadline - self.clock()
        if left <= 0:
            raise TimeoutError(f"request deadline passed {-left:.3f} s ago")
        return left

    def join(self) -> list[Request]:
        """Wait for the load's end and its last requests (at most its timeout and
        :data:`JOIN_SLACK` past its end time), and return every request sorted by sent time.
        A request still out then is recorded :attr:`Failure.HUNG`."""
        self._dispatcher.join(timeout=max(0.0, self.started + self.duration - self.clock()) + JOIN_SLACK)
        self._stop.set()
        wait(self._futures, timeout=self.timeout + JOIN_SLACK)
        self._pool.shutdown(wait=False, cancel_futures=True)  # one still queued now is never sent
        return self._close()

    def _close(self) -> list[Request]:
        with self._lock:
            now = self.clock() - self.started
            self._records += [Request(sent, now - sent, failure=Failure.HUNG) for sent in self._out.values()]
            self._out.clear()
            return sorted(self._records, key=lambda r: r.sent)

    def requests(self) -> list[Request]:
        """The requests that have ended so far, sorted by sent time."""
        with self._lock:
            return sorted(self._records, key=lambda r: r.sent)
