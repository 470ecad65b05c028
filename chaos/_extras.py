"""Optional dependencies, imported where they are used, with the extra that installs them.

``pip install raychaos`` brings what chaos, the checkpoint mechanism and the replay buffer
need; torch and gymnasium (the parameter server, the DQN flagship) come with the ``rl``
extra, Ray's own libraries as targets with ``apps``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from chaos._errors import MissingExtra

__all__ = ["import_extra"]


def import_extra(module: str, *, extra: str, needed_by: str) -> ModuleType:
    """``import module``, or a :class:`MissingExtra` naming what needs it and the fix.

    Raises:
        MissingExtra: ``module`` is not installed (an ``ImportError`` too).
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module.partition(".")[0]:
            raise  # the module is there but one of its own imports is broken: not ours to rename
        raise MissingExtra(f"{needed_by} needs {module}, which is not installed; install it with "
                           f"pip install 'raychaos[{extra}]'") from exc
