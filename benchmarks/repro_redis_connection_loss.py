"""Standalone reproduction: what does Ray's GCS do when its Redis connection goes away?

Found: a dropped connection to a Redis that stays up, with every key intact, ends the GCS.
Ray 2.60's GCS does not connect again: each command fails ("Redis is disconnected") until its
retries run out, and the process exits with "Failed to run redis cmds ... for 5 times", about
3.6 s after the drop. A server-side idle ``timeout`` does the same to a quiet cluster: the
server closes the GCS's idle connections and the GCS exits at its next command, about 5 s
after a 1 s timeout was set (under a steady stream of writes to the GCS its connections never
idle and it keeps serving). Ray's GCS fault tolerance page says a restarted GCS loads its data
from Redis; it does not say that a Redis failover, a proxy restart, an idle timeout or a
``CLIENT KILL`` ends the GCS, nor that outside KubeRay nothing starts it again (then every
raylet and driver exits after ``gcs_rpc_server_reconnect_timeout_s``, 60 s by default).

An embedded single-node cluster with GCS fault tolerance (Debian's redis-server, an fsynced
append-only file), a detached actor, and for each round one fault:

- ``client_kill``: ``CLIENT KILL ID`` every connection of the gcs_server process;
- ``idle_timeout``: ``CONFIG SET timeout 1`` for ``HOLD`` seconds;
- ``kill``: redis-server SIGKILLed, started again ``HOLD`` seconds later with its data.

It prints when the GCS exited (or that it kept serving), its last fatal log line, what Redis
still holds, and, once the GCS is started again, whether the cluster serves (the named actor
found with its state, a new actor created).

    .venv/bin/python benchmarks/repro_redis_connection_loss.py [client_kill|idle_timeout|kill] [rounds]
"""

from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import psutil
import ray

from chaos import local_cluster, wait_until
from chaos._cluster import head_of
from chaos._redis import redis_of
from chaos._redis_faults import KillRedis, RedisClientKill, RedisFault, RedisIdleTimeout, inject_redis_fault
from chaos.cluster import redis_server

HOLD, WATCH = 5.0, 10.0
FAULTS: dict[str, RedisFault] = {"client_kill": RedisClientKill(), "idle_timeout": RedisIdleTimeout(timeout=1),
                                 "kill": KillRedis()}


@ray.remote(num_cpus=0, max_restarts=-1)
class Counter:
    def __init__(self) -> None:
        self.n = 0

    def add(self) -> int:
        self.n += 1
        return self.n


def exited(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def last_fatal(logs: str) -> str:
    with open(os.path.join(logs, "gcs_server.out"), errors="replace") as f:
        lines = [line for line in f if " C " in line[:40] or "Check failed" in line]
    return lines[-1].strip()[:200] if lines else "none"


def one_round(case: str) -> str:
    with redis_server() as address, local_cluster(nodes=1, num_cpus=2, redis_address=address,
                                                  log_to_driver=False) as cluster:
        head, server = head_of(cluster.address), redis_of(address)
        counter = Counter.options(name="c", lifetime="detached").remote()
        ray.get(counter.add.remote(), timeout=60)
        pid, start, gone = head.gcs_pid(), time.monotonic(), None
        with inject_redis_fault(FAULTS[case], server, gcs_pid=pid, journal=lambda e: print("  ", e.step, e.detail)):
            while time.monotonic() - start < (HOLD if case != "client_kill" else WATCH):
                if gone is None and exited(pid):
                    gone = time.monotonic() - start
                time.sleep(0.05)  # the watch's poll
        if gone is None:
            try:
                gone = wait_until(lambda: exited(pid) and time.monotonic() - start, timeout=WATCH, interval=0.05)
            except Exception:  # noqa: BLE001 - it kept running: that is the finding's other side
                pass
        keys = server.command("DBSIZE")
        line = (f"{case}: GCS exited {gone:.2f} s after the fault" if gone is not None else
                f"{case}: GCS still running {time.monotonic() - start:.1f} s after the fault")
        line += f"; Redis up with {keys} keys; GCS's last fatal line: {last_fatal(head.node.get_logs_dir_path())}"
        if gone is not None:
            head.node.kill_gcs_server(check_alive=False)
            new, took = head.restart_gcs(cluster.address)
            value = ray.get(ray.get_actor("c").add.remote(), timeout=30)
            line += f"; restarted as pid {new} in {took:.2f} s, the named actor answered {value}"
        fresh = Counter.remote()
        line += f"; a new actor answered {ray.get(fresh.add.remote(), timeout=30)}"
        ray.kill(counter)
        return line


def main() -> None:
    case = next((a for a in sys.argv[1:] if a in FAULTS), "client_kill")
    rounds = int(next((a for a in sys.argv[1:] if a.isdigit()), "1"))
    for i in range(rounds):
        print(f"round {i + 1}: {one_round(case)}", flush=True)


if __name__ == "__main__":
    main()
