"""The attack's HTTP load generator (``scenarios.workloads.serve._load.HttpLoad``) against wrk,
on one minimal HTTP server in a process of its own (asyncio: read a request, answer 200 "ok",
close), in the same run:

* the generator's ceiling: at each asked rate, the rate it sent at and the share answered, for
  SECONDS each (open loop: every request sent at its due time, on a new connection);
* the latency it measures and adds: its median and p99 at a low rate, beside wrk's (one
  connection, ``Connection: close`` as the generator does, so both open a connection per request);
* wrk's own ceiling on the same server: ``-c 8`` with keep-alive, and with ``Connection: close``.

    .venv/bin/python benchmarks/load_generator.py [SECONDS]

Needs ``wrk`` (Debian's ``wrk``; ``make bench-load`` installs it).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks._common import machine, table

RATES = (50, 200, 800, 1600, 3200)
ANSWER = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


async def _serve(port: int) -> None:
    async def one(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:  # keep-alive for wrk's keep-alive run; closed when the client closes
                head = await reader.readuntil(b"\r\n\r\n")
                writer.write(ANSWER)
                await writer.drain()
                if b"connection: close" in head.lower():
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(one, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


def _server(port: int) -> None:
    asyncio.run(_serve(port))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _ours(port: int, rate: float, seconds: float) -> tuple[float, float, float, float]:
    """(sent per second, share answered, p50 ms, p99 ms) of the generator at ``rate``."""
    from scenarios.workloads.serve._load import HttpLoad
    from scenarios.workloads.serve._verdicts import p99

    got = HttpLoad("127.0.0.1", port, rate=rate, duration=seconds, timeout=2.0).start().join()
    ok = [r.latency for r in got if r.ok(2.0)]
    ended = max((r.ended() for r in got), default=seconds)
    return (len(got) / max(ended, seconds), len(ok) / max(len(got), 1),
            1000 * statistics.median(ok) if ok else float("nan"), 1000 * p99(ok) if ok else float("nan"))


def _wrk(port: int, seconds: float, *, connections: int, close: bool) -> tuple[float, float, float]:
    """(requests per second, p50 ms, p99 ms) of wrk."""
    args = ["wrk", "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s", "--latency",
            *(["-H", "Connection: close"] if close else []), f"http://127.0.0.1:{port}/"]
    out = subprocess.run(args, capture_output=True, text=True, timeout=seconds + 60, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    return rps, _ms(out, "50%"), _ms(out, "99%")


def _ms(out: str, pct: str) -> float:
    value, unit = re.search(rf"{pct}\s+([\d.]+)(us|ms|s)", out).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def main() -> None:
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 5.0
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed: `make bench-load` installs it (Debian's wrk)")
    port = _free_port()
    server = multiprocessing.Process(target=_server, args=(port,), daemon=True)
    server.start()
    try:
        _run(port, seconds)
    finally:
        server.terminate()
        server.join(timeout=10)


def _run(port: int, seconds: float) -> None:
    print(f"{machine()}; {seconds:g} s per row")
    rows = []
    for rate in RATES:
        sent, answered, p50, p99 = _ours(port, rate, seconds)
        rows.append([f"{rate}", f"{sent:,.0f}", f"{answered:.1%}", f"{p50:.2f}", f"{p99:.2f}"])
    table("raychaos's load: asked rate, sent rate, answered, latency from due time (ms)",
          ["asked /s", "sent /s", "answered", "p50 ms", "p99 ms"], rows)
    peers = []
    for name, connections, close in (("wrk -c1, Connection: close", 1, True), ("wrk -c8, Connection: close", 8, True),
                                     ("wrk -c8, keep-alive", 8, False)):
        rps, p50, p99 = _wrk(port, seconds, connections=connections, close=close)
        peers.append([name, f"{rps:,.0f}", f"{p50:.2f}", f"{p99:.2f}"])
    table("wrk on the same server (closed loop: as fast as answers come)", ["peer", "req /s", "p50 ms", "p99 ms"],
          peers)


if __name__ == "__main__":
    main()
