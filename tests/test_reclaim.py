"""What raychaos makes on the machine is reclaimed after its driver is SIGKILLed (Ray-free): the
driver's reaper undoes what it claimed; ``raychaos cleanup`` removes what a driver without a
reaper left, by the owner label on each thing, and leaves a live driver's things alone; and
every teardown of several steps finishes them all and reports each failure."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner

from chaos._wait import wait_until
from chaos.cluster import capped_filesystem
from chaos.disks._fusefs import fault_filesystem, fuse_mounts_left
from chaos.net._lab import NEEDS, PREFIX, _destroy, _plan, network_lab, network_leftovers, network_missing, run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
needs_net = pytest.mark.skipif(bool(network_missing()), reason=f"the network lab needs {NEEDS}")
needs_fuse = pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse")
#: Seconds a reaper (or the kernel) may take to reclaim a killed driver's lab.
RECLAIM_BOUND = 15.0


def _of_lab(name: str) -> list[str]:
    """The leak check's lines about lab ``name``'s objects."""
    return [line for line in network_leftovers() if f"{PREFIX}{name}-" in line]


def _scrub(name: str) -> None:
    """Delete whatever of lab ``name`` a failed test left (the processes in its namespaces first)."""
    for line in _of_lab(name):
        kind, obj = line.rsplit(" ", 1)
        if kind == "namespace":
            for pid in run(["ip", "netns", "pids", obj], check=False).split():
                os.kill(int(pid), signal.SIGKILL)
            run(["ip", "netns", "del", obj], check=False)
        elif kind in ("link", "bridge"):
            run(["ip", "link", "del", obj], check=False)
        elif kind.startswith("nftables table"):
            run(["nft", "delete", "table", kind.split()[-1], obj], check=False)


def _mounted(path: str) -> bool:
    with open("/proc/self/mounts", encoding="utf-8") as mounts:
        return any(line.split()[1] == path for line in mounts)


@contextmanager
def _driver(code: str) -> Iterator[tuple[subprocess.Popen[str], dict[str, object]]]:
    """A driver process running ``code``, which prints one JSON line of what it made and then
    sleeps; killed (SIGKILL) at the latest when the block ends."""
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], stdout=subprocess.PIPE, text=True,
                             cwd=ROOT)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line, f"the driver exited ({child.wait(30)}) before saying what it made"
        yield child, json.loads(line)
    finally:
        child.kill()
        child.wait(30)


_LAB_DRIVER = """
    import json, time
    from chaos.net._lab import network_lab
    with network_lab(2) as lab:
        print(json.dumps({"lab": lab.name}), flush=True)
        time.sleep(600)  # until the test kills this driver
"""


@needs_net
def test_a_killed_drivers_network_lab_is_reclaimed_by_its_reaper() -> None:
    with _driver(_LAB_DRIVER) as (child, made):
        name = str(made["lab"])
        try:
            assert len([line for line in _of_lab(name) if line.startswith("namespace")]) == 2
            child.send_signal(signal.SIGKILL)
            child.wait(30)
            wait_until(lambda: not _of_lab(name), timeout=RECLAIM_BOUND, interval=0.1,
                       what=f"the killed driver's lab {name} reclaimed")
        finally:
            _scrub(name)


_CLEAN_DRIVER = """
    import json
    from chaos._reclaim import _reaper
    from chaos.net._lab import network_lab
    with network_lab(1) as lab:
        pass
    print(json.dumps({"lab": lab.name, "reaper": _reaper.reaper_pid()}), flush=True)
"""


@needs_net
def test_after_a_normal_teardown_the_reaper_does_nothing_and_ends_with_its_driver() -> None:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(_CLEAN_DRIVER)], capture_output=True, text=True,
                          cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    made = json.loads(done.stdout)
    # capture_output read the driver's stderr to its end: the reaper, which shares it, is ending.
    wait_until(lambda: not _alive(int(made["reaper"])), timeout=5, interval=0.05, what="the reaper ended")
    assert not _of_lab(str(made["lab"]))
    assert "raychaos reaper" not in done.stderr, done.stderr


_REPLACED_DRIVER = """
    import json, sys, time
    from chaos._reclaim import _reaper
    from chaos.net._lab import network_lab
    from chaos.cluster import capped_filesystem
    with network_lab(1) as lab:
        print(json.dumps({"lab": lab.name, "reaper": _reaper.reaper_pid()}), flush=True)
        sys.stdin.readline()  # the test killed the reaper
        with capped_filesystem(1) as capped:
            print(json.dumps({"capped": capped, "reaper": _reaper.reaper_pid()}), flush=True)
            time.sleep(600)  # until the test kills this driver
"""


@needs_net
def test_a_killed_reaper_is_replaced_and_told_every_claim_still_held() -> None:
    child = subprocess.Popen([sys.executable, "-c", textwrap.dedent(_REPLACED_DRIVER)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, cwd=ROOT)
    name, capped = "", ""
    try:
        assert child.stdin is not None and child.stdout is not None
        first = json.loads(child.stdout.readline())
        name = first["lab"]
        os.kill(first["reaper"], signal.SIGKILL)
        wait_until(lambda: not _alive(first["reaper"]), timeout=10, what="the first reaper gone")
        child.stdin.write("go on\n")
        child.stdin.flush()
        second = json.loads(child.stdout.readline())
        capped = second["capped"]
        assert second["reaper"] != first["reaper"]
        child.kill()
        child.wait(30)
        wait_until(lambda: not _of_lab(name) and not _mounted(capped), timeout=RECLAIM_BOUND, interval=0.1,
                   what="the lab (claimed before the first reaper died) and the tmpfs reclaimed")
        assert not os.path.exists(capped)
    finally:
        child.kill()
        child.wait(30)
        _scrub(name)
        if capped and _mounted(capped):
            subprocess.run(["umount", "-l", capped], check=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_folder_with_a_filesystem_mounted_in_it_is_never_walked(tmp_path: Path) -> None:
    from chaos._reclaim._owner import StillMounted, remove_folder

    inner = tmp_path / "outer" / "inner"
    inner.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "rc-test", str(inner)], check=True)
    try:
        (inner / "data").write_bytes(b"x")
        with pytest.raises(StillMounted, match=f"{inner} is still mounted in it"):
            remove_folder(str(tmp_path / "outer"))
        assert (inner / "data").read_bytes() == b"x"
    finally:
        subprocess.run(["umount", "-l", str(inner)], check=False)
    remove_folder(str(tmp_path / "outer"))
    assert not (tmp_path / "outer").exists()
    remove_folder(str(tmp_path / "outer"))  # gone already: nothing to do


_FUSE_DRIVER = """
    import json, time
    from chaos.disks._fusefs import fault_filesystem
    with fault_filesystem() as fs:
        print(json.dumps({"mount": fs.mount, "server": fs.pid}), flush=True)
        time.sleep(600)  # until the test kills this driver
"""


@needs_fuse
def test_a_killed_drivers_fault_filesystem_whose_server_died_too_is_unmounted_by_its_reaper() -> None:
    """The server unmounts itself when its driver dies; killed with it, it cannot: the reaper does."""
    with _driver(_FUSE_DRIVER) as (child, made):
        mount = str(made["mount"])
        try:
            os.kill(int(made["server"]), signal.SIGKILL)  # type: ignore[call-overload]
            child.send_signal(signal.SIGKILL)
            child.wait(30)
            wait_until(lambda: mount not in fuse_mounts_left() and not os.path.exists(os.path.dirname(mount)),
                       timeout=RECLAIM_BOUND, interval=0.1, what="the dead mount unmounted and its folder deleted")
        finally:
            if mount in fuse_mounts_left():
                subprocess.run(["fusermount3", "-u", "-z", mount], check=False)
            subprocess.run(["rm", "-rf", os.path.dirname(mount)], check=False)


# -- raychaos cleanup --------------------------------------------------------------------------

_MANY_DRIVER = """
    import json, os, signal, subprocess, time
    from chaos._reclaim import _reaper
    from chaos.net._lab import _enter, network_lab
    from chaos._reclaim._owner import OWNER_ENV, me
    from chaos.disks._fusefs import fault_filesystem
    from chaos.cluster import capped_filesystem

    env = {**os.environ, OWNER_ENV: str(me())}  # as a `ray start` daemon's
    with network_lab(1) as lab, capped_filesystem(1) as capped, fault_filesystem() as fs:
        (node,) = lab.workers
        inside = subprocess.Popen(["sleep", "600"], env=env, preexec_fn=lambda: _enter(node.namespace))
        outside = subprocess.Popen(["sleep", "600"], env=env, start_new_session=True)
        print(json.dumps({"lab": lab.name, "capped": capped, "mount": fs.mount, "server": fs.pid,
                          "reaper": _reaper.reaper_pid(), "daemons": [inside.pid, outside.pid]}), flush=True)
        time.sleep(600)  # until the test kills this driver
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _cleanup(*args: str) -> tuple[int, str]:
    from scenarios.cli import main

    result = CliRunner().invoke(main, ["cleanup", *args])
    return result.exit_code, result.output


@needs_net
@needs_fuse
def test_cleanup_removes_what_a_driver_killed_with_its_reaper_left_and_keeps_a_live_drivers() -> None:
    with _driver(_MANY_DRIVER) as (child, made):
        name, capped, mount = str(made["lab"]), str(made["capped"]), str(made["mount"])
        daemons = [int(pid) for pid in made["daemons"]]  # type: ignore[attr-defined]
        try:
            # Nothing outlives the driver to clean up for it: its reaper and the fault
            # filesystem's server (which would unmount itself) go first.
            for pid in (int(made["reaper"]), int(made["server"])):  # type: ignore[call-overload]
                os.kill(pid, signal.SIGKILL)
            child.send_signal(signal.SIGKILL)
            child.wait(30)
            with network_lab(1) as mine, capped_filesystem(1) as my_capped, _unlabelled_namespace() as stray:
                code, listed = _cleanup("--dry-run")
                assert code == 0, listed
                for thing in (f"namespace {PREFIX}{name}-n1", f"bridge {PREFIX}{name}-br", capped, mount,
                              *(f"pid {pid}" for pid in daemons)):
                    assert thing in listed, (thing, listed)
                assert _of_lab(name) and _mounted(capped) and all(_alive(pid) for pid in daemons)

                code, done = _cleanup()
                assert code == 0, done
                assert not _of_lab(name) and not _mounted(capped) and mount not in fuse_mounts_left()
                assert not os.path.exists(capped) and not os.path.exists(os.path.dirname(mount))
                wait_until(lambda: not any(_alive(pid) for pid in daemons), timeout=10, what="the daemons gone")
                # A live driver's things and an unlabelled one are left alone.
                assert _of_lab(mine.name) and _mounted(my_capped)
                assert stray in run(["ip", "netns", "list"])
                removed = [line for line in done.splitlines() if line.startswith("removed:")]
                assert not [line for line in removed if mine.name in line or my_capped in line or stray in line]
        finally:
            _scrub(name)
            for pid in daemons:
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)
            if _mounted(capped):
                subprocess.run(["umount", "-l", capped], check=False)
            if mount in fuse_mounts_left():
                subprocess.run(["fusermount3", "-u", "-z", mount], check=False)
            subprocess.run(["rm", "-rf", os.path.dirname(mount)], check=False)
            subprocess.run(["rmdir", capped], check=False, capture_output=True)


@contextmanager
def _unlabelled_namespace() -> Iterator[str]:
    """A namespace named as raychaos names them but with no owner label (an older raychaos's)."""
    name = f"{PREFIX}stray{os.getpid() % 10000}"
    run(["ip", "netns", "add", name])
    try:
        yield name
    finally:
        run(["ip", "netns", "del", name], check=False)


# -- the fault filesystem's stop ---------------------------------------------------------------


@needs_fuse
def test_a_fault_filesystem_whose_unmount_fails_is_reported_and_its_folder_not_walked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every fusermount3 fails (the driver's and the server's own): the teardown still ends the
    server, then raises naming the mount and the fix, and deletes nothing under the mount."""
    import chaos.disks._fusefs as fusefs

    fake = tmp_path / "bin" / "fusermount3"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'fusermount3: failed to unmount: Device or resource busy' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    monkeypatch.setattr(fusefs, "_STOP_TIMEOUT", 1.0)
    mount = ""
    try:
        with pytest.raises(Exception, match="fusermount3 -u -z") as caught, fault_filesystem() as fs:
            mount, work = fs.mount, os.path.dirname(fs.control)
            Path(fs.mount, "kept").write_bytes(b"x")
        assert fs.mount in str(caught.value)
        assert fs.mount in fuse_mounts_left()  # still mounted (its server ended): so never walked
        assert os.path.isdir(work) and "kept" in os.listdir(Path(work, "backing"))
    finally:
        monkeypatch.undo()
        if mount and mount in fuse_mounts_left():
            subprocess.run(["fusermount3", "-u", "-z", mount], check=False)
        if mount:
            subprocess.run(["rm", "-rf", os.path.dirname(mount)], check=False)


# -- each failure reported ---------------------------------------------------------------------


@needs_net
def test_a_lab_teardown_with_two_failing_steps_finishes_and_reports_both(monkeypatch: pytest.MonkeyPatch) -> None:
    import chaos.net._lab as net
    from chaos._errors import ChaosError

    lab = _plan(2)
    net._create(lab)
    n1, n2 = lab.workers
    failing = (["ip", "link", "del", n1.host_link], ["ip", "netns", "del", n2.namespace])

    def fake(args: list[str], **kwargs: object) -> str:
        if list(args) in failing:
            raise net.NetCommandFailed(f"`{' '.join(args)}` failed (2): Device or resource busy")
        return run(args, **kwargs)  # type: ignore[arg-type]

    try:
        monkeypatch.setattr(net, "run", fake)
        with pytest.raises(ChaosError) as caught:
            _destroy(lab)
        message = str(caught.value)
        assert f"ip link del {n1.host_link}" in message and f"ip netns del {n2.namespace}" in message, message
        # Every other step was done: the first node's namespace (and with it its link) and the
        # bridge are gone; the namespace whose deletion failed is what is left.
        assert _of_lab(lab.name) == [f"namespace {n2.namespace}"]
    finally:
        monkeypatch.undo()
        _scrub(lab.name)


def test_a_reaper_with_two_claims_it_cannot_undo_undoes_the_rest_and_reports_both(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from chaos._reclaim import _reaper_main as _reaper
    from chaos._reclaim._owner import TeardownFailed
    from chaos._reclaim._reaper import Claim, ClaimKind

    undone: list[str] = []

    def undo(path: str) -> None:
        if "bad" in path:
            raise OSError(f"cannot undo {path}")
        undone.append(path)

    monkeypatch.setitem(_reaper.UNDO, ClaimKind.FOLDER, undo)
    held = [Claim(ClaimKind.FOLDER, (p,)) for p in ("/bad1", "/good", "/bad2")]
    with pytest.raises(TeardownFailed) as caught:
        _reaper.reclaim(held, owner="1:2")
    assert undone == ["/good"]
    assert [str(f) for f in caught.value.failures] == ["cannot undo /bad2", "cannot undo /bad1"]  # newest first
    assert "cannot undo /bad1" in str(caught.value) and "cannot undo /bad2" in str(caught.value)


def test_cleanup_that_cannot_remove_two_things_removes_the_rest_names_both_and_exits_1(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import chaos._reclaim._cleanup as cleanup_module
    from chaos._reclaim._cleanup import Found, Leftover, Ownership
    from chaos._reclaim._owner import Owner

    removed: list[str] = []

    def remover(name: str) -> Callable[[], None]:
        def remove() -> None:
            if name.startswith("bad"):
                raise OSError(f"{name} is busy")
            removed.append(name)
        return remove

    dead, live = Owner(1, 1), Owner(os.getpid(), 0)
    found = Found(tuple(Leftover(name, owner, ownership, 0, remover(name))
                        for name, owner, ownership in (("bad-a", dead, Ownership.ENDED), ("ok", dead, Ownership.ENDED),
                                                       ("bad-b", dead, Ownership.ENDED),
                                                       ("theirs", live, Ownership.ALIVE))), ())
    monkeypatch.setattr(cleanup_module, "find_leftovers", lambda: found)
    code, output = _cleanup()
    assert code == 1, output
    assert removed == ["ok"]
    assert "could not remove: bad-a" in output and "could not remove: bad-b" in output
    assert "left alone: theirs" in output and "removed: theirs" not in output


def test_the_processes_of_a_clusters_folder_are_found_by_their_command_line_or_an_open_file(tmp_path: Path) -> None:
    """Ray's agents retitle themselves (``ray::DashboardAgent``): their command line no longer
    names the cluster's folder, but they hold their logs open in it."""
    import subprocess
    import sys

    from chaos._reclaim._owner import kill_all, processes_naming

    log = (tmp_path / "agent.log").open("w")
    by_file = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], stdout=log)
    by_name = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", str(tmp_path)])
    elsewhere = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        found = processes_naming(str(tmp_path))
        assert by_file.pid in found and by_name.pid in found and elsewhere.pid not in found
        assert kill_all([by_file.pid, by_name.pid]) == []
    finally:
        for proc in (by_file, by_name, elsewhere):
            proc.kill()
            proc.wait(timeout=10)
        log.close()
