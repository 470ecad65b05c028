"""Programs per minute of the hunt's engine against a baseline commit's, on the same programs.

The baseline's own generator draws the programs (so the fault mix is the baseline's), seeded;
then each engine runs all of them as its ``make hunt`` would: the baseline on one hunt cluster (a
head, a removable node, a node failing RPCs, the GCS on Redis), this checkout on ``--clusters``
such clusters side by side, each taking the next program as it finishes one; the baseline's first, one after
the other in this one run. Cluster start and stop are not timed. Prints a table and the ratio.

    python benchmarks/hunt_speed.py --programs 60 --baseline 1c88672
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from scenarios.hunt._fleet import SIDE_BY_SIDE

ROOT = Path(__file__).resolve().parent.parent
#: Seconds one engine may take for its programs (cluster start included) before the run fails.
ENGINE_BOUND = 3600

#: Run in the checkout being measured: draws the programs, one repr a line. Only names both
#: engines have (the baseline's generator, its seed).
GENERATE = """
import sys
from hypothesis import HealthCheck, Phase, given, seed, settings
from scenarios.hunt import programs
drawn = []
@seed(int(sys.argv[2]))
@settings(max_examples=int(sys.argv[1]), database=None, deadline=None, phases=[Phase.generate],
          suppress_health_check=list(HealthCheck))
@given(program=programs(gcs_restart=True, rpc_failures=True))
def draw(program):
    drawn.append(repr(program))
draw()
print("\\n".join(drawn[: int(sys.argv[1])]))
"""

#: Run in the baseline: runs the programs read from standard input on a hunt cluster (as its
#: benchmarks/hunt.py starts it) and prints what it took, as JSON. Only names the baseline has.
RUN = """
import json, sys, time
import scenarios.hunt as hunt
from chaos.cluster import local_cluster, redis_server
from scenarios.hunt import run_program
from scenarios.hunt._rpc import add_rpc_node
from scenarios.hunt._run import HUNT_NODE, NODE_BOUND, REPLACEMENT_STORE
names = {name: getattr(hunt, name) for name in hunt.__all__}
texts = [line for line in sys.stdin.read().splitlines() if line.strip()]
programs = [eval(text, {"__builtins__": {}}, names) for text in texts]  # our own reprs, from a pipe
with redis_server() as redis, local_cluster(nodes=2, object_store_mb=96, redis_address=redis,
                                            worker_resources={HUNT_NODE: 100.0}, log_to_driver=False) as c:
    add_rpc_node(c.cluster, object_store_bytes=REPLACEMENT_STORE, bound=NODE_BOUND)
    started, landed, failures, classes = time.monotonic(), 0, 0, {}
    for program in programs:
        verdict = run_program(program, address=c.address, cluster=c.cluster, gcs_restart=True, rpc_failures=True)
        landed, failures = landed + len(verdict.landed), failures + len(verdict.failures)
        for failure in verdict.failures:
            classes[failure.signature.label()] = classes.get(failure.signature.label(), 0) + 1
    seconds = time.monotonic() - started
print(json.dumps({"programs": len(programs), "seconds": seconds, "landed": landed, "failures": failures,
                  "classes": classes}))
"""

#: Run in this checkout: the same, on ``sys.argv[1]`` hunt clusters side by side (as its
#: benchmarks/hunt.py runs them), each taking the next program as it finishes one.
RUN_SIDE_BY_SIDE = """
import json, sys
from scenarios.hunt._fleet import HuntSetup, SideBySide
texts = [line for line in sys.stdin.read().splitlines() if line.strip()]
setup = HuntSetup(rpc_delay=False)  # the baseline's cluster: no slow node, no program asks for it
landed, failures, classes = 0, 0, {}
with SideBySide(int(sys.argv[1]), setup=setup, programs=texts) as side:
    for verdict in side.verdicts():
        landed, failures = landed + len(verdict.landed), failures + len(verdict.failures)
        for failure in verdict.failures:
            classes[failure.signature.label()] = classes.get(failure.signature.label(), 0) + 1
print(json.dumps({"programs": len(texts), "seconds": side.seconds, "landed": landed, "failures": failures,
                  "classes": classes}))
"""


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineRun:
    """One engine's run of the programs."""

    engine: str
    programs: int
    seconds: float
    landed: int
    failures: int
    #: Failure class -> steps that showed it (known findings included: a hunt reports them too).
    classes: dict[str, int]

    @property
    def per_minute(self) -> float:
        return self.programs / (self.seconds / 60)


@contextmanager
def checkout(revision: str) -> Iterator[Path]:
    """A detached worktree of ``revision``, removed afterwards."""
    where = Path(tempfile.mkdtemp(prefix="hunt-baseline-"))
    try:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(where), revision],
                       check=True)
        yield where
    finally:
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(where)], check=False)
        shutil.rmtree(where, ignore_errors=True)  # a worktree that was never added leaves its folder


def python_in(tree: Path, code: str, *args: str, stdin: str = "") -> str:
    """Run ``code`` with ``tree``'s packages first on the path (Ray's workers inherit it)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=tree, env=env, input=stdin, text=True,
                          capture_output=True, timeout=ENGINE_BOUND, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{tree}: exit {done.returncode}\n{done.stderr[-4000:]}")
    return done.stdout


def run_engine(tree: Path, engine: str, programs: str, *, code: str = RUN, args: tuple[str, ...] = ()) -> EngineRun:
    result = json.loads(python_in(tree, code, *args, stdin=programs).strip().splitlines()[-1])
    return EngineRun(engine=engine, **result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=60)
    parser.add_argument("--baseline", required=True, help="the commit whose generator and engine are the baseline")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--clusters", type=int, default=SIDE_BY_SIDE,
                        help=f"this checkout's hunt clusters side by side (default {SIDE_BY_SIDE}, as make hunt)")
    args = parser.parse_args()
    if args.programs < 1 or args.clusters < 1:
        parser.error(f"--programs and --clusters must be >= 1, got {args.programs} and {args.clusters}")
    with checkout(args.baseline) as baseline:
        programs = python_in(baseline, GENERATE, str(args.programs), str(args.seed))
        runs = [run_engine(baseline, f"baseline ({args.baseline})", programs),
                run_engine(ROOT, f"this checkout ({args.clusters} side by side)", programs, code=RUN_SIDE_BY_SIDE,
                           args=(str(args.clusters),))]
    print(f"{args.programs} programs drawn by the baseline's generator (seed {args.seed}), each engine on a cluster of "
          "its own, cluster start not timed\n\n"
          "| engine | programs | seconds | programs/min | faults landed | failures |\n|---|---:|---:|---:|---:|---:|")
    for run in runs:
        print(f"| {run.engine} | {run.programs} | {run.seconds:.0f} | {run.per_minute:.1f} | {run.landed} | "
              f"{run.failures} |")
    print(f"\nthis checkout runs {runs[1].per_minute / runs[0].per_minute:.2f} times the baseline's programs a minute")
    for run in runs:
        print(f"\n{run.engine}: failure classes (steps)" + "".join(f"\n- {label} ({n})"
                                                                for label, n in sorted(run.classes.items())))


if __name__ == "__main__":
    main()
