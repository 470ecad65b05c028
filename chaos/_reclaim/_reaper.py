"""A reaper per driver: a small process that outlives its driver and, when the driver ends
however it ended (SIGKILL included), undoes what the driver claimed and did not undo itself.

The driver starts it on its first claim (``python -c '…chaos._reclaim._reaper…' --owner PID:START``, in a
session of its own, so that a signal to the driver's process group spares it), with a pipe as
its standard input, and writes a line per claim before it makes the thing: ``["+", "netlab",
NAME, WORKERS]``; its own teardown, once it has undone the thing, writes the same with ``"-"``.
The kernel closes the pipe when the driver ends: at that end of file the reaper undoes every
claim still held, newest first, prints what it reclaimed and each failure on its standard error
(the driver's) and exits. After a normal teardown nothing is held and it does nothing. The fault
filesystem's server watches its standard input the same way.

A reaper that died (killed with its driver's group, say) is replaced on the next claim or
release, and the new one is told every claim still held.
"""

from __future__ import annotations

import enum
import json
import os
import select
import subprocess
import sys
import threading
from dataclasses import dataclass

from chaos._reclaim._owner import OWNER_ENV, Owner, me

__all__ = ["Claim", "ClaimKind", "claim", "read_claims", "reaper_pid", "release"]

#: The reaper's entry: it imports what undoes each kind of claim (this module imports none of it).
_MODULE = "chaos._reclaim._reaper_main"
_ENTRY = f"import sys; from {_MODULE} import main; sys.exit(main())"
#: Seconds between checks that the driver still runs, while its pipe is open: a child the driver
#: forked without exec may hold the pipe open after the driver died.
_OWNER_POLL = 1.0


class ClaimKind(enum.Enum):
    """What a claim is, and so how the reaper undoes it."""

    NETLAB = "netlab"  # a network lab: its name and how many worker namespaces it has
    FAULTFS = "faultfs"  # a fault filesystem's mount point: its server unmounts it; checked
    TMPFS = "tmpfs"  # a capped tmpfs's mount point: unmounted, and the empty folder deleted
    FOLDER = "folder"  # a folder of the driver's: deleted, unless something is mounted in it
    #: An embedded cluster's temporary root: every process naming it is killed (the head's
    #: dashboard and runtime-env agents outlive a killed driver's raylet by a minute and more:
    #: Ray's own fate-sharing ends the raylet, not them); the folder stays, for the postmortem.
    RAY_SESSION = "ray-session"


_NOUNS = {ClaimKind.FAULTFS: "fault filesystem at", ClaimKind.TMPFS: "capped tmpfs at", ClaimKind.FOLDER: "folder",
          ClaimKind.RAY_SESSION: "Ray processes of the cluster under"}


@dataclass(frozen=True, slots=True)
class Claim:
    """One thing a driver made, as its reaper would undo it."""

    kind: ClaimKind
    args: tuple[str, ...]

    def __str__(self) -> str:
        if self.kind is ClaimKind.NETLAB:
            return f"the network lab rc-{self.args[0]} ({self.args[1]} worker namespaces)"
        return f"the {_NOUNS[self.kind]} {self.args[0]}"

    def line(self, sign: str) -> bytes:
        return (json.dumps([sign, self.kind.value, *self.args]) + "\n").encode()

    @classmethod
    def read(cls, line: bytes) -> tuple[str, Claim]:
        sign, kind, *args = json.loads(line)
        return str(sign), cls(ClaimKind(kind), tuple(str(a) for a in args))


# -- the driver's side -----------------------------------------------------------------------------


class _Link:
    """This process's pipe to its reaper, and every claim it holds (told again to a new reaper)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.fd = -1
        self.held: list[Claim] = []

    def send(self, line: bytes) -> None:
        """Write ``line`` to the reaper; a reaper that is gone is replaced and told every held claim."""
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.write(self.fd, line)
                return
            except OSError:  # it died since the poll: replaced below
                pass
        if not self.held:
            return
        self.close()
        self.proc, self.fd = _spawn()
        os.write(self.fd, b"".join(item.line("+") for item in self.held))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        self.proc, self.fd = None, -1


_LINK = _Link()


def _spawn() -> tuple[subprocess.Popen[bytes], int]:
    """A new reaper for this process, and the write end of its pipe (not inherited by children)."""
    read, write = os.pipe()
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {name: value for name, value in os.environ.items() if name != OWNER_ENV}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH", "")) if p)
    try:
        # Not `-m`: the package imports this module first, and runpy warns about that.
        proc = subprocess.Popen([sys.executable, "-c", _ENTRY, "--owner", str(me())], stdin=read,
                                stdout=subprocess.DEVNULL, env=env, start_new_session=True)
    except BaseException:
        os.close(write)
        raise
    finally:
        os.close(read)
    return proc, write


def _forget_in_child() -> None:
    """In a forked child: the parent's claims and pipe are not the child's (its end of file
    must come when the parent ends, not when this child does)."""
    global _LINK
    if _LINK.fd >= 0:
        try:
            os.close(_LINK.fd)
        except OSError:
            pass
    _LINK = _Link()


os.register_at_fork(after_in_child=_forget_in_child)


def claim(item: Claim) -> None:
    """Have this driver's reaper (started on the first claim) undo ``item`` if the driver ends
    before :func:`release`. Claim before making the thing: a kill in between leaves nothing."""
    with _LINK.lock:
        _LINK.held.append(item)
        _LINK.send(item.line("+"))


def release(item: Claim) -> None:
    """The driver undid ``item`` itself: its reaper forgets it (nothing if it was not claimed)."""
    with _LINK.lock:
        if item not in _LINK.held:
            return
        del _LINK.held[len(_LINK.held) - 1 - _LINK.held[::-1].index(item)]
        try:
            _LINK.send(item.line("-"))
        except OSError:  # no reaper could be started: it would have nothing more to do than before
            pass


def reaper_pid() -> int | None:
    """The pid of this driver's reaper; None before its first claim."""
    with _LINK.lock:
        return None if _LINK.proc is None else _LINK.proc.pid


# -- the reaper's side -----------------------------------------------------------------------------


def read_claims(owner: Owner | None) -> list[Claim]:
    """Every claim still held when the driver's pipe reaches end of file (or the driver ended)."""
    held: list[Claim] = []
    pending = b""
    while True:
        ready, _, _ = select.select([0], [], [], _OWNER_POLL)
        if not ready:
            if owner is not None and not owner.alive():
                return held
            continue
        chunk = os.read(0, 1 << 16)
        if not chunk:
            return held
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            try:
                sign, item = Claim.read(line)
            except (ValueError, KeyError, TypeError) as exc:  # never lose the other claims over one
                print(f"raychaos reaper: ignored a line it cannot read ({exc}): {line!r}", file=sys.stderr)
                continue
            if sign == "+":
                held.append(item)
            elif item in held:
                del held[len(held) - 1 - held[::-1].index(item)]
