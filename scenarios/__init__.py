"""Scenarios, the ``raychaos`` CLI and reports.

What a user writes code against is exported here; the parts of a run (its steady state,
probes, samples, each fault's record, a file's problems, the demo) are in ``scenarios.runner``.
"""

from scenarios.model._experiment import load_attack
from scenarios.model._records import RunResult, Verdict
from scenarios.model._scenario import Scenario, ScenarioError, builtin_names, load_scenario
from scenarios.model._workload import Params, RunContext, Workload
from scenarios.reports._files import summary, write_reports
from scenarios.runner._run import run_scenario
from scenarios.workloads._registry import known_workloads, register_workload

__all__ = ["Params", "RunContext", "RunResult", "Scenario", "ScenarioError", "Verdict", "Workload",
           "builtin_names", "known_workloads", "load_attack", "load_scenario", "register_workload",
           "run_scenario", "summary", "write_reports"]
