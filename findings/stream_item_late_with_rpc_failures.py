"""Standalone reproduction: a streaming generator on a node whose RPCs fail now and then (Ray's own
testing knob, ``RAY_testing_rpc_failure``) may deliver its first item only after 30 s. Found by
raychaos's hunt as a stream that gave no item within its 30 s bound, on the node failing RPCs,
while the driver filled the head's object store past capacity.

Ray's RPC layer retries failed RPCs, and the knob is how Ray's own tests check that each RPC
survives an injected failure of its request, of its reply, or while in flight. Seen: most first
items arrive within a second or a few; a few take over 30 s.

A head (2 CPUs) and one node started with the knob for every method (``--no-rpc-failures``: without
it, a control), each with a 96 MiB object store. Then ``--tries`` times: a task on the head, a
``ray.put`` on the head, and a generator (``num_returns="streaming"``, Ray's default retries) on the
knob's node given the task's ref nested in a list and the put's ref, yielding 200 KiB items; while
it starts, the driver puts 144 MiB (1.5 times the store) into the head's store and drops it
(``--no-pressure``: not). From then, the first item is awaited (its ref, then its value) for up to
``--bound`` seconds and its latency printed; a try over 30 s (the hunt's bound), or with no first
item within the bound, counts as reproduced. Each stream is taken to its end before the next.

    python findings/stream_item_late_with_rpc_failures.py [--tries N] [--bound S] [--no-pressure] [--no-rpc-failures]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HUNT_BOUND = 30.0  # seconds the hunt gives a get: a first item later than this is its "hang"
SHARE = 10  # percent of requests, replies and calls in flight failed by the knob, every method
STORE = 96 * 1024 * 1024
CHUNK = 16 * 1024 * 1024
PAD = 200 * 1024  # past Ray's 100 KiB inline limit: each item lives in an object store


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


def first_item(stream: object, pressure: bool, bound: float) -> float | None:
    """Seconds from the pressure's end until the stream's first item was got; None when none was
    got within ``bound`` (no ref came, or its value could not be fetched). The rest of its items
    are taken too (bounded), so the next try's stream finds the node idle."""
    import ray
    from ray.exceptions import GetTimeoutError

    if pressure:  # past the head's capacity: Ray spills what its store holds, then frees it
        held = [ray.put(bytes(CHUNK)) for _ in range(STORE * 3 // 2 // CHUNK)]
        del held
    started, first = time.monotonic(), None
    try:
        while not (ref := stream._next_sync(timeout_s=bound)).is_nil():  # type: ignore[attr-defined]
            ray.get(ref, timeout=bound)
            first = time.monotonic() - started if first is None else first
            if time.monotonic() - started > bound:
                break
    except StopIteration:  # its last item taken
        return first
    except GetTimeoutError:  # a ref came, its value did not within the bound
        pass
    ray.cancel(stream, force=True)  # none came within the bound, or past it
    return first


def run(tries: int, bound: float, pressure: bool, rpc_failures: bool) -> list[float | None]:
    import ray
    from ray.cluster_utils import Cluster

    @ray.remote(max_retries=0, resources={"head": 0.01})
    def task(const: int) -> int:
        return const

    @ray.remote(num_returns="streaming", resources={"knob": 0.01})
    def stream(const: int, nested: list, value: int):  # type: ignore[no-untyped-def]
        base = const + ray.get(nested[0], timeout=60) + value
        for i in range(4):
            yield [base + i, bytes(PAD)]

    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "object_store_memory": STORE,
                                                            "resources": {"head": 1.0}, "include_dashboard": False})
    try:
        cluster.add_node(num_cpus=1, object_store_memory=STORE, resources={"knob": 1.0},
                         env_vars=knob() if rpc_failures else {})
        cluster.wait_for_nodes(timeout=60)
        ray.init(address=cluster.address, log_to_driver=False)
        seen = []
        for attempt in range(tries):
            late = first_item(stream.remote(9, [task.remote(4)], ray.put(3)), pressure, bound)
            seen.append(late)
            print(f"try {attempt}: " + (f"NONE within {bound:g} s" if late is None else f"{late:.1f} s"), flush=True)
        return seen
    finally:
        ray.shutdown()
        cluster.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=60)
    parser.add_argument("--bound", type=float, default=60.0, help="seconds to wait for a first item (default 60)")
    parser.add_argument("--no-pressure", action="store_true", help="a control: the head's store is not filled")
    parser.add_argument("--no-rpc-failures", action="store_true", help="a control: no RPC failure knob")
    args = parser.parse_args()
    import ray

    print(f"Ray {ray.__version__}, Python {sys.version.split()[0]}, {os.cpu_count()} CPUs; RPC failures "
          f"{'off' if args.no_rpc_failures else f'{SHARE} %'}, pressure {'off' if args.no_pressure else 'on'}")
    seen = run(args.tries, args.bound, not args.no_pressure, not args.no_rpc_failures)
    late = sorted(s for s in seen if s is not None)
    missing = sum(s is None for s in seen)
    over = sum(s > HUNT_BOUND for s in late) + missing
    print(f"first items: median {late[len(late) // 2]:.1f} s, slowest {late[-1]:.1f} s; over {HUNT_BOUND:g} s: "
          f"{over - missing}; none within {args.bound:g} s: {missing}" if late else "no first item came")
    print(f"REPRODUCED {over} of {len(seen)}")


if __name__ == "__main__":
    main()
