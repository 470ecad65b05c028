"""Standalone reproduction: calls of an actor on a node whose RPCs fail now and then (Ray's own
testing knob, ``RAY_testing_rpc_failure``) may never return nor raise. Found by raychaos's hunt
under a GCS restart on Redis as well; here the knob alone did it too.

Ray's GCS fault tolerance page says that while the GCS restarts (its tables kept in Redis),
running actors stay alive and actor calls go on. Ray's RPC layer retries failed RPCs, and the
knob is how Ray's own tests check that each RPC survives an injected failure of its request, of
its reply, or while in flight. Seen: an actor (``max_restarts=-1``, ``max_task_retries=0``)
living on the node that fails 10 % of its RPCs each way is called; two calls submitted next
(during a GCS restart, or not) never return (``ray.get`` times out after ``BOUND`` s), while the
State API shows the actor alive and never restarted.

Each round runs in its own process: Debian's ``redis-server`` on a free port, a head with
``RAY_REDIS_ADDRESS`` set (and 1 s health checks), and one more node started with the knob for
every method (``--no-rpc-failures``: without it, a control). Then ``--tries`` times: an actor is
created on that node and answers; one call (returning a ref the actor ``ray.put``) is submitted;
the GCS is SIGKILLed and started again from the main thread (``--no-gcs-restart``: not); two
calls are submitted at once (one given the driver's ``ray.put`` ref and the first call's result
nested in a list); each result is fetched, each ``ray.get`` bounded.

    python findings/actor_call_hangs_after_gcs_restart_with_rpc_failures.py \\
        [--no-rpc-failures] [--no-gcs-restart] [--tries K] [rounds]
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

BOUND = 30.0  # seconds a call may take before it counts as hung
SHARE = 10  # percent of requests, replies and calls in flight failed by the knob, every method
ROUND_BOUND = 900.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--save", "", "--appendonly", "no"],
                            stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # bounded: Redis answers within a second here
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"redis-server on port {port} did not answer within 10 s")


def knob() -> dict[str, str]:
    import ray

    minor = int(ray.__version__.split(".")[1])
    if minor >= 54:  # JSON since Ray 2.54; before it "M=max:req:resp", a fourth share (in flight) from 2.52
        value = json.dumps({"*": {"num_failures": -1, "req_failure_prob": SHARE, "resp_failure_prob": SHARE,
                                  "in_flight_failure_prob": SHARE}})
    else:
        value = f"*=-1:{SHARE}:{SHARE}" + (f":{SHARE}" if minor >= 52 else "")
    # Every node of this cluster shares the machine's address: intra-node calls must fail too.
    return {"RAY_testing_rpc_failure": value, "RAY_testing_rpc_failure_avoid_intra_node_failures": "0"}


def child(tries: int, rpc_failures: bool, gcs_restart: bool) -> None:
    import ray
    from ray.cluster_utils import Cluster
    from ray.exceptions import GetTimeoutError
    from ray.util.state import list_actors

    @ray.remote(max_restarts=-1, max_task_retries=0, num_cpus=0, resources={"knob": 0.01})
    class Holder:
        def ready(self) -> int:
            return 1

        def boxed(self, const: int) -> list[ray.ObjectRef]:
            return [ray.put(const)]

        def total(self, const: int, value: int, nested: list[ray.ObjectRef]) -> int:
            inner = ray.get(nested[0], timeout=BOUND)  # the first call's result: [a ref it put]
            return const + value + ray.get(inner[0], timeout=BOUND)

    config = {"health_check_initial_delay_ms": 1000, "health_check_period_ms": 1000,
              "health_check_timeout_ms": 2000, "health_check_failure_threshold": 3}
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": True,
                                                            "_system_config": config})
    cluster.add_node(num_cpus=1, resources={"knob": 1.0}, env_vars=knob() if rpc_failures else {})
    cluster.wait_for_nodes(timeout=60)
    ray.init(address=cluster.address, log_to_driver=False)
    for attempt in range(tries):
        put, holder = ray.put(5), Holder.remote()
        ray.get(holder.ready.remote(), timeout=BOUND)
        first = holder.boxed.remote(4)
        if gcs_restart:
            cluster.head_node.kill_gcs_server()
            cluster.head_node.start_gcs_server()  # from the main thread, which lives on
        later = [holder.total.remote(4, put, [first]), holder.boxed.remote(1)]
        seen = []
        for ref, boxed in ((first, True), (later[0], False), (later[1], True)):
            try:
                value = ray.get(ref, timeout=BOUND)
                if boxed:  # the ref the actor put: fetched from its node
                    ray.get(value[0], timeout=BOUND)
                seen.append("returned")
            except GetTimeoutError:
                seen.append(f"HUNG {BOUND:g} s")
            except Exception as exc:  # noqa: BLE001 - reported as it is
                seen.append(type(exc).__name__)
        state = [(a.state, a.num_restarts) for a in list_actors(address=cluster.address, detail=True, timeout=10)
                 if a.actor_id == holder._actor_id.hex()]
        print(f"try {attempt}: {', '.join(seen)}; the actor (state, restarts): {state}", flush=True)
        ray.kill(holder)


def kill_session(sid: int) -> None:
    """SIGKILL what is left of a round: every process of its session (Ray's)."""
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # gone meanwhile
        if int(fields[3]) == sid:  # the session id, after state, ppid and pgrp
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(stat.split("/")[2]), signal.SIGKILL)


def one_round(args: list[str]) -> tuple[int, int, str]:
    """One driver in its own session, with its own Redis: (tries that hung, tries, its lines)."""
    redis, address = start_redis()
    try:
        # A file, not a pipe: Ray's own processes inherit the driver's output and outlive it.
        with tempfile.TemporaryFile("w+") as out:
            proc = subprocess.Popen([sys.executable, __file__, "--child", *args], text=True, stdout=out,
                                    stderr=subprocess.DEVNULL, start_new_session=True,
                                    env={**os.environ, "RAY_REDIS_ADDRESS": address})
            try:
                proc.wait(timeout=ROUND_BOUND)
            finally:
                kill_session(proc.pid)
                proc.wait(timeout=10)
            out.seek(0)
            lines = [line.strip() for line in out if line.startswith("try ")]
    finally:
        redis.kill()
        redis.wait(timeout=10)
    hung = sum("HUNG" in line for line in lines)
    return hung, len(lines), "\n  ".join(lines) + f"\n  (exit {proc.returncode})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rounds", type=int, nargs="?", default=2)
    parser.add_argument("--tries", type=int, default=8, help="actors per round (default 8)")
    parser.add_argument("--no-rpc-failures", action="store_true", help="a control: no RPC failure knob")
    parser.add_argument("--no-gcs-restart", action="store_true", help="a control: the GCS is not restarted")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.tries, not args.no_rpc_failures, not args.no_gcs_restart)
        return
    import ray

    passed = [f"--tries={args.tries}"] + [flag for flag, on in (("--no-rpc-failures", args.no_rpc_failures),
                                                                ("--no-gcs-restart", args.no_gcs_restart)) if on]
    print(f"Ray {ray.__version__}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs; "
          f"RPC failures {'off' if args.no_rpc_failures else f'{SHARE} %'}, "
          f"GCS restart {'off' if args.no_gcs_restart else 'on'}")
    reproduced = 0
    for index in range(args.rounds):
        hung, tries, lines = one_round(passed)
        reproduced += hung > 0
        print(f"round {index}: {hung} of {tries} tries hung:\n  {lines}", flush=True)
    print(f"REPRODUCED {reproduced} of {args.rounds}")


if __name__ == "__main__":
    main()
