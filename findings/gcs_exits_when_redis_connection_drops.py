"""Standalone reproduction: the GCS exits when its connection to Redis drops, even when Redis
stays up with every key, and nothing starts it again.

Ray's GCS fault tolerance (an external Redis, ``RAY_REDIS_ADDRESS``) keeps the GCS's tables in
Redis so that a GCS started again finds them. Ray's documentation says a restarted GCS loads its
data from Redis; it does not say that losing the *connection* ends the GCS. Ray 2.60's GCS does
not connect again: each command fails ("Redis is disconnected") until its retries are spent, and
the process exits ("Failed to run redis cmds ... for 5 times"). A Redis failover behind a stable
address, a proxy restart, a server-side idle ``timeout`` or an operator's ``CLIENT KILL`` all do
that. Outside KubeRay nothing starts the GCS again: every raylet and driver then exits after
``gcs_rpc_server_reconnect_timeout_s`` (60 s by default).

Each round runs in its own process (a driver whose GCS is gone is ended by Ray 60 s later):
Debian's ``redis-server`` on a free port with an append-only file fsynced on every write,
``ray.init`` with ``RAY_REDIS_ADDRESS`` set, a detached named actor called once, then one fault:

- ``client_kill``: ``CLIENT KILL ID`` of each connection the gcs_server process holds (matched
  by its sockets' ports in ``/proc``); Redis stays up;
- ``idle_timeout``: ``CONFIG SET timeout 1`` for ``HOLD`` seconds, on a quiet cluster;
- ``idle_timeout_busy``: the same while the driver writes to the GCS's key-value store every
  ``PACE`` seconds (a control: connections in use never idle);
- ``kill``: redis-server SIGKILLed and started again ``HOLD`` seconds later with its data;
- ``none``: no fault, the same watch (the control).

The round watches the GCS process for ``WATCH`` seconds and prints when it exited, its last
fatal log line and how many keys Redis still holds. Then it starts the GCS again
(``Node.start_gcs_server``, from the main thread) and checks the cluster serves: the named
actor found with its state, a new actor created.

    flock /tmp/raychaos-ray.lock .venv/bin/python findings/gcs_exits_when_redis_connection_drops.py \\
        [client_kill|idle_timeout|idle_timeout_busy|kill|none] [rounds]
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

HOLD, WATCH, SETTLE, PACE = 5.0, 15.0, 30.0, 0.1
CASES = ("client_kill", "idle_timeout", "idle_timeout_busy", "kill", "none")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis(port: int, folder: str) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "yes", "--appendfsync", "always", "--dir", folder],
                            stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # bounded: Redis answers within a second here
        with contextlib.suppress(OSError):
            if redis(port, "PING") == "PONG":
                return proc
        time.sleep(0.05)  # the poll's pace
    proc.kill()
    raise RuntimeError(f"redis-server on port {port} did not answer within 10 s")


def redis(port: int, *args: str) -> str:
    """One command in RESP; the reply as text (an integer, a status, a bulk string, an error)."""
    wire = b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a.encode()) for a in args)
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(wire)
        reply = sock.makefile("rb")
        head = reply.readline().decode().rstrip("\r\n")
        if head.startswith("$") and int(head[1:]) >= 0:
            return reply.read(int(head[1:]) + 2)[:-2].decode()
        return head[1:]


def gcs_client_ids(port: int, gcs_pid: int) -> list[str]:
    """The Redis client ids of the gcs_server's connections: its sockets' inodes in
    /proc/PID/fd, their local ports in /proc/net/tcp, those ports in CLIENT LIST."""
    inodes = set()
    for fd in glob.glob(f"/proc/{gcs_pid}/fd/*"):
        with contextlib.suppress(OSError):
            inodes.add(os.readlink(fd).removeprefix("socket:[").removesuffix("]"))
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for row in f.readlines()[1:]:
                local, remote, inode = row.split()[1], row.split()[2], row.split()[9]
                if inode in inodes and int(remote.rsplit(":", 1)[1], 16) == port:
                    ports.add(int(local.rsplit(":", 1)[1], 16))
    clients = [dict(f.split("=", 1) for f in line.split() if "=" in f)
               for line in redis(port, "CLIENT", "LIST").splitlines()]
    return [c["id"] for c in clients if int(c["addr"].rsplit(":", 1)[1]) in ports]


def last_fatal(logs: str) -> str:
    """The GCS's last fatal log line (glog's ``C`` level), or its last failed Redis command."""
    lines: list[str] = []
    for path in sorted(glob.glob(os.path.join(logs, "gcs_server*.out"))):
        with open(path, errors="replace") as f:
            lines += [line for line in f if " C " in line[:40] or "Failed to run redis cmds" in line]
    return lines[-1].strip()[-150:] if lines else "none"


class Counter:
    def __init__(self) -> None:
        self.n = 0

    def add(self) -> int:
        self.n += 1
        return self.n


class Redis:
    """The round's redis-server: started, SIGKILLed and started again on one port and folder."""

    def __init__(self, folder: str) -> None:
        self.port, self.folder = free_port(), folder
        self.proc = start_redis(self.port, folder)

    def kill(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)

    def restart(self) -> None:
        self.proc = start_redis(self.port, self.folder)


def fault_steps(case: str, server: Redis, gcs_pid: int) -> tuple[str, object]:
    """Inject the case's fault now; returns what was done and the heal, run ``HOLD`` s later."""
    if case == "client_kill":
        ids = gcs_client_ids(server.port, gcs_pid)
        killed = sum(int(redis(server.port, "CLIENT", "KILL", "ID", i)) for i in ids)
        return f"CLIENT KILL closed {killed} of the GCS's {len(ids)} connections", None
    if case.startswith("idle_timeout"):
        redis(server.port, "CONFIG", "SET", "timeout", "1")
        return "timeout 1 set", lambda: redis(server.port, "CONFIG", "SET", "timeout", "0")
    if case == "kill":
        server.kill()
        return f"redis-server SIGKILLed, started again {HOLD:g} s later", server.restart
    return "no fault", None


def watch(gcs: subprocess.Popen[bytes], heal: object) -> float | None:
    """Seconds until the GCS process exited, or None if it still runs ``WATCH`` s later;
    the fault's heal runs ``HOLD`` s in, whether or not the GCS exited before."""
    start, gone = time.monotonic(), None
    while (elapsed := time.monotonic() - start) < WATCH and (gone is None or heal is not None):
        if heal is not None and elapsed >= HOLD:
            heal()  # type: ignore[operator]
            heal = None
        if gone is None and gcs.poll() is not None:
            gone = elapsed
        time.sleep(0.05)  # the watch's poll
    return gone


def write_until(stop: threading.Event, done: list[int]) -> None:
    """Write to the GCS's key-value store every ``PACE`` s until ``stop``: a cluster in use;
    ``done`` gets one entry per write that succeeded."""
    from ray.experimental import internal_kv

    while not stop.wait(PACE):  # the writes' pace, not a synchronisation
        with contextlib.suppress(Exception):  # a GCS that exited fails them; the watch says so
            internal_kv._internal_kv_put(b"finding", b"busy", overwrite=True)
            done.append(1)


def one_round(case: str, folder: str) -> str:
    """The round in this process: Redis, Ray on it, a named actor, the fault, what followed."""
    server = Redis(folder)
    os.environ["RAY_REDIS_ADDRESS"] = f"127.0.0.1:{server.port}"  # Ray's GCS fault tolerance
    import ray
    from ray._private import ray_constants

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    node = ray._private.worker._global_node
    counter = ray.remote(num_cpus=0, max_restarts=-1)(Counter).options(name="counter", lifetime="detached").remote()
    ray.get(counter.add.remote(), timeout=60)
    (gcs,) = [info.process for info in node.all_processes[ray_constants.PROCESS_TYPE_GCS_SERVER]]
    gone, line = fault_and_watch(case, server, gcs)
    line += f"; GCS's last fatal line: {last_fatal(node.get_logs_dir_path())!r}"
    if gone is not None:
        node.kill_gcs_server(check_alive=False)  # clears Ray's record of the exited process
        node.start_gcs_server()  # from the main thread, which lives on: the kernel leaves it be
    return f"{'exited' if gone is not None else 'running'}: {line}; {serves(restarted=gone is not None)}"


def fault_and_watch(case: str, server: Redis, gcs: subprocess.Popen[bytes]) -> tuple[float | None, str]:
    """Inject the case's fault (with writes to the GCS throughout for ``idle_timeout_busy``) and
    watch the GCS; returns when it exited (None: it ran on) and what was seen."""
    stop, writes = threading.Event(), []
    if case == "idle_timeout_busy":
        threading.Thread(target=write_until, args=(stop, writes), daemon=True).start()
    did, heal = fault_steps(case, server, gcs.pid)
    try:
        gone = watch(gcs, heal)
    finally:
        stop.set()
    busy = f" ({len(writes)} writes to the GCS meanwhile)" if writes else ""
    fate = f"the GCS exited {gone:.2f} s after the fault" if gone is not None else \
        f"the GCS still runs {WATCH:g} s after the fault"
    return gone, f"{did}{busy}; {fate}; Redis up with {redis(server.port, 'DBSIZE')} keys"


def serves(*, restarted: bool) -> str:
    """Whether the cluster serves: the named actor answers with its state, a new actor answers."""
    import ray

    named = ray.get(ray.get_actor("counter").add.remote(), timeout=SETTLE)
    fresh = ray.get(ray.remote(num_cpus=0)(Counter).remote().add.remote(), timeout=SETTLE)
    again = "started again, " if restarted else ""
    return f"{again}the named actor answered {named} (2: its state kept), a new actor answered {fresh}"


def kill_session(sid: int) -> None:
    """SIGKILL what is left of a round: every process of its session (Ray's and Redis)."""
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[3]) == sid:  # the session id, after state, ppid and pgrp
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(stat.split("/")[2]), signal.SIGKILL)


def run_round(case: str) -> str:
    folder = tempfile.mkdtemp(prefix="finding-redis-")
    try:
        child = subprocess.Popen([sys.executable, __file__, "--one-round", case, folder], text=True,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            stdout, _ = child.communicate(timeout=WATCH + 2 * SETTLE + 120)
        finally:
            kill_session(child.pid)
        return next((line[8:] for line in stdout.splitlines() if line.startswith("OUTCOME ")),
                    f"no outcome (exit {child.returncode})")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    args = sys.argv[1:]
    if args[:1] == ["--one-round"]:
        try:
            print("OUTCOME", one_round(args[1], args[2]), flush=True)
        except Exception as exc:  # noqa: BLE001 - reported as the round's outcome
            print("OUTCOME", f"failed: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
        finally:
            os._exit(0)  # the GCS may be gone: do not wait for Ray's shutdown
    case = next((a for a in args if a in CASES), "client_kill")
    rounds = int(next((a for a in args if a.isdigit()), "3"))
    import ray

    print(f"Ray {ray.__version__}; fault: {case}")
    exited = 0
    for i in range(rounds):
        outcome = run_round(case)
        exited += outcome.startswith("exited")
        print(f"round {i}: {outcome}", flush=True)
    print(f"REPRODUCED {exited} of {rounds}: the GCS exited")


if __name__ == "__main__":
    main()
