"""What a power loss keeps: the fault filesystem's model of unsynced writes.

The mount writes through to its backing directory at once (reads are plain passthrough) and
keeps, beside it, what must be undone to get back to the durable state — as LazyFS does with
a page cache, but as an undo log:

* data: per file (by inode), the size it had at its last ``fsync`` and the old bytes of every
  page changed since (saved on the first change of each page). A file created since its last
  ``fsync`` durably holds nothing.
* names: each create, unlink and rename, until an ``fsync`` of its directory (of both
  directories, for a rename across two) covers it. An unlinked or replaced file is moved to a
  hidden graveyard, not deleted, so that undoing the unlink can bring it back.

A power loss puts every dirty file back to its synced bytes, then undoes the uncovered name
changes newest first. Directories are held by descriptor, so a directory renamed later is
still found. ``fsync`` of a file never makes its own name durable: its directory's does.
"""

from __future__ import annotations

import contextlib
import enum
import itertools
import os
import shutil
import stat
from dataclasses import dataclass, field

__all__ = ["GRAVEYARD", "NameChange", "NameKind", "PowerLossReport", "Volatile"]

#: The hidden folder (in the backing directory) that holds unlinked files until their unlink is durable.
GRAVEYARD = ".raychaos-faultfs"
_PAGE = 4096
Key = tuple[int, int]  # (st_dev, st_ino): a file or directory whatever its name is now


def key_of(fd: int) -> Key:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


class NameKind(enum.Enum):
    """What a name change did to a directory."""

    ADDED = "added"  # create, mkdir, mknod, symlink, link
    REMOVED = "removed"  # unlink, rmdir: the inode waits in the graveyard
    RENAMED = "renamed"  # rename; a replaced target waits in the graveyard


@dataclass(slots=True)
class NameChange:
    """One name change not yet covered by an fsync of every directory it touched."""

    kind: NameKind
    dirs: tuple[Key, ...]  # (dir,) or (source dir, target dir)
    names: tuple[str, ...]  # (name,) or (source name, target name)
    ino: int  # the inode the change was about
    grave: str | None = None  # graveyard entry: the removed inode, or the one a rename replaced
    replaced_dir_mode: int | None = None  # a rename replaced this empty directory
    pending: set[Key] = field(default_factory=set)


@dataclass(slots=True)
class _Dirty:
    """A file changed since its last fsync: an fd on its inode, its synced size and old pages."""

    fd: int
    synced_size: int
    pages: dict[int, bytes] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PowerLossReport:
    """What a power loss undid: files put back to their synced bytes (the bytes cut beyond
    their synced size, the pages written back within it), name changes undone."""

    files_reverted: int
    bytes_cut: int
    pages_restored: int
    names_undone: int


class Volatile:
    """The undo log of one mount's backing directory; every method is called under one lock."""

    def __init__(self, backing: str) -> None:
        self.backing = backing
        grave = os.path.join(backing, GRAVEYARD)
        shutil.rmtree(grave, ignore_errors=True)
        os.makedirs(grave)
        self._grave_fd = os.open(grave, os.O_RDONLY | os.O_DIRECTORY)
        self._dirty: dict[Key, _Dirty] = {}
        self._created: set[Key] = set()  # files created since their last fsync: durably empty
        self._names: list[NameChange] = []
        self._dir_fds: dict[Key, int] = {}
        self._grave_names = itertools.count()

    # -- data ------------------------------------------------------------------------------

    def created(self, fd: int) -> None:
        self._created.add(key_of(fd))

    def before_write(self, fd: int, offset: int, length: int) -> None:
        """Save the synced bytes of the pages ``[offset, offset + length)`` will overwrite."""
        if length <= 0:
            return
        dirty = self._dirty_of(fd)
        first, last = offset // _PAGE, (offset + length - 1) // _PAGE
        for page in range(first, last + 1):
            if page * _PAGE < dirty.synced_size and page not in dirty.pages:
                dirty.pages[page] = os.pread(dirty.fd, _PAGE, page * _PAGE)

    def before_truncate(self, fd: int, length: int) -> None:
        """Save the synced bytes a truncation to ``length`` cuts off (or a partial page rewrites)."""
        size = os.fstat(fd).st_size
        if length < size:
            self.before_write(fd, length, size - length)
        else:
            self._dirty_of(fd)

    def _dirty_of(self, fd: int) -> _Dirty:
        key = key_of(fd)
        dirty = self._dirty.get(key)
        if dirty is None:
            own = os.open(f"/proc/self/fd/{fd}", os.O_RDWR)  # no O_APPEND: pwrite must go where it is told
            synced = 0 if key in self._created else os.fstat(own).st_size
            dirty = self._dirty[key] = _Dirty(own, synced)
        return dirty

    def synced(self, fd: int) -> None:
        """An fsync of the file behind ``fd``: its bytes now are what a power loss keeps."""
        key = key_of(fd)
        self._created.discard(key)
        dirty = self._dirty.pop(key, None)
        if dirty is not None:
            os.close(dirty.fd)

    # -- names -----------------------------------------------------------------------------

    def dir_key(self, path: str) -> Key:
        """The key of directory ``path``, holding a descriptor on it while changes are pending."""
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        key = key_of(fd)
        if key in self._dir_fds:
            os.close(fd)
        else:
            self._dir_fds[key] = fd
        return key

    def added(self, parent: str, name: str) -> None:
        key = self.dir_key(parent)
        ino = os.stat(name, dir_fd=self._dir_fds[key], follow_symlinks=False).st_ino
        self._names.append(NameChange(kind=NameKind.ADDED, dirs=(key,), names=(name,), ino=ino, pending={key}))

    def remove(self, parent: str, name: str) -> None:
        """Unlink or rmdir ``parent/name`` by moving it to the graveyard, and log it."""
        key = self.dir_key(parent)
        dir_fd = self._dir_fds[key]
        ino = os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_ino
        grave = str(next(self._grave_names))
        os.rename(name, grave, src_dir_fd=dir_fd, dst_dir_fd=self._grave_fd)
        self._names.append(NameChange(kind=NameKind.REMOVED, dirs=(key,), names=(name,), ino=ino, grave=grave,
                                      pending={key}))

    def rename(self, src: tuple[str, str], dst: tuple[str, str]) -> None:
        """Rename ``src`` (parent, name) to ``dst``, keeping a replaced file in the graveyard."""
        keys = (self.dir_key(src[0]), self.dir_key(dst[0]))
        src_fd, dst_fd = self._dir_fds[keys[0]], self._dir_fds[keys[1]]
        ino = os.stat(src[1], dir_fd=src_fd, follow_symlinks=False).st_ino
        change = NameChange(kind=NameKind.RENAMED, dirs=keys, names=(src[1], dst[1]), ino=ino, pending=set(keys))
        with contextlib.suppress(FileNotFoundError):
            target = os.stat(dst[1], dir_fd=dst_fd, follow_symlinks=False)
            if stat.S_ISDIR(target.st_mode):  # only an empty one can be replaced: remade on undo
                change.replaced_dir_mode = stat.S_IMODE(target.st_mode)
            elif target.st_ino != ino:
                change.grave = str(next(self._grave_names))
                os.link(dst[1], change.grave, src_dir_fd=dst_fd, dst_dir_fd=self._grave_fd,
                        follow_symlinks=False)
        os.rename(src[1], dst[1], src_dir_fd=src_fd, dst_dir_fd=dst_fd)
        self._names.append(change)

    def dir_synced(self, fd: int) -> None:
        """An fsync of a directory: every name change in it so far is durable."""
        key = key_of(fd)
        kept = []
        for change in self._names:
            change.pending.discard(key)
            if change.pending:
                kept.append(change)
            elif change.grave is not None:  # the unlink is durable: the inode may go now
                _remove_entry(change.grave, self._grave_fd)
        self._names = kept
        self._close_dirs_unused()

    def _close_dirs_unused(self) -> None:
        used = {key for change in self._names for key in change.dirs}
        for key in [k for k in self._dir_fds if k not in used]:
            os.close(self._dir_fds.pop(key))

    # -- the power loss --------------------------------------------------------------------

    def unsynced(self) -> tuple[int, int]:
        """How many files hold unsynced bytes and how many name changes are not durable."""
        return len(self._dirty) + len(self._created - set(self._dirty)), len(self._names)

    def power_loss(self) -> PowerLossReport:
        """Drop everything not covered by an fsync; the log is empty afterwards."""
        cut = sum(self._revert(dirty) for dirty in self._dirty.values())
        files, pages = len(self._dirty), sum(len(d.pages) for d in self._dirty.values())
        self._dirty.clear()
        self._created.clear()  # a created file whose name survived keeps its empty synced bytes
        for change in reversed(self._names):
            self._undo(change)
        undone = len(self._names)
        self._names.clear()
        self.close_dirs()
        return PowerLossReport(files_reverted=files, bytes_cut=cut, pages_restored=pages, names_undone=undone)

    def _revert(self, dirty: _Dirty) -> int:
        size = os.fstat(dirty.fd).st_size
        os.ftruncate(dirty.fd, dirty.synced_size)
        for page, data in sorted(dirty.pages.items()):
            keep = max(0, min(len(data), dirty.synced_size - page * _PAGE))
            os.pwrite(dirty.fd, data[:keep], page * _PAGE)
        os.close(dirty.fd)
        return max(0, size - dirty.synced_size)

    def _undo(self, change: NameChange) -> None:
        fds = [self._dir_fds[k] for k in change.dirs]
        if any(os.fstat(fd).st_nlink == 0 for fd in fds):
            return  # its directory's own removal is durable: whatever was in it is gone for good
        if change.kind is NameKind.ADDED:
            if _ino_at(change.names[0], fds[0]) == change.ino:
                _remove_entry(change.names[0], fds[0])
        elif change.kind is NameKind.REMOVED:
            assert change.grave is not None
            os.rename(change.grave, change.names[0], src_dir_fd=self._grave_fd, dst_dir_fd=fds[0])
        else:
            self._unrename(change, fds[0], fds[-1])

    def _unrename(self, change: NameChange, src_fd: int, dst_fd: int) -> None:
        source, target = change.names
        if _ino_at(target, dst_fd) == change.ino:
            os.rename(target, source, src_dir_fd=dst_fd, dst_dir_fd=src_fd)
        if change.grave is not None:
            os.rename(change.grave, target, src_dir_fd=self._grave_fd, dst_dir_fd=dst_fd)
        elif change.replaced_dir_mode is not None:
            os.mkdir(target, change.replaced_dir_mode, dir_fd=dst_fd)

    def close_dirs(self) -> None:
        for fd in self._dir_fds.values():
            os.close(fd)
        self._dir_fds.clear()

    def close(self) -> None:
        """Forget the log (an unmount is a clean shutdown: what is there now stays) and the graveyard."""
        for dirty in self._dirty.values():
            os.close(dirty.fd)
        self._dirty.clear()
        self._created.clear()
        self._names.clear()
        self.close_dirs()
        os.close(self._grave_fd)
        shutil.rmtree(os.path.join(self.backing, GRAVEYARD), ignore_errors=True)


def _ino_at(name: str, dir_fd: int) -> int | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_ino
    except FileNotFoundError:
        return None


def _remove_entry(name: str, dir_fd: int) -> None:
    if stat.S_ISDIR(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode):
        shutil.rmtree(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)
