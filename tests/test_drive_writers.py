"""``drive_writers`` ends within bounds set by its per-call timeout, never by its write count.

Ray-free: the writers' ``submit`` blocks (as a call into a wedged client would), so no reply
is ever awaited; only the run's own bounds can end it.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from chaos import HangError, History
from chaos._history import STALL_TIMEOUTS
from chaos.errors import InvalidConfig
from chaos.history import OpStatus, drive_writers

MANY = 10**6  # a long run's write count: its old backstop, timeout × (writes + 1), never came
pytestmark = pytest.mark.timeout(60)  # a regression hangs: fail it in a minute, not the suite's five


@pytest.fixture
def blocked() -> Iterator[Callable[[str, int], Any]]:
    """A submit that blocks until the test ends (then the stranded writer threads return)."""
    release = threading.Event()

    def submit(writer: str, seq: int) -> Any:
        release.wait()  # bounded by the test: set on teardown
        raise RuntimeError("released at teardown")

    yield submit
    release.set()


def test_a_submit_that_never_returns_is_a_hang_named_with_its_write(blocked: Any) -> None:
    history, timeout = History(), 0.2
    start = time.monotonic()
    errors = drive_writers(blocked, history, writers=["w"], writes=MANY, timeout=timeout)
    took = time.monotonic() - start
    assert STALL_TIMEOUTS * timeout <= took < STALL_TIMEOUTS * timeout + 5
    assert isinstance(errors["w"], HangError), errors
    assert re.search(r"writer 'w' recorded nothing for .* its writes pending: \[\('w', 0\)\]",
                     str(errors["w"]))
    assert [(op.key, op.status) for op in history.ops()] == [(("w", 0), OpStatus.PENDING)]


def test_every_stuck_writer_is_named(blocked: Any) -> None:
    errors = drive_writers(blocked, History(), writers=["a", "b"], writes=MANY, timeout=0.2)
    assert set(errors) == {"a", "b"} and all(isinstance(e, HangError) for e in errors.values())


def test_the_run_ends_at_its_deadline_before_the_stall_bound(blocked: Any) -> None:
    start = time.monotonic()
    errors = drive_writers(blocked, History(), writers=["w"], writes=MANY, timeout=60.0, deadline=0.3)
    assert time.monotonic() - start < 10
    assert isinstance(errors["w"], HangError)
    assert "was still writing at the run's deadline" in str(errors["w"])


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), True, "5"])
@pytest.mark.parametrize("name", ["timeout", "deadline"])
def test_a_bound_that_is_not_positive_seconds_is_refused(name: str, bad: Any) -> None:
    with pytest.raises(InvalidConfig, match=f"drive_writers `{name}` must be a positive number of seconds"):
        drive_writers(lambda w, s: None, History(), writers=["w"], writes=1, **{name: bad})
