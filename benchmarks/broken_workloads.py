"""Deliberately broken workloads, for measuring what raychaos catches (not part of the product).

Named in a scenario file as ``workload = "benchmarks.broken_workloads:ForgetfulCrashLoop"``
(run from the repository's root, which ``raychaos`` puts on ``sys.path`` for such names).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from actors import ReplayBufferActor
from scenarios.workloads._registry import builtin_workloads

#: Every built-in workload by name (the one registry).
WORKLOADS = builtin_workloads()

__all__ = ["ForgetfulCrashLoop", "ForgetsCursor"]


class ForgetsCursor(ReplayBufferActor):
    """Bug: its checkpoint forgets the write cursor, so after a restore that follows a
    checkpoint the log's adds overwrite the oldest slots: acknowledged transitions vanish,
    but only when a kill lands after a checkpoint (the faults decide whether it shows)."""

    def state_dict(self) -> Mapping[str, Any]:
        state = dict(super().state_dict())
        state["buffer"] = {**state["buffer"], "counters": {**state["buffer"]["counters"], "cursor": 0}}
        return state


class ForgetfulCrashLoop(WORKLOADS["replay-crash-loop"]):  # type: ignore[misc, valid-type]
    """The replay-crash-loop workload over the broken buffer."""

    buffer_class = ForgetsCursor
