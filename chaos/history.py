"""Jepsen-style histories of concurrent operations, the set checker that judges them, and the
three-valued validity every verdict has (held, broken, unknown; n/a) with its composition."""

from chaos._checker import Validity, compose
from chaos._history import History, Op, OpStatus, SetVerdict, check_set, drive_writers

__all__ = ["History", "Op", "OpStatus", "SetVerdict", "Validity", "check_set", "compose", "drive_writers"]
