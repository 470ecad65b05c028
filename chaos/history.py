"""Jepsen-style histories of concurrent operations and the set checker that judges them."""

from chaos._history import History, Op, OpStatus, SetVerdict, check_set, drive_writers

__all__ = ["History", "Op", "OpStatus", "SetVerdict", "check_set", "drive_writers"]
