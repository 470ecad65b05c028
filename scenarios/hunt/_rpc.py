"""The hunt's node that fails RPCs: started with Ray's RPC failure knob for every method, and
the count of failures its processes injected while a program ran (what makes the fault land)."""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from typing import Any

#: The custom resource of the node whose processes fail RPCs (only RPC_FAILURES victims ask for it).
HUNT_RPC = "hunt_rpc"
#: Percent of requests lost before they are sent, of replies lost after the server ran the
#: call, and of calls failed while the server still runs them: each, on every method, unbounded.
RPC_SHARE = 10
#: The line Ray 2.60's knob logs (INFO) for every failure it injects (see chaos.engine.rpc_failures_injected).
_INJECTED = b"Inject RPC "


def add_rpc_node(cluster: Any, *, object_store_bytes: int, bound: float) -> None:
    """Add to ``cluster`` (a ``ray.cluster_utils.Cluster``) one node of 1 CPU holding
    :data:`HUNT_RPC`, whose raylet and workers fail :data:`RPC_SHARE` % of their RPCs three ways."""
    from chaos import RpcFailure
    from chaos.engine import rpc_failure_env

    env = rpc_failure_env(RpcFailure("*", request_percent=RPC_SHARE, response_percent=RPC_SHARE,
                                     in_flight_percent=RPC_SHARE))
    cluster.add_node(num_cpus=1, object_store_memory=object_store_bytes, resources={HUNT_RPC: 100.0}, env_vars=env)
    cluster.wait_for_nodes(timeout=bound)


@dataclass
class Injections:
    """RPC failures Ray's knob logged into workers' logs under a logs folder since this count
    began, reading only what each log gained (a long hunt's logs grow to many megabytes)."""

    logs: str
    offsets: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_now(cls, logs: str) -> Injections:
        return cls(logs, {path: size for path in _files(logs) if (size := _size(path)) is not None})

    def since(self, pids: set[int]) -> int:
        """Failures the processes ``pids`` logged (in their worker logs, ``*_<pid>.log``) since
        the last call or :meth:`from_now`, in whole lines."""
        count = 0
        for path in (p for p in _files(self.logs) if _pid_of(p) in pids):
            start = self.offsets.get(path, 0)
            try:
                with open(path, "rb") as log:
                    log.seek(start)
                    chunk = log.read()
            except OSError:  # rotated or removed meanwhile: nothing to count there
                continue
            whole = chunk.rfind(b"\n") + 1
            self.offsets[path] = start + whole
            count += chunk[:whole].count(_INJECTED)
        return count


def _files(logs: str) -> list[str]:
    return glob.glob(os.path.join(logs, "python-core-worker-*.log"))


def _pid_of(path: str) -> int | None:
    """The pid in a worker log's name, ``python-core-worker-<worker id>_<pid>.log``."""
    tail = os.path.basename(path).removesuffix(".log").rsplit("_", 1)[-1]
    return int(tail) if tail.isdigit() else None


def _size(path: str) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:  # Ray's log monitor moved it to logs/old/ meanwhile: a dead worker's
        return None
