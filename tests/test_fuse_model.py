"""The fault filesystem's model of a power loss, driven directly (no mount, no FUSE): each call
the server makes before an operation, and what a power loss then puts back and reports.
Fast: every case runs on a backing folder of its own in a few milliseconds."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from chaos.disks._fuse_model import _PAGE, GRAVEYARD, PowerLossReport, Volatile


@pytest.fixture
def vol(tmp_path: Path) -> Iterator[Volatile]:
    volatile = Volatile(str(tmp_path))
    yield volatile
    volatile.close()


def _fds_under(folder: Path) -> int:
    """This process's descriptors open on ``folder`` or under it."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        count += target == str(folder) or target.startswith(f"{folder}/")
    return count


def _write(vol: Volatile, fd: int, offset: int, data: bytes) -> None:
    vol.before_write(fd, offset, len(data))
    os.pwrite(fd, data, offset)


def _synced_file(tmp_path: Path, name: str, data: bytes) -> int:
    fd = os.open(tmp_path / name, os.O_CREAT | os.O_RDWR, 0o600)
    os.pwrite(fd, data, 0)
    return fd


def test_writes_past_the_synced_size_are_cut_exactly_and_counted(vol: Volatile, tmp_path: Path) -> None:
    fd = _synced_file(tmp_path, "f", b"a" * 100)
    try:
        _write(vol, fd, 100, b"b" * 50)
        # The write touched page 0, which holds synced bytes: its old bytes are saved and put back.
        assert vol.power_loss() == PowerLossReport(files_reverted=1, bytes_cut=50, pages_restored=1, names_undone=0)
        assert (tmp_path / "f").read_bytes() == b"a" * 100
    finally:
        os.close(fd)


def test_pages_rewritten_within_the_synced_size_are_put_back_each_once(vol: Volatile, tmp_path: Path) -> None:
    old = bytes(range(256)) * (3 * _PAGE // 256)  # three pages
    fd = _synced_file(tmp_path, "f", old)
    try:
        _write(vol, fd, _PAGE - 100, b"x" * 200)  # across pages 0 and 1
        _write(vol, fd, _PAGE - 10, b"y" * 20)  # the same pages again: their first old bytes are kept
        report = vol.power_loss()
        assert (report.files_reverted, report.bytes_cut, report.pages_restored) == (1, 0, 2)
        assert (tmp_path / "f").read_bytes() == old
    finally:
        os.close(fd)


def test_a_synced_partial_last_page_is_restored_only_up_to_its_synced_size(vol: Volatile, tmp_path: Path) -> None:
    old = b"s" * (_PAGE + 100)  # a page and a bit
    fd = _synced_file(tmp_path, "f", old)
    try:
        _write(vol, fd, _PAGE, b"n" * 3000)  # rewrites the bit and grows the file
        report = vol.power_loss()
        assert report.bytes_cut == _PAGE + 3000 - len(old)
        assert (tmp_path / "f").read_bytes() == old
    finally:
        os.close(fd)


def test_a_write_of_nothing_leaves_the_file_clean(vol: Volatile, tmp_path: Path) -> None:
    fd = _synced_file(tmp_path, "f", b"a")
    try:
        vol.before_write(fd, 0, 0)
        assert vol.unsynced() == (0, 0) and vol.power_loss().files_reverted == 0
    finally:
        os.close(fd)


def test_truncations_are_undone_and_one_to_the_same_size_counts_as_a_change(vol: Volatile, tmp_path: Path) -> None:
    fd = _synced_file(tmp_path, "f", b"k" * 5000)
    other = _synced_file(tmp_path, "g", b"k" * 10)
    try:
        vol.before_truncate(fd, 1000)
        os.ftruncate(fd, 1000)
        vol.before_truncate(other, 10)  # to its own size: nothing cut, the file is dirty all the same
        assert vol.unsynced()[0] == 2
        report = vol.power_loss()
        assert report.files_reverted == 2 and report.bytes_cut == 0
        assert (tmp_path / "f").read_bytes() == b"k" * 5000 and (tmp_path / "g").read_bytes() == b"k" * 10
    finally:
        os.close(fd)
        os.close(other)


def test_an_fsync_makes_the_bytes_durable_and_a_created_file_holds_nothing_until_then(vol: Volatile,
                                                                                     tmp_path: Path) -> None:
    fd = _synced_file(tmp_path, "f", b"")
    vol.created(fd)
    try:
        _write(vol, fd, 0, b"new")
        assert vol.unsynced()[0] == 1
        vol.synced(fd)
        assert vol.unsynced() == (0, 0)
        _write(vol, fd, 3, b"+more")
        assert vol.power_loss().bytes_cut == 5 and (tmp_path / "f").read_bytes() == b"new"
    finally:
        os.close(fd)


def test_a_power_loss_and_an_fsync_leave_no_descriptor_open_under_the_folder(vol: Volatile, tmp_path: Path) -> None:
    fd = _synced_file(tmp_path, "f", b"a" * 10)
    try:
        before = _fds_under(tmp_path)
        _write(vol, fd, 10, b"b")  # the model opens the file once, to put it back later
        assert _fds_under(tmp_path) == before + 1
        vol.synced(fd)  # durable: nothing to put back, its descriptor closed
        assert _fds_under(tmp_path) == before
        _write(vol, fd, 11, b"c")
        vol.power_loss()  # put back, and its descriptor closed
        assert _fds_under(tmp_path) == before
    finally:
        os.close(fd)


def test_a_directory_fsync_releases_the_directories_no_change_needs(vol: Volatile, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    vol.added(str(tmp_path), "sub")
    held = _fds_under(tmp_path)
    root = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        vol.dir_synced(root)
        assert _fds_under(tmp_path) == held  # its own descriptor (root) opened, the model's closed
    finally:
        os.close(root)
    assert vol.unsynced() == (0, 0)


def test_a_stale_graveyard_is_emptied_when_a_mount_starts(tmp_path: Path) -> None:
    (tmp_path / GRAVEYARD).mkdir()
    (tmp_path / GRAVEYARD / "0").write_bytes(b"an unlink of a mount long gone")
    volatile = Volatile(str(tmp_path))
    try:
        assert os.listdir(tmp_path / GRAVEYARD) == []
    finally:
        volatile.close()


def test_a_symlink_created_and_not_made_durable_is_removed_not_its_target(vol: Volatile, tmp_path: Path) -> None:
    (tmp_path / "target").write_bytes(b"kept")
    os.symlink("target", tmp_path / "link")
    vol.added(str(tmp_path), "link")
    assert vol.power_loss().names_undone == 1
    assert not (tmp_path / "link").is_symlink() and (tmp_path / "target").read_bytes() == b"kept"


def test_a_rename_that_replaced_an_empty_directory_is_undone_with_the_directory_back(vol: Volatile,
                                                                                     tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir(mode=0o750)
    os.chmod(tmp_path / "b", 0o750)
    vol.rename((str(tmp_path), "a"), (str(tmp_path), "b"))
    assert vol.power_loss().names_undone == 1
    assert (tmp_path / "a").is_dir() and (tmp_path / "b").is_dir()
    assert (os.stat(tmp_path / "b").st_mode & 0o777) == 0o750


def test_changes_inside_a_directory_removed_durably_stay_gone(vol: Volatile, tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").write_bytes(b"x")
    vol.added(str(tmp_path / "d"), "f")  # a file made in d, never made durable
    vol.remove(str(tmp_path), "d")  # d itself removed, and that removal made durable
    root = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        vol.dir_synced(root)
    finally:
        os.close(root)
    assert vol.power_loss().names_undone == 1  # the file's creation: its directory is gone for good
    assert not (tmp_path / "d").exists()


def test_a_page_saved_after_the_file_grew_is_put_back_only_up_to_the_synced_size(vol: Volatile,
                                                                                tmp_path: Path) -> None:
    fd = _synced_file(tmp_path, "f", b"s" * 100)
    try:
        _write(vol, fd, 5000, b"far")  # grows the file first: page 0 is not saved yet
        _write(vol, fd, 0, b"x" * 10)  # now page 0 is saved, as 4096 bytes (the rest a hole)
        report = vol.power_loss()
        assert report.bytes_cut == 5003 - 100 and (tmp_path / "f").read_bytes() == b"s" * 100
    finally:
        os.close(fd)


def test_a_write_ending_one_byte_into_a_page_saves_that_page_too(vol: Volatile, tmp_path: Path) -> None:
    old = b"o" * (2 * _PAGE)
    fd = _synced_file(tmp_path, "f", old)
    try:
        _write(vol, fd, 0, b"n" * (_PAGE + 1))  # the last byte is the first of page 1
        assert vol.power_loss().pages_restored == 2
        assert (tmp_path / "f").read_bytes() == old
    finally:
        os.close(fd)


def test_a_rename_across_directories_is_undone_into_the_directory_it_left(vol: Volatile, tmp_path: Path) -> None:
    (tmp_path / "from").mkdir()
    (tmp_path / "to").mkdir()
    (tmp_path / "from" / "f").write_bytes(b"moved")
    vol.rename((str(tmp_path / "from"), "f"), (str(tmp_path / "to"), "f"))  # the model renames itself
    assert vol.power_loss().names_undone == 1
    assert (tmp_path / "from" / "f").read_bytes() == b"moved" and not (tmp_path / "to" / "f").exists()


def test_an_unmount_closes_every_descriptor_and_forgets_the_log(tmp_path: Path) -> None:
    fd = _synced_file(tmp_path, "f", b"a" * 10)
    new = os.open(tmp_path / "new", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        before = _fds_under(tmp_path)
        volatile = Volatile(str(tmp_path))
        _write(volatile, fd, 10, b"b")
        volatile.added(str(tmp_path), "f")
        volatile.created(new)
        assert volatile.unsynced() == (2, 1)  # the written file and the created one; one name
        volatile.close()
        assert volatile.unsynced() == (0, 0)  # an unmount is a clean shutdown: nothing to drop
        assert _fds_under(tmp_path) == before and (tmp_path / "f").read_bytes() == b"a" * 10 + b"b"
    finally:
        os.close(fd)
        os.close(new)


def test_only_the_pages_a_write_touches_below_the_synced_size_are_saved(vol: Volatile, tmp_path: Path) -> None:
    fd = _synced_file(tmp_path, "f", b"o" * (2 * _PAGE))
    try:
        _write(vol, fd, 0, b"n" * _PAGE)  # exactly page 0
        assert vol.power_loss().pages_restored == 1
        vol.synced(fd)
        _write(vol, fd, 2 * _PAGE, b"past")  # a page that starts at the synced size holds nothing synced
        assert vol.power_loss() == PowerLossReport(files_reverted=1, bytes_cut=4, pages_restored=0, names_undone=0)
    finally:
        os.close(fd)


def test_a_later_page_saved_after_the_file_grew_is_put_back_only_up_to_the_synced_size(vol: Volatile,
                                                                                      tmp_path: Path) -> None:
    old = b"s" * (_PAGE + 100)  # page 1 holds 100 synced bytes
    fd = _synced_file(tmp_path, "f", old)
    try:
        _write(vol, fd, 3 * _PAGE, b"far")  # grows the file first
        _write(vol, fd, _PAGE + 10, b"x")  # page 1 saved whole: 100 synced bytes, then a hole
        vol.power_loss()
        assert (tmp_path / "f").read_bytes() == old
    finally:
        os.close(fd)


def test_symlinks_are_removed_renamed_and_replaced_as_links_even_dangling(vol: Volatile, tmp_path: Path) -> None:
    """A name change is about the link itself: never its target, which may not even exist."""
    (tmp_path / "t").write_bytes(b"target")
    os.symlink("nowhere", tmp_path / "dangling")
    os.symlink("t", tmp_path / "link")
    (tmp_path / "a").write_bytes(b"a")
    vol.remove(str(tmp_path), "dangling")  # unlinking a dangling link
    vol.rename((str(tmp_path), "link"), (str(tmp_path), "moved"))  # renaming a link
    os.symlink("nowhere", tmp_path / "gone")
    vol.rename((str(tmp_path), "a"), (str(tmp_path), "gone"))  # replacing a dangling link
    assert vol.power_loss().names_undone == 3
    assert os.readlink(tmp_path / "dangling") == "nowhere" and os.readlink(tmp_path / "gone") == "nowhere"
    assert os.readlink(tmp_path / "link") == "t" and not os.path.lexists(tmp_path / "moved")
    assert (tmp_path / "a").read_bytes() == b"a" and (tmp_path / "t").read_bytes() == b"target"


def test_a_link_replaced_by_a_rename_comes_back_a_link(vol: Volatile, tmp_path: Path) -> None:
    (tmp_path / "t").write_bytes(b"target")
    os.symlink("t", tmp_path / "link")
    (tmp_path / "a").write_bytes(b"a")
    vol.rename((str(tmp_path), "a"), (str(tmp_path), "link"))
    vol.power_loss()
    assert os.readlink(tmp_path / "link") == "t" and (tmp_path / "a").read_bytes() == b"a"


def test_a_new_link_to_a_directory_is_removed_not_the_directory(vol: Volatile, tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "kept").write_bytes(b"x")
    os.symlink("real", tmp_path / "ld")
    vol.added(str(tmp_path), "ld")
    vol.power_loss()
    assert not os.path.lexists(tmp_path / "ld") and (tmp_path / "real" / "kept").read_bytes() == b"x"


def test_a_durable_unlink_empties_its_grave_and_a_power_loss_forgets_and_releases_all(vol: Volatile,
                                                                                      tmp_path: Path) -> None:
    before = _fds_under(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f").write_bytes(b"x")
    (tmp_path / "sub" / "g").write_bytes(b"y")
    vol.remove(str(tmp_path / "sub"), "f")
    vol.remove(str(tmp_path / "sub"), "g")  # the directory's descriptor is held once
    sub = os.open(tmp_path / "sub", os.O_RDONLY | os.O_DIRECTORY)
    try:
        vol.dir_synced(sub)
    finally:
        os.close(sub)
    assert os.listdir(tmp_path / GRAVEYARD) == []  # the unlinks are durable: their inodes may go
    new = os.open(tmp_path / "new", os.O_CREAT | os.O_RDWR, 0o600)
    try:
        vol.created(new)
        vol.added(str(tmp_path), "new")
        vol.power_loss()
        assert vol.unsynced() == (0, 0) and _fds_under(tmp_path) == before + 1  # only `new`, ours
    finally:
        os.close(new)


def test_a_rename_that_fails_is_not_logged_and_a_power_loss_undoes_nothing(vol: Volatile, tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "kept").write_bytes(b"x")  # a non-empty directory cannot be replaced
    with pytest.raises(OSError):
        vol.rename((str(tmp_path), "a"), (str(tmp_path), "b"))
    assert vol.power_loss().names_undone == 0
    assert (tmp_path / "a").is_dir() and (tmp_path / "b" / "kept").read_bytes() == b"x"
