"""The chaos agent's own package, as Ray ships it to every node: a node needs only ``ray[default]``.

The agent travels with its actor through Ray's ``runtime_env`` ``py_modules``: the driver zips a
directory and uploads it to the GCS once per content (its ``gcs://_ray_pkg_<hash>.zip`` URI is a
hash of the files; an actor's own ``runtime_env`` takes only URIs, a local directory only
``ray.init``'s), and each node that starts an agent unpacks it and puts it first on that
worker's ``PYTHONPATH``. The GCS deletes the package once no actor uses it. The directory
holds a ``chaos`` package of its own with only the modules the agent imports (:data:`SHIPPED`,
the standard library and psutil, which Ray's wheel carries) and an ``__init__`` that imports
nothing: a node never imports this package's public API nor what that needs (pydantic, rich).

Shipped rather than pickled by value (``cloudpickle.register_pickle_by_value``): the agent's
errors and records then keep their import names on both sides (an engine's ``except
FaultIneffective`` catches the node's), the pause healer still starts as ``python -m
chaos.agents._healer``, and nothing changes how the rest of the driver's process pickles.
"""

from __future__ import annotations

import atexit
import functools
import os
import shutil
import tempfile
from pathlib import Path

# Defined beside the code's hash: an agent hashes the modules it was shipped as its identity.
from chaos.agents._identity import SHIPPED, SHIPPED_PACKAGES, shipped_file

__all__ = ["SHIPPED", "agent_package", "agent_runtime_env"]

_INIT = '"""raychaos\'s chaos agent as shipped to a node: only the modules the agent imports."""\n'


@functools.cache
def agent_package() -> str:
    """The ``chaos`` directory to ship, built once per process in a private temporary
    directory (removed at exit): a copy of :data:`SHIPPED` where it lies under ``chaos``, and an
    empty ``__init__`` in ``chaos`` and in each package below it."""
    root = Path(tempfile.mkdtemp(prefix="raychaos-agent-"))  # mode 0700: no one else writes it
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    package, source = root / "chaos", Path(__file__).parents[1]
    for folder in (package, *(package / shipped_file(p).with_suffix("") for p in SHIPPED_PACKAGES)):
        folder.mkdir()
        (folder / "__init__.py").write_text(_INIT, encoding="utf-8")
    for module in SHIPPED:
        shutil.copyfile(source / shipped_file(module), package / shipped_file(module))
    return str(package)


def agent_runtime_env() -> dict[str, list[str]]:
    """The agent actor's ``runtime_env``: its package in ``py_modules``, uploaded to the
    connected cluster's GCS if it is not there yet."""
    import ray

    return {"py_modules": [_uploaded(ray.get_runtime_context().gcs_address)]}


@functools.cache
def _uploaded(gcs_address: str) -> str:
    """The package's URI on the cluster at ``gcs_address``, uploaded once per cluster."""
    # Ray's own upload, as ray.init does it for a job's py_modules (ray._private.worker).
    from chaos._ray_compat import upload_py_modules

    package = agent_package()
    env = upload_py_modules({"py_modules": [package]}, scratch_dir=os.path.dirname(package))
    (uri,) = env["py_modules"]
    return str(uri)
