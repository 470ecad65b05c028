"""A Redis for GCS fault tolerance: Debian's ``redis-server`` on a free port, owned and stopped
by the caller. Ray's GCS keeps its tables there when the head starts with ``RAY_REDIS_ADDRESS``
(:func:`chaos.local_cluster`'s ``redis_address``), so a restarted GCS finds its actors,
nodes, jobs and placement groups again.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator

from chaos._cluster import _free_port, reap
from chaos._errors import HangError, InvalidConfig
from chaos._wait import wait_until

__all__ = ["redis_server"]

#: How long a fresh redis-server may take to answer PING.
START_TIMEOUT = 30.0


@contextlib.contextmanager
def redis_server(*, executable: str = "redis-server") -> Iterator[str]:
    """Start a throwaway ``redis-server`` (no persistence, loopback only), yield its
    ``host:port``, and stop it (SIGTERM, then SIGKILL) when the block ends. If this process
    dies first, without unwinding (Ray's core worker ends a driver that lost its GCS for
    60 s with an abort), the kernel stops it: it is bound to the calling thread's life.

    Raises:
        InvalidConfig: ``redis-server`` is not installed (``make`` installs it:
            ``apt-get install redis-server``), or it did not answer within ``START_TIMEOUT``.
    """
    path = shutil.which(executable)
    if path is None:
        raise InvalidConfig(f"{executable!r} is not on PATH: install Redis (Debian: apt-get install "
                            "redis-server; `make test` does it) for GCS fault tolerance")
    port = _free_port()
    with tempfile.TemporaryDirectory(prefix="rc-redis-") as folder:
        proc = subprocess.Popen([path, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                 "--appendonly", "no", "--dir", folder, "--daemonize", "no"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                preexec_fn=_die_with_parent)
        try:
            _wait_answers(port, proc)
            yield f"127.0.0.1:{port}"
        finally:
            import psutil

            with contextlib.suppress(psutil.NoSuchProcess):
                psutil.Process(proc.pid).terminate()
            reap([psutil.Process(proc.pid)] if proc.poll() is None else [], timeout=10.0)
            proc.wait(timeout=10)


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM it when the thread that started it dies."""
    import ctypes
    import signal

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
