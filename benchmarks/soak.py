"""``make soak``: the concurrent history, driven for a set time under random-time kills.

Four replay-buffer actors (WAL durability, incremental checkpoints, ``max_restarts=-1``,
``max_task_retries=-1``), each with three writers keeping four adds in flight and a nemesis
that SIGKILLs it at random times (each kill confirmed, each restart awaited before the next).
At the end the set checker reads every actor: acknowledged writes lost, duplicated, or stored
without being sent. Exit status 1 on any of those, or on any writer or nemesis error.

    .venv/bin/python benchmarks/soak.py --seconds 600 [--actors 3] [--gap 0.05 0.4]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]

import ray
from ray import cloudpickle

import histories
from benchmarks._common import console, machine, table
from chaos import local_cluster
from histories import HistoryRun, add_row, buffer_keys, run_history, start_buffer

cloudpickle.register_pickle_by_value(histories)  # workers cannot import tests/
CAPACITY = 1 << 17  # more than a writer's cap × 3: nothing is evicted in a soak
MAX_WRITES = 40_000


def soak_one(i: int, root: str, seconds: float, gap: tuple[float, float], out: dict[int, HistoryRun]) -> None:
    actor = start_buffer(f"{root}/a{i}", CAPACITY, every_n=64)
    stop = threading.Event()
    timer = threading.Timer(seconds, stop.set)
    timer.start()
    try:
        out[i] = run_history(actor, add_row(actor), lambda: buffer_keys(actor), seed=i, gap=gap,
                             stop=stop, max_writes=MAX_WRITES)
    finally:
        timer.cancel()
        ray.kill(actor)


def progress(runs: dict[int, HistoryRun], start: float, seconds: float, done: threading.Event) -> None:
    while not done.wait(30.0):  # a progress line every 30 s
        console.print(f"soak: {time.monotonic() - start:.0f}/{seconds:.0f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--actors", type=int, default=4)
    parser.add_argument("--gap", type=float, nargs=2, default=(0.05, 0.3), metavar=("MIN", "MAX"),
                        help="seconds between a restart and the next kill, drawn uniformly")
    args = parser.parse_args()
    if args.seconds <= 0 or args.actors < 1 or not 0 <= args.gap[0] <= args.gap[1]:
        parser.error(f"need --seconds > 0, --actors >= 1, 0 <= MIN <= MAX; got {args.seconds}, "
                     f"{args.actors}, {args.gap}")
    runs: dict[int, HistoryRun] = {}
    start, done = time.monotonic(), threading.Event()
    with tempfile.TemporaryDirectory(prefix="raychaos-soak-") as root, \
            local_cluster(num_cpus=4, log_to_driver=False):
        threading.Thread(target=progress, args=(runs, start, args.seconds, done), daemon=True).start()
        threads = [threading.Thread(target=soak_one, args=(i, root, args.seconds, tuple(args.gap), runs))
                   for i in range(args.actors)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        done.set()
    return report(runs, args, time.monotonic() - start)


def report(runs: dict[int, HistoryRun], args: argparse.Namespace, elapsed: float) -> int:
    rows, bad = [], len(runs) != args.actors
    for i, run in sorted(runs.items()):
        v = run.verdict
        rows.append([f"actor {i}", str(run.kills), f"{v.acknowledged:,}", f"{v.stored:,}", str(len(v.lost)),
                     str(len(v.duplicated)), str(len(v.unexpected)), str(v.indeterminate),
                     ", ".join(f"{k}: {type(e).__name__}" for k, e in run.errors.items()) or "none"])
        bad |= not v.ok or bool(run.errors)
    total = [sum(r.kills for r in runs.values()), sum(r.verdict.acknowledged for r in runs.values())]
    rows.append(["all", f"{total[0]:,}", f"{total[1]:,}", "", str(sum(len(r.verdict.lost) for r in runs.values())),
                 str(sum(len(r.verdict.duplicated) for r in runs.values())), "", "", ""])
    table(f"Soak: {elapsed:.0f} s, {args.actors} actors, kill gap {args.gap[0]}–{args.gap[1]} s — {machine()}",
          ["", "kills survived", "acknowledged", "stored", "lost", "duplicated", "unexpected",
           "indeterminate", "errors"], rows)
    for i, run in sorted(runs.items()):
        if not run.verdict.ok or run.errors:
            console.print(f"actor {i}: {run.explain()}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
