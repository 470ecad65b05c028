"""The incarnation fence: one actor incarnation at a time writes to a checkpoint storage.

Ray restarts an actor when its node is declared dead, but a node cut off by a partition is
not dead: its worker runs on, and Ray 2.60 does not stop it. After the heal it can still run
calls delivered late (measured: see the page "Ray under partitions"), and without a fence it
would append to the write-ahead log its replacement is appending to, or commit a checkpoint
over the replacement's. The fence makes that impossible where the incarnations share one
kernel's filesystem (the nodes of one host; every write of a process reaches it at once), with
one file, ``incarnation``:

- each incarnation, when it starts, takes the next incarnation number: under an exclusive
  ``flock`` of the file it reads the number in it, writes the number plus one in its place
  (fixed width, so the write never changes the file's length) and fsyncs it;
- every commit (a mutation acknowledged, its log record, a checkpoint) runs under a shared
  ``flock`` of the file and first reads the number back (one ``pread``): a number other than
  its own means a later incarnation started, and the commit is refused with
  :class:`Superseded`.

A later incarnation's start waits for a commit in flight, and a commit begun after that start
reads the new number: no write of a superseded incarnation lands after its replacement started.
On a network filesystem (NFS) that ordering holds only as far as its locks and caches go: a
client cut off keeps the log records it buffered (WAL appends are fsynced in batches) and may
write them back after its replacement started.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading

from chaos._errors import CheckpointError

__all__ = ["FENCE_FILE", "Fence", "Superseded"]

#: The file that holds the newest incarnation's number, and the lock every incarnation takes.
FENCE_FILE = "incarnation"
#: Digits of the number: every write is the same length, in place.
_WIDTH = 20


class Superseded(CheckpointError):
    """A later incarnation of this actor took its storage: this one may no longer commit.

    Raised by a mutation (its effect is not acknowledged, and nothing of it reached the
    storage) and by every mutation after it. The process is a leftover Ray already replaced
    (typically the old worker of a node a partition cut off); it only has to end."""


class Fence:
    """The fence of one incarnation over the storage folder ``root``."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.number = 0
        self.refused = ""  # why this incarnation may no longer commit, once it may not
        path = os.path.join(root, FENCE_FILE)
        created = not os.path.exists(path)
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        if created:
            _fsync_dir(root)  # the file itself must survive a power loss, not only its bytes
        self._mine = b""
        self._depth, self._locked = 0, False
        self._lock = threading.RLock()  # one flock per process: nested and threaded holds share it

    def take(self) -> int:
        """Become the newest incarnation: the number after the storage's, written durably."""
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        try:
            self.number = self.read() + 1
            self._mine = f"{self.number:0{_WIDTH}d}\n".encode()
            os.pwrite(self._fd, self._mine, 0)
            os.fsync(self._fd)
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        return self.number

    def read(self) -> int:
        """The storage's newest incarnation number (0 before any took one)."""
        text = os.pread(self._fd, _WIDTH + 1, 0).decode("ascii", "replace").strip()
        if text and not text.isdigit():
            raise CheckpointError(f"the incarnation file under {self.root} holds {text!r}, not a number: "
                                  f"it was written by something else; delete {FENCE_FILE} if no "
                                  "incarnation of the actor runs")
        return int(text) if text else 0

    def held(self) -> Fence:
        """Hold the storage for a commit (``with fence.held(): ...``): refused once a later
        incarnation started. A class's enter and exit, not a generator: it runs per mutation.

        Raises:
            Superseded: a later incarnation started (now, or at an earlier commit).
        """
        return self

    def __enter__(self) -> None:
        self._lock.acquire()
        self._depth += 1
        try:
            if self._depth == 1:
                fcntl.flock(self._fd, fcntl.LOCK_SH)
                self._locked = True
            elif not self._locked:
                # A signal handler (SIGTERM's checkpoint) run while this thread waits for the
                # lock: committing now would not hold it. Refused: the stop goes on without it.
                raise CheckpointError(f"a commit under {self.root} is waiting for the incarnation lock (a "
                                      "replacement may be starting): nothing is committed from a signal "
                                      "handler meanwhile")
            self._check()
        except BaseException:
            self.__exit__()
            raise

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._locked = False
            fcntl.flock(self._fd, fcntl.LOCK_UN)
        self._lock.release()

    def _check(self) -> None:
        if self.refused:
            raise Superseded(self.refused)
        if os.pread(self._fd, _WIDTH + 1, 0) == self._mine:
            if os.fstat(self._fd).st_nlink:
                return
            by = f"left with its {FENCE_FILE} file deleted (a new one would fence nothing against it)"
        else:
            by = f"superseded by incarnation {self.read()}"
        self.refused = (f"incarnation {self.number} of the actor whose storage is {self.root} was {by}: "
                        "Ray started a replacement while this process ran on (a partition cut its node "
                        "off); it commits nothing more and should end")
        raise Superseded(self.refused)

    def close(self) -> None:
        if self._fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._fd)
        self._fd = -1

    def __del__(self) -> None:
        self.close()


def _fsync_dir(path: str) -> None:
    directory = os.open(path, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
