"""The measurements behind each lesson: the chapter's mistake, then its fix, on real Ray.

Every figure is measured in the run (nothing is hard-coded); the tests assert only its
direction. Sleeps inside remote tasks stand for I/O or for work of a known length: they
are the workload being scheduled, not synchronisation.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from actors import CheckpointedCounter
from chaos import HangError, wait_until, watch
from scenarios._lessons import Measure, lesson

TIMEOUT = 30.0
Result = tuple[Sequence[Measure], Sequence[str]]


def _remote(fn: Any, **options: Any) -> Any:
    import ray

    return ray.remote(fn).options(**options) if options else ray.remote(fn)


def _io(seconds: float) -> float:
    time.sleep(seconds)  # the "I/O" being scheduled
    return seconds


def _warm(workers: int) -> None:
    """Start ``workers`` worker processes first, so neither side pays for process start-up.

    Ray keeps about one idle worker per CPU and stops the others after a second idle, so
    each side warms up right before it is timed.
    """
    import ray

    task = _remote(_io, num_cpus=0.01)
    ray.get([task.remote(0.3) for _ in range(workers)], timeout=TIMEOUT)


def _io_until(until: float) -> tuple[float, float]:
    """An "I/O" task that lasts until the wall-clock time ``until``; returns when it ran."""
    start = time.time()
    time.sleep(max(0.0, until - start))  # the "I/O" being scheduled
    return start, time.time()


def _concurrency(n: int, hold: float, **options: Any) -> int:
    """How many of ``n`` I/O tasks, declared with ``options``, run at one instant.

    Every task lasts until one wall-clock time, ``hold`` seconds after submission, and the
    count is taken just before it: a worker process that starts late still counts, and a
    task admitted only once another has finished (freeing its CPUs) never does.
    """
    import ray

    _warm(n)
    until = time.time() + hold
    task = _remote(_io_until, **options)
    spans = ray.get([task.remote(until) for _ in range(n)], timeout=TIMEOUT)
    instant = until - 0.1
    return sum(1 for start, end in spans if start <= instant < end)


def _timed(fn: Any, *, warm: int = 0) -> float:
    if warm:
        _warm(warm)
    start = time.monotonic()
    fn()
    return time.monotonic() - start


# -- 4.1 remote functions --------------------------------------------------------------------

_COUNTER = {"value": 0}


def _bump_global(n: int) -> int:
    _COUNTER["value"] += n  # lands in the worker's copy of the module, not the driver's
    return n


@lesson(id="01-global-state", section="4.1", title="Mutating a global inside a remote function",
        mistake="tasks add to a module-level counter", fix="tasks return their part; the driver sums",
        why="Each task runs in a worker process with its own copy of every global: the driver's stays "
            "as it was. Pass inputs as arguments and return outputs.")
def global_state(address: str) -> Result:
    import ray

    _COUNTER["value"] = 0
    task = _remote(_bump_global)
    refs = [task.remote(1) for _ in range(20)]
    ray.get(refs, timeout=TIMEOUT)
    lost_mistake = 20 - _COUNTER["value"]
    lost_fix = 20 - sum(ray.get([task.remote(1) for _ in range(20)], timeout=TIMEOUT))
    return [Measure("updates lost", "of 20", lost_mistake, lost_fix)], []


@lesson(id="02-num-cpus", section="4.1", title="Ignoring num_cpus for I/O-bound tasks",
        mistake="I/O tasks at the default num_cpus=1", fix="the same tasks at num_cpus=0.5",
        why="Ray admits a task when its declared CPUs are free, not when a core is busy: I/O tasks "
            "that hold a whole CPU each halve how many run at once.")
def num_cpus(address: str) -> Result:
    n = 2 * _all_cpus_free(address)  # twice what fits at 1 CPU each
    return [Measure(f"{n} I/O tasks running at once", "tasks", _concurrency(n, 2.0, num_cpus=1),
                    _concurrency(n, 2.0, num_cpus=0.5), better="higher")], []


@lesson(id="03-eager-get", section="4.1", title="Calling ray.get inside the submit loop",
        mistake="ray.get(f.remote(i)) for each i", fix="submit all, then one ray.get on the list",
        why="ray.get blocks until that one result exists, so the next task is not even submitted: "
            "the loop runs the tasks one after another.")
def eager_get(address: str) -> Result:
    import ray

    task = _remote(_io, num_cpus=0.5)
    eager = _timed(lambda: [ray.get(task.remote(0.3), timeout=TIMEOUT) for _ in range(6)], warm=4)
    batch = _timed(lambda: ray.get([task.remote(0.3) for _ in range(6)], timeout=TIMEOUT), warm=4)
    return [Measure("wall time for 6 × 0.3 s tasks", "s", eager, batch)], []


# -- 4.2 actors ------------------------------------------------------------------------------


class _SyncService:
    def slow(self) -> None:
        time.sleep(2.0)  # a long inference call

    def ping(self) -> float:
        return time.monotonic()


class _AsyncService:
    async def slow(self) -> None:
        import asyncio

        await asyncio.sleep(2.0)

    async def ping(self) -> float:
        return time.monotonic()


def _ping_latency(service: Any) -> float:
    import ray

    ray.get(service.ping.remote(), timeout=TIMEOUT)
    slow = service.slow.remote()
    latency = _timed(lambda: ray.get(service.ping.remote(), timeout=TIMEOUT))
    ray.get(slow, timeout=TIMEOUT)
    ray.kill(service)
    return latency


@lesson(id="04-blocking-method", section="4.2", title="A long actor method blocks every other call",
        mistake="a plain actor: ping() queued behind a 2 s slow()",
        fix="an async actor (or concurrency groups): ping() answers while slow() waits",
        why="A plain actor runs one method at a time, in call order. Async methods (or "
            "concurrency groups, or splitting the work) let short calls through.")
def blocking_method(address: str) -> Result:
    mistake = _ping_latency(_remote(_SyncService, num_cpus=0).remote())
    fix = _ping_latency(_remote(_AsyncService, num_cpus=0).remote())
    return [Measure("ping latency during slow()", "s", mistake, fix)], []


class _Idle:
    def ready(self) -> bool:
        return True


def _all_cpus_free(address: str) -> int:
    """The cluster's CPU count, once every CPU is free (what ran before has let go)."""
    import ray

    total = float(ray.cluster_resources().get("CPU", 0.0))
    wait_until(lambda: _free_cpus(address) >= total, timeout=TIMEOUT, what=f"all {total:g} CPUs to be free")
    return int(total)


def _free_cpus(address: str) -> float:
    import ray

    return float(ray.available_resources().get("CPU", 0.0))


@lesson(id="05-leaked-actors", section="4.2", title="Never destroying actors",
        mistake="two finished actors kept alive", fix="ray.kill (or exit_actor) when done",
        why="An actor keeps the resources it asked for until it exits: idle actors starve new work. "
            "ray.kill(handle) or ray.actor.exit_actor() from inside releases them.")
def leaked_actors(address: str) -> Result:
    import ray

    before = _free_cpus(address)
    actors = [_remote(_Idle, num_cpus=0.5).remote() for _ in range(2)]
    ray.get([a.ready.remote() for a in actors], timeout=TIMEOUT)
    # Resource views are refreshed asynchronously: wait (bounded) until the view settles.
    wait_until(lambda: _free_cpus(address) <= before - 1.0, timeout=TIMEOUT, what="the actors' CPUs to show")
    held = before - _free_cpus(address)
    for actor in actors:
        ray.kill(actor)
    wait_until(lambda: _free_cpus(address) >= before, timeout=TIMEOUT, what="the killed actors' CPUs to return")
    return [Measure("CPUs held by finished actors", "CPUs", held, before - _free_cpus(address))], []


class _PlainCounter:
    def __init__(self) -> None:
        self.value = 0

    def add(self, n: int) -> int:
        self.value += n
        return self.value

    def get(self) -> int:
        return self.value

    def pid(self) -> int:
        return os.getpid()


def _lost_after_kill(counter: Any, adds: int) -> int:
    import ray

    for _ in range(adds):
        ray.get(counter.add.remote(1), timeout=TIMEOUT)
    old = ray.get(counter.pid.remote(), timeout=TIMEOUT)
    os.kill(old, signal.SIGKILL)
    wait_until(lambda: ray.get(counter.pid.remote(), timeout=TIMEOUT) != old, timeout=TIMEOUT,
               what="the actor's restart")
    lost = adds - ray.get(counter.get.remote(), timeout=TIMEOUT)
    ray.kill(counter)
    return lost


@lesson(id="06-restarts-without-state", section="4.2", title="Relying on max_restarts alone",
        mistake="max_restarts=1, state in memory, SIGKILL",
        fix="a checkpointed actor (actors.CheckpointedCounter, WAL)",
        why="A restart re-runs __init__ in a new process: the process comes back, its memory does not. "
            "Checkpoint what matters (raychaos.actors: checkpoint + write-ahead log).")
def restarts_without_state(address: str) -> Result:
    opts = {"max_restarts": 1, "max_task_retries": -1, "num_cpus": 0}
    plain = _lost_after_kill(_remote(_PlainCounter, **opts).remote(), 10)
    with tempfile.TemporaryDirectory(prefix="raychaos-lesson-") as root:
        counter = _remote(CheckpointedCounter, **opts).remote(root, durability="wal", every_n=100)
        saved = _lost_after_kill(counter, 10)
    return [Measure("adds lost to one SIGKILL", "of 10", plain, saved)], []


# -- 4.3 ObjectRefs --------------------------------------------------------------------------


def _total(array: np.ndarray) -> float:
    return float(array[::4096].sum())


def _store_objects(address: str, refs: Sequence[Any]) -> tuple[int, int]:
    """How many of ``refs`` the object store still holds, and their bytes (State API)."""
    return _stored(address, [ref.hex() for ref in refs])


def _stored(address: str, hexes: Sequence[str]) -> tuple[int, int]:
    from ray.util.state import list_objects

    wanted = set(hexes)
    rows = list_objects(address=address, limit=10_000, raise_on_missing_output=False, timeout=TIMEOUT)
    sizes = {row.object_id: row.object_size or 0 for row in rows if row.object_id in wanted}
    return len(sizes), sum(sizes.values())


@lesson(id="07-get-then-put", section="4.3", title="ray.get then ray.put of the same data",
        mistake="x = ray.get(ref); task.remote(ray.put(x))", fix="task.remote(ref)",
        why="A ref can be passed on as it is: tasks receive the value, workers on the node share "
            "one copy. Getting and re-putting serialises it again and stores a second copy.")
def get_then_put(address: str) -> Result:
    import ray

    task, data = _remote(_total), ray.put(np.ones(40 * 2**20, dtype=np.uint8))
    start = time.monotonic()
    again = ray.put(ray.get(data, timeout=TIMEOUT))
    ray.get(task.remote(again), timeout=TIMEOUT)
    mistake_s, (_, mistake_bytes) = time.monotonic() - start, _store_objects(address, [data, again])
    start = time.monotonic()
    ray.get(task.remote(data), timeout=TIMEOUT)
    fix_s, (_, fix_bytes) = time.monotonic() - start, _store_objects(address, [data])
    del data, again
    return [Measure("bytes in the object store", "MiB", mistake_bytes / 2**20, fix_bytes / 2**20),
            Measure("time to hand the data to a task", "s", mistake_s, fix_s)], []


@lesson(id="08-held-refs", section="4.3", title="Holding ObjectRefs you no longer need",
        mistake="10 × 8 MiB results kept in a list after use", fix="del the refs once used",
        why="An object stays pinned in the store while any ref to it lives (reference counting). "
            "Drop refs (del, or let them go out of scope) to free the memory.")
def held_refs(address: str) -> Result:
    import ray

    make = _remote(np.ones)
    refs = [make.remote(8 * 2**20, dtype=np.uint8) for _ in range(10)]
    ray.wait(refs, num_returns=len(refs), timeout=TIMEOUT)
    hexes = [ref.hex() for ref in refs]
    held, held_bytes = _stored(address, hexes)
    del refs  # the fix: nothing refers to the results any more
    wait_until(lambda: _stored(address, hexes)[0] == 0, timeout=TIMEOUT, what="the dropped objects to be freed")
    left, left_bytes = _stored(address, hexes)
    return [Measure("objects pinned after use", "objects", held, left),
            Measure("bytes pinned after use", "MiB", held_bytes / 2**20, left_bytes / 2**20)], []


def _small(i: int) -> int:
    return i


@lesson(id="09-get-in-loop", section="4.3", title="ray.get one ref at a time in a loop",
        mistake="[ray.get(r) for r in refs] over 300 refs", fix="ray.get(refs) once",
        why="Each ray.get is a round trip to the object store and the owner; one call on the list "
            "fetches them together.")
def get_in_loop(address: str) -> Result:
    import ray

    task = _remote(_small)
    refs = [task.remote(i) for i in range(300)]
    ray.get(refs, timeout=TIMEOUT)  # every result exists: only the fetching is compared
    # Milliseconds each: the best of five runs, as a benchmark would, so noise cannot decide.
    one_by_one = min(_timed(lambda: [ray.get(r, timeout=TIMEOUT) for r in refs]) for _ in range(5))
    batched = min(_timed(lambda: ray.get(refs, timeout=TIMEOUT)) for _ in range(5))
    return [Measure("time to fetch 300 ready results (best of 5)", "s", one_by_one, batched)], []


# -- 4.4 ray.wait and ray.get ----------------------------------------------------------------


def _process(value: float) -> None:
    time.sleep(0.1)  # the driver's own work on each result


def _process_all(task: Any, durations: Sequence[float], *, as_completed: bool) -> float:
    import ray

    start = time.monotonic()
    refs = [task.remote(d) for d in durations]
    if not as_completed:
        for value in ray.get(refs, timeout=TIMEOUT):
            _process(value)
        return time.monotonic() - start
    while refs:
        ready, refs = ray.wait(refs, num_returns=1, timeout=TIMEOUT)
        _process(ray.get(ready[0], timeout=TIMEOUT))
    return time.monotonic() - start


@lesson(id="10-driver-bottleneck", section="4.4", title="ray.get on everything makes the driver the bottleneck",
        mistake="ray.get(all) then process each result", fix="ray.wait(num_returns=1) and process each as it lands",
        why="With one big ray.get the driver idles until the slowest task ends, then works alone; "
            "processing results as they complete overlaps its work with the cluster's.")
def driver_bottleneck(address: str) -> Result:
    task = _remote(_io, num_cpus=0.5)
    durations = [0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 0.3, 0.5]
    _warm(8)
    mistake = _process_all(task, durations, as_completed=False)
    _warm(8)
    fix = _process_all(task, durations, as_completed=True)
    return [Measure("time to process 8 results (0.1 s each)", "s", mistake, fix)], []


@lesson(id="11-no-timeout", section="4.4", title="Waiting with no timeout",
        mistake="ray.get(all refs) with a straggler among them (bounded here to 3 s: it would wait forever)",
        fix="ray.wait(..., timeout=0.5) in a loop; the watchdog names the straggler",
        why="Without a timeout one straggler or lost task blocks the loop forever and says nothing. "
            "A timeout keeps the loop alive; raychaos.chaos.watch says why the rest is pending.")
def no_timeout(address: str) -> Result:
    import ray
    from ray.exceptions import GetTimeoutError

    _warm(4)
    task = _remote(_io, num_cpus=0.25)
    refs = [task.remote(0.1) for _ in range(7)] + [task.remote(120.0)]  # the last is the straggler
    start, got = time.monotonic(), 0
    try:
        got = len(ray.get(refs, timeout=3.0))
    except GetTimeoutError:
        pass
    blocked = time.monotonic() - start
    handled, pending, start, longest = 0, list(refs), time.monotonic(), 0.0
    while pending and time.monotonic() - start < 3.0:
        waited = time.monotonic()
        ready, pending = ray.wait(pending, num_returns=len(pending), timeout=0.5)
        longest, handled = max(longest, time.monotonic() - waited), handled + len(ready)
    notes = _diagnose(pending, address)
    for ref in refs:
        ray.cancel(ref, force=True)
    return [Measure("results handled within 3 s", "of 8", got, handled, better="higher"),
            Measure("longest the loop was blocked in one call", "s", blocked, longest)], notes


def _diagnose(pending: Sequence[Any], address: str) -> list[str]:
    try:
        watch(pending, deadline=1.0, address=address)
    except HangError as exc:
        return [f"watchdog: {line.strip()}" for line in str(exc).splitlines() if line.strip()][:4]
    return []


def _maybe_fail(i: int) -> int:
    if i == 0:
        raise ValueError("task 0 failed")
    time.sleep(0.3)
    return i


@lesson(id="12-get-raises-first", section="4.4", title="ray.get on a list raises at the first failure",
        mistake="ray.get(refs) when one task raises", fix="ray.wait, then ray.get each ready ref in its own try",
        why="ray.get on a list raises the first error it meets and returns nothing, though the other "
            "results are there. ray.wait hands back each ref to handle on its own.")
def get_raises_first(address: str) -> Result:
    import ray
    from ray.exceptions import RayTaskError

    task = _remote(_maybe_fail, max_retries=0)
    refs = [task.remote(i) for i in range(6)]
    try:
        mistake = len(ray.get(refs, timeout=TIMEOUT))
    except RayTaskError:
        mistake = 0
    refs, fix = [task.remote(i) for i in range(6)], 0
    while refs:
        ready, refs = ray.wait(refs, num_returns=1, timeout=TIMEOUT)
        try:
            ray.get(ready[0], timeout=TIMEOUT)
            fix += 1
        except RayTaskError:
            continue
    return [Measure("successful results recovered", "of 5", mistake, fix, better="higher")], []


# -- 4.5 resources ---------------------------------------------------------------------------


@lesson(id="13-undeclared-gpu", section="4.5", title="Not declaring resources: GPU work as plain CPU tasks",
        mistake="2 training tasks at the default num_cpus=1 beside 4 env tasks",
        fix="training declares num_gpus=1, num_cpus=0",
        why="Ray schedules by what is declared. Undeclared GPU work queues for CPUs beside the env "
            "workers while the GPU stays idle. (This cluster has one logical GPU; the work is simulated.)",
        num_gpus=1)
def undeclared_gpu(address: str) -> Result:
    import ray

    env = _remote(_io, num_cpus=1)

    def makespan(train: Any) -> float:
        return _timed(lambda: ray.get([train.remote(1.0) for _ in range(2)] + [env.remote(1.0) for _ in range(4)],
                                      timeout=TIMEOUT), warm=6)


    mistake_train, fix_train = _remote(_train, num_cpus=1), _remote(_train, num_cpus=0, num_gpus=1)
    mistake, fix = makespan(mistake_train), makespan(fix_train)
    on_gpu = lambda train: sum(ray.get([train.remote(0.0) for _ in range(2)], timeout=TIMEOUT))  # noqa: E731
    return [Measure("time for 2 training + 4 env tasks", "s", mistake, fix),
            Measure("training tasks that got the GPU", "of 2", on_gpu(mistake_train), on_gpu(fix_train),
                    better="higher")], []


def _train(seconds: float) -> int:
    """Simulated training; returns how many GPUs Ray assigned to it."""
    import ray

    time.sleep(seconds)
    return len(ray.get_gpu_ids())


@lesson(id="14-over-request", section="4.5", title="Over-requesting resources",
        mistake="I/O tasks that ask for num_cpus=2", fix="ask for what they use: num_cpus=0.5",
        why="Declared CPUs are reserved whether used or not: a task that waits on I/O holding two CPUs "
            "keeps three other tasks out.")
def over_request(address: str) -> Result:
    n = 2 * _all_cpus_free(address)
    return [Measure(f"{n} I/O tasks running at once", "tasks", _concurrency(n, 2.0, num_cpus=2),
                    _concurrency(n, 2.0, num_cpus=0.5), better="higher")], []


class _Peer:
    def node(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()


def _nodes_spanned(options: dict[str, Any]) -> int:
    import ray

    peers = [_remote(_Peer, num_cpus=0.5, **options).remote() for _ in range(2)]
    nodes = set(ray.get([p.node.remote() for p in peers], timeout=TIMEOUT))
    for peer in peers:
        ray.kill(peer)
    return len(nodes)


@lesson(id="15-placement-groups", section="4.5", title="Ignoring placement groups",
        mistake="two communicating actors placed freely (SPREAD here)",
        fix="a STRICT_PACK placement group: both on one node",
        why="Without a placement group nothing keeps cooperating actors together: across nodes every "
            "call pays the network. STRICT_PACK reserves the bundles on one node, atomically.",
        nodes=3)
def placement_groups(address: str) -> Result:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    scattered = _nodes_spanned({"scheduling_strategy": "SPREAD"})
    group = placement_group([{"CPU": 0.5}, {"CPU": 0.5}], strategy="STRICT_PACK")
    ray.get(group.ready(), timeout=TIMEOUT)
    packed = _nodes_spanned({"scheduling_strategy": PlacementGroupSchedulingStrategy(group)})
    remove_placement_group(group)
    return [Measure("nodes the two actors span", "nodes", scattered, packed)], []


# -- the chapter's two tips ------------------------------------------------------------------


def _block(i: int) -> np.ndarray:
    return np.full(2**18, i, dtype=np.float32)  # 1 MiB


@lesson(id="t1-batches", section="4.1", title="Tip: collect results in batches with ray.wait",
        mistake="one ray.get of 120 × 1 MiB results", fix="ray.wait in batches of 10, each processed and dropped",
        why="One huge ray.get brings every value into the driver at once; batches bound the driver's "
            "memory by the batch size.", tip=True)
def batches(address: str) -> Result:
    import ray

    task = _remote(_block)
    values = ray.get([task.remote(i) for i in range(120)], timeout=TIMEOUT)
    mistake = sum(v.nbytes for v in values)
    del values
    pending, peak = [task.remote(i) for i in range(120)], 0
    while pending:
        ready, pending = ray.wait(pending, num_returns=min(10, len(pending)), timeout=TIMEOUT)
        batch = ray.get(ready, timeout=TIMEOUT)
        peak = max(peak, sum(v.nbytes for v in batch))
        del batch
    return [Measure("result bytes held by the driver at once", "MiB", mistake / 2**20, peak / 2**20)], []


def _crash() -> None:
    os._exit(1)  # a worker that dies every time


@lesson(id="t2-max-retries-0", section="4.5", title="Tip: max_retries=0 while watching the cluster",
        mistake="a task whose worker always crashes, retried without end (max_retries=-1)",
        fix="max_retries=0: WorkerCrashedError surfaces at once",
        why="Retries hide a failure that will not go away: the task just stays pending. During "
            "development run with max_retries=0 and watch the cluster, so failures surface.", tip=True)
def max_retries_zero(address: str) -> Result:
    import ray
    from ray.exceptions import WorkerCrashedError

    hidden, start = _remote(_crash, max_retries=-1).remote(), time.monotonic()
    ready, _ = ray.wait([hidden], timeout=5.0)  # bounded: it would stay hidden forever
    mistake = time.monotonic() - start
    notes = _diagnose([hidden], address) if not ready else []
    ray.cancel(hidden, force=True)
    start = time.monotonic()
    try:
        ray.get(_remote(_crash, max_retries=0).remote(), timeout=TIMEOUT)
    except WorkerCrashedError:
        pass
    fix = time.monotonic() - start
    return [Measure("time until the crash is visible", "s", mistake, fix)], notes
