"""A versioned parameter server (Li et al., OSDI 2014) as a checkpointed Ray actor.

Pushes are applied exactly once per ``(worker_id, seq)`` — with ``max_task_retries`` Ray
delivers a call at least once, so after a crash a gradient could otherwise be applied
twice, a silent corruption. Staleness is bounded; weights are put in the object store
once per version and every puller of that version gets the same ObjectRef (the
broadcast of the reference chapter, section 4.3).

Run it with ``max_concurrency >= 2`` so that a ``pull`` waiting for a version does not
hold up the pushes that would produce it; every method takes the server's lock.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Any, Literal, get_args

import numpy as np
from numpy.typing import ArrayLike

from actors._checkpoint import Checkpointable, CheckpointConfig, CheckpointStats, Restore, mutation
from actors._codec import StateTree
from actors._spare import SpareState, current_env, keep_spare_alive, keep_spare_for
from chaos._errors import ChaosError, InvalidConfig
from chaos._extras import import_extra

if TYPE_CHECKING:
    import torch

__all__ = [
    "GradientError",
    "ParameterServer",
    "PushResult",
    "ServerStats",
    "StaleGradientError",
    "VersionTimeout",
]

Mode = Literal["async", "sync"]
OnStale = Literal["reject", "drop"]
OnNonFinite = Literal["reject", "skip"]
DEDUPE_WINDOW = 64


class StaleGradientError(ChaosError, ValueError):
    """A push was computed on weights more than ``max_staleness`` versions old; not applied."""


class GradientError(ChaosError, ValueError):
    """A push's gradients have wrong names, shapes, or non-finite values; not applied."""


class VersionTimeout(ChaosError, TimeoutError):
    """``pull(min_version)`` waited its whole timeout and the server never reached the version."""


@dataclass(frozen=True, slots=True)
class PushResult:
    """What became of a push: the version after it, and whether it was applied now."""

    version: int
    applied: bool
    duplicate: bool = False
    dropped: bool = False
    pending: int = 0


@dataclass(frozen=True, slots=True)
class ServerStats:
    """Counters of a parameter server."""

    version: int
    applied_pushes: int
    duplicate_pushes: int
    dropped_stale: int
    skipped_nonfinite: int
    puts: int
    pending: int
    checkpoint: CheckpointStats
    spare_error: str | None = None  #: why this incarnation has no spare worker (spare_worker=True)


def _torch() -> ModuleType:
    return import_extra("torch", extra="rl", needed_by="the parameter server")


def _optimizer_class(name: str) -> type:
    torch = _torch()

    cls = getattr(torch.optim, name, None)
    if not (isinstance(cls, type) and issubclass(cls, torch.optim.Optimizer)) or name == "Optimizer":
        known = sorted(n for n, c in vars(torch.optim).items()
                       if isinstance(c, type) and issubclass(c, torch.optim.Optimizer)
                       and n != "Optimizer")
        raise InvalidConfig(f"unknown optimizer {name!r}; use one of torch.optim's: {', '.join(known)}")
    return cls


def _choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise InvalidConfig(f"unknown {name} {value!r}; use one of {', '.join(map(repr, choices))}")


class ParameterServer(Checkpointable):
    """Holds a torch model and optimizer; applies pushed gradients, serves versioned weights.

    Args:
        model_factory: a picklable callable returning the ``nn.Module`` (called on every
            start, so restarts rebuild the same architecture before restoring weights).
        checkpoint: where and how to checkpoint (``"wal"``: no acknowledged push is lost).
        optimizer: a ``torch.optim`` class name; ``optimizer_kwargs`` are its arguments.
        mode: ``"async"`` applies each push; ``"sync"`` averages ``sync_k`` pushes per step.
        max_staleness: pushes whose ``base_version`` is more than this many versions behind
            are rejected (``on_stale="reject"``, raising :class:`StaleGradientError`) or
            dropped and counted (``"drop"``). None: no bound.
        on_nonfinite: ``"reject"`` raises :class:`GradientError`; ``"skip"`` counts and ignores.
        seed: torch seed for the model's initial weights.
        spare_worker: keep an idle worker on the server's node that has imported the modules
            its runtime env names (``actors.spare.spare_actor_env("torch", "torch._dynamo")``), for
            Ray to restart the server in: see ``actors._spare``. The first start fails when
            no spare can be asked for (the set-up missing, or the raylet's RPC); when none
            shows up, or a restart cannot ask for the next, ``stats().spare_error`` and the
            log say so.
    """

    def __init__(self, model_factory: Callable[[], Any], *, checkpoint: CheckpointConfig,
                 optimizer: str = "SGD", optimizer_kwargs: Mapping[str, object] | None = None,
                 mode: Mode = "async", sync_k: int = 1, max_staleness: int | None = None,
                 on_stale: OnStale = "reject", on_nonfinite: OnNonFinite = "reject",
                 seed: int = 0, restore: Restore = "auto", spare_worker: bool = False) -> None:
        torch = _torch()

        self._validate(mode, sync_k, max_staleness, on_stale, on_nonfinite)
        if not isinstance(spare_worker, bool):
            raise InvalidConfig(f"`spare_worker` must be True or False, got {spare_worker!r}")
        self.mode, self.sync_k, self.max_staleness = mode, sync_k, max_staleness
        self.on_stale, self.on_nonfinite = on_stale, on_nonfinite
        torch.manual_seed(seed)
        self.model = model_factory()
        self.optimizer = _optimizer_class(optimizer)(self.model.parameters(),
                                                     **dict(optimizer_kwargs or {"lr": 0.01}))
        self._shapes = {n: tuple(p.shape) for n, p in self.model.named_parameters()}
        self._lock = self.checkpoint_lock = threading.RLock()
        self._version_changed = threading.Condition(self._lock)
        self._version = 0
        self._pending: list[tuple[dict[str, np.ndarray], list[Any]]] = []  # (grads, [worker, seq])
        self._dedupe: dict[str, dict[int, list[int]]] = {}
        self._counts = {"applied": 0, "duplicates": 0, "dropped": 0, "skipped": 0}
        self._puts = 0
        self._ref: tuple[int, Any] | None = None  # (version, ObjectRef of its weights)
        self.restore_info = self.enable_checkpointing(checkpoint, restore=restore)
        self._spare_error: str | None = None
        if spare_worker:
            self._keep_spare()

    def _keep_spare(self) -> None:
        import ray

        env = current_env()  # here: Ray keeps the task's runtime env per thread
        asked = False
        if not ray.get_runtime_context().was_current_actor_reconstructed:
            # The first start fails on a spare it cannot ask for.
            asked = keep_spare_for(env) is SpareState.REQUESTED
        # Seeing the spare appear (and asking again whenever there is none) runs beside the serving: a
        # failure must not fail a restart (Ray would count it against max_restarts).
        threading.Thread(target=self._spare_keeper, args=(env, asked), name="raychaos-spare", daemon=True).start()

    def _spare_keeper(self, env: str, asked: bool) -> None:
        try:
            keep_spare_alive(env, asked=asked)
        except ChaosError as exc:
            self._spare_error = str(exc)
            logging.getLogger(__name__).warning("the parameter server has no spare worker: %s", exc)

    @staticmethod
    def _validate(mode: str, sync_k: int, max_staleness: int | None, on_stale: str,
                  on_nonfinite: str) -> None:
        _choice("mode", mode, get_args(Mode))
        _choice("on_stale", on_stale, get_args(OnStale))
        _choice("on_nonfinite", on_nonfinite, get_args(OnNonFinite))
        if isinstance(sync_k, bool) or not isinstance(sync_k, int) or sync_k < 1:
            raise InvalidConfig(f"`sync_k` must be a whole number >= 1, got {sync_k!r}")
        if max_staleness is not None and (not isinstance(max_staleness, int) or max_staleness < 0):
            raise InvalidConfig(f"`max_staleness` must be None or a whole number >= 0, got {max_staleness!r}")

    # -- state -----------------------------------------------------------------------------

    def state_dict(self) -> StateTree:
        with self._lock:
            opt = self.optimizer.state_dict()
            return {
                "model": {n: t.detach().clone() for n, t in self.model.state_dict().items()},
                "optimizer": {"state": {str(k): v for k, v in opt["state"].items()},
                              "param_groups": opt["param_groups"]},
                "version": self._version,
                "pending": [{"grads": g, "key": k} for g, k in self._pending],
                "dedupe": {w: {str(s): r for s, r in table.items()} for w, table in self._dedupe.items()},
                "counts": dict(self._counts),
            }

    def load_state_dict(self, state: StateTree) -> None:
        torch = _torch()

        with self._lock:
            self.model.load_state_dict({n: torch.as_tensor(t) for n, t in state["model"].items()})
            opt = state["optimizer"]
            self.optimizer.load_state_dict({
                "state": {int(k): v for k, v in opt["state"].items()},
                "param_groups": [{**g, "params": [int(p) for p in g["params"]]}
                                 for g in opt["param_groups"]]})
            self._version = int(state["version"])
            self._pending = [(p["grads"], p["key"]) for p in state["pending"]]
            self._dedupe = {w: {int(s): list(r) for s, r in t.items()} for w, t in state["dedupe"].items()}
            self._counts = {k: int(v) for k, v in state["counts"].items()}
            self._ref = None

    # -- pushes ----------------------------------------------------------------------------

    @mutation
    def push(self, grads: Mapping[str, ArrayLike], *, worker_id: str, seq: int,
             base_version: int) -> PushResult:
        """Apply a gradient once per ``(worker_id, seq)``; a duplicate returns the first result.

        Raises:
            StaleGradientError: ``base_version`` is too old and ``on_stale="reject"``.
            GradientError: wrong names or shapes, or non-finite values with ``"reject"``.
        """
        with self._lock:
            earlier = self._dedupe.get(str(worker_id), {}).get(int(seq))
            if earlier is not None or self._too_old(str(worker_id), int(seq)):
                self._counts["duplicates"] += 1
                return PushResult(earlier[0] if earlier else self._version, False, duplicate=True)
            arrays = self._check_grads(grads)
            result = self._accept(arrays, base_version, (str(worker_id), int(seq)))
            self._remember(str(worker_id), int(seq), result)
            return result

    def _too_old(self, worker: str, seq: int) -> bool:
        table = self._dedupe.get(worker, {})
        return len(table) >= DEDUPE_WINDOW and seq < min(table)

    def _remember(self, worker: str, seq: int, result: PushResult) -> None:
        table = self._dedupe.setdefault(worker, {})
        table[seq] = [result.version, int(result.applied)]
        if len(table) > DEDUPE_WINDOW:
            del table[min(table)]

    def _check_grads(self, grads: Mapping[str, ArrayLike]) -> dict[str, np.ndarray] | None:
        if not isinstance(grads, Mapping) or set(grads) != set(self._shapes):
            got = sorted(grads) if isinstance(grads, Mapping) else type(grads).__name__
            raise GradientError(f"gradient names {got} differ from the model's "
                                f"{sorted(self._shapes)}; push one gradient per parameter")
        arrays = {n: np.asarray(g.detach().cpu().numpy() if hasattr(g, "detach") else g,
                                dtype=np.float32) for n, g in grads.items()}
        for name, array in arrays.items():
            if array.shape != self._shapes[name]:
                raise GradientError(f"gradient {name!r} has shape {list(array.shape)}, the "
                                    f"parameter {list(self._shapes[name])}")
        if all(np.isfinite(a).all() for a in arrays.values()):
            return arrays
        if self.on_nonfinite == "reject":
            bad = [n for n, a in arrays.items() if not np.isfinite(a).all()]
            raise GradientError(f"gradients {bad} hold NaN or inf; nothing applied "
                                "(on_nonfinite='skip' ignores such pushes instead)")
        return None

    def _accept(self, arrays: dict[str, np.ndarray] | None, base_version: int,
                key: tuple[str, int]) -> PushResult:
        if arrays is None:
            self._counts["skipped"] += 1
            return PushResult(self._version, False)
        lag = self._version - int(base_version)
        if self.max_staleness is not None and lag > self.max_staleness:
            if self.on_stale == "reject":
                raise StaleGradientError(
                    f"push from {key[0]!r} seq {key[1]} was computed at version {base_version}, "
                    f"{lag} behind the server's {self._version} (max_staleness={self.max_staleness}); "
                    "pull fresh weights and recompute")
            self._counts["dropped"] += 1
            return PushResult(self._version, False, dropped=True)
        if self.mode == "sync":
            self._pending.append((arrays, list(key)))
            if len(self._pending) < self.sync_k:
                return PushResult(self._version, False, pending=len(self._pending))
            arrays = {n: np.mean([g[n] for g, _ in self._pending], axis=0) for n in arrays}
            self._pending = []
        self._step(arrays)
        return PushResult(self._version, True)

    def _step(self, arrays: Mapping[str, np.ndarray]) -> None:
        torch = _torch()

        for name, param in self.model.named_parameters():
            param.grad = torch.from_numpy(np.ascontiguousarray(arrays[name])).to(param.dtype)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self._version += 1
        self._counts["applied"] += 1
        self._version_changed.notify_all()

    # -- pulls -----------------------------------------------------------------------------

    def pull(self, min_version: int = 0, *, timeout: float = 30.0) -> tuple[int, Any]:
        """``(version, weights_ref)`` once the server is at ``min_version`` or later.

        The weights of a version are ``ray.put`` once; every caller gets that same ref.

        Raises:
            VersionTimeout: the version was not reached within ``timeout`` seconds.
        """
        if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout >= 0):
            raise InvalidConfig(f"`timeout` must be a finite number >= 0, got {timeout!r}")
        with self._version_changed:
            if not self._version_changed.wait_for(lambda: self._version >= min_version, timeout):
                raise VersionTimeout(
                    f"asked for version {min_version}, the server is at {self._version} after "
                    f"waiting {timeout:g} s; push more gradients or lower min_version")
            return self._version, self._weights_ref()

    def _weights_ref(self) -> Any:
        import ray

        if self._ref is None or self._ref[0] != self._version:
            weights = {n: t.detach().clone() for n, t in self.model.state_dict().items()}
            self._ref = (self._version, ray.put(weights))
            self._puts += 1
        return self._ref[1]

    # -- queries ---------------------------------------------------------------------------

    def version(self) -> int:
        return self._version

    def weights(self) -> dict[str, torch.Tensor]:
        """A copy of the current weights (by value, for checks; pull() is the broadcast path)."""
        with self._lock:
            return {n: t.detach().clone() for n, t in self.model.state_dict().items()}

    def stats(self) -> ServerStats:
        with self._lock:
            c = self._counts
            return ServerStats(version=self._version, applied_pushes=c["applied"], duplicate_pushes=c["duplicates"],
                               dropped_stale=c["dropped"], skipped_nonfinite=c["skipped"], puts=self._puts,
                               pending=len(self._pending), checkpoint=self.checkpoint_stats(),
                               spare_error=self._spare_error)

    def pid(self) -> int:
        return os.getpid()

    def ping(self) -> float:
        return time.monotonic()
