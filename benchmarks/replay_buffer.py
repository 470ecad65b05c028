"""Replay buffer benchmark: one run, one table per question, ratios against peers.

    python benchmarks/replay_buffer.py [--quick] [--core]

Peers (installed by ``pip install -e .[bench]``): cpprb's PrioritizedReplayBuffer (C++), and
the reference chapter's list-based actor body (at 100k items: it is O(n) per sample).
Capacity 2^20, transitions obs[8] f32, action i64, reward f32, next_obs[8] f32, done f32,
batch 256, alpha 0.6, beta 0.4. Ours runs on its default trees (the compiled ones when numba
is installed), with a line forced onto numpy. Fills are timed in fresh processes and in this
one, five of each. Not a test: it prints figures, it asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import psutil

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from _common import (
    bare_mttr,
    console,
    fmt,
    interleaved,
    machine,
    median_seconds,
    mttr_row,
    mttr_table,
    rate,
    table,
)

from actors import CheckpointConfig, PrioritizedReplayBuffer, ReplayBufferActor, ReplayClient, _kernels, _pages
from actors._trees import _level_sizes
from actors._wire import pack_batch, pack_request
from actors.checkpoint import CheckpointStore
from chaos import local_cluster

CAPACITY, BATCH, INSERT = 2**20, 256, 1000
ALPHA, BETA = 0.6, 0.4
TIMEOUT = 60.0


def transitions(rng: np.random.Generator, n: int) -> dict[str, np.ndarray]:
    return {
        "obs": rng.random((n, 8), dtype=np.float32),
        "action": rng.integers(0, 2, n, dtype=np.int64),
        "reward": rng.random(n, dtype=np.float32),
        "next_obs": rng.random((n, 8), dtype=np.float32),
        "done": np.zeros(n, dtype=np.float32),
    }


class ChapterBuffer:
    """The reference chapter's ReplayBuffer body (section 4.2), verbatim in behaviour."""

    def __init__(self, capacity: int = 100000) -> None:
        self.capacity, self.buffer, self.priorities, self.position = capacity, [], [], 0

    def add(self, sample: Any, priority: float = 1.0) -> None:
        if len(self.buffer) < self.capacity:
            self.buffer.append(sample)
            self.priorities.append(priority)
        else:
            self.buffer[self.position] = sample
            self.priorities[self.position] = priority
        self.position = (self.position + 1) % self.capacity

    def sample(self, batch_size: int) -> tuple[list[Any], np.ndarray]:
        probs = np.array(self.priorities) / sum(self.priorities)
        indices = np.random.choice(len(self.buffer), batch_size, p=probs)
        return [self.buffer[i] for i in indices], indices

    def update_priority(self, indices: Any, new_priorities: Any) -> None:
        for idx, p in zip(indices, new_priorities):
            self.priorities[idx] = p


# -- core ------------------------------------------------------------------------------------

RUNS = 5  #: runs of both buffers per figure: min, median and max are printed
CPPRB_ENV = {"obs": {"shape": 8}, "action": {"dtype": np.int64}, "reward": {}, "next_obs": {"shape": 8}, "done": {}}


def _cpprb() -> Any:
    try:
        from cpprb import PrioritizedReplayBuffer as Cpprb
    except ImportError:
        return None
    return Cpprb


def make_ours() -> tuple[PrioritizedReplayBuffer, Callable[[dict[str, np.ndarray]], object]]:
    rb = PrioritizedReplayBuffer(CAPACITY, alpha=ALPHA, beta=BETA, seed=0)
    return rb, rb.add


def make_cpprb() -> tuple[Any, Callable[[dict[str, np.ndarray]], object]]:
    rb = _cpprb()(CAPACITY, CPPRB_ENV, alpha=ALPHA)
    return rb, lambda batch: rb.add(**batch)


def in_fresh_process(call: str) -> list[str]:
    """Run ``call`` (an expression over this module's names) in a new interpreter; return the
    words it printed. Peak RSS is measured there: ru_maxrss survives fork+exec (it would
    report this process's size), so the high-water mark is reset through clear_refs and read
    from VmHWM."""
    here = os.path.dirname(os.path.abspath(__file__))
    code = f"import sys; sys.path[:0] = [{here!r}, {os.path.dirname(here)!r}]\n" \
           f"import replay_buffer as b; print(*b.{call})"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          timeout=300).stdout.split()


def fill(which: str) -> tuple[float, int, float]:
    """Rows/s from nothing to a full buffer, the peak RSS growth, and the seconds the process
    took to load the compiled trees before (0 for cpprb), in a fresh process: the memory is
    what the kernel hands a new process."""
    rows, grown, load = in_fresh_process(f"fill_here({which!r})")
    return float(rows), int(grown), float(load)


def fill_here(which: str) -> tuple[float, int, float]:
    """One fill in this process: construction and every add of 2^20 rows, in batches of
    1,000. The process's one-time load of the compiled trees (a library's start, as its
    import is) is timed apart, before: the first tree a process builds pays it."""
    batch = transitions(np.random.default_rng(0), INSERT)
    load = load_trees() if which == "ours" else 0.0
    base = _reset_hwm()
    start = time.perf_counter()
    _, add = (make_ours if which == "ours" else make_cpprb)()
    for _ in range(CAPACITY // INSERT):
        add(batch)
    return CAPACITY // INSERT * INSERT / (time.perf_counter() - start), _hwm() - base, load


def load_trees() -> float:
    """Load the compiled trees for a 2^20 buffer if they are on (what a process's first tree
    does, once); return the seconds it took. No tree is built: its pages would be reused."""
    start = time.perf_counter()
    if _kernels.enabled():
        _kernels.prepare(len(_level_sizes(CAPACITY)) - 1)
    return time.perf_counter() - start


def _reset_hwm() -> int:
    """Reset the peak-RSS mark (VmHWM) to the current RSS; return it."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _hwm()


def _hwm() -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM"))


def ours_cycle(rb: PrioritizedReplayBuffer, rng: np.random.Generator) -> Callable[[], None]:
    def cycle() -> None:
        out = rb.sample(BATCH)
        rb.update_priorities(out["indices"], rng.random(BATCH))
    return cycle


def cpprb_cycle(rb: Any, rng: np.random.Generator) -> Callable[[], None]:
    def cycle() -> None:
        out = rb.sample(BATCH, beta=BETA)
        rb.update_priorities(out["indexes"], rng.random(BATCH) + 1e-6)
    return cycle


def on(path: str, fn: Callable[[], None]) -> Callable[[], None]:
    """``fn`` with the trees forced onto ``path`` (``RAYCHAOS_TREES``), then as they were."""
    def call() -> None:
        before = os.environ.get(_kernels.SWITCH)
        os.environ[_kernels.SWITCH] = path
        try:
            fn()
        finally:
            os.environ.pop(_kernels.SWITCH)
            if before is not None:
                os.environ[_kernels.SWITCH] = before
    return call


def fills(run: int) -> dict[str, tuple[float, float, int, float]]:
    """Each buffer's fill in a fresh process, then in this one (which holds the other figures'
    buffers and has allocated and freed before, as a training process has), with rows/s
    fresh, rows/s here, fresh RSS growth and load seconds. Who goes first alternates by run:
    the second fill may reuse the pages the first just gave back."""
    order = ("ours", "cpprb") if run % 2 == 0 else ("cpprb", "ours")
    fresh = {which: fill(which) for which in order}
    here = {which: fill_here(which)[0] for which in order}
    return {w: (fresh[w][0], here[w], fresh[w][1], fresh[w][2]) for w in order}


def one_pair(rng: np.random.Generator, seconds: float, run: int) -> dict[str, tuple[float, ...]]:
    """One run of each figure: the fills (fresh process and this one), then, on buffers filled
    here, steady-state inserts and sample+update cycles, interleaved (ours on the default
    trees, which are the compiled ones where numba is installed, ours forced onto numpy, cpprb)."""
    batch = transitions(rng, INSERT)
    filled_ = fills(run)
    (ours, ours_add), (peer, peer_add) = make_ours(), make_cpprb()
    for _ in range(CAPACITY // INSERT + 1):
        ours_add(batch)
        peer_add(batch)
    inserts = interleaved((partial(ours_add, batch), partial(peer_add, batch)), seconds=seconds, per_call=INSERT)
    cycles = interleaved((ours_cycle(ours, rng), on("numpy", ours_cycle(ours, rng)), cpprb_cycle(peer, rng)),
                         seconds=seconds)
    (o_fresh, o_here, o_mem, o_load), (p_fresh, p_here, p_mem, _) = filled_["ours"], filled_["cpprb"]
    return {"ours": (o_fresh, o_here, inserts[0], cycles[0], o_mem, o_load),
            "cpprb": (p_fresh, p_here, inserts[1], cycles[2], p_mem),
            "numpy": (cycles[1],)}


def spread(values: list[float]) -> list[str]:
    return [fmt(min(values)), fmt(statistics.median(values)), fmt(max(values))]


FIGURES = ("fill, fresh process (rows/s)", "fill, in this process (rows/s)", "inserts, full ring (rows/s)",
           "sample(256) + update (/s)")


def core_section(seconds: float) -> dict[str, float]:
    rng = np.random.default_rng(0)
    if _cpprb() is None:
        console.print("cpprb is not installed (pip install -e .[bench]): no peer to compare with")
        return {}
    trees = "compiled" if _kernels.enabled() else f"numpy ({_kernels.why_numpy()})"
    pairs = [one_pair(rng, seconds, run) for run in range(RUNS)]
    raw = sum(v.nbytes for v in transitions(rng, 1).values()) * CAPACITY  # the transitions alone
    rows = []
    for i, what in enumerate(FIGURES):
        ours, peer = [p["ours"][i] for p in pairs], [p["cpprb"][i] for p in pairs]
        rows.append([what, *spread(ours), *spread(peer), *spread([a / b for a, b in zip(ours, peer)])])
    slow, peer = [p["numpy"][0] for p in pairs], [p["cpprb"][3] for p in pairs]
    rows.append(["sample(256) + update, RAYCHAOS_TREES=numpy (/s)", *spread(slow), *spread(peer),
                 *spread([a / b for a, b in zip(slow, peer)])])
    table(f"Core at 2^20, {RUNS} runs of both (cpprb 11), ours on the {trees} trees: fills in fresh "
          "processes and in this one, the rest interleaved",
          ["figure", "ours min", "median", "max", "cpprb min", "median", "max",
           "ours/cpprb min", "median", "max"], rows)
    console.print(f"a fresh process's first tree loaded the compiled trees in "
                  f"{' / '.join(spread([p['ours'][5] for p in pairs]))} s (min / median / max), before its fill")
    first_touch_section()
    memory = [[name, fmt(statistics.median(p[name][4] for p in pairs) / 2**20),
               fmt(statistics.median(p[name][4] for p in pairs) / raw)] for name in ("ours", "cpprb")]
    table("Memory of a fill (peak RSS growth, fresh process, median)", ["buffer", "MiB", "vs raw transitions"],
          memory)
    chapter = bench_chapter(rng, seconds)
    table("The reference chapter's list-based buffer (100k items)", ["figure", "chapter", "ours/chapter"],
          [["inserts/s", fmt(chapter[0]), fmt(statistics.median(p["ours"][2] for p in pairs) / chapter[0])],
           ["sample+update/s", fmt(chapter[1]), fmt(statistics.median(p["ours"][3] for p in pairs) / chapter[1])]])
    return {}


TOUCHED = 96 << 20  #: bytes first touched by touch_here: about a 2^20 buffer's columns


def touch_here(how: str) -> tuple[float]:
    """MiB/s from allocating TOUCHED bytes to having written every page once: with numpy's
    np.zeros (which asks for transparent huge pages) or as the buffer allocates (_pages)."""
    start = time.perf_counter()
    memory = np.zeros(TOUCHED, np.uint8) if how == "numpy" else _pages.zeros(TOUCHED, np.uint8)
    memory[::4096] = 1
    return (TOUCHED / 2**20 / (time.perf_counter() - start),)


def first_touch_section() -> None:
    """Why a fill's speed depends on its pages: the same first touch, five fresh processes of
    each allocation, alternating."""
    rates: dict[str, list[float]] = {"numpy": [], "pages": []}
    for run in range(RUNS):
        for how in ("numpy", "pages") if run % 2 == 0 else ("pages", "numpy"):
            rates[how].append(float(in_fresh_process(f"touch_here({how!r})")[0]))
    table(f"First touch of {TOUCHED >> 20} MiB in a fresh process (MiB/s), {RUNS} processes each",
          ["allocation", "min", "median", "max"],
          [["np.zeros (numpy asks for huge pages)", *spread(rates["numpy"])],
           ["the buffer's (4 KiB pages, populated at once)", *spread(rates["pages"])]])


def bench_chapter(rng: np.random.Generator, seconds: float) -> tuple[float, float]:
    rb = ChapterBuffer(100_000)
    rows = transitions(rng, INSERT)
    samples = [{k: v[i] for k, v in rows.items()} for i in range(INSERT)]
    for _ in range(100):
        for s in samples:
            rb.add(s)

    def insert() -> None:
        for s in samples:
            rb.add(s)

    def cycle() -> None:
        _, idx = rb.sample(BATCH)
        rb.update_priority(idx, rng.random(BATCH) + 1e-6)

    return rate(insert, seconds=seconds, per_call=INSERT), rate(cycle, seconds=seconds)


# -- checkpoint ------------------------------------------------------------------------------


def filled(n: int) -> PrioritizedReplayBuffer:
    rb = PrioritizedReplayBuffer(n, alpha=ALPHA, beta=BETA, seed=0)
    rng = np.random.default_rng(1)
    for _ in range(n // INSERT + 1):
        rb.add(transitions(rng, INSERT))
    return rb


def checkpoint_section(root: str) -> None:
    rb = filled(CAPACITY)
    state = rb.state_dict()
    arrays = {**state["columns"], "leaves": state["leaves"],
              **{f"tree_{k}": v for k, v in state["tree"].items()}}
    nbytes = sum(a.nbytes for a in arrays.values())
    path = f"{root}/plain.npz"

    def npz_load() -> None:
        with np.load(path, allow_pickle=False) as z:
            {k: z[k] for k in z.files}

    save_np = median_seconds(lambda: np.savez(path, **arrays))
    load_np = median_seconds(npz_load)
    store = CheckpointStore(f"{root}/ckpt", keep=2)
    save = median_seconds(lambda: store.save(rb.state_dict()))

    def restore() -> None:
        (tree,) = store.load_latest().chain
        PrioritizedReplayBuffer(CAPACITY).load_state_dict(tree)

    load = median_seconds(restore)
    incremental_section(root)
    table(f"Checkpoint of 2^20 transitions ({nbytes / 2**20:.0f} MiB), median of 5",
          ["what", "save s", "restore s", "save+restore s", "ratio"],
          [["np.savez + np.load (no fsync, no checksums)", fmt(save_np), fmt(load_np),
            fmt(save_np + load_np), "1.00"],
           ["raychaos checkpoint (fsync, crc32, manifest)", fmt(save), fmt(load),
            fmt(save + load), fmt((save + load) / (save_np + load_np))]])
    peak_restore(root, nbytes)


def incremental_section(root: str) -> None:
    cfg = CheckpointConfig(storage=f"{root}/incr", policy="on_demand", incremental=True)
    actor = ReplayBufferActor(CAPACITY, checkpoint=cfg, alpha=ALPHA, beta=BETA, seed=0,
                              restore="never")
    rng = np.random.default_rng(4)
    for _ in range(CAPACITY // INSERT + 1):
        actor.add(transitions(rng, INSERT))
    rows = []
    for _ in range(3):
        full = actor.checkpoint(full=True)
        slots = rng.choice(CAPACITY, CAPACITY // 100, replace=False)
        actor.update_priorities(slots, rng.random(len(slots)))
        delta = actor.checkpoint()
        rows.append((full.seconds, full.nbytes, delta.seconds, delta.nbytes))
    f_s, f_b, d_s, d_b = (float(np.median(c)) for c in zip(*rows))
    table("Incremental checkpoint after 1% of 2^20 slots changed (median of 3)",
          ["checkpoint", "seconds", "MiB", "seconds vs full"],
          [["full", fmt(f_s), fmt(f_b / 2**20), "1.00"],
           ["incremental (changed slots + trees)", fmt(d_s), fmt(d_b / 2**20), fmt(d_s / f_s)]])


def peak_restore(root: str, nbytes: int) -> None:
    (grown,) = in_fresh_process(f"restore_here({root!r})")
    table("Restore memory (fresh process: peak RSS during restore minus RSS before)",
          ["state MiB", "peak RSS growth MiB", "copies of the state"],
          [[fmt(nbytes / 2**20), fmt(int(grown) / 2**20), fmt(int(grown) / nbytes)]])


def restore_here(root: str) -> tuple[int]:
    load_trees()  # numba's own memory is not the restore's
    base = _reset_hwm()
    (tree,) = CheckpointStore(f"{root}/ckpt").load_latest().chain
    rb = PrioritizedReplayBuffer(CAPACITY)
    rb.load_state_dict(tree)
    del tree
    return (_hwm() - base,)


# -- through Ray -----------------------------------------------------------------------------


class Floor:
    """Ray's own cost of a learner's step: a packed request in, a packed batch's bytes back,
    and no work between. What a step costs beyond this line is the buffer's."""

    def __init__(self, batch: bytes) -> None:
        self.batch = batch

    def step(self, request: bytes) -> bytes:
        return self.batch


def round_trips(actor: Any, compiled_actor: Any, rng: np.random.Generator) -> list[Callable[[], object]]:
    """A no-op call, the same bytes as a step's through a method that does nothing, sample,
    sample then update (two calls), sample_and_update with numpy arrays on the wire, and
    through ReplayClient (one bytes each way) on the numpy trees and on the compiled ones:
    timed interleaved, as one."""
    import ray

    def get(ref: Any) -> Any:
        return ray.get(ref, timeout=TIMEOUT)

    request = pack_request(BATCH, np.arange(BATCH), rng.random(BATCH), None)
    floor = ray.remote(Floor).remote(pack_batch(get(actor.sample.remote(BATCH))))

    def cycle() -> None:
        out = get(actor.sample.remote(BATCH))
        get(actor.update_priorities.remote(out["indices"], rng.random(BATCH)))

    last = {"arrays": get(actor.sample.remote(BATCH))}

    def one_call() -> None:
        last["arrays"] = get(actor.sample_and_update.remote(BATCH, last["arrays"]["indices"], rng.random(BATCH)))

    return [lambda: get(actor.ping.remote()), lambda: get(floor.step.remote(request)),
            lambda: get(actor.sample.remote(BATCH)), cycle, one_call,
            learner(ReplayClient(actor, timeout=TIMEOUT), rng),
            learner(ReplayClient(compiled_actor, timeout=TIMEOUT), rng)]


def learner(client: ReplayClient, rng: np.random.Generator) -> Callable[[], object]:
    """A learner's step through ``client``: the previous batch's priorities set, the next drawn."""
    last = {"batch": client.sample_and_update(BATCH)}

    def step() -> None:
        last["batch"] = client.sample_and_update(BATCH, last["batch"]["indices"], rng.random(BATCH))
    return step


def filled_actor(root: str, *, trees: str) -> Any:
    """A ReplayBufferActor holding 2^20 transitions, on the numpy trees or the compiled ones."""
    import ray

    env = {"runtime_env": {"env_vars": {_kernels.SWITCH: trees}}}
    actor = ray.remote(max_restarts=3, max_task_retries=-1)(ReplayBufferActor).options(**env).remote(
        CAPACITY, checkpoint=CheckpointConfig(storage=f"{root}/actor-{trees}", every_n=10**9),
        alpha=ALPHA, beta=BETA, seed=0)
    batch = transitions(np.random.default_rng(2), INSERT)
    for _ in range(CAPACITY // INSERT + 1):
        ray.get(actor.add.remote(batch), timeout=TIMEOUT)
    return actor


def actor_section(root: str, seconds: float) -> None:
    import ray

    actor, compiled_actor = filled_actor(root, trees="numpy"), filled_actor(root, trees="compiled")
    # Five rounds, each timing the seven calls interleaved: a round's ratios are against that
    # round's no-op, and the one-call line is judged by its minimum, as sample+update is.
    fns = round_trips(actor, compiled_actor, np.random.default_rng(2))
    rounds = [interleaved(fns, seconds=len(fns) * seconds / RUNS) for _ in range(RUNS)]
    # Before state_dict(), whose serialised copy of the state would count as the actor's.
    rss = [psutil.Process(ray.get(a.pid.remote(), timeout=TIMEOUT)).memory_info().rss for a in (actor, compiled_actor)]
    empty_rss = [empty_actor_rss(root, trees=trees) for trees in ("numpy", "compiled")]
    state = ray.get(actor.state_dict.remote(), timeout=TIMEOUT)
    raw = sum(a.nbytes for a in state["buffer"]["columns"].values()) + \
        state["buffer"]["leaves"].nbytes + sum(a.nbytes for a in state["buffer"]["tree"].values())
    del state
    ray.kill(actor)
    ray.kill(compiled_actor)
    calls = ["no-op actor method", "a step's bytes each way, no work (Ray's floor)",
             "sample(256)", "sample + update_priorities (2 calls)",
             "sample_and_update (1 call, numpy arrays on the wire)",
             "ReplayClient.sample_and_update (1 call, one bytes each way)",
             "the same, the actor on the compiled trees"]
    table(f"Through the actor (2^20 transitions), {RUNS} rounds of the calls interleaved",
          ["call", "round trips/s (median)", "vs no-op call: min / median / max"],
          [[call, fmt(statistics.median(r[k] for r in rounds)),
            " / ".join(spread([r[k] / r[0] for r in rounds]))] for k, call in enumerate(calls)])
    table("Actor memory at 2^20 transitions (growth: RSS minus an empty actor's)",
          ["trees", "raw columns + trees MiB", "actor RSS MiB", "empty actor RSS MiB", "growth / raw"],
          [[trees, fmt(raw / 2**20), fmt(r / 2**20), fmt(e / 2**20), fmt((r - e) / raw)]
           for trees, r, e in zip(("numpy", "compiled (after its samples)"), rss, empty_rss)])


def empty_actor_rss(root: str, *, trees: str) -> int:
    """The RSS of a ReplayBufferActor that holds nothing, on ``trees``."""
    import ray

    env = {"runtime_env": {"env_vars": {_kernels.SWITCH: trees}}}
    empty = ray.remote(ReplayBufferActor).options(**env).remote(
        CAPACITY, checkpoint=CheckpointConfig(storage=f"{root}/empty-{trees}"), seed=0)
    rss: int = psutil.Process(ray.get(empty.pid.remote(), timeout=TIMEOUT)).memory_info().rss
    ray.kill(empty)
    return rss


class NumpyTreesActor(ReplayBufferActor):
    """A ReplayBufferActor on the numpy trees, forced in its own process: a ``runtime_env``
    would keep it off Ray's prestarted workers, and its restarts would wait for a new one."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        os.environ[_kernels.SWITCH] = "numpy"
        super().__init__(*args, **kwargs)


def mttr_section(root: str) -> None:
    import ray

    bare, bare_times = bare_mttr()
    rng = np.random.default_rng(3)
    rows = []
    # The default trees (compiled where numba is installed: a restart loads numba), and numpy.
    for durability, cls in (("policy", ReplayBufferActor), ("wal", ReplayBufferActor),
                            ("policy", NumpyTreesActor)):
        trees = "numpy" if cls is NumpyTreesActor else ""
        cfg = CheckpointConfig(storage=f"{root}/mttr-{durability}{trees}", every_n=10**9, durability=durability)
        rb = ray.remote(max_restarts=-1, max_task_retries=-1)(cls).remote(100_000, checkpoint=cfg, seed=0)
        for _ in range(100):
            ray.get(rb.add.remote(transitions(rng, INSERT)), timeout=TIMEOUT)
        ray.get(rb.checkpoint.remote(), timeout=TIMEOUT)
        # First correct answer: the restarted actor reports all 100k transitions.
        label = f"{durability}, {trees or 'default'} trees"
        rows.append(mttr_row(f"ReplayBufferActor, 100k, {label}", rb,
                             lambda: ray.get(rb.size.remote(), timeout=TIMEOUT) == 100_000,
                             bare_times))
        ray.kill(rb)
    ray.kill(bare)
    mttr_table(rows, bare_times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shorter timing windows")
    parser.add_argument("--core", action="store_true", help="the in-process figures only (no checkpoints, no Ray)")
    args = parser.parse_args()
    seconds = 1.0 if args.quick else 3.0
    console.print(f"[bold]raychaos replay buffer benchmark[/] on {machine()}")
    core_section(seconds)
    if args.core:
        return
    with tempfile.TemporaryDirectory(prefix="rc-bench-") as root:
        checkpoint_section(root)
        with local_cluster(num_cpus=2, object_store_mb=1024, log_to_driver=False):
            actor_section(root, seconds)
            mttr_section(root)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    console.print(f"driver peak RSS {peak:.0f} MiB")


if __name__ == "__main__":
    main()
