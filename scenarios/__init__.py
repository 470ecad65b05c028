"""Scenarios, the ``raychaos`` CLI and reports."""

from scenarios._demo import DemoRow, run_demo

__all__ = ["DemoRow", "run_demo"]
