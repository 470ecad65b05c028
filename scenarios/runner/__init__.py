"""The parts of a scenario run beneath :func:`scenarios.run_scenario`: the steady state and its
probes and samples, each fault's record, the problems found in a scenario file, and the demo."""

from scenarios.model._records import FaultRecord, Probe, Sample
from scenarios.model._scenario import Problem, SteadyState
from scenarios.workloads._demo import DemoRow, run_demo

__all__ = ["DemoRow", "FaultRecord", "Probe", "Problem", "Sample", "SteadyState", "run_demo"]
