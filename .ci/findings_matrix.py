"""Every finding on every Ray release asked for: `make findings-matrix` (or `RAYS="2.50 2.60"`).

    python .ci/findings_matrix.py --ray 2.55 --python .compat/ray-2.55/bin/python

Runs each script of findings/ with the given Python (a venv holding that Ray), each with a
bounded number of rounds and a deadline, reads its last line (`REPRODUCED k of N`), and merges
the outcome into `findings/matrix.json`, keyed by finding and Ray release, so releases can be
run one at a time. A run that ends without that line, or past its deadline, is "unknown":
never counted as reproduced or as not. Each script's Ray keeps its files in a folder of the
run's own (RAY_TMPDIR): a finding that shows in an abort is read from Ray's logs there too. Every
process a script left (in its own session, or naming that folder) is killed and counted before
the next one starts. `--table` rewrites the table in README.md (and the per-finding summary of
releases in docs/explanation/ray-under-faults.md) from the JSON without running anything;
`--report SCRIPT` prints a ready-to-file issue for one finding.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import re
import signal
import subprocess
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path
from typing import Any

import psutil

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "findings"
MATRIX = HERE / "matrix.json"
README = HERE / "README.md"
START, END = "<!-- matrix:start -->", "<!-- matrix:end -->"
#: The docs page that says, per finding, on which releases it reproduced (from the same JSON).
DOCS = ROOT / "docs" / "explanation" / "ray-under-faults.md"
RELEASES_START, RELEASES_END = "<!-- releases:start -->", "<!-- releases:end -->"
#: Seconds a script past its deadline has between SIGTERM and SIGKILL.
STOP_GRACE = 20
#: The source name of the filesystems the findings mount (a tmpfs, a FUSE passthrough).
FINDING_MOUNT = "spill-finding"
REPRODUCED = re.compile(r"^REPRODUCED (\d+) of (\d+)", re.MULTILINE)
#: What the scripts print for a round that crashed before its outcome: they count it as not
#: reproduced, the matrix makes the run unknown. (A crash that is the finding prints neither.)
ERRORED = ("no outcome (exit", "OUTCOME failed: ")


@dataclass(frozen=True)
class Finding:
    script: str
    args: tuple[str, ...]  # a bounded run: fewer rounds than the README's own command
    deadline: float  # seconds
    by_exit: str = ""  # for a script that reproduces by ending (one round a run): the abort's own text
    variant: str = ""  # a second behaviour of the same script: the options that select it (in ``args``)

    @property
    def name(self) -> str:
        """What the matrix keys its results by: the script, and its variant when it has one."""
        return f"{self.script} {self.variant}" if self.variant else self.script


FINDINGS = (
    Finding(script="retry_order.py", args=("3",), deadline=180),
    Finding(script="cancel_ignored_when_sigint_ignored.py", args=("--ignore", "2"), deadline=180),
    Finding(script="gcs_restarted_from_ended_thread.py", args=("1",), deadline=240),
    Finding(script="train_report_lost_with_worker.py", args=("1",), deadline=300),
    Finding(script="cancel_lost_under_load.py", args=("--rounds", "10", "--graph", "2"), deadline=300),
    Finding(script="spill_disk_errors.py", args=(), deadline=180, by_exit="create_buffer failed"),
    Finding(script="spill_restore_interrupted.py", args=("1",), deadline=240),
    Finding(script="gcs_exits_when_redis_connection_drops.py", args=("client_kill", "2"), deadline=240),
    Finding(script="force_cancel_after_cancel_crashes_driver.py", args=("1",), deadline=240),
    Finding(script="driver_ended_when_gcs_gone.py", args=("1",), deadline=240),
    Finding(script="shutdown_blocked_when_gcs_gone.py", args=("1",), deadline=240),
    Finding(script="actor_call_hangs_after_gcs_restart_with_rpc_failures.py", args=("1",), deadline=420),
    Finding(script="stream_item_late_with_rpc_failures.py", args=("--tries", "60"), deadline=900),
    Finding(script="group_actor_pending_after_gcs_restart.py", args=("1",), deadline=420),
    Finding(script="task_rerun_late_after_node_removal.py", args=("2",), deadline=300),
    Finding(script="task_rerun_late_after_node_removal.py", args=("--retry", "--kill-worker", "2"), deadline=300,
            variant="--retry --kill-worker"),
)


@dataclass(frozen=True)
class Result:
    finding: str
    ray: str
    status: str  # "measured" or "unknown"
    reproduced: int
    rounds: int
    seconds: float
    note: str  # why unknown, or processes the script left behind


def reap(session: int, temp: str) -> int:
    """Kill every process still in the script's session, or naming its Ray folder ``temp`` on its
    command line or in its environment (a Ray process or driver in a session of its own); how
    many there were."""
    left = []
    for proc in psutil.process_iter():
        try:
            if proc.pid != os.getpid() and (os.getsid(proc.pid) == session
                                            or any(temp in arg for arg in proc.cmdline())
                                            or proc.environ().get("RAY_TMPDIR") == temp):
                left.append(proc)
        except (ProcessLookupError, psutil.Error):
            continue
    for proc in left:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.Error:
            continue
    psutil.wait_procs(left, timeout=10)
    return len(left)


def run(finding: Finding, python: str, ray: str) -> Result:
    start = time.monotonic()
    # Ray's files for this run alone (Ray reads RAY_TMPDIR for its temp root): an abort that only
    # the raylet's log states is read from there, and a Ray process that left the script's
    # session is still found by its command line, which names the folder.
    with tempfile.TemporaryDirectory(prefix="rcfm-", ignore_cleanup_errors=True) as temp:
        proc = subprocess.Popen([python, str(HERE / finding.script), *finding.args], cwd=ROOT,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                start_new_session=True, env={**os.environ, "RAY_TMPDIR": temp})
        try:
            out, timed_out = proc.communicate(timeout=finding.deadline)[0], False
        except subprocess.TimeoutExpired:
            out, timed_out = stop(proc), True
        left = reap(proc.pid, temp) + unmount_left()
        ray_logs = read_ray_logs(Path(temp))
    logs = ROOT / ".compat" / "findings"
    logs.mkdir(parents=True, exist_ok=True)
    (logs / f"{ray}-{finding.name.replace(' ', '_')}.log").write_text(out, encoding="utf-8")
    return judge(finding, ray, out, proc.returncode, timed_out=timed_out, left=left,
                 seconds=time.monotonic() - start, ray_logs=ray_logs)


def stop(proc: subprocess.Popen[str]) -> str:
    """A script past its deadline: SIGTERM (it may clean up: unmount, stop its Ray), then
    SIGKILL what is left of its session; its output."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        return proc.communicate(timeout=STOP_GRACE)[0]
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.communicate(timeout=60)[0]


def unmount_left() -> int:
    """Unmount what a finding left mounted (its filesystems are named ``spill-finding``); how many."""
    with open("/proc/mounts", encoding="utf-8") as mounts:
        left = [line.split()[1] for line in mounts if line.split()[0] == FINDING_MOUNT]
    for mount in left:
        subprocess.run(["umount", "--lazy", mount], timeout=60, check=False)
    return len(left)


def read_ray_logs(temp: Path) -> str:
    """Every log file Ray wrote under ``temp`` (its sessions' ``logs`` folders), joined."""
    texts = []
    for path in sorted(temp.glob("ray/session_*/logs/*")):
        if path.is_file() and not path.is_symlink():
            texts.append(path.read_text(encoding="utf-8", errors="replace"))
    return "\n".join(texts)


def judge(finding: Finding, ray: str, out: str, returncode: int | None, *, timed_out: bool, left: int,
          seconds: float, ray_logs: str = "") -> Result:
    note = f"{left} process(es) left, killed" if left else ""
    if timed_out:
        return Result(finding=finding.name, ray=ray, status="unknown", reproduced=0, rounds=0,
                      seconds=seconds, note=f"past its {finding.deadline:g} s deadline")
    if finding.by_exit:
        healed = "healed:" in out
        # The abort is the raylet's; the driver only learns that the store went away.
        hit = returncode != 0 and finding.by_exit in out + ray_logs and not healed
        ran = hit or healed
        return Result(finding=finding.name, ray=ray, status="measured" if ran else "unknown",
                      reproduced=int(hit), rounds=1, seconds=seconds,
                      note=note if ran else f"exit {returncode}, neither the abort nor the heal seen")
    found = REPRODUCED.findall(out)
    if errored := next((m for m in ERRORED if m in out), None):  # a round that crashed counts as "not"
        return Result(finding=finding.name, ray=ray, status="unknown", reproduced=0, rounds=0,
                      seconds=seconds, note=f"exit {returncode}; a round errored ({errored!r} in its output)")
    if not found:
        tail = out.strip().splitlines()[-1:] or ["no output"]
        return Result(finding=finding.name, ray=ray, status="unknown", reproduced=0, rounds=0,
                      seconds=seconds, note=f"exit {returncode}, no REPRODUCED line: {tail[0][:160]}")
    k, n = (int(x) for x in found[-1])
    return Result(finding=finding.name, ray=ray, status="measured", reproduced=k, rounds=n,
                  seconds=seconds, note=note)


def load() -> dict[str, Any]:
    return json.loads(MATRIX.read_text(encoding="utf-8")) if MATRIX.exists() else {"runs": {}, "results": []}


def merge(matrix: dict[str, Any], ray: str, installed: str, results: list[Result]) -> dict[str, Any]:
    ran = {r.finding for r in results}  # `--only`: the release's other findings keep their results
    kept = [r for r in matrix["results"] if r["ray"] != ray or r["finding"] not in ran]
    runs = {**matrix["runs"], ray: {"installed": installed, "date": date.today().isoformat(),
                                    "machine": f"{os.cpu_count()} cores, {platform.machine()}, "
                                               f"Python {platform.python_version()}"}}
    ordered = sorted([*kept, *(asdict(r) for r in results)],
                     key=lambda r: ([f.name for f in FINDINGS].index(r["finding"]), r["ray"]))
    return {"runs": dict(sorted(runs.items())), "results": ordered}


def cell(result: dict[str, Any] | None) -> str:
    if result is None:
        return "not run"
    if result["status"] != "measured":
        return "unknown"
    return f"{result['reproduced']} of {result['rounds']}"


def table(matrix: dict[str, Any]) -> str:
    rays = list(matrix["runs"])
    if not rays:
        return "No release measured yet: `make findings-matrix` (or `RAYS=\"2.50 2.60\"`)."
    index = {(r["finding"], r["ray"]): r for r in matrix["results"]}
    rows = ["| finding | " + " | ".join(rays) + " |", "|---|" + "---:|" * len(rays)]
    for finding in FINDINGS:
        cells = [cell(index.get((finding.name, ray))) for ray in rays]
        rows.append(f"| `{' '.join((finding.script, *finding.args))}` | " + " | ".join(cells) + " |")
    installed = ", ".join(f"{ray}: {run['installed']} ({run['date']})" for ray, run in matrix["runs"].items())
    return "\n".join([*rows, "", f"Rounds reproduced per release (the release's newest patch; run on: {installed})."])


def minors(rays: list[str]) -> list[str]:
    """Every minor release from the first of ``rays`` to the last (``2.50``, ``2.51``, ...): a
    release not measured breaks a span."""
    numbers = sorted((int(r.split(".")[0]), int(r.split(".")[1])) for r in rays)
    if not numbers:
        return []
    (major, low), (_, high) = numbers[0], numbers[-1]
    return [f"{major}.{m}" for m in range(low, high + 1)]


def spans(rays: list[str], chosen: set[str]) -> str:
    """The releases of ``chosen``, consecutive minors joined: ``2.50–2.54, 2.56``."""
    runs: list[list[str]] = [[]]
    for ray in minors(rays):
        if ray in chosen:
            runs[-1].append(ray)
        elif runs[-1]:
            runs.append([])
    return ", ".join(r[0] if len(r) == 1 else f"{r[0]}–{r[-1]}" for r in runs if r)


def releases(rays: list[str], results: dict[str, dict[str, Any]]) -> str:
    """On which of ``rays`` one finding reproduced, from its results by release: since when, up
    to when, or where. "Not seen" is only that: its bounded rounds did not show it."""
    hit = {r for r, x in results.items() if x["status"] == "measured" and x["reproduced"] > 0}
    miss = {r for r, x in results.items() if x["status"] == "measured" and x["reproduced"] == 0}
    unknown = {r for r, x in results.items() if x["status"] != "measured"}
    order = [r for r in rays if r in hit | miss]
    if not order:
        text = "not measured"
    elif not miss:
        text = f"reproduced on every release measured ({spans(rays, hit)})"
    elif not hit:
        text = f"not seen in its rounds on any release ({spans(rays, miss)})"
    else:
        first, last = order.index(min(hit, key=order.index)), order.index(max(hit, key=order.index))
        complete = set(minors(rays)) <= hit | miss  # no release between unmeasured: "since" holds
        since = complete and all(order.index(r) < first for r in miss)
        until = complete and all(order.index(r) > last for r in miss)
        lead = f"reproduced from {order[first]} on" if since else f"reproduced up to {order[last]}" if until else \
            "reproduced"
        text = f"{lead} ({spans(rays, hit)}); not seen in its rounds on {spans(rays, miss)}"
    return f"{text}; unknown on {spans(rays, unknown)}" if unknown else text


def releases_table(matrix: dict[str, Any]) -> str:
    """Each finding and the releases it reproduced on, for the docs."""
    rays = list(matrix["runs"])
    rows = ["| finding | on Ray's releases (bounded rounds each: `findings/README.md`) |", "|---|---|"]
    for finding in FINDINGS:
        results = {r["ray"]: r for r in matrix["results"] if r["finding"] == finding.name}
        rows.append(f"| `{finding.name}` | {releases(rays, results)} |")
    return "\n".join(rows)


def report(script: str, matrix: dict[str, Any]) -> str:
    """A ready-to-file issue for ``script``: its title and what happens (its docstring), how to
    run it and its rate (the README's table), the releases it reproduced on (the matrix), and
    the nearest known issues (the README's bullet naming it)."""
    source = (HERE / script).read_text(encoding="utf-8")
    doc = (ast.get_docstring(ast.parse(source)) or "").removeprefix("Standalone reproduction: ")
    title, _, body = doc.partition("\n\n")
    readme = README.read_text(encoding="utf-8")
    row = next((line for line in readme.splitlines() if line.startswith("| ") and f"findings/{script}" in line), "")
    cells = [c.strip() for c in row.strip("|").split("|")] if row else ["", "(no row)", "(no rate)", ""]
    bullet = _bullet(readme, script)
    results = {r["ray"]: r for r in matrix["results"] if r["finding"] == script}
    return "\n".join([
        f"### {' '.join(title.split())}", "",
        f"**Ray releases**: {releases(list(matrix['runs']), results)} (`make findings-matrix` in raychaos).", "",
        f"**Reproduction** (Ray and Python's standard library; the script attached): {cells[1]}; "
        f"reproduced {cells[2]}; control: {cells[3]}.", "",
        "**What happens**", "", body.strip(), "",
        "**Nearest known issues**", "", bullet or "(none listed)"])


def _bullet(readme: str, script: str) -> str:
    """The README's issue-tracker bullet that names ``script``, unwrapped."""
    section = readme.split("## Does Ray's issue tracker know them?", 1)[-1]
    for bullet in section.split("\n- ")[1:]:
        if f"(`{script}`)" in bullet.split(":", 1)[0]:
            return " ".join(bullet.split("\n\n")[0].split())
    return ""


def replace_between(path: Path, start: str, end: str, block: str) -> None:
    text = path.read_text(encoding="utf-8")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    path.write_text(f"{head}{start}\n{block}\n{end}{tail}", encoding="utf-8")


def write_table(matrix: dict[str, Any]) -> None:
    """The README's table and the docs' summary, from the JSON."""
    replace_between(README, START, END, table(matrix))
    replace_between(DOCS, RELEASES_START, RELEASES_END, releases_table(matrix))


def installed_ray(python: str) -> str:
    done = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('ray'))"],
                          capture_output=True, text=True, check=True, timeout=60)
    return done.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ray", help="the minor release the Python holds, e.g. 2.55")
    parser.add_argument("--python", help="a Python whose environment holds that Ray")
    parser.add_argument("--only", action="append", default=[],
                        help="a finding's script, with its variant's options if it has one (repeatable)")
    parser.add_argument("--table", action="store_true", help="only rewrite README.md's table from the JSON")
    parser.add_argument("--report", metavar="SCRIPT", help="print a ready-to-file issue for one finding")
    args = parser.parse_args()
    if args.report:
        if args.report not in {f.script for f in FINDINGS}:
            parser.error(f"--report {args.report!r}: not a finding here; one of {[f.script for f in FINDINGS]}")
        print(report(args.report, load()))
        return
    if args.table:
        write_table(load())
        return
    if not (args.ray and args.python):
        parser.error("give --ray and --python (or --table)")
    chosen = [f for f in FINDINGS if not args.only or f.name in args.only]
    if unknown := set(args.only) - {f.name for f in FINDINGS}:
        parser.error(f"--only {sorted(unknown)}: not a finding here; one of {[f.name for f in FINDINGS]}")
    results = []
    for finding in chosen:
        results.append(result := run(finding, args.python, args.ray))
        print(f"Ray {args.ray} {finding.name}: {cell(asdict(result))} in {result.seconds:.0f} s {result.note}",
              flush=True)
    matrix = merge(load(), args.ray, installed_ray(args.python), results)
    MATRIX.write_text(json.dumps(matrix, indent=2) + "\n", encoding="utf-8")
    write_table(matrix)


if __name__ == "__main__":
    main()
