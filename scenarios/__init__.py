"""Scenarios, the ``raychaos`` CLI and reports."""

from scenarios._demo import DemoRow, run_demo
from scenarios._model import (
    Problem,
    Scenario,
    ScenarioError,
    SteadyState,
    builtin_names,
    load_attack,
    load_scenario,
)
from scenarios._records import FaultRecord, Probe, RunResult, Sample, Verdict
from scenarios._registry import known_workloads, register_workload
from scenarios._report import summary, write_reports
from scenarios._runner import run_scenario
from scenarios._workload import Params, RunContext, Workload

__all__ = ["DemoRow", "FaultRecord", "Params", "Probe", "Problem", "RunContext", "RunResult", "Sample",
           "Scenario", "ScenarioError", "SteadyState", "Verdict", "Workload", "builtin_names",
           "known_workloads", "load_attack", "load_scenario", "register_workload", "run_demo",
           "run_scenario", "summary", "write_reports"]
