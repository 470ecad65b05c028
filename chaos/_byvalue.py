"""Functions Ray ships by value: a worker runs them without importing the module they came from."""

from __future__ import annotations

import builtins
import dis
import types
from collections.abc import Callable
from typing import Any

from chaos._errors import InvalidConfig


def by_value(function: Callable[..., Any], name: str) -> types.FunctionType:
    """A copy of ``function`` that belongs to no module, so cloudpickle pickles it by value.

    A function of an importable module goes to a worker by reference: the worker imports
    that module first (this package's ``scenarios`` costs 1 s of CPU, more on a loaded node).
    The copy sees only builtins, so ``function`` must name nothing else; its ``name`` is the
    task's name in Ray (what a ``task`` target matches, so distinct from the function's own).

    Raises:
        InvalidConfig: not a Python function, or one that names a global or a closure's cell.
    """
    code = getattr(function, "__code__", None)
    if code is None:
        raise InvalidConfig(f"by_value({function!r}): not a Python function; pass one defined with def")
    outside = sorted(_globals_named(code) - set(dir(builtins))) + list(code.co_freevars)
    if outside:
        raise InvalidConfig(f"by_value({function.__qualname__}): it names {outside} from outside itself; a "
                        "function shipped by value may name only builtins and what it imports inside")
    copy = types.FunctionType(code, {"__builtins__": builtins}, name, function.__defaults__)
    copy.__kwdefaults__ = function.__kwdefaults__
    copy.__qualname__ = copy.__module__ = name
    return copy


def _globals_named(code: types.CodeType) -> set[str]:
    """The global names ``code`` (and the code nested in it) loads."""
    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _globals_named(const)
    return names
