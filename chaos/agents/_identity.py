"""The chaos agent's code, as a node runs it: which modules are shipped (:data:`SHIPPED`) and
the hash that is the code's identity (:func:`code_hash`). Shipped with them: an agent hashes
its own copy, the driver its ``chaos``, and the two agree exactly when they are the same bytes."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

__all__ = ["SHIPPED", "SHIPPED_PACKAGES", "code_hash", "code_hash_of", "shipped_file"]

#: The modules of ``chaos`` a node runs, named under ``chaos``: the agent and what it imports,
#: nothing else. They are the agent's package (:mod:`chaos.agents._ship`) and, hashed, its
#: code's identity (:func:`code_hash`).
SHIPPED = ("agents._agent", "agents._disk", "_errors", "agents._healer", "agents._identity", "agents._memory",
           "agents._safety", "_wait")
#: The packages below ``chaos`` the shipped modules live in (each shipped with an empty ``__init__``).
SHIPPED_PACKAGES = tuple(sorted({m.rpartition(".")[0] for m in SHIPPED} - {""}))


def shipped_file(module: str) -> Path:
    """Where a shipped module's source lies, relative to the ``chaos`` folder."""
    return Path(*module.split(".")).with_suffix(".py")


def code_hash_of(folder: Path) -> str:
    """The sha256 of the :data:`SHIPPED` modules in ``folder``: each one's name, length and bytes,
    in that order (a fixed order: the same files hash the same anywhere)."""
    digest = hashlib.sha256()
    for module in SHIPPED:
        data = (folder / shipped_file(module)).read_bytes()
        digest.update(f"{shipped_file(module)} {len(data)}\n".encode())
        digest.update(data)
    return digest.hexdigest()


@functools.cache
def code_hash() -> str:
    """The hash of the agent's code as this process has it, computed once: the driver hashes its
    own ``chaos`` and an agent its shipped copy, byte-identical, so the two agree exactly when
    the agent runs the code the driver ships."""
    return code_hash_of(Path(__file__).parents[1])
