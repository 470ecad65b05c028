"""Scenarios, the ``raychaos`` CLI and reports.

What a user writes code against is exported here; the parts of a run (its steady state,
probes, samples, each fault's record, a file's problems, the demo) are in ``scenarios.runner``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the names below, for type checkers; at run time each is imported when first used
    from scenarios.model._experiment import load_attack
    from scenarios.model._records import RunResult, Verdict
    from scenarios.model._scenario import Scenario, ScenarioError, builtin_names, load_scenario
    from scenarios.model._workload import Params, RunContext, Workload
    from scenarios.reports._files import summary, write_reports
    from scenarios.runner._run import run_scenario
    from scenarios.workloads._registry import known_workloads, register_workload

#: Where each public name lives: importing ``scenarios`` (as every Ray worker that runs one of its
#: functions or actors does, for the module that defines it) imports none of them until one is
#: used: a worker started for a workload's actor does not pay for pydantic and the runner.
_WHERE = {
    "Params": "scenarios.model._workload",
    "RunContext": "scenarios.model._workload",
    "RunResult": "scenarios.model._records",
    "Scenario": "scenarios.model._scenario",
    "ScenarioError": "scenarios.model._scenario",
    "Verdict": "scenarios.model._records",
    "Workload": "scenarios.model._workload",
    "builtin_names": "scenarios.model._scenario",
    "known_workloads": "scenarios.workloads._registry",
    "load_attack": "scenarios.model._experiment",
    "load_scenario": "scenarios.model._scenario",
    "register_workload": "scenarios.workloads._registry",
    "run_scenario": "scenarios.runner._run",
    "summary": "scenarios.reports._files",
    "write_reports": "scenarios.reports._files",
}

__all__ = ["Params", "RunContext", "RunResult", "Scenario", "ScenarioError", "Verdict", "Workload",
           "builtin_names", "known_workloads", "load_attack", "load_scenario", "register_workload",
           "run_scenario", "summary", "write_reports"]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'scenarios' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # once: later lookups find it without this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
