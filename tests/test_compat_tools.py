"""The tools that run raychaos on other Ray releases judge what they read, never assume it:
`make compat-all` reads each release's pytest summary, `make findings-matrix` each finding's
`REPRODUCED k of N`; a run that printed neither is unknown, not a pass. No Ray here: the
outputs as the tools meet them."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[1]


def _load(name: str) -> ModuleType:
    sys.path.insert(0, str(ROOT / ".ci"))  # compat_all imports compat_requirements as a script would
    try:
        spec = importlib.util.spec_from_file_location(name, ROOT / ".ci" / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses resolve their module's annotations through it
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / ".ci"))


compat_all = _load("compat_all")
matrix = _load("findings_matrix")

PASSED = "Ray 2.50.1 (compat)\n...\n================ 80 passed, 23 deselected in 402.17s (0:06:42) ================\n"
FAILED = "Ray 2.51.2 (compat)\n=========== 2 failed, 78 passed, 23 deselected in 410.00s (0:06:50) ===========\n"
ERRORS = "Ray 2.52.1 (compat)\n============= 79 passed, 1 error in 401.00s (0:06:41) =============\n"


@pytest.mark.parametrize(("log", "returncode", "status"), [
    (PASSED, 0, "passed"), (FAILED, 2, "failed"), (ERRORS, 1, "failed"),
    (PASSED, 2, "failed"),  # the leak check after a green pytest failed make
    ("Ray 2.53.0 (compat)\nTimeout >300.0s\n", 2, "unknown"),  # no pytest summary: never a pass
    ("error: uv could not resolve ray[default]==2.54.*\n", 2, "unknown"),
    (PASSED.replace("2.50.1", "2.60.0"), 0, "unknown"),  # green, but on another Ray than asked
])
def test_a_releases_compat_run_is_judged_by_what_its_log_says(log: str, returncode: int, status: str) -> None:
    ray = {"2.51.2": "2.51", "2.52.1": "2.52"}.get(log.split()[1] if log.startswith("Ray ") else "", "2.50")
    outcome = compat_all.judge(ray, log, returncode, 500.0)
    assert outcome.status == status, outcome


def test_compat_all_reads_the_installed_patch_and_the_tests_time() -> None:
    outcome = compat_all.judge("2.50", PASSED, 0, 480.0)
    assert (outcome.installed, outcome.test_seconds, outcome.summary) == ("2.50.1", 402.17, "80 passed, 23 deselected")


def test_every_finding_is_in_the_matrix_once() -> None:
    """Each script once as itself; a second behaviour of one script is a variant, named apart,
    whose options its run passes."""
    scripts = sorted(p.name for p in (ROOT / "findings").glob("*.py"))
    assert sorted(f.script for f in matrix.FINDINGS if not f.variant) == scripts
    names = [f.name for f in matrix.FINDINGS]
    assert len(names) == len(set(names)), names
    assert all(f.script in scripts and set(f.variant.split()) <= set(f.args) for f in matrix.FINDINGS if f.variant)


@pytest.mark.parametrize(("out", "returncode", "timed_out", "cell"), [
    ("Ray 2.50.1\nround 0: ...\nREPRODUCED 2 of 3: the retried calls ran out of order\n", 0, False, "2 of 3"),
    ("REPRODUCED 0 of 1\n", 0, False, "0 of 1"),
    ("Traceback ...\nImportError: cannot import name 'x'\n", 1, False, "unknown"),
    ("round 0: no outcome (exit 1)\nREPRODUCED 0 of 1: the GCS exited\n", 0, False, "unknown"),  # a crashed round
    ("round 0 ...\n", None, True, "unknown"),  # past its deadline, even had it printed a count
])
def test_a_findings_run_is_counted_only_from_its_reproduced_line(out: str, returncode: int | None,
                                                                  timed_out: bool, cell: str) -> None:
    finding = matrix.Finding(script="retry_order.py", args=("3",), deadline=60)
    result = matrix.judge(finding, "2.50", out, returncode, timed_out=timed_out, left=0, seconds=1.0)
    assert matrix.cell(vars(result)) == cell


ABORT = "dlmalloc.cc:129: create_buffer failed to open file /mnt/x, No space left on device\n"
ENDED = "put past the full store ...\nThe connection to the plasma store is failed. Terminate the process.\n"


@pytest.mark.parametrize(("out", "ray_logs", "returncode", "cell"), [
    ("create_buffer failed to open file ... No space left on device\n", "", 1, "1 of 1"),  # the raylet aborted
    (ENDED, ABORT, 1, "1 of 1"),  # the abort in the raylet's log only, as Ray writes it
    (ENDED, "", 1, "unknown"),  # the driver ended, the raylet's reason unread
    ("before: ...\nhealed: ['correct in 0.1 s']\n", "", 0, "0 of 1"),  # ran through: not reproduced
    ("spill failed: No space left on device\nhealed: [...]\nexit\n", ABORT, 1, "0 of 1"),  # healed first
    ("Traceback: fusermount3 not found\n", "", 1, "unknown"),  # neither: never ran
])
def test_a_finding_that_reproduces_by_ending_is_read_from_its_end(out: str, ray_logs: str, returncode: int,
                                                                   cell: str) -> None:
    finding = next(f for f in matrix.FINDINGS if f.by_exit)
    result = matrix.judge(finding, "2.50", out, returncode, timed_out=False, left=0, seconds=1.0, ray_logs=ray_logs)
    assert matrix.cell(vars(result)) == cell


def test_the_ray_logs_of_a_run_are_read_and_its_escaped_processes_killed(tmp_path: Path) -> None:
    logs = tmp_path / "ray" / "session_2026-12-06_1" / "logs"
    logs.mkdir(parents=True)
    (logs / "raylet.out").write_text(ABORT, encoding="utf-8")
    assert matrix.read_ray_logs(tmp_path) == ABORT
    # a process in a session of its own, naming the run's folder, as a daemonised raylet would
    escaped = subprocess.Popen([sys.executable, "-c", "import sys, time; time.sleep(60)", str(tmp_path)],
                               start_new_session=True)
    try:
        assert matrix.reap(-1, str(tmp_path)) == 1  # no session of its own: found by its command line
        assert not psutil.pid_exists(escaped.pid)  # reap waited for it (its exit status is reap's)
    finally:
        escaped.kill()
        escaped.wait(timeout=10)


def test_a_run_of_some_findings_keeps_the_releases_other_results() -> None:
    old = {"runs": {"2.50": {"installed": "2.50.1", "date": "d", "machine": "m"}}, "results": [
        {"finding": f.script, "ray": "2.50", "status": "measured", "reproduced": 1, "rounds": 1, "seconds": 1.0,
         "note": ""} for f in matrix.FINDINGS]}
    again = matrix.Result(finding="retry_order.py", ray="2.50", status="measured", reproduced=0, rounds=3,
                          seconds=2.0, note="")
    merged = matrix.merge(old, "2.50", "2.50.1", [again])
    assert len(merged["results"]) == len(matrix.FINDINGS)
    assert next(r for r in merged["results"] if r["finding"] == "retry_order.py")["rounds"] == 3


def test_the_readmes_table_is_the_one_the_matrix_writes() -> None:
    text = (ROOT / "findings" / "README.md").read_text(encoding="utf-8")
    shown = text.split(matrix.START, 1)[1].split(matrix.END, 1)[0].strip()
    assert shown == matrix.table(matrix.load()), "stale: .venv/bin/python .ci/findings_matrix.py --table"


def test_the_install_range_is_the_range_compat_checks() -> None:
    """pyproject's Ray range, the releases `make compat-all` runs and those `make compat` takes
    are one range: a release added to one and not the others shows here."""
    import re
    import tomllib

    requirements = _load("compat_requirements")
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    ray = next(d for d in deps if d.startswith("ray["))
    low, high = (int(m) for m in re.fullmatch(r"ray\[default\]>=2\.(\d+),<2\.(\d+)", ray).groups())
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    listed = re.search(r"^COMPAT_RAYS \?= (.+)$", makefile, re.MULTILINE).group(1).split()
    assert list(requirements.SUPPORTED) == list(range(low, high)) == [int(v.split(".")[1]) for v in listed]


def test_a_mount_a_finding_left_is_unmounted(tmp_path: Path) -> None:
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", matrix.FINDING_MOUNT, str(tmp_path)], check=True,
                   timeout=60)
    try:
        assert matrix.unmount_left() == 1
        assert not os.path.ismount(tmp_path)
    finally:
        subprocess.run(["umount", "--lazy", str(tmp_path)], timeout=60, check=False)


def _runs(cells: dict[str, str]) -> dict[str, dict[str, object]]:
    """Results by release from ``{"2.50": "1/1", "2.51": "0/1", "2.52": "?"}``."""
    return {ray: {"status": "unknown" if c == "?" else "measured", "reproduced": 0 if c == "?" else int(c[0])}
            for ray, c in cells.items()}


@pytest.mark.parametrize(("cells", "said"), [
    ({"2.50": "1", "2.51": "1", "2.52": "1"}, "reproduced on every release measured (2.50–2.52)"),
    ({"2.50": "0", "2.51": "1", "2.52": "1"}, "reproduced from 2.51 on (2.51–2.52); not seen in its rounds on 2.50"),
    ({"2.50": "1", "2.51": "1", "2.52": "0"}, "reproduced up to 2.51 (2.50–2.51); not seen in its rounds on 2.52"),
    ({"2.50": "1", "2.51": "0", "2.52": "1"}, "reproduced (2.50, 2.52); not seen in its rounds on 2.51"),
    ({"2.50": "0", "2.52": "1"}, "reproduced (2.52); not seen in its rounds on 2.50"),  # 2.51 unmeasured: no "since"
    ({"2.50": "0", "2.51": "0"}, "not seen in its rounds on any release (2.50–2.51)"),
    ({"2.50": "1", "2.51": "?", "2.52": "1"},
     "reproduced on every release measured (2.50, 2.52); unknown on 2.51"),
])
def test_a_findings_releases_say_since_when_up_to_when_or_where(cells: dict[str, str], said: str) -> None:
    results = _runs({ray: f"{c}" for ray, c in cells.items()})
    assert matrix.releases(sorted(cells), results) == said


def test_the_docs_releases_summary_is_the_one_the_matrix_writes() -> None:
    text = matrix.DOCS.read_text(encoding="utf-8")
    shown = text.split(matrix.RELEASES_START, 1)[1].split(matrix.RELEASES_END, 1)[0].strip()
    assert shown == matrix.releases_table(matrix.load()), "stale: .venv/bin/python .ci/findings_matrix.py --table"


@pytest.mark.parametrize("finding", [f.script for f in matrix.FINDINGS])
def test_every_finding_has_a_ready_to_file_report(finding: str) -> None:
    """Its title and what happens, its command and rate, its releases, its nearest known issues."""
    text = matrix.report(finding, matrix.load())
    assert f"findings/{finding}" in text and "(no row)" not in text, "findings/README.md: a row running it"
    assert "(none listed)" not in text, f"findings/README.md: an issue-tracker bullet naming (`{finding}`)"
    assert "**Ray releases**: not measured" not in text, "make findings-matrix"
    what = text.split("**What happens**", 1)[1].split("**Nearest known issues**", 1)[0]
    assert len(what.split()) > 20, what
