"""Disk faults as records on a fault filesystem, Ray-free: each is confirmed by an operation that
sees it, healed, and confirmed healed; one whose effect never comes is ineffective (a plant)."""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Iterator

import pytest

from chaos._errors import FaultIneffective, InvalidFaultSpec, TargetNotFound
from chaos.disks._faults import (
    DiskEvent,
    FailingDisk,
    PowerLoss,
    SlowDisk,
    StallDisk,
    inject_disk,
)
from chaos.disks._fusefs import FaultFS, fault_filesystem

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse")


@pytest.fixture(scope="module")
def fs() -> Iterator[FaultFS]:
    with fault_filesystem() as mounted:
        yield mounted


def steps_of(events: list[DiskEvent]) -> list[str]:
    return [e.kind for e in events]


def test_a_slow_disk_is_measured_by_a_probe_and_measured_gone_after_its_heal(fs: FaultFS) -> None:
    events: list[DiskEvent] = []
    with inject_disk(SlowDisk(fs.mount, seconds=5, latency=0.2, ops=("fsync",)), record=events.append) as hit:
        fd = os.open(f"{fs.mount}/f", os.O_CREAT | os.O_WRONLY)
        start = time.perf_counter()
        os.fsync(fd)
        assert time.perf_counter() - start >= 0.2
        os.close(fd)
    assert steps_of(events) == ["inject", "heal"]
    assert hit.confirmed.measured is not None and hit.confirmed.measured >= 0.18
    assert events[1].measured is not None and events[1].measured < 0.1
    assert fs.state().latency == {}


def test_a_slow_read_is_confirmed_by_a_read_that_reaches_the_disk(fs: FaultFS) -> None:
    # A probe read of an empty file is answered by the kernel alone: it could never see the fault.
    events: list[DiskEvent] = []
    with inject_disk(SlowDisk(fs.mount, seconds=5, latency=0.2, ops=("read",)), record=events.append) as hit:
        assert hit.confirmed.measured is not None and hit.confirmed.measured >= 0.18
    assert steps_of(events) == ["inject", "heal"]


def test_a_slow_disk_no_probe_can_time_is_healed_by_reading_its_state_back(fs: FaultFS) -> None:
    events: list[DiskEvent] = []
    stop = threading.Event()

    def workload() -> None:  # renames back and forth: the operation the fault's injection waits for
        here, there = f"{fs.mount}/r", f"{fs.mount}/r2"
        os.close(os.open(here, os.O_CREAT | os.O_WRONLY))
        deadline = time.monotonic() + 30  # bounded, whatever happens
        while not stop.wait(0.01) and time.monotonic() < deadline:
            os.rename(here, there)
            here, there = there, here
        os.unlink(here)

    renamer = threading.Thread(target=workload)
    renamer.start()
    try:
        with inject_disk(SlowDisk(fs.mount, seconds=5, latency=0.2, ops=("rename",)), record=events.append):
            pass
    finally:
        stop.set()
        renamer.join(timeout=60)
    assert steps_of(events) == ["inject", "heal"]
    assert events[1].measured is None and "read back" in events[1].outcome


def test_a_stall_is_confirmed_by_a_blocked_probe_and_released_by_its_heal(fs: FaultFS) -> None:
    os.makedirs(f"{fs.mount}/stalled", exist_ok=True)
    events: list[DiskEvent] = []
    done = threading.Event()
    with inject_disk(StallDisk(fs.mount, seconds=30, glob="/stalled/*"), record=events.append):
        writer = threading.Thread(target=lambda: (open(f"{fs.mount}/stalled/x", "wb").close(), done.set()))
        writer.start()
        assert not done.wait(0.3)
        open(f"{fs.mount}/elsewhere", "wb").close()  # outside the glob: not blocked
    assert done.wait(5)
    writer.join()
    assert steps_of(events) == ["inject", "heal"] and "returned" in events[1].outcome


@pytest.mark.parametrize("name", ["EIO", "ENOSPC", "EROFS"])
def test_a_failing_disk_is_confirmed_by_a_probe_write_and_healed(fs: FaultFS, name: str) -> None:
    events: list[DiskEvent] = []
    with inject_disk(FailingDisk(fs.mount, seconds=5, errno=name, glob="/*"), record=events.append) as hit:
        with pytest.raises(OSError) as exc, open(f"{fs.mount}/data", "wb") as f:
            f.write(b"x")
        assert exc.value.errno == getattr(errno, name)
    open(f"{fs.mount}/data", "wb").close()
    assert steps_of(events) == ["inject", "heal"] and hit.confirmed.measured == getattr(errno, name)


def test_a_failing_disk_on_a_folder_not_made_yet_waits_for_the_workload(fs: FaultFS) -> None:
    """No probe reaches ``/later/*`` until the folder exists: a workload operation confirms it."""
    events: list[DiskEvent] = []
    fault = FailingDisk(fs.mount, seconds=5, glob="/later/*")

    def workload() -> None:
        time.sleep(0.3)  # the workload's own pace: it makes the folder a moment later
        os.makedirs(f"{fs.mount}/later", exist_ok=True)
        try:
            open(f"{fs.mount}/later/x", "wb").close()
        except OSError:
            pass

    thread = threading.Thread(target=workload)
    thread.start()
    with inject_disk(fault, record=events.append, confirm_within=5):
        pass
    thread.join()
    assert steps_of(events) == ["inject", "heal"] and events[1].outcome == "errors off (read back)"


def test_a_fault_no_operation_sees_is_ineffective_and_healed(fs: FaultFS) -> None:
    """A glob no path ever takes: nothing fails within the bound, so it is ineffective, journaled."""
    events: list[DiskEvent] = []
    with pytest.raises(FaultIneffective, match="no operation of the workload"), \
            inject_disk(FailingDisk(fs.mount, seconds=5, glob="/never/*"), record=events.append,
                        confirm_within=0.5):
        pytest.fail("the block ran although the fault was never confirmed")
    assert steps_of(events) == ["ineffective"] and fs.state().errors == ()


def test_a_power_loss_takes_an_unsynced_probe_and_the_workloads_unsynced_writes(fs: FaultFS) -> None:
    with open(f"{fs.mount}/unsynced", "wb") as f:
        f.write(b"gone")
    events: list[DiskEvent] = []
    with inject_disk(PowerLoss(fs.mount), record=events.append) as hit:
        assert not os.path.exists(f"{fs.mount}/unsynced")
    assert hit.power_loss is not None and hit.power_loss.names_undone >= 2  # the workload's file and the probe
    assert steps_of(events) == ["inject", "heal"]


def test_records_are_validated_before_anything_is_injected(fs: FaultFS, tmp_path: object) -> None:
    for bad, match in ((lambda: SlowDisk("rel/path", seconds=1), "absolute mount point"),
                       (lambda: SlowDisk(fs.mount, seconds=1, ops=("fsnyc",)), "`ops` must be a list"),
                       (lambda: FailingDisk(fs.mount, seconds=1, errno="EPERM"), "`errno` must be"),  # type: ignore[arg-type]
                       (lambda: StallDisk(fs.mount, seconds=0), "`seconds` must be a duration")):
        with pytest.raises(InvalidFaultSpec, match=match):
            bad()
    with pytest.raises(TargetNotFound), inject_disk(PowerLoss(str(tmp_path))):
        pass


# -- what each confirmation says, and what it leaves behind -----------------------------------------


def test_a_power_loss_that_took_nothing_is_ineffective_and_leaves_no_probe(
        fs: FaultFS, monkeypatch: pytest.MonkeyPatch) -> None:
    from chaos.disks._fusefs import PowerLossResult

    monkeypatch.setattr(FaultFS, "power_loss", lambda self: PowerLossResult(  # the server kept all
        files_reverted=0, bytes_cut=0, pages_restored=0, names_undone=0, handles_killed=0))
    with pytest.raises(FaultIneffective, match=r"unsynced probe file .* survived the power loss"), \
            inject_disk(PowerLoss(fs.mount)):
        pytest.fail("a power loss that dropped nothing was confirmed")
    assert [n for n in os.listdir(fs.mount) if n.startswith(".raychaos-probe")] == []


def test_a_failing_disk_whose_probe_write_worked_says_it_got_no_error(
        fs: FaultFS, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FaultFS, "fail", lambda self, code, **_: None)  # the rule never reaches the server
    with pytest.raises(FaultIneffective, match="got no error, not EIO"), \
            inject_disk(FailingDisk(fs.mount, seconds=1, errno="EIO", glob="*")):
        pytest.fail("a failing disk no write met was confirmed")


def test_a_failing_disk_whose_rules_outlive_the_heal_is_ineffective(
        fs: FaultFS, monkeypatch: pytest.MonkeyPatch) -> None:
    """No probe (it fails reads only): the heal is read back from the server's own list."""
    from chaos.disks import _faults

    heal = FaultFS.heal
    monkeypatch.setattr(_faults, "_seen", lambda *_, **__: 0.0)  # the workload's read: not this test's
    monkeypatch.setattr(FaultFS, "heal", lambda self, *kinds: None)
    try:
        with pytest.raises(FaultIneffective, match="still lists errno rules after the heal"), \
                inject_disk(FailingDisk(fs.mount, seconds=1, errno="EIO", glob="/ckpt/*", ops=("read",))):
            pass
    finally:
        heal(fs, "errors")
    assert not fs.state().errors


def test_a_confirmation_by_the_workloads_operation_takes_the_seconds_it_waited(fs: FaultFS) -> None:
    from chaos.disks._faults import _seen

    done = threading.Event()

    def workload() -> None:  # stats the mount until the wait has seen one, at most 5 s
        deadline = time.monotonic() + 5.0
        while not done.is_set() and time.monotonic() < deadline:
            os.stat(fs.mount)
            done.wait(0.01)

    thread = threading.Thread(target=workload)
    thread.start()
    try:
        took = _seen(fs, "op.getattr", 5.0, lambda event: None, PowerLoss(fs.mount))
    finally:
        done.set()
        thread.join(timeout=10)
    assert 0.0 <= took < 5.0


def test_a_stall_no_operation_met_is_ineffective(fs: FaultFS, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(FaultFS, "stall", lambda self, **_: None)  # the stall never reaches the server
    with pytest.raises(FaultIneffective, match="was stalled within"), \
            inject_disk(StallDisk(fs.mount, seconds=1, glob="*"), confirm_within=0.5):
        pytest.fail("a stall no operation met was confirmed")


def test_a_stall_is_confirmed_with_the_seconds_its_probe_waited_to_be_seen(fs: FaultFS) -> None:
    with inject_disk(StallDisk(fs.mount, seconds=1, glob="*")) as injection:
        assert 0.0 <= (injection.confirmed.measured or 0.0) < 5.0


@pytest.mark.parametrize("op", ["create", "open", "getattr", "write", "fsync", "read"])
def test_a_probe_reaches_the_fault_on_its_own_operation_and_leaves_no_file_or_descriptor(
        fs: FaultFS, op: str) -> None:
    from chaos.disks._faults import _fresh_probe, _timed_op

    fs.set_latency({op: 0.05}, until=30)
    try:
        fds = len(os.listdir("/proc/self/fd"))
        took = _timed_op(op, _fresh_probe(fs))
        assert len(os.listdir("/proc/self/fd")) == fds
    finally:
        fs.heal("latency")
    assert 0.045 <= took < 10.0, f"a probe {op} took {took:.3f} s, not the latency on {op} (0.05 s)"
    assert not [name for name in os.listdir(fs.mount) if name.startswith(".raychaos-probe")]


def test_a_slow_open_is_confirmed_by_opening_a_file_that_is_there(fs: FaultFS) -> None:
    # An open that creates its file is the filesystem's create: it could never see a slow open.
    with inject_disk(SlowDisk(fs.mount, seconds=5, latency=0.2, ops=("open",))) as hit:
        assert hit.confirmed.measured is not None and hit.confirmed.measured >= 0.18


def test_a_heal_probe_stops_at_its_first_fast_operation_and_tries_each_while_they_are_slow(fs: FaultFS) -> None:
    from chaos.disks._faults import HEAL_PROBES, _fastest_probe

    before = fs.state().count("op.fsync")
    assert _fastest_probe("fsync", fs, under=1.0) < 1.0
    assert fs.state().count("op.fsync") == before + 1
    fs.set_latency({"fsync": 0.02}, until=30)
    try:
        assert _fastest_probe("fsync", fs, under=0.01) >= 0.018
    finally:
        fs.heal("latency")
    assert fs.state().count("op.fsync") == before + 1 + HEAL_PROBES


def test_a_heal_names_only_the_filesystems_faults_and_a_power_loss_has_none_to_switch_off(fs: FaultFS) -> None:
    from chaos._errors import InvalidConfig
    from chaos.disks._faults import switch_off

    fs.set_latency({"fsync": 0.01}, until=30)
    try:
        with pytest.raises(InvalidConfig, match=r"cannot heal \['latncy'\].*name some of them"):
            fs.heal("latncy")
        switch_off(PowerLoss(fs.mount))  # instant: nothing of it is on, nothing else is touched
        assert fs.state().latency == {"fsync": 0.01}
    finally:
        fs.heal()
    assert fs.state().latency == {}


def test_a_failing_disk_whose_probe_got_another_error_names_the_one_it_got(
        fs: FaultFS, monkeypatch: pytest.MonkeyPatch) -> None:
    fail = FaultFS.fail
    monkeypatch.setattr(FaultFS, "fail", lambda self, code, **options: fail(self, errno.ENOSPC, **options))
    with pytest.raises(FaultIneffective, match="got ENOSPC, not EIO"), \
            inject_disk(FailingDisk(fs.mount, seconds=1, errno="EIO")):
        pytest.fail("a disk failing with another error was confirmed")
    assert not fs.state().errors


def test_a_stall_no_probe_can_reach_is_healed_only_when_the_filesystem_reads_it_back_off(
        fs: FaultFS, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stall's folder is made by the workload once the stall is on, so no probe waits in it."""
    import shutil
    import uuid

    from chaos._wait import wait_until

    name, heal = f"later-{uuid.uuid4().hex[:8]}", FaultFS.heal

    def workload() -> None:
        wait_until(lambda: fs.state().stall is not None, timeout=10, what="the stall")
        os.mkdir(f"{fs.mount}/{name}")
        open(f"{fs.mount}/{name}/f", "w").close()  # blocked by the stall until it is healed

    thread = threading.Thread(target=workload)
    thread.start()
    monkeypatch.setattr(FaultFS, "heal", lambda self, *kinds: None)  # a heal that never reaches the server
    try:
        with pytest.raises(FaultIneffective, match="held 5 s after the heal"), \
                inject_disk(StallDisk(fs.mount, seconds=1, glob=f"/{name}/*"), confirm_within=5):
            pass
    finally:
        heal(fs, "stall")
        thread.join(timeout=10)
        shutil.rmtree(f"{fs.mount}/{name}", ignore_errors=True)
    assert not thread.is_alive() and fs.state().stall is None
