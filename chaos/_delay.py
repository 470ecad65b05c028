"""Delay injection into functions the user wraps: stragglers by a seeded latency distribution."""

from __future__ import annotations

import functools
import hashlib
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from chaos._errors import InvalidFaultSpec

__all__ = ["Latency", "delayed", "rpc_delay_env"]

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
