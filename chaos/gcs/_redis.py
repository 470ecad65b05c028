"""A Redis for GCS fault tolerance: Debian's ``redis-server`` on a free port, owned and stopped
by the caller. Ray's GCS keeps its tables there when the head starts with ``RAY_REDIS_ADDRESS``
(:func:`chaos.local_cluster`'s ``redis_address``), so a restarted GCS finds its actors,
nodes, jobs and placement groups again.

It keeps what it acknowledged: an append-only file fsynced on every write, as the persistent
Redis Ray's GCS fault tolerance asks for, so a Redis killed and started again (a fault of
:mod:`chaos.gcs._faults`) comes back with every table the GCS wrote.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import psutil

from chaos._errors import ChaosError, FaultIneffective, HangError, InvalidConfig, InvalidFaultSpec
from chaos._reclaim._owner import OWNER_ENV, me
from chaos._wait import wait_until
from chaos.cluster._cluster import _free_port, reap

__all__ = ["RedisReplyError", "RedisServer", "redis_of", "redis_server"]

#: How long a fresh redis-server may take to answer PING.
START_TIMEOUT = 30.0
#: Seconds one command to the server may take (connect, send, whole reply).
COMMAND_TIMEOUT = 5.0
_SERVERS: dict[str, RedisServer] = {}  # host:port -> the server this process started there
#: Every redis-server is forked from this executor's one thread, which lives as long as this
#: process: the child's PR_SET_PDEATHSIG fires when the *thread* that forked it ends, and a
#: restart from a fault's heal (a thread that ends) would otherwise be stopped a moment later.
_REDIS_PARENT = ThreadPoolExecutor(max_workers=1, thread_name_prefix="raychaos-redis-parent")


class RedisServer:
    """A ``redis-server`` this process started on ``127.0.0.1:port``, with its data folder: it
    can be killed and started again on the same port with the same data (or none)."""

    def __init__(self, path: str, port: int, folder: str) -> None:
        self.path, self.port, self.folder = path, port, folder
        self.address = f"127.0.0.1:{port}"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        if self.proc is None:
            raise InvalidFaultSpec(f"redis-server at {self.address} is not running; start() it first")
        return self.proc.pid

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, *, keep_data: bool = True) -> int:
        """Start the server (again) on its port and wait until it answers PING; returns its pid.
        ``keep_data=False`` starts it on an empty folder: a Redis that lost what it held.

        Raises:
            InvalidConfig: it exited, or did not answer within ``START_TIMEOUT``.
        """
        if not keep_data:
            shutil.rmtree(self.folder, ignore_errors=True)
            os.makedirs(self.folder)
        argv = [self.path, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                "--appendonly", "yes", "--appendfsync", "always", "--dir", self.folder, "--daemonize", "no"]
        self.proc = _REDIS_PARENT.submit(_spawn, argv).result(timeout=START_TIMEOUT)
        _wait_answers(self.port, self.proc)
        return self.proc.pid

    def kill(self) -> int:
        """SIGKILL the server; returns its pid once it is gone and its port refuses connections.

        Raises:
            FaultIneffective: it still runs, or its port still answers, after the signal.
        """
        pid = self.pid
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        assert self.proc is not None
        self.proc.wait(timeout=10)
        if _ping(self.port):
            raise FaultIneffective(f"redis-server pid {pid} was SIGKILLed but {self.address} still answers PING")
        return pid

    def stop(self) -> None:
        """SIGTERM, then SIGKILL what is left; nothing when it is not running."""
        if not self.running():
            return
        assert self.proc is not None
        with contextlib.suppress(psutil.NoSuchProcess):
            psutil.Process(self.proc.pid).terminate()
        reap([psutil.Process(self.proc.pid)] if self.proc.poll() is None else [], timeout=10.0)
        self.proc.wait(timeout=10)

    def command(self, *args: str | int | bytes) -> bytes | int | list[object] | None:
        """Send one command and return its reply (see :func:`_read_reply`).

        Raises:
            OSError: the server cannot be reached or closed the connection.
            RedisReplyError: the server answered with an error.
        """
        with socket.create_connection(("127.0.0.1", self.port), timeout=COMMAND_TIMEOUT) as sock:
            sock.sendall(encode(*args))
            return _read_reply(sock.makefile("rb"))


class RedisReplyError(ChaosError, RuntimeError):
    """Redis answered a command with an error reply (``-ERR ...``); the message is Redis's."""


def encode(*args: str | int | bytes) -> bytes:
    """One command in RESP, Redis's wire format: an array of bulk strings (bytes as they are)."""
    parts = [a if isinstance(a, bytes) else str(a).encode() for a in args]
    return b"".join([b"*%d\r\n" % len(parts), *(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)])


def _read_reply(stream: object) -> bytes | int | list[object] | None:
    """One RESP2 reply from ``stream`` (a binary file): status and bulk strings as bytes,
    integers as int, arrays as lists, a null bulk as None; an error reply raises."""
    line = stream.readline()  # type: ignore[attr-defined]
    if not line:
        raise ConnectionResetError("redis-server closed the connection before replying")
    kind, body = line[:1], line[1:-2]
    if kind == b"-":
        raise RedisReplyError(f"redis-server replied with an error: {body.decode(errors='replace')}")
    if kind == b":":
        return int(body)
    if kind == b"$":
        size = int(body)
        return None if size < 0 else bytes(stream.read(size + 2)[:-2])  # type: ignore[attr-defined]
    if kind == b"*":
        return [_read_reply(stream) for _ in range(int(body))]
    return bytes(body)


def redis_of(address: str) -> RedisServer:
    """The Redis this process started at ``address`` (``host:port``).

    Raises:
        InvalidFaultSpec: another process started it (it is not ours to kill or reconfigure).
    """
    if address not in _SERVERS:
        raise InvalidFaultSpec(f"the Redis at {address!r} was not started by this process, so its faults "
                               "cannot be injected from here; start it with chaos.cluster.redis_server()")
    return _SERVERS[address]


@contextlib.contextmanager
def redis_server(*, executable: str = "redis-server") -> Iterator[str]:
    """Start a throwaway ``redis-server`` (loopback only, an append-only file fsynced on every
    write in a temporary folder), yield its ``host:port``, and stop it (SIGTERM, then SIGKILL)
    when the block ends. If this process dies first, without unwinding (Ray's core worker
    ends a driver that lost its GCS for 60 s with an abort), the kernel stops it: it is bound
    to the life of the thread that forks every redis-server here.

    Raises:
        InvalidConfig: ``redis-server`` is not installed (``make`` installs it:
            ``apt-get install redis-server``), or it did not answer within ``START_TIMEOUT``.
    """
    path = shutil.which(executable)
    if path is None:
        raise InvalidConfig(f"{executable!r} is not on PATH: install Redis (Debian: apt-get install "
                            "redis-server; `make test` does it) for GCS fault tolerance")
    with tempfile.TemporaryDirectory(prefix="rc-redis-") as folder:
        server = RedisServer(path, _free_port(), os.path.join(folder, "data"))
        os.makedirs(server.folder)
        try:
            server.start()
            _SERVERS[server.address] = server
            yield server.address
        finally:
            _SERVERS.pop(server.address, None)
            server.stop()


def _spawn(argv: list[str]) -> subprocess.Popen[bytes]:
    # Labelled with its driver, for `raychaos cleanup`, should it outlive the signal below.
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=_die_with_parent,
                            env={**os.environ, OWNER_ENV: str(me())})


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM it when the thread that started it dies."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _wait_answers(port: int, proc: subprocess.Popen[bytes]) -> None:
    def answers() -> bool:
        if proc.poll() is not None:
            raise InvalidConfig(f"redis-server exited with {proc.returncode}: "
                                f"{proc.stderr.read().decode(errors='replace')[-500:] if proc.stderr else ''}")
        return _ping(port)

    try:
        wait_until(answers, timeout=START_TIMEOUT, interval=0.05, what=f"redis-server on port {port}")
    except HangError as exc:
        proc.kill()
        raise InvalidConfig(f"redis-server on port {port} did not answer PING within "
                            f"{START_TIMEOUT:g} s") from exc


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False
