"""Jepsen-style histories of concurrent operations, the set checker that judges them, and the
checker layer every judgement is expressed in: one :class:`Verdict` type whose validity is
three-valued (held, broken, unknown; n/a), and its composition."""

from chaos._checker import Validity, Verdict, compose
from chaos._history import History, Op, OpStatus, SetVerdict, check_set, drive_writers

__all__ = ["History", "Op", "OpStatus", "SetVerdict", "Validity", "Verdict", "check_set", "compose",
           "drive_writers"]
