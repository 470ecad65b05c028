"""Delay injection into functions the user wraps: stragglers by a seeded latency distribution."""

from __future__ import annotations

import functools
import hashlib
import math
import os
import random
import re
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from chaos._errors import InvalidFaultSpec
from chaos._ray_compat import RPC_IN_FLIGHT_SINCE, ray_minor, rpc_failure_knob, rpc_in_flight

__all__ = ["Latency", "RpcFailure", "delayed", "rpc_delay_env", "rpc_failure_env", "rpc_failures_injected",
           "unconfirmed_rpc_failures"]

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class Latency:
    """A latency distribution in seconds: ``fixed``, ``uniform`` (low, high) or ``exponential``
    (mean), applied with ``probability`` per call."""

    kind: Literal["fixed", "uniform", "exponential"]
    a: float
    b: float = 0.0
    probability: float = 1.0

    def __post_init__(self) -> None:
        if self.kind not in ("fixed", "uniform", "exponential"):
            raise InvalidFaultSpec(f"unknown latency kind {self.kind!r}; use 'fixed', 'uniform' "
                                   "or 'exponential'")
        values = (self.a, self.b)
        if any(not math.isfinite(v) or v < 0 for v in values) or (self.kind == "uniform" and self.b < self.a):
            raise InvalidFaultSpec(f"latency bounds must be finite, >= 0 and ordered, got {values}")
        if not 0 <= self.probability <= 1:
            raise InvalidFaultSpec(f"`probability` must be in [0, 1], got {self.probability!r}")

    def draw(self, rng: random.Random) -> float:
        if rng.random() >= self.probability:
            return 0.0
        if self.kind == "fixed":
            return self.a
        if self.kind == "uniform":
            return rng.uniform(self.a, self.b)
        return rng.expovariate(1.0 / self.a) if self.a > 0 else 0.0


def delayed(latency: Latency, *, seed: int = 0) -> Callable[[F], F]:
    """Wrap a function (before ``ray.remote``) or an actor method so each call first waits a
    latency drawn from ``latency``. Call ``n`` in a process draws from a RNG seeded by
    :func:`call_seed`, so a run's delays are reproducible."""

    def wrap(fn: F) -> F:
        calls = [0]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            calls[0] += 1
            if latency.probability > 0:  # a disabled delay costs one comparison
                pause = latency.draw(random.Random(call_seed(seed, fn, calls[0])))
                if pause:
                    time.sleep(pause)  # the injected latency itself, not a synchronisation
            return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    return wrap


def call_seed(seed: int, fn: Callable[..., Any], n: int) -> int:
    """The RNG seed of call ``n`` of ``fn``: stable across processes and runs."""
    return int.from_bytes(hashlib.blake2b(f"{seed}:{fn.__qualname__}:{n}".encode(),
                                          digest_size=8).digest(), "little")


def rpc_delay_env(*, method: str = "*", min_us: int, max_us: int) -> dict[str, str]:
    """Environment for a cluster started with Ray's own RPC-delay testing knob.

    Ray reads ``RAY_testing_asio_delay_us`` when its processes start (a testing knob, not a
    stable API): set these variables before ``ray start`` or ``local_cluster`` to delay every
    matching gRPC handler by a uniform draw in ``[min_us, max_us]`` microseconds.
    """
    if min_us < 0 or max_us < min_us:
        raise InvalidFaultSpec(f"need 0 <= min_us <= max_us, got {min_us}, {max_us}")
    return {"RAY_testing_asio_delay_us": f"{method}={min_us}:{max_us}"}


@dataclass(frozen=True, slots=True)
class RpcFailure:
    """Ray's own RPC failure knob for one gRPC client method (``"*"``: every method).

    ``method`` is ``Service.grpc_client.Method`` as Ray names it, e.g.
    ``"CoreWorkerService.grpc_client.PushTask"`` (an actor call or task pushed to a worker).
    Percentages: the request is lost before it is sent, the reply is lost after the server ran
    it, or the call fails while the server still runs it (its retry may arrive meanwhile).
    ``num_failures`` bounds how many are injected per process (-1: no bound).
    """

    method: str
    request_percent: int = 0
    response_percent: int = 0
    in_flight_percent: int = 0
    num_failures: int = -1

    def __post_init__(self) -> None:
        if not isinstance(self.method, str) or not (self.method == "*" or self.method.count(".") == 2):
            raise InvalidFaultSpec(f"RPC method must be 'Service.grpc_client.Method' or '*', "
                                   f"got {self.method!r}", field="method")
        shares = (self.request_percent, self.response_percent, self.in_flight_percent)
        if any(isinstance(p, bool) or not isinstance(p, int) or not 0 <= p <= 100 for p in shares) \
                or sum(shares) > 100 or sum(shares) == 0:
            raise InvalidFaultSpec(f"RPC failure percentages must be whole numbers in [0, 100] "
                                   f"adding up to (0, 100], got {shares}", field=_first_bad_share(self))
        if isinstance(self.num_failures, bool) or not isinstance(self.num_failures, int) \
                or self.num_failures < -1 or self.num_failures == 0:
            raise InvalidFaultSpec(f"`num_failures` must be -1 (no bound) or >= 1, got {self.num_failures!r}",
                                   field="num_failures")


def _first_bad_share(failure: RpcFailure) -> str | None:
    """The first percentage that is no whole number in [0, 100]; None when only their sum is off."""
    names = ("request_percent", "response_percent", "in_flight_percent")
    return next((n for n in names if isinstance(p := getattr(failure, n), bool) or not isinstance(p, int)
                 or not 0 <= p <= 100), None)


def rpc_failure_env(*failures: RpcFailure) -> dict[str, str]:
    """Environment for Ray processes started with Ray's RPC failure testing knob (read at
    start-up; a testing knob, not a stable API): pass it as :func:`chaos.local_cluster`'s
    ``worker_env`` to make the worker nodes' RPCs fail. In the installed Ray's format (JSON
    since 2.54, ``M=max:req:resp[:in_flight]`` before: ``chaos._ray_compat``).

    Raises:
        InvalidFaultSpec: no failure given, or an in-flight share on a Ray before 2.52 (whose
            knob has none).
    """
    if not failures:
        raise InvalidFaultSpec("give at least one RpcFailure")
    if not rpc_in_flight() and (late := next((f for f in failures if f.in_flight_percent), None)):
        raise InvalidFaultSpec(f"in_flight_percent = {late.in_flight_percent} for {late.method!r}: Ray "
                               f"{'.'.join(map(str, ray_minor()))}'s RPC failure knob has no in-flight failures "
                               f"(since Ray {'.'.join(map(str, RPC_IN_FLIGHT_SINCE))}); give request_percent "
                               "or response_percent instead, or upgrade Ray", field="in_flight_percent")
    knob = rpc_failure_knob({f.method: (f.num_failures, f.request_percent, f.response_percent,
                                        f.in_flight_percent) for f in failures})
    # Every embedded node shares this machine's address: "intra-node" must not be spared.
    return {"RAY_testing_rpc_failure": knob, "RAY_testing_rpc_failure_avoid_intra_node_failures": "0"}


#: The line each Ray 2.60 process logs (INFO, ``grpc_client.h``) for every failure its RPC
#: failure knob injects: "Inject RPC request failure for M", "Inject RPC response failure for
#: M", "Inject RPC response failure while request in flight for M".
_INJECTED = re.compile(r"Inject RPC (?:request|response) failure (?:while request in flight )?for (\S+)")


def rpc_failures_injected(log_root: str) -> dict[str, int]:
    """How many RPC failures Ray's knob injected, by method, read from the log files of every
    process of every session under ``log_root`` (an embedded cluster's ``temp_dir``). The knob only logs
    what it injects: a method name that matches nothing (misspelled), or calls that never
    leave a worker node's processes, leave no line at all."""
    counts: dict[str, int] = {}
    for path in _log_files(log_root):
        with open(path, errors="replace") as lines:
            for line in lines:
                if "Inject RPC" in line and (match := _INJECTED.search(line)):
                    counts[match.group(1)] = counts.get(match.group(1), 0) + 1
    return counts


#: Where Ray's processes write: workers ``*.log`` (rotated ``*.log.N``), raylet and GCS ``*.out``/``*.err``.
_LOG_FILE = re.compile(r"\.(?:log(?:\.\d+)?|out|err)$")


def _log_files(root: str) -> Iterator[str]:
    for folder, _dirs, files in os.walk(root):
        yield from (os.path.join(folder, f) for f in files if _LOG_FILE.search(f))


def unconfirmed_rpc_failures(failures: tuple[RpcFailure, ...], injected: Mapping[str, int]) -> list[str]:
    """Why each of ``failures`` was not seen injected (empty: all were): a knob entry Ray
    never fired injected nothing, and a run that counts it as its fault would pass untested."""
    problems = []
    named = {f.method for f in failures}
    for failure in failures:
        # "*" is confirmed only by a method no other entry names: those confirm their own.
        seen = (sum(n for m, n in injected.items() if m not in named) if failure.method == "*"
                else injected.get(failure.method, 0))
        if seen == 0:
            problems.append(f"RPC failures for {failure.method!r}: Ray's knob injected none (no "
                            "'Inject RPC ... failure' line in the cluster's logs); check the method's "
                            "spelling (Service.grpc_client.Method) and that the calls are made from a "
                            "worker node's processes, where the knob is set")
    return problems
