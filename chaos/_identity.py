"""The chaos agent's code, as a node runs it: which modules are shipped (:data:`SHIPPED`) and
the hash that is the code's identity (:func:`code_hash`). Shipped with them: an agent hashes
its own copy, the driver its ``chaos``, and the two agree exactly when they are the same bytes."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

__all__ = ["SHIPPED", "code_hash", "code_hash_of"]

#: The modules of ``chaos`` a node runs: the agent and what it imports, nothing else. They are
#: the agent's package (:mod:`chaos._ship`) and, hashed, its code's identity (:func:`code_hash`).
SHIPPED = ("_agent", "_disk", "_errors", "_healer", "_identity", "_memory", "_safety", "_wait")


def code_hash_of(folder: Path) -> str:
    """The sha256 of the :data:`SHIPPED` modules in ``folder``: each one's name, length and bytes,
    in that order (a fixed order: the same files hash the same anywhere)."""
    digest = hashlib.sha256()
    for module in SHIPPED:
        data = (folder / f"{module}.py").read_bytes()
        digest.update(f"{module}.py {len(data)}\n".encode())
        digest.update(data)
    return digest.hexdigest()


@functools.cache
def code_hash() -> str:
    """The hash of the agent's code as this process has it, computed once: the driver hashes its
    own ``chaos`` and an agent its shipped copy, byte-identical, so the two agree exactly when
    the agent runs the code the driver ships."""
    return code_hash_of(Path(__file__).parent)
