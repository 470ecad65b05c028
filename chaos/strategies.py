"""Hypothesis strategies for fault schedules: let Hypothesis search, and shrink, the faults.

Example::

    @given(schedule=strategies.schedules(strategies.faults(targets=[ActorTarget.of(a)])))
    def test_survives(schedule): ...
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import strategies as st

from chaos._faults import Fault
from chaos._process_faults import Kill, Pause
from chaos._schedule import Schedule, ScheduledFault
from chaos._targets import Target

__all__ = ["faults", "schedules"]


def faults(*, targets: Sequence[Target], max_pause: float = 2.0) -> st.SearchStrategy[Fault]:
    """Kills (SIGKILL, SIGTERM) and pauses of up to ``max_pause`` seconds on ``targets``."""
    target = st.sampled_from(list(targets))
    return st.one_of(
        st.builds(Kill, target, st.sampled_from(["SIGKILL", "SIGTERM"])),
        st.builds(Pause, target, st.floats(0.05, max_pause, allow_nan=False)),
    )


def schedules(fault: st.SearchStrategy[Fault], *, max_faults: int = 5,
              horizon: float = 10.0) -> st.SearchStrategy[Schedule]:
    """Schedules of up to ``max_faults`` faults within ``horizon`` seconds; shrinks towards
    fewer, earlier, simpler faults."""
    entry = st.builds(ScheduledFault, st.floats(0.0, horizon, allow_nan=False), fault)
    return st.lists(entry, max_size=max_faults).map(
        lambda es: Schedule(tuple(sorted(es, key=lambda e: e.at))))
