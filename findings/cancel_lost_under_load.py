"""Standalone reproduction: a ``ray.cancel`` lost under load (a property's one flake, on its own).

``python findings/cancel_lost_under_load.py [--rounds N] [--load K] [--graph I]`` starts Ray
and, N times per graph, submits one of the task graphs on which the property flaked — a task that polls
for a release file (the property's ``cancel`` node), next to an actor whose process exits in
its call and a task depending on them — calls ``ray.cancel`` on the polling task at once,
and waits up to 10 s for it. ``--load K`` keeps K busy processes running meanwhile, as a
full test suite does on a 2-core machine (the flake showed up only under load).

A round ends ``cancelled`` (``TaskCancelledError``, what Ray documents for a cancelled
task), or ``lost``: 10 s after the cancel the task is still RUNNING (the State API says so,
and its Python code has started), as if never cancelled. Prints a table per graph, and
every lost round's evidence. Leaves no Ray process behind. Ray alone: no raychaos.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import ray
from ray.exceptions import RayError, TaskCancelledError

PENDING_FOR = 10.0
#: (name, [(kind, deps, max_retries)], index of the node to cancel, force) as the property ran them.
GRAPHS = [
    ("found: cancel next to actor exits and a crash",
     [("actor_exit", (), 1), ("flaky_crash", (), 0), ("cancel", (), 0), ("actor_flaky_exit", (0, 2), 1)], 2, False),
    ("baseline: cancel_force first, an actor waits on it",
     [("cancel", (), 1), ("actor_exit", (0,), 0), ("flaky_raise", (0, 1), 1)], 0, True),
    ("here: cancel_force after an actor exit",
     [("actor_exit", (), 0), ("cancel", (), 1), ("crash", (0, 1), 1)], 1, True),
]


@ray.remote
def run_node(index: int, kind: str, marker: str, *deps: object) -> int:
    """The property's task: it polls for its release (so a KeyboardInterrupt lands), crashes,
    or raises on its first attempt, as its kind says."""
    first_attempt = not os.path.exists(marker)
    Path(marker).touch()
    if kind == "crash" or (kind == "flaky_crash" and first_attempt):
        os._exit(1)
    if kind == "flaky_raise" and first_attempt:
        raise ValueError(f"node {index}, first attempt")
    deadline = time.monotonic() + 60
    while kind == "cancel" and not os.path.exists(marker + ".release") and time.monotonic() < deadline:
        time.sleep(0.01)
    return index


@ray.remote
class Host:
    def run(self, index: int, kind: str, marker: str, *deps: object) -> int:
        first_attempt = not os.path.exists(marker)
        Path(marker).touch()
        if kind == "actor_exit" or first_attempt:
            os._exit(1)
        return index


def submit(kind: str, index: int, marker: str, retries: int, deps: list[object]) -> ray.ObjectRef:
    if kind.startswith("actor"):
        host = Host.options(max_restarts=0 if kind == "actor_exit" else 1, max_task_retries=retries).remote()
        return host.run.remote(index, kind, marker, *deps)
    return run_node.options(max_retries=retries, retry_exceptions=True,
                            num_cpus=0 if kind == "cancel" else 1).remote(index, kind, marker, *deps)


def one_round(root: Path, graph: list[tuple[str, tuple[int, ...], int]], victim: int,
              force: bool) -> tuple[str, str | None]:
    """How the cancelled task ended, and the evidence when the cancel was lost (else None)."""
    root.mkdir()
    refs: list[ray.ObjectRef] = []
    for i, (kind, deps, retries) in enumerate(graph):
        refs.append(submit(kind, i, str(root / f"n{i}"), retries, [refs[d] for d in deps]))
    ray.cancel(refs[victim], force=force)
    ready, _ = ray.wait([refs[victim]], timeout=PENDING_FOR)
    evidence = "" if ready else _evidence(refs[victim], root / f"n{victim}")
    (root / f"n{victim}.release").touch()  # a lost cancel: let the task end
    ray.wait(refs, num_returns=len(refs), timeout=90)
    try:
        ray.get(refs[victim], timeout=30)
        outcome = "ran"
    except TaskCancelledError:
        outcome = "cancelled"
    except RayError as exc:
        outcome = type(exc).__name__
    return outcome, None if ready else evidence


def _evidence(ref: ray.ObjectRef, marker: Path) -> str:
    from ray.util.state import list_tasks

    rows = list_tasks(address=ray.get_runtime_context().gcs_address, detail=True, timeout=10,
                      filters=[("task_id", "=", ref.task_id().hex())], raise_on_missing_output=False)
    states = [(t.attempt_number, t.state) for t in rows]
    return f"its code started: {marker.exists()}; State API (attempt, state): {states}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--load", type=int, default=2, help="busy processes running meanwhile")
    parser.add_argument("--graph", type=int, choices=range(len(GRAPHS)), action="append",
                        help="run only this graph (repeatable; default: all)")
    parser.add_argument("--verbose", action="store_true", help="print every round as it ends")
    args = parser.parse_args()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.load)]
    print(f"ray.cancel at once after submit, {args.rounds} rounds per graph, {args.load} busy processes "
          f"(Ray {ray.__version__})")
    rows: list[str] = ["| graph | cancel | cancelled | lost (RUNNING 10 s later) | other |", "|---|---|---:|---:|---:|"]
    lost_lines: list[str] = []
    total_lost = 0
    ray.init(address="local", num_cpus=4, log_to_driver=False)
    try:
        with tempfile.TemporaryDirectory(prefix="finding-cancel-") as tmp:
            for g, (name, graph, victim, force) in enumerate(GRAPHS):
                if args.graph and g not in args.graph:
                    continue
                outcomes = []
                for r in range(args.rounds):
                    start = time.monotonic()
                    outcomes.append(one_round(Path(tmp) / f"g{g}r{r}", graph, victim, force))
                    if args.verbose:
                        print(f"{name} round {r}: {outcomes[-1][0]}, lost: {outcomes[-1][1]} "
                          f"({time.monotonic() - start:.1f} s)", flush=True)
                counts = Counter("lost" if lost is not None else o for o, lost in outcomes)
                lost_lines += [f"{name}: lost: {lost}" for _, lost in outcomes if lost is not None]
                rows.append(f"| {name} | force={force} | {counts['cancelled']} | {counts['lost']} | "
                            f"{args.rounds - counts['cancelled'] - counts['lost']} |")
                total_lost += counts["lost"]
                print(name, dict(counts), flush=True)
    finally:
        ray.shutdown()
        for hog in hogs:
            hog.kill()
            hog.wait(timeout=10)
    print("\n".join(rows))
    for line in lost_lines:
        print(line)
    ran = args.rounds * len(args.graph or GRAPHS)
    print(f"REPRODUCED {total_lost} of {ran}: the cancelled task was still RUNNING {PENDING_FOR:g} s later")
    return 0


if __name__ == "__main__":
    sys.exit(main())
