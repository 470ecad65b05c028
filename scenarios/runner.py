"""The parts of a scenario run beneath :func:`scenarios.run_scenario`: the steady state and its
probes and samples, each fault's record, the problems found in a scenario file, and the demo."""

from scenarios._demo import DemoRow, run_demo
from scenarios._model import Problem, SteadyState
from scenarios._records import FaultRecord, Probe, Sample

__all__ = ["DemoRow", "FaultRecord", "Probe", "Problem", "Sample", "SteadyState", "run_demo"]
