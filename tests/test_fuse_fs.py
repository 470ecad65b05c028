"""The fault filesystem, Ray-free, on plain files: each fault takes effect and heals, and a
power loss keeps exactly what an fsync covered (of the file for its bytes, of its directory
for creates, renames and unlinks)."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos._errors import InvalidConfig, TargetNotFound
from chaos._wait import wait_until
from chaos.disks._fusefs import FaultFS, FaultFSError, connect, fault_filesystem, fuse_mounts_left, fuse_servers_left

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse")


@pytest.fixture
def fs() -> Iterator[FaultFS]:
    with fault_filesystem() as mounted:
        yield mounted
    assert mounted.mount not in fuse_mounts_left()


def put(path: str, data: bytes, *, sync: bool = False) -> None:
    with open(path, "wb") as f:
        f.write(data)
        if sync:
            f.flush()
            os.fsync(f.fileno())


def sync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def timed(action: object) -> float:
    start = time.perf_counter()
    action()  # type: ignore[operator]
    return time.perf_counter() - start


# -- passthrough -------------------------------------------------------------------------------


def test_files_pass_through_to_the_backing_directory_which_hides_the_graveyard(fs: FaultFS) -> None:
    m = fs.mount
    os.mkdir(f"{m}/d")
    put(f"{m}/d/a", b"alpha")
    os.rename(f"{m}/d/a", f"{m}/d/b")
    os.symlink("b", f"{m}/d/link")
    os.link(f"{m}/d/b", f"{m}/d/hard")
    assert sorted(os.listdir(f"{m}/d")) == ["b", "hard", "link"]
    assert read(f"{m}/d/link") == b"alpha" and read(f"{fs.backing}/d/b") == b"alpha"
    os.unlink(f"{m}/d/hard")
    with pytest.raises(OSError) as exc:
        os.rmdir(f"{m}/d")
    assert exc.value.errno == errno.ENOTEMPTY
    assert os.listdir(m) == ["d"] and ".raychaos-faultfs" in os.listdir(fs.backing)
    assert not os.path.exists(f"{m}/.raychaos-faultfs")
    assert fs.state().count("op.rename") == 1


def test_posix_locks_work_on_the_mount(fs: FaultFS) -> None:
    import fcntl

    with open(f"{fs.mount}/locked", "wb") as f:
        fcntl.lockf(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.lockf(f, fcntl.LOCK_UN)
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)


# -- latency, stall, errors ----------------------------------------------------------------------


def test_latency_delays_only_the_chosen_operation_and_heals(fs: FaultFS) -> None:
    path = f"{fs.mount}/f"
    fd = os.open(path, os.O_CREAT | os.O_WRONLY)
    try:
        os.write(fd, b"x")
        fs.set_latency({"fsync": 0.2})
        assert timed(lambda: os.fsync(fd)) >= 0.2
        assert timed(lambda: os.write(fd, b"y")) < 0.15
        fs.heal("latency")
        assert timed(lambda: os.fsync(fd)) < 0.15
    finally:
        os.close(fd)
    assert fs.state().count("delayed") == 1


def test_a_stall_blocks_operations_until_healed(fs: FaultFS) -> None:
    fs.stall(glob="/slow/*", seconds=60)
    put(f"{fs.mount}/fast", b"not stalled")  # outside the glob
    os.mkdir(f"{fs.mount}/slow")  # the directory itself is "/slow", not under it
    done = threading.Event()
    writer = threading.Thread(target=lambda: (put(f"{fs.mount}/slow/x", b"1"), done.set()))
    writer.start()
    wait_until(lambda: fs.state().count("stalled") >= 1, timeout=10, what="a stalled operation")
    assert not done.wait(0.3), "the write finished during the stall"
    fs.heal("stall")
    assert done.wait(10), "the write was not released by the heal"
    writer.join()
    assert read(f"{fs.mount}/slow/x") == b"1"


def test_a_stall_ends_by_itself_at_its_deadline(fs: FaultFS) -> None:
    fs.stall(seconds=0.5)
    took = timed(lambda: put(f"{fs.mount}/x", b"1"))
    assert 0.4 <= took < 5
    assert fs.state().stall is None


@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC])
def test_an_errno_hits_matching_paths_only_and_heals(fs: FaultFS, code: int) -> None:
    os.mkdir(f"{fs.mount}/bad")
    fs.fail(code, glob="/bad/*")
    with pytest.raises(OSError) as exc:
        put(f"{fs.mount}/bad/x", b"1")
    assert exc.value.errno == code
    put(f"{fs.mount}/good", b"1")
    fs.heal("errors")
    put(f"{fs.mount}/bad/x", b"2")
    assert read(f"{fs.mount}/bad/x") == b"2"
    assert fs.state().count(f"errno.{code}") == 1


def test_eio_on_reads_of_one_file(fs: FaultFS) -> None:
    put(f"{fs.mount}/f", b"data", sync=True)
    fs.fail(errno.EIO, glob="/f", ops=["read"])
    with open(f"{fs.mount}/f", "rb") as f, pytest.raises(OSError) as exc:
        f.read()
    assert exc.value.errno == errno.EIO


def test_erofs_refuses_opening_for_writing_but_not_reading(fs: FaultFS) -> None:
    put(f"{fs.mount}/f", b"data")
    fs.fail(errno.EROFS)
    assert read(f"{fs.mount}/f") == b"data"
    for attempt in (lambda: os.open(f"{fs.mount}/f", os.O_WRONLY), lambda: os.mkdir(f"{fs.mount}/d"),
                    lambda: os.unlink(f"{fs.mount}/f")):
        with pytest.raises(OSError) as exc:
            attempt()
        assert exc.value.errno == errno.EROFS


def test_bad_switches_are_refused_before_anything_changes(fs: FaultFS) -> None:
    with pytest.raises(InvalidConfig, match="EIO, ENOSPC, EROFS"):
        fs.fail(errno.EPERM)
    with pytest.raises(InvalidConfig, match="not ones a fault filesystem serves"):
        fs.set_latency({"fsnyc": 0.1})
    with pytest.raises(InvalidConfig, match=r"`seconds` must be a number of seconds in \[0, 600\]"):
        fs.stall(seconds=-1)
    state = fs.state()
    assert (state.latency, state.stall, state.errors) == ({}, None, ())


# -- the power loss ------------------------------------------------------------------------------


def test_a_write_never_fsynced_is_gone_and_the_synced_bytes_are_back(fs: FaultFS) -> None:
    m = fs.mount
    put(f"{m}/f", b"A" * 10_000, sync=True)
    sync_dir(m)
    with open(f"{m}/f", "r+b") as f:  # overwrite inside, and append, no fsync
        f.seek(5000)
        f.write(b"B" * 6000)
    lost = fs.power_loss()
    assert read(f"{m}/f") == b"A" * 10_000
    assert (lost.files_reverted, lost.bytes_cut, lost.names_undone) == (1, 1000, 0)


def test_a_truncation_and_an_o_trunc_never_fsynced_are_undone(fs: FaultFS) -> None:
    m = fs.mount
    put(f"{m}/f", b"12345678", sync=True)
    put(f"{m}/g", b"abcdefgh", sync=True)
    sync_dir(m)
    os.truncate(f"{m}/f", 3)
    put(f"{m}/g", b"new")  # open(O_TRUNC), write: never fsynced
    fs.power_loss()
    assert (read(f"{m}/f"), read(f"{m}/g")) == (b"12345678", b"abcdefgh")


def test_calls_on_an_open_handle_reach_its_file(fs: FaultFS) -> None:
    """ftruncate, fchmod and futimens come with a handle and no path."""
    put(f"{fs.mount}/f", b"0123456789", sync=True)
    sync_dir(fs.mount)
    fd = os.open(f"{fs.mount}/f", os.O_RDWR)
    try:
        os.ftruncate(fd, 4)
        os.fchmod(fd, 0o600)
        os.utime(fd, ns=(10**9, 2 * 10**9))
    finally:
        os.close(fd)
    st = os.stat(f"{fs.backing}/f")
    assert (st.st_size, st.st_mode & 0o777, st.st_mtime_ns) == (4, 0o600, 2 * 10**9)
    fs.power_loss()
    assert read(f"{fs.mount}/f") == b"0123456789"


def test_a_file_created_and_fsynced_but_not_its_directory_is_gone(fs: FaultFS) -> None:
    m = fs.mount
    put(f"{m}/synced-file-only", b"data", sync=True)
    put(f"{m}/nothing-synced", b"data")
    fs.power_loss()
    assert os.listdir(m) == []


def test_a_file_and_its_directory_fsynced_survive_whole(fs: FaultFS) -> None:
    m = fs.mount
    put(f"{m}/f", b"data", sync=True)
    put(f"{m}/empty-but-named", b"data")  # its name is synced below, its bytes never
    sync_dir(m)
    assert fs.state().unsynced_names == 0
    fs.power_loss()
    assert (read(f"{m}/f"), read(f"{m}/empty-but-named")) == (b"data", b"")


def test_a_rename_without_a_directory_fsync_is_undone(fs: FaultFS) -> None:
    m = fs.mount
    put(f"{m}/old", b"content", sync=True)
    put(f"{m}/target", b"replaced", sync=True)
    sync_dir(m)
    os.rename(f"{m}/old", f"{m}/new")
    os.rename(f"{m}/new", f"{m}/target")  # replaces target: it must come back too
    lost = fs.power_loss()
    assert sorted(os.listdir(m)) == ["old", "target"]
    assert (read(f"{m}/old"), read(f"{m}/target")) == (b"content", b"replaced")
    assert lost.names_undone == 2


def test_atomic_replace_is_durable_only_once_the_directory_is_fsynced(fs: FaultFS) -> None:
    m = fs.mount
    put(f"{m}/cfg", b"v1", sync=True)
    sync_dir(m)
    for dir_sync, expected in ((False, b"v1"), (True, b"v2")):
        put(f"{m}/cfg.tmp", b"v2", sync=True)
        os.rename(f"{m}/cfg.tmp", f"{m}/cfg")
        if dir_sync:
            sync_dir(m)
        fs.power_loss()
        assert (read(f"{m}/cfg"), os.listdir(m)) == (expected, ["cfg"])


def test_an_unlink_without_a_directory_fsync_is_undone_with_the_bytes(fs: FaultFS) -> None:
    m = fs.mount
    for name in ("kept", "gone"):
        put(f"{m}/{name}", name.encode(), sync=True)
    sync_dir(m)
    os.unlink(f"{m}/kept")
    os.unlink(f"{m}/gone")
    sync_dir(m)  # covers both unlinks ...
    put(f"{m}/other", b"x", sync=True)
    os.unlink(f"{m}/other")  # ... but not these two changes
    fs.power_loss()
    assert os.listdir(m) == []
    put(f"{m}/f", b"bytes", sync=True)
    sync_dir(m)
    os.unlink(f"{m}/f")
    fs.power_loss()
    assert read(f"{m}/f") == b"bytes"


def test_a_new_directory_whose_parent_was_not_fsynced_is_gone_with_its_files(fs: FaultFS) -> None:
    m = fs.mount
    os.mkdir(f"{m}/d")
    put(f"{m}/d/f", b"data", sync=True)
    sync_dir(f"{m}/d")
    fs.power_loss()
    assert os.listdir(m) == []
    os.mkdir(f"{m}/d")
    put(f"{m}/d/f", b"data", sync=True)
    sync_dir(f"{m}/d")
    sync_dir(m)
    fs.power_loss()
    assert read(f"{m}/d/f") == b"data"


def test_a_directory_renamed_after_its_changes_is_still_undone_in_place(fs: FaultFS) -> None:
    """A file created in ``tmp`` (not fsynced there), then ``tmp`` renamed to ``final`` with the
    parent fsynced: the rename is durable, the file's name in it is not."""
    m = fs.mount
    os.mkdir(f"{m}/tmp")
    sync_dir(m)
    put(f"{m}/tmp/f", b"data", sync=True)
    os.rename(f"{m}/tmp", f"{m}/final")
    sync_dir(m)
    fs.power_loss()
    assert (os.listdir(m), os.listdir(f"{m}/final")) == (["final"], [])


def test_handles_open_at_a_power_loss_are_dead(fs: FaultFS) -> None:
    os.mkdir(f"{fs.mount}/replay")
    fd = os.open(f"{fs.mount}/replay/f", os.O_CREAT | os.O_RDWR)
    try:
        lost = fs.power_loss()
        # Which files' handles died, so a workload can tell the power loss reached its writer.
        assert lost.handles_killed == 1 and lost.killed_paths == ("/replay/f",)
        assert lost.cut_under("replay") == 1 and lost.cut_under("/params") == 0
        with pytest.raises(OSError) as exc:
            os.write(fd, b"zombie")
        assert exc.value.errno == errno.EIO
    finally:
        os.close(fd)
    assert os.listdir(fs.mount) == []


# -- the mount's life ----------------------------------------------------------------------------


def test_connect_finds_a_mount_by_its_path_and_refuses_any_other(fs: FaultFS, tmp_path: Path) -> None:
    found = connect(fs.mount + "/")
    assert (found.mount, found.backing, found.pid) == (fs.mount, fs.backing, fs.pid)
    with pytest.raises(TargetNotFound, match="no fault filesystem is mounted at"):
        connect(str(tmp_path))


def test_an_error_in_the_block_and_a_stall_left_on_still_unmount(tmp_path: Path) -> None:
    backing = tmp_path / "data"
    backing.mkdir()
    with pytest.raises(RuntimeError, match="boom"), fault_filesystem(str(backing)) as fs:
        put(f"{fs.mount}/kept", b"x")
        fs.stall(seconds=600)
        raise RuntimeError("boom")
    assert fs.mount not in fuse_mounts_left()
    assert not any(p.pid == fs.pid for p in fuse_servers_left())
    assert os.listdir(backing) == ["kept"]  # an unmount is a clean shutdown: the graveyard goes
    with pytest.raises(FaultFSError, match="does not answer"):
        fs.state()


_CHILD = textwrap.dedent("""
    import os, sys, time
    from chaos.disks._fusefs import fault_filesystem
    with fault_filesystem() as fs:
        print(fs.mount, flush=True)
        time.sleep(600)  # until the test kills or interrupts this process
""")


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGINT])
def test_a_driver_killed_or_interrupted_leaves_no_mount(how: int) -> None:
    child = subprocess.Popen([sys.executable, "-c", _CHILD], stdout=subprocess.PIPE, text=True,
                             cwd=os.path.dirname(os.path.dirname(__file__)),
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert child.stdout is not None
        mount = child.stdout.readline().strip()
        found = connect(mount)
        server, work = found.pid, os.path.dirname(found.control)
        assert server in [p.pid for p in fuse_servers_left()]
        child.send_signal(how)
        child.wait(30)
        wait_until(lambda: mount not in fuse_mounts_left(), timeout=20, what="the orphaned mount gone")
        wait_until(lambda: server not in [p.pid for p in fuse_servers_left()], timeout=20,
                   what="the orphaned server gone")
        assert not os.path.exists(work), "the orphaned server left its folder"
    finally:
        child.kill()
        child.wait(10)


def test_a_create_that_loses_the_race_to_another_opens_the_file_unless_exclusive(tmp_path: Path) -> None:
    """The kernel sends ``create`` when its lookup found no file; another creator may make it
    first. Called directly, without a mount: the server's operations on a plain directory."""
    from chaos.disks._fuse_faults import FaultState
    from chaos.disks._fuse_server import FaultOps

    ops = FaultOps(str(tmp_path), FaultState())
    try:
        (tmp_path / "f").write_bytes(b"theirs")
        fd = ops.create("/f", 0o644, os.O_CREAT | os.O_RDWR)
        assert os.pread(fd, 10, 0) == b"theirs"
        ops.release(None, fd)
        with pytest.raises(FileExistsError):
            ops.create("/f", 0o644, os.O_CREAT | os.O_EXCL | os.O_RDWR)
    finally:
        ops.volatile.close()


def test_a_real_full_disk_behind_the_mount_shows_through(tmp_path: Path) -> None:
    """The backing's own errors pass through: a 1 MiB tmpfs fills, and its ENOSPC reaches the writer."""
    from chaos.cluster import capped_filesystem

    with capped_filesystem(1) as backing, fault_filesystem(backing) as fs:
        with pytest.raises(OSError) as exc, open(f"{fs.mount}/big", "wb") as f:
            f.write(b"\0" * (2 << 20))
        assert exc.value.errno == errno.ENOSPC


def test_the_leak_check_sees_a_mounted_fault_filesystem_and_its_server() -> None:
    from chaos.leakcheck import leftovers

    with fault_filesystem() as fs:
        assert fs.mount in fuse_mounts_left()
        assert fs.pid in {p.pid for p in leftovers(grace=0)}
    assert fs.mount not in fuse_mounts_left()
    assert fs.pid not in {p.pid for p in leftovers(grace=0)}


def test_an_errno_rule_that_ends_by_itself_leaves_the_latency_on() -> None:
    """Each kind's deadline ends that kind only (driven directly, no mount)."""
    from chaos.disks._fuse_faults import ErrorRule, FaultState

    state = FaultState()
    state.set_latency({"read": 0.001})  # no deadline: on until healed
    state.add_error(ErrorRule(errno.EIO, "*", frozenset({"read"})), until=0.0)  # ends at once
    assert state.gate("write", "/f") == 0  # the gate ends what is due first
    assert state.latency == {"read": 0.001} and state.errors == []
    assert state.counts["expired.errors"] == 1 and state.counts["expired.latency"] == 0


def test_a_latency_deadline_passing_after_its_heal_ends_nothing_else_and_each_expiry_counts_once() -> None:
    """A deadline whose kind is off by then is dropped without touching the other kind; each
    kind that ends by itself counts one expiry (driven directly, no mount)."""
    from chaos.disks._fuse_faults import ErrorRule, FaultState

    state = FaultState()
    state.add_error(ErrorRule(errno.EIO, "*", frozenset({"read"})))  # no deadline: on until healed
    state.set_latency({}, until=0.0)  # a latency deadline with no latency on
    assert state.gate("write", "/f") == 0
    assert len(state.errors) == 1 and state.deadlines == {}
    state.set_latency({"read": 0.001}, until=0.0)
    state.set_stall("/nothing/*", 0.0)
    state.gate("write", "/f")
    assert state.latency == {} and state.stall is None
    assert state.counts["expired.latency"] == 1 and state.counts["expired.stall"] == 1


def test_an_operation_stalled_to_the_stalls_deadline_ends_the_stall_it_waited_out() -> None:
    from chaos.disks._fuse_faults import FaultState

    state = FaultState()
    state.set_stall("/f", 0.05)
    assert state.gate("write", "/f") == 0  # waits the stall out
    assert state.stall is None and state.counts["stalled"] == 1 and state.counts["expired.stall"] == 1


def test_a_rule_added_after_its_kinds_deadline_passed_outlives_that_deadline() -> None:
    """An old deadline, due but not yet met by any operation, ends the rules it was set for, never
    one added after it without a deadline of its own."""
    from chaos.disks._fuse_faults import ErrorRule, FaultState

    state = FaultState()
    old, new = ErrorRule(errno.EIO, "*", frozenset({"read"})), ErrorRule(errno.EROFS, "*", frozenset({"write"}))
    state.add_error(old, until=0.0)
    state.add_error(new)
    state.set_latency({"read": 0.001}, until=0.0)
    state.set_latency({"write": 0.001})
    state.gate("open", "/f")
    assert state.errors == [new] and state.latency == {"write": 0.001}


def test_a_heal_drops_its_kinds_deadline_so_a_later_rule_outlives_it() -> None:
    from chaos.disks._fuse_faults import ErrorRule, FaultState

    state = FaultState()
    old, new = ErrorRule(errno.EIO, "*", frozenset({"read"})), ErrorRule(errno.EROFS, "*", frozenset({"write"}))
    state.add_error(old, until=0.05)
    state.heal(frozenset({"errors"}))
    state.add_error(new)  # no deadline of its own: on until healed
    passed = time.monotonic() + 0.06
    wait_until(lambda: time.monotonic() > passed, timeout=1.0, interval=0.01, what="the old deadline to pass")
    state.gate("open", "/f")
    assert state.errors == [new] and state.counts["expired.errors"] == 0


def test_a_heal_that_comes_after_its_kinds_deadline_counts_the_fault_expired() -> None:
    """The filesystem's own deadline ended the fault before the heal: the injector reads that
    from the count, so a heal must not hide it by switching off what already ended."""
    from chaos.disks._fuse_faults import FaultState

    state = FaultState()
    state.set_latency({"read": 0.001}, until=0.0)
    state.heal(frozenset({"latency"}))
    assert state.counts["expired.latency"] == 1 and state.latency == {}


def test_a_snapshot_names_the_stalls_glob_while_it_is_on_and_none_after_its_heal() -> None:
    from chaos.disks._fuse_faults import FaultState

    state = FaultState()
    state.set_stall("/ckpt/*", 30.0)
    assert state.snapshot()["stall"] == "/ckpt/*"
    state.heal(frozenset({"stall"}))
    assert state.snapshot()["stall"] is None
