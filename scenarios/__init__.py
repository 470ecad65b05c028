"""Scenarios, the ``raychaos`` CLI and reports.

What a user writes code against is exported here; the parts of a run (its steady state,
probes, samples, each fault's record, a file's problems, the demo) are in ``scenarios.runner``.
"""

from scenarios._model import Scenario, ScenarioError, builtin_names, load_attack, load_scenario
from scenarios._records import RunResult, Verdict
from scenarios._registry import known_workloads, register_workload
from scenarios._report import summary, write_reports
from scenarios._runner import run_scenario
from scenarios._workload import Params, RunContext, Workload

__all__ = ["Params", "RunContext", "RunResult", "Scenario", "ScenarioError", "Verdict", "Workload",
           "builtin_names", "known_workloads", "load_attack", "load_scenario", "register_workload",
           "run_scenario", "summary", "write_reports"]
