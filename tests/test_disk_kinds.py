"""Disk faults as fault kinds, Ray-free: the engine injects, journals and heals them like any
fault, a schedule holds each for its ``seconds``, scenario files name them (their mount the
run's storage, ``$STORAGE``), and a fault the filesystem's own deadline ended before the
driver's heal fails instead of passing."""

from __future__ import annotations

import dataclasses
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos import Chaos, Schedule
from chaos._driver import run_schedule
from chaos._errors import FaultIneffective, InvalidFaultSpec, TargetNotFound
from chaos._faults import STORAGE, FaultKind, FaultStatus, fault_from_dict, fault_to_dict
from chaos._journal import FaultEvent
from chaos._wait import wait_until
from chaos.disks._faults import (
    EXPIRED,
    DiskEvent,
    DiskInjection,
    FailingDisk,
    PowerLoss,
    SlowDisk,
    StallDisk,
    inject_disk,
)
from chaos.disks._fusefs import FaultFS, fault_filesystem
from scenarios import ScenarioError, load_scenario

needs_fuse = pytest.mark.skipif(not os.path.exists("/dev/fuse"), reason="needs /dev/fuse")
#: The grace the expiry tests give the filesystem's own deadline (DISK_GRACE is 5 s), and the
#: confirmation's bound (5 s by default), which the deadline includes: each test waits for both.
GRACE, CONFIRM = 0.2, 1.5


@pytest.fixture(scope="module")
def fs() -> Iterator[FaultFS]:
    with fault_filesystem() as mounted:
        os.makedirs(f"{mounted.mount}/ckpt", exist_ok=True)
        root = os.open(mounted.mount, os.O_RDONLY | os.O_DIRECTORY)
        os.fsync(root)  # the folder must outlive the power-loss test's cut
        os.close(root)
        yield mounted


def fault_events(chaos: Chaos) -> list[FaultEvent]:
    return [e for e in chaos.journal.events if isinstance(e, FaultEvent)]


# -- records, the journal's format, scenario files ------------------------------------------------

ALL = [SlowDisk("/mnt/x", seconds=2, latency=0.05, ops=("fsync", "write")), StallDisk("/mnt/x", seconds=1, glob="/a/*"),
       FailingDisk("/mnt/x", seconds=3, errno="ENOSPC", glob="/ckpt/*", ops=("write",)), PowerLoss("/mnt/x")]


@pytest.mark.parametrize("fault", ALL, ids=lambda f: f.KIND.value)
def test_each_disk_fault_is_a_kind_the_journal_writes_and_reads_back(fault: object) -> None:
    data = fault_to_dict(fault)  # type: ignore[arg-type]
    assert data["kind"] in {k.value for k in (FaultKind.SLOW_DISK, FaultKind.STALL_DISK, FaultKind.FAILING_DISK,
                                               FaultKind.POWER_LOSS)}
    assert fault_from_dict(data) == fault


SCENARIO = """
name = "disk"
workload = "full-disk"
duration = 6
{option}
[[faults]]
at = 1
kind = "{kind}"
mount = "$STORAGE"
{fields}
"""


def write(tmp_path: Path, *, kind: str = "slow_disk", fields: str = "seconds = 2", option: str = "") -> str:
    path = tmp_path / "disk.toml"
    path.write_text(SCENARIO.format(kind=kind, fields=fields, option=option))
    return str(path)


def test_a_scenario_names_its_disk_faults_mount_as_the_runs_storage_on_a_fault_filesystem(tmp_path: Path) -> None:
    scenario = load_scenario(write(tmp_path, fields="seconds = 2\nlatency = 0.2\nops = [\"fsync\"]",
                                   option="storage_faultfs = true"))
    assert scenario.storage_faultfs
    assert [e.fault for e in scenario.schedule.entries] == [SlowDisk(STORAGE, seconds=2, latency=0.2)]


def test_a_disk_fault_on_the_storage_without_a_fault_filesystem_is_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"faults.*slow_disk.*set storage_faultfs = true"):
        load_scenario(write(tmp_path))


@pytest.mark.parametrize(("kind", "fields", "said"), [
    ("failing_disk", 'seconds = 2\nerrno = "EPERM"', r"`errno` must be 'EIO', 'ENOSPC' or 'EROFS', got 'EPERM'"),
    ("slow_disk", "seconds = 2\nlatency = 0", r"`latency` must be seconds in \[0.001, 60\] per operation, got 0"),
    ("slow_disk", 'seconds = 2\nops = ["fsnyc"]', r"`ops` must be a list of operations among open, .*'fsnyc'"),
    ("stall_disk", "seconds = 599", r"`seconds` must be a duration in \(0, 595\] for a stall, got 599"),
    ("failing_disk", "seconds = 0", r"`seconds` must be a duration in \(0, 3600\] seconds, got 0"),
])
def test_bad_disk_fault_fields_are_refused_with_the_value_and_the_fix(tmp_path: Path, kind: str, fields: str,
                                                                    said: str) -> None:
    with pytest.raises(ScenarioError, match=said):
        load_scenario(write(tmp_path, kind=kind, fields=fields, option="storage_faultfs = true"))


def test_a_mount_that_is_no_mount_point_is_refused_with_the_fix() -> None:
    with pytest.raises(InvalidFaultSpec, match=r"`mount` must be where a fault filesystem is mounted, got "
                                               r"'relative/dir': give the absolute mount point"):
        PowerLoss("relative/dir")


@needs_fuse
def test_storage_outside_a_scenario_run_is_not_found_before_anything_is_injected() -> None:
    with pytest.raises(TargetNotFound, match=r"only the scenario runner resolves"), \
            inject_disk(SlowDisk(STORAGE, seconds=1)):
        pytest.fail("the block ran without a fault")


# -- the engine ------------------------------------------------------------------------------------


@needs_fuse
def test_a_second_fault_of_a_kind_on_a_mount_while_the_first_is_on_is_refused(fs: FaultFS) -> None:
    """A heal switches off every rule of its kind on a mount: the first's heal would end the
    second, which would then be reported as held. Refused, with the first untouched."""
    chaos = Chaos(address="unused: a disk fault asks Ray nothing")
    with chaos.inject(SlowDisk(fs.mount, seconds=5, latency=0.1)):
        with pytest.raises(InvalidFaultSpec, match=r"slow_disk on .* while another is on: .*one after the other"), \
                chaos.inject(SlowDisk(fs.mount, seconds=2, latency=0.2, ops=("write",))):
            pytest.fail("the block ran with two slow disks on one mount")
        assert fs.state().latency == {"fsync": 0.1}
    with chaos.inject(SlowDisk(fs.mount, seconds=1, latency=0.1)):  # one after the other: fine
        pass


@needs_fuse
def test_the_engine_injects_journals_and_heals_a_disk_fault(fs: FaultFS) -> None:
    chaos = Chaos(address="unused: a disk fault asks Ray nothing")
    with chaos.inject(SlowDisk(fs.mount, seconds=5, latency=0.1)) as injection:
        assert [e.kind for e in fault_events(chaos)] == ["inject"]
        assert fs.state().latency == {"fsync": 0.1}
    events = fault_events(chaos)
    assert [(e.kind, e.fault.KIND) for e in events] == [("inject", FaultKind.SLOW_DISK), ("heal", FaultKind.SLOW_DISK)]
    assert events[0].target == f"fault filesystem at {fs.mount}" and "delayed" in events[0].outcome
    assert isinstance(injection.found, DiskInjection) and (injection.found.confirmed.measured or 0) >= 0.09
    assert fs.state().latency == {}


@needs_fuse
def test_a_power_loss_through_the_engine_journals_the_bytes_it_cut(fs: FaultFS) -> None:
    path = f"{fs.mount}/ckpt/unsynced"
    with open(path, "wb") as f:
        f.write(b"x" * 1000)
    chaos = Chaos(address="unused")
    with chaos.inject(PowerLoss(fs.mount)) as injection:
        assert not os.path.exists(path)
    (inject, heal) = fault_events(chaos)
    assert inject.kind == "inject" and (inject.observed.bytes or 0) >= 1000 and heal.kind == "heal"
    assert isinstance(injection.found, DiskInjection) and injection.found.power_loss is not None


@needs_fuse
def test_a_schedule_holds_each_disk_fault_for_its_seconds_then_heals_it(fs: FaultFS) -> None:
    chaos = Chaos(address="unused")
    schedule = Schedule.explicit([(0, SlowDisk(fs.mount, seconds=1, latency=0.05)),
                                  (0, FailingDisk(fs.mount, seconds=1, errno="EIO", glob="/ckpt/*"))])
    outcomes = run_schedule(chaos, schedule)
    assert [o.status for o in outcomes] == [FaultStatus.INJECTED, FaultStatus.INJECTED], \
        [o.describe() for o in outcomes]
    for kind in (FaultKind.SLOW_DISK, FaultKind.FAILING_DISK):
        inject, heal = [e for e in fault_events(chaos) if e.fault.KIND is kind]
        assert (inject.kind, heal.kind) == ("inject", "heal")
        assert 0.9 <= heal.mono - inject.mono < 4, f"{kind} held {heal.mono - inject.mono:.2f} s, not its 1 s"
    state = fs.state()
    assert state.latency == {} and state.errors == ()


@needs_fuse
def test_a_rollback_switches_a_held_disk_fault_off_at_once(fs: FaultFS) -> None:
    chaos = Chaos(address="unused")
    with chaos.inject(FailingDisk(fs.mount, seconds=30, errno="EIO", glob="/ckpt/*")):
        assert fs.state().errors
        assert chaos.heal_all() == 1  # what a Ctrl-C's rollback does, while the block still holds it
        assert fs.state().errors == ()
    assert [e.kind for e in fault_events(chaos)] == ["inject", "heal"]


@needs_fuse
def test_a_slow_disk_whose_heal_leaves_the_latency_on_is_ineffective(fs: FaultFS,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The heal is confirmed by a fast probe, retried (one alone can be slow on a loaded
    machine): a latency that stays on slows every retry, and the fault fails closed."""
    heal = FaultFS.heal

    def heal_but_the_latency(self: FaultFS, *kinds: str) -> None:
        if rest := [k for k in kinds if k != "latency"]:  # none named would heal them all
            heal(self, *rest)

    monkeypatch.setattr(FaultFS, "heal", heal_but_the_latency)
    events: list[DiskEvent] = []
    try:
        with pytest.raises(FaultIneffective, match="each of 5 probe fsyncs still took"), \
                inject_disk(SlowDisk(fs.mount, seconds=0.1, latency=0.05), record=events.append):
            pass
    finally:
        heal(fs, "latency")
    assert [e.kind for e in events] == ["inject", "ineffective"], events


# -- the filesystem's own deadline: ends the fault, and a driver still holding it fails -----------

HELD = [SlowDisk("/mounted-later", seconds=0.3, latency=0.05),
        FailingDisk("/mounted-later", seconds=0.3, glob="/ckpt/*"),
        StallDisk("/mounted-later", seconds=0.3, glob="/ckpt/*")]


def switched_off(fs: FaultFS) -> bool:
    state = fs.state()
    return not state.latency and not state.errors and state.stall is None


@needs_fuse
@pytest.mark.parametrize("held", HELD, ids=lambda f: f.KIND.value)
def test_a_disk_fault_held_past_its_seconds_ends_by_the_filesystems_deadline_and_fails(
        fs: FaultFS, held: SlowDisk | FailingDisk | StallDisk) -> None:
    events: list[DiskEvent] = []
    fault = dataclasses.replace(held, mount=fs.mount)
    with pytest.raises(FaultIneffective, match=EXPIRED.split("{")[0]), \
            inject_disk(fault, record=events.append, grace=GRACE, confirm_within=CONFIRM):
        # Held well past seconds + grace: the filesystem itself must end it (a driver gone).
        wait_until(lambda: switched_off(fs), timeout=10, what=f"the {fault.KIND} to end by its deadline")
    assert [e.kind for e in events] == ["inject", "ineffective"]
    assert f"{fault.seconds:g} s + {GRACE:g} s grace" in events[-1].outcome
    assert switched_off(fs)


@needs_fuse
def test_a_stall_released_by_its_deadline_lets_the_blocked_operation_go_and_says_so(fs: FaultFS) -> None:
    done = threading.Event()
    fault = StallDisk(fs.mount, seconds=0.3, glob="/ckpt/*")
    with pytest.raises(FaultIneffective, match="own deadline"), inject_disk(fault, grace=GRACE, confirm_within=CONFIRM):
        writer = threading.Thread(target=lambda: (open(f"{fs.mount}/ckpt/w", "wb").close(), done.set()))
        writer.start()
        assert done.wait(10), "a stall past its deadline still blocked a write"
    writer.join(10)
    assert fs.state().count("expired.stall") >= 1


def test_the_filesystems_own_deadline_outlasts_the_confirmation_and_the_hold() -> None:
    """The deadline counts from the switch-on: a 6 s latency's probe alone takes 6 s, so a
    deadline of ``seconds + grace`` would end the fault before the driver held it (and fail
    every such run as expired). Capped at what the filesystem takes."""
    from chaos.disks._faults import _until
    from chaos.disks._fuse_faults import MAX_FAULT_SECONDS, MAX_STALL_SECONDS

    assert _until(SlowDisk("/mnt/x", seconds=1, latency=6), 5.0, 5.0) == 17.0
    assert _until(FailingDisk("/mnt/x", seconds=2), 5.0, 5.0) == 12.0
    assert _until(StallDisk("/mnt/x", seconds=590), 5.0, 5.0) == MAX_STALL_SECONDS
    assert _until(SlowDisk("/mnt/x", seconds=3600, latency=1), 5.0, 5.0) == MAX_FAULT_SECONDS


@pytest.mark.parametrize(("duration", "refused"), [(500, False), (600, True)])
def test_a_stall_held_to_the_end_past_its_cap_is_refused_when_the_file_loads(
        tmp_path: Path, duration: int, refused: bool) -> None:
    """``heal = "at_end"`` holds a fault to the run's end and 10 s past it: a stall cannot be
    held past 595 s, so a run that long is refused with the fix, not failed at its start."""
    text = SCENARIO.format(kind="stall_disk", fields="seconds = 2",
                           option='storage_faultfs = true\nheal = "at_end"').replace("duration = 6",
                                                                                    f"duration = {duration}")
    path = tmp_path / "stall.toml"
    path.write_text(text)
    if not refused:
        assert load_scenario(str(path)).heal == "at_end"
        return
    with pytest.raises(ScenarioError, match=r"heal.*the stall_disk at 1 s would be held 609 s, past a stall's 595 s; "
                                            r"use heal = \"after_each\" or a duration that ends within 585 s"):
        load_scenario(str(path))
