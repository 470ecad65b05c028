"""Standalone reproduction: an actor in a placement group, created just before the GCS goes down
and is started again (its tables on Redis), may stay ``PENDING_CREATION`` for ever while its
placement group is ``CREATED``: a call of it neither returns nor raises.

Ray's GCS fault tolerance guide: with an external Redis, "when the GCS restarts, it loads all the
data from the Redis instance and resumes regular functions"; during the recovery "actor creation"
and "placement group creation" are not available, and they resume after it. Ray 2.60 resumes
them for an actor without a placement group every time here, but an actor made in a placement
group of its own just before the GCS went down was left pending, its group created, in every
round of the first case below.

Each round runs in its own process: Debian's ``redis-server`` on a free port (an append-only file
fsynced on every write), ``ray.init`` with ``RAY_REDIS_ADDRESS`` set, then up to ``CYCLES``
cycles of: a placement group of one bundle (a custom resource of the head), an actor in it, a call
of it, and at once ``CLIENT KILL ID`` of each connection the gcs_server holds (matched by its
sockets' ports in ``/proc``), after which the GCS exits by itself (about 3.6 s:
``findings/gcs_exits_when_redis_connection_drops.py``); the GCS is started again
(``Node.start_gcs_server``, from the main thread) and the call is got within ``WAIT`` s. A round
reproduces when a get times out; it prints the actor's state (the GCS's table) and the group's.
``--gcs-kill``: the GCS SIGKILLed instead (no Redis connection lost); ``--no-group``: the actor
without a placement group (control).

Seen on Ray 2.60.0, 2026-12-07, a 2-core machine: 3 of 3 rounds (hung in cycle 1, 2 and 2 of 4);
``--gcs-kill`` 1 of 2 rounds (cycle 3); ``--no-group`` 0 of 2 rounds (8 cycles, each answered
within 1.7 s of the restart).

    flock /tmp/raychaos-ray.lock .venv/bin/python findings/group_actor_pending_after_gcs_restart.py \\
        [--no-group] [--gcs-kill] [rounds]
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
import time

WAIT, EXIT_BOUND, CYCLES = 30.0, 15.0, 4


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


class Counter:
    def add(self) -> int:
        return 1


def wait_exit(gcs: subprocess.Popen[bytes]) -> float | None:
    """Seconds until the GCS exited, or None if it still runs ``EXIT_BOUND`` s later."""
    start = time.monotonic()
    while time.monotonic() - start < EXIT_BOUND:
        if gcs.poll() is not None:
            return time.monotonic() - start
        time.sleep(0.05)  # the watch's poll
    return None


def one_round(folder: str, grouped: bool, gcs_kill: bool) -> str:
    """The round in this process: Redis, Ray on it, the actor and its call, the fault, the get."""
    port = free_port()
    start_redis(port, folder)
    os.environ["RAY_REDIS_ADDRESS"] = f"127.0.0.1:{port}"  # Ray's GCS fault tolerance
    import ray

    ray.init(address="local", num_cpus=2, resources={"head": 1}, include_dashboard=False, log_to_driver=False)
    node = ray._private.worker._global_node
    seen = []
    for cycle in range(CYCLES):
        outcome = one_cycle(node, port, grouped, gcs_kill, cycle)
        seen.append(outcome)
        if outcome.startswith(("hung", "other hang", "not run")):
            break
    return seen[-1] if seen[-1].startswith(("hung", "other hang", "not run")) else "; ".join(seen)


def one_cycle(node: object, port: int, grouped: bool, gcs_kill: bool, cycle: int) -> str:
    """A placement group, an actor in it and its call, the fault at once, the GCS started again,
    the get (bounded)."""
    import ray
    from ray._private import ray_constants
    from ray.util import placement_group, placement_group_table
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    (gcs,) = [info.process for info in node.all_processes[ray_constants.PROCESS_TYPE_GCS_SERVER]]  # type: ignore[attr-defined]
    group = placement_group([{"head": 0.001}], name=f"finding-group-{cycle}") if grouped else None
    where = {"scheduling_strategy": PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=0)} \
        if group is not None else {}
    actor = ray.remote(num_cpus=0, resources={"head": 0.001})(Counter).options(**where).remote()
    call = actor.add.remote()
    if gcs_kill:
        node.kill_gcs_server()  # type: ignore[attr-defined]  # SIGKILL, then waits for the process
        gone: float | None = 0.0
        did = "GCS SIGKILLed"
    else:
        ids = gcs_client_ids(port, gcs.pid)
        killed = sum(int(redis(port, "CLIENT", "KILL", "ID", i)) for i in ids)
        gone, did = wait_exit(gcs), f"CLIENT KILL closed {killed} of the GCS's {len(ids)} Redis connections"
    if gone is None:
        return f"not run: {did}, but the GCS still runs {EXIT_BOUND:g} s later"
    node.kill_gcs_server(check_alive=False)  # type: ignore[attr-defined]  # clears Ray's record of it
    node.start_gcs_server()  # type: ignore[attr-defined]  # from the main thread, which lives on
    started = time.monotonic()
    try:
        ray.get(call, timeout=WAIT)
    except ray.exceptions.GetTimeoutError:
        state = ray._private.state.actors(actor._actor_id.hex()).get("State", "unknown")  # the GCS's own table
        group_state = placement_group_table(group).get("state") if group is not None else "no group"
        # The finding is the actor left pending with its group created; another hang is reported apart.
        what = "hung" if state == "PENDING_CREATION" and group_state in ("CREATED", "no group") else "other hang"
        return (f"{what} in cycle {cycle}: {did}; the GCS exited after {gone:.1f} s and was started again; the "
                f"call gave nothing within {WAIT:g} s; actor {state}, placement group {group_state}")
    ray.kill(actor)
    return f"cycle {cycle} answered {time.monotonic() - started:.1f} s after the restart"


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


def run_round(grouped: bool, gcs_kill: bool) -> str:
    folder = tempfile.mkdtemp(prefix="finding-group-")
    try:
        child = subprocess.Popen([sys.executable, __file__, "--one-round", folder, str(grouped), str(gcs_kill)],
                                 text=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            stdout, _ = child.communicate(timeout=CYCLES * (EXIT_BOUND + WAIT) + 120)
        except subprocess.TimeoutExpired:
            return "no outcome: the round outlived its bound"
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
            print("OUTCOME", one_round(args[1], args[2] == "True", args[3] == "True"), flush=True)
        except Exception as exc:  # noqa: BLE001 - reported as the round's outcome
            print("OUTCOME", f"failed: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
        finally:
            os._exit(0)  # do not wait for Ray's shutdown
    grouped, gcs_kill = "--no-group" not in args, "--gcs-kill" in args
    rounds = int(next((a for a in args if a.isdigit()), "3"))
    import ray

    print(f"Ray {ray.__version__}; actor {'in a placement group' if grouped else 'without a group'}; "
          f"fault: {'GCS SIGKILL' if gcs_kill else 'CLIENT KILL of the GCS Redis connections'}")
    hung = 0
    for i in range(rounds):
        outcome = run_round(grouped, gcs_kill)
        hung += outcome.startswith("hung")
        print(f"round {i}: {outcome}", flush=True)
    print(f"REPRODUCED {hung} of {rounds}: the call hung")


if __name__ == "__main__":
    main()
