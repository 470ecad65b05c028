"""The checkpoint mechanism under every stateful actor: policy checkpoints and a WAL.

Ray re-runs ``__init__`` when it restarts an actor, so all in-memory state is gone.
:class:`Checkpointable` closes that gap: the actor says what its state is
(``state_dict`` / ``load_state_dict``), marks the methods that change it with
:func:`mutation`, and calls :meth:`Checkpointable.enable_checkpointing` at the end of
``__init__``. On a restart it then restores the newest valid checkpoint by itself and, in
``"wal"`` durability, replays every acknowledged mutation made after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
import os
import signal
import threading
import time
import warnings
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal, TypeVar, get_args, overload

from actors import _codec, _wal
from actors import _failpoints as fp
from actors._codec import StateTree
from actors._dedupe import CALL_KEYS, WriterSeqs
from actors._fence import Fence, Superseded
from actors._store import (
    CheckpointInfo,
    CheckpointRetried,
    CheckpointStore,
    CheckpointWarning,
    CommittedNotSynced,
    LoadedCheckpoint,
)
from chaos._errors import CheckpointError, InvalidConfig, MutationNotLogged, StorageUnreachable
from chaos._failpoint import failpoint

__all__ = [
    "CheckpointConfig",
    "CheckpointStats",
    "Checkpointable",
    "Durability",
    "Policy",
    "RestartUnknown",
    "RestoreInfo",
    "StorageNotFresh",
    "checkpoint_async",
    "mutation",
]

Policy = Literal["every_n", "every_seconds", "on_demand"]
Durability = Literal["policy", "wal"]
Restore = Literal["auto", "always", "never"]
F = TypeVar("F", bound=Callable[..., Any])


def _validate_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise InvalidConfig(f"unknown {name} {value!r}; use one of {', '.join(map(repr, choices))}")


def _validate_positive(name: str, value: float, *, allow_zero: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (
        value == 0 and not allow_zero
    ):
        bound = "non-negative" if allow_zero else "positive"
        raise InvalidConfig(f"`{name}` must be a {bound} number, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointConfig:
    """How and where an actor checkpoints. Validated on construction; nothing is written.

    Args:
        storage: local directory or fsspec URL. Give every actor its own; on a multi-node
            cluster it must be shared by all nodes (NFS mount, object store URL).
        policy: ``"every_n"`` mutations, ``"every_seconds"`` (checked when a mutation
            happens), or ``"on_demand"`` (only ``checkpoint()``).
        durability: ``"policy"`` loses the mutations after the last checkpoint on a crash;
            ``"wal"`` logs each mutation before the call returns and loses none.
        keep: how many checkpoints to keep (with the chain of deltas each one needs).
        incremental: save only what changed since the previous checkpoint, when the actor
            implements ``delta_state_dict``; a full checkpoint every ``full_every``.
        checkpoint_on_sigterm: on SIGTERM (a node drained or preempted, an instance shutting
            down) commit a checkpoint of everything acknowledged, after the mutation in flight,
            then exit as before: ``"policy"`` durability then loses nothing to a graceful stop.
            For actors whose mutations run on the main thread (sync actors); an async actor's
            run on its event loop's thread, where Python cannot take signals.
        fence: on a filesystem storage, let one incarnation at a time commit: each restart
            takes the next incarnation number, and an older incarnation still running (its
            node cut off by a partition, then declared dead and replaced) has every later
            mutation refused with ``Superseded`` instead of writing over its replacement's
            log and checkpoints. Costs a ``flock`` and a small read per mutation; turn it off
            only on a filesystem without ``flock``. Remote (fsspec) storage is not fenced.
    """

    storage: str
    policy: Policy = "every_n"
    every_n: int = 100
    every_seconds: float = 30.0
    durability: Durability = "policy"
    keep: int = 3
    fsync_every: int = 32
    fsync_interval: float = 0.05
    incremental: bool = False
    full_every: int = 8
    checkpoint_on_sigterm: bool = False
    fence: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.storage, str) or not self.storage:
            raise InvalidConfig(f"`storage` must be a directory or URL, got {self.storage!r}")
        _validate_choice("checkpoint policy", self.policy, get_args(Policy))
        _validate_choice("durability", self.durability, get_args(Durability))
        for flag in ("incremental", "checkpoint_on_sigterm", "fence"):
            if not isinstance(getattr(self, flag), bool):
                raise InvalidConfig(f"`{flag}` must be True or False, got {getattr(self, flag)!r}")
        for name in ("every_n", "keep", "fsync_every", "full_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidConfig(f"`{name}` must be a whole number >= 1, got {value!r}")
        _validate_positive("every_seconds", self.every_seconds)
        _validate_positive("fsync_interval", self.fsync_interval, allow_zero=True)


@dataclass(frozen=True, slots=True)
class RestoreInfo:
    """What happened when the actor started: restored checkpoint (0: none), replayed records,
    and any fallback: newer checkpoints ``skipped`` as unusable, torn log bytes dropped.

    After a process crash neither kind of fallback is ever needed (the commit protocol and
    the one-write record keep both whole, the last record aside); they show a torn disk, or
    a bug.
    """

    restored: bool
    seq: int
    replayed: int
    seconds: float
    skipped: tuple[int, ...] = ()
    torn_bytes: int = 0


@dataclass(frozen=True, slots=True)
class CheckpointStats:
    """Counters of one actor's checkpointing, for ``stats()`` methods and reports."""

    checkpoints: int
    last_seq: int
    mutations_since_checkpoint: int
    wal_records: int
    restore: RestoreInfo
    #: Calls of idempotent mutations recognised as repeats and not applied (kept in the
    #: checkpoints: a crash forgets only those counted after the last one).
    repeats: int = 0


@overload
def mutation(method: F, /) -> F: ...


@overload
def mutation(*, idempotent: bool = False) -> Callable[[F], F]: ...


def mutation(method: F | None = None, /, *, idempotent: bool = False) -> F | Callable[[F], F]:
    """Mark an actor method that changes state, so it is logged and counted for checkpoints.

    The method's arguments must be numpy arrays, torch tensors or JSON values when the
    actor uses ``"wal"`` durability: they are what the log replays. An ``async def``
    method is logged once its coroutine has finished (its effect is then whole), and async
    mutations run one at a time, ``await``s included, across concurrency groups too.

    A mutation whose log record cannot be written (a full disk) is undone before the call
    fails with :class:`MutationNotLogged`: what the actor holds is always what its log
    replays.

    ``@mutation(idempotent=True)`` applies each call once under Ray's at-least-once delivery
    (``max_task_retries`` other than 0). The method takes keyword-only ``writer_id: str`` and
    ``seq: int``; each caller (an ``actors.Writer``) numbers its calls 0, 1, 2, … The mixin keeps
    the seqs applied per writer (an ``actors.WriterSeqs``, reordering allowed), checkpoints and
    replays that table with the actor's state, and answers a call it already applied with
    ``None`` without running it: results are not kept. A call that raises records nothing,
    so its retry under the same seq is applied.

    Raises:
        InvalidConfig: ``idempotent=True`` on a method without keyword-only ``writer_id`` and
            ``seq`` parameters.
    """
    if method is None:
        return functools.partial(_mark, idempotent=idempotent)
    return _mark(method, idempotent=idempotent)


def _mark(method: F, *, idempotent: bool) -> F:
    if idempotent:
        _check_call_keys(method)
    make = _async_mutation if inspect.iscoroutinefunction(method) else _sync_mutation
    wrapper = make(method, idempotent)
    wrapper.__raychaos_mutation__ = method  # type: ignore[attr-defined]
    wrapper.__raychaos_idempotent__ = bool(idempotent)  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def _check_call_keys(method: Callable[..., Any]) -> None:
    params = inspect.signature(method).parameters
    missing = [name for name in CALL_KEYS
               if name not in params or params[name].kind is not inspect.Parameter.KEYWORD_ONLY]
    if missing:
        raise InvalidConfig(
            f"@mutation(idempotent=True) needs keyword-only {' and '.join(missing)} on "
            f"{method.__qualname__}(); declare them after `*`: "
            f"def {method.__name__}(self, ..., *, writer_id: str, seq: int)")


def _writers(owner: object) -> WriterSeqs:
    """The owner's table of applied ``(writer_id, seq)``, created on first use."""
    table = owner.__dict__.get("_raychaos_writers")
    if table is None:
        table = owner.__dict__["_raychaos_writers"] = WriterSeqs()
    assert isinstance(table, WriterSeqs)
    return table


def _seen(owner: object, name: str, kwargs: Mapping[str, Any]) -> bool:
    """Whether an idempotent call was applied before (counted as a repeat); validates its key
    before anything runs. A repeat is answered as applied only by an incarnation that may
    still commit: a superseded or diverged one recorded seqs its log never got."""
    writer_id, seq = kwargs.get("writer_id"), kwargs.get("seq")
    if writer_id is None or seq is None:
        raise InvalidConfig(
            f"{type(owner).__name__}.{name}() is an idempotent mutation: pass writer_id= and seq= "
            f"(got writer_id={writer_id!r}, seq={seq!r}); actors.Writer numbers a caller's calls")
    if not _writers(owner).is_repeat(writer_id, seq):
        return False
    checkpointer = owner.__dict__.get("_raychaos_checkpointer")
    if checkpointer is not None:
        checkpointer.refuse_if_stale()
    return True


def _sync_mutation(method: F, idempotent: bool) -> Callable[..., Any]:
    @functools.wraps(method)
    def wrapper(self: Checkpointable, *args: Any, **kwargs: Any) -> Any:
        # Applying and logging happen under one lock, so the log's order is the apply order.
        with _lock_of(self):
            depth = self.__dict__.get("_raychaos_depth", 0)
            if depth == 0 and idempotent and _seen(self, method.__name__, kwargs):
                return None
            self.__dict__["_raychaos_depth"] = depth + 1
            try:
                result = method(self, *args, **kwargs)
            finally:
                self.__dict__["_raychaos_depth"] = depth
            if depth == 0:  # an override calling super() logs once
                _applied(self, idempotent, kwargs)
                _log(self, method.__name__, args, kwargs)
            return result

    return wrapper


def _applied(owner: object, idempotent: bool, kwargs: Mapping[str, Any]) -> None:
    """Record an idempotent call as applied: after it ran, before its log record and any
    checkpoint the policy takes after it (which must hold its seq with its effect). A record
    that cannot be written undoes the call by reloading, which drops the seq again."""
    if idempotent:
        _writers(owner).applied(kwargs["writer_id"], kwargs["seq"])


#: The actors whose async mutation this task is inside (an override awaiting ``super()``).
_IN_MUTATION: contextvars.ContextVar[frozenset[int]] = contextvars.ContextVar(
    "raychaos_in_mutation", default=frozenset())


def _inside_mutation(owner: Checkpointable) -> bool:
    """This call runs inside one of ``owner``'s mutations (or its replay)."""
    return id(owner) in _IN_MUTATION.get() or bool(owner.__dict__.get("_raychaos_depth", 0))


@contextlib.contextmanager
def _marked_inside(owner: Checkpointable) -> Iterator[None]:
    token = _IN_MUTATION.set(_IN_MUTATION.get() | {id(owner)})
    try:
        yield
    finally:
        _IN_MUTATION.reset(token)


def _async_mutation(method: F, idempotent: bool) -> Callable[..., Any]:
    # The wrapper names module functions only, never the ContextVar itself: a class defined in
    # a user's script is pickled by value, closure and globals with it, and a ContextVar
    # cannot be pickled (the module's functions are pickled by reference).
    @functools.wraps(method)
    async def wrapper(self: Checkpointable, *args: Any, **kwargs: Any) -> Any:
        gate = self.__dict__.get("_raychaos_gate")
        if _inside_mutation(self):  # replaying, or nested
            return await method(self, *args, **kwargs)
        if gate is None:  # not checkpointed yet
            if idempotent and _seen(self, method.__name__, kwargs):
                return None
            result = await method(self, *args, **kwargs)
            _applied(self, idempotent, kwargs)
            return result
        async with gate.held():
            if idempotent and _seen(self, method.__name__, kwargs):
                return None
            with _marked_inside(self):
                result = await method(self, *args, **kwargs)
            _applied(self, idempotent, kwargs)
            _log(self, method.__name__, args, kwargs)
            return result

    return wrapper


async def checkpoint_async(owner: Checkpointable, *, full: bool = False) -> CheckpointInfo:
    """:meth:`Checkpointable.checkpoint` for async actors: waits until no async mutation is in
    flight. A function, not a method: an ``async def`` on the mixin would make Ray run every
    checkpointed actor as an async actor."""
    checkpointer = owner._checkpointer()
    async with owner.__dict__["_raychaos_gate"].held():
        return checkpointer.checkpoint(full=full)


def _log(owner: Checkpointable, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    checkpointer = owner.__dict__.get("_raychaos_checkpointer")
    if checkpointer is not None:
        failpoint(fp.MUTATION_APPLIED)
        checkpointer.install_sigterm()
        checkpointer.after_mutation(name, args, kwargs)
        if checkpointer.terminating:  # SIGTERM came while this call ran: it is whole now
            checkpointer.final_checkpoint()


class _Gate:
    """Runs an actor's async mutations one at a time, ``await``s included.

    A thread lock, not an ``asyncio.Lock``: an actor with concurrency groups runs one event
    loop per group, each in its own thread, and an ``asyncio.Lock`` belongs to one loop. A
    coroutine that must wait does so in an executor thread, never blocking its loop.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()

    @contextlib.asynccontextmanager
    async def held(self) -> AsyncIterator[None]:
        if not self._lock.acquire(blocking=False):
            waiting = asyncio.get_running_loop().run_in_executor(None, self._lock.acquire)
            try:
                await asyncio.shield(waiting)
            except asyncio.CancelledError:  # the lock is still taken for us: give it back then
                waiting.add_done_callback(lambda _: self._lock.release())
                raise
        try:
            yield
        finally:
            self._lock.release()

    def try_hold(self) -> bool:
        return self._lock.acquire(blocking=False)

    def release(self) -> None:
        self._lock.release()


class Checkpointable:
    """Mixin for actors whose state must survive a crash. See the module docstring.

    An actor that runs methods concurrently (``max_concurrency > 1``) sets
    ``self.checkpoint_lock = threading.RLock()`` before ``enable_checkpointing``: mutations,
    their log records and checkpoints are then taken under it.

    Example::

        @ray.remote(max_restarts=3, max_task_retries=-1)
        class Counter(Checkpointable):
            def __init__(self, storage):
                self.n = 0
                self.enable_checkpointing(CheckpointConfig(storage=storage, every_n=10))

            def state_dict(self):
                return {"n": self.n}

            def load_state_dict(self, state):
                self.n = int(state["n"])

            @mutation(idempotent=True)  # Ray may deliver a call again: it is applied once
            def add(self, k, *, writer_id, seq):
                self.n += k

            def get(self):
                return self.n

    A caller numbers its calls with an ``actors.Writer``:
    ``counter.add.remote(1, **writer.next())``. A plain ``@mutation`` under
    ``max_task_retries`` other than 0 is applied at least once: twice, when the actor dies
    after applying a call and before its reply arrives.
    """

    def state_dict(self) -> StateTree:
        """The actor's whole logical state as a state tree (arrays, tensors, JSON values)."""
        raise NotImplementedError(f"{type(self).__name__} must define state_dict()")

    def load_state_dict(self, state: StateTree) -> None:
        """Replace the actor's state by ``state``, as returned by :meth:`state_dict`."""
        raise NotImplementedError(f"{type(self).__name__} must define load_state_dict()")

    def delta_state_dict(self) -> StateTree | None:
        """What changed since the last checkpoint, for incremental checkpoints; None: unsupported.

        Return None to have a full checkpoint taken instead.
        """
        return None

    def load_delta_state_dict(self, delta: StateTree) -> None:
        """Apply a delta from :meth:`delta_state_dict` on top of the restored state."""
        raise NotImplementedError(f"{type(self).__name__} must define load_delta_state_dict()")

    def mark_checkpointed(self) -> None:
        """Called after each committed checkpoint and restore: forget what changed so far."""

    def enable_checkpointing(
        self,
        config: CheckpointConfig,
        *,
        restore: Restore = "auto",
        clock: Callable[[], float] = time.monotonic,
    ) -> RestoreInfo:
        """Attach checkpointing; call it last in ``__init__``.

        Args:
            config: where and how to checkpoint.
            restore: ``"auto"`` restores only when Ray reconstructed this actor (a restart)
                and refuses a first start over storage that already holds checkpoints;
                ``"always"`` also restores on a first start (resume a previous run's storage);
                ``"never"`` starts fresh, over any old checkpoints. A fresh start commits the
                initial state as a checkpoint.
            clock: monotonic time, for the ``"every_seconds"`` policy.

        Raises:
            InvalidConfig: bad ``restore``, or WAL durability on storage that is not a filesystem.
            StorageUnreachable: the storage cannot be written.
            CheckpointFormatError: the newest checkpoint comes from a newer raychaos.
            RestartUnknown: ``"auto"``, and Ray could not say whether this is a restart.
            StorageNotFresh: ``"auto"``, a first start, and the storage holds checkpoints.
        """
        _validate_choice("restore mode", restore, get_args(Restore))
        restart = restore == "always" or (restore == "auto" and _reconstructed())
        checkpointer = _Checkpointer(self, config, clock)
        info = checkpointer.start(restart, over_old=restore == "never")
        self.__dict__["_raychaos_gate"] = _Gate()
        self.__dict__["_raychaos_checkpointer"] = checkpointer
        if config.checkpoint_on_sigterm:
            checkpointer.checkpoint_on_sigterm()
        return info

    def checkpoint(self, *, full: bool = False) -> CheckpointInfo:
        """Commit a checkpoint now (on demand), whatever the policy; ``full`` skips deltas.

        Raises:
            CheckpointError: an async mutation is half done (awaiting); a snapshot now would
                hold half of it. Use :meth:`checkpoint_async` from async code.
        """
        checkpointer, gate = self._checkpointer(), self.__dict__["_raychaos_gate"]
        if _inside_mutation(self):
            return checkpointer.checkpoint(full=full)  # from inside a mutation: it holds the gate
        if not gate.try_hold():
            raise CheckpointError(f"an async mutation of {type(self).__name__} is in flight: a "
                                  "checkpoint now would hold half of it; await "
                                  "actors.checkpoint_async(self) instead")
        try:
            return checkpointer.checkpoint(full=full)
        finally:
            gate.release()


    def digest(self) -> str:
        """A stable hash of the logical state, for recovery assertions."""
        return _codec.digest(self.state_dict())

    def checkpoint_stats(self) -> CheckpointStats:
        return self._checkpointer().stats()

    def _checkpointer(self) -> _Checkpointer:
        checkpointer = self.__dict__.get("_raychaos_checkpointer")
        if checkpointer is None:
            raise InvalidConfig(
                f"{type(self).__name__} has no checkpointing: call "
                "self.enable_checkpointing(CheckpointConfig(storage=...)) at the end of __init__"
            )
        assert isinstance(checkpointer, _Checkpointer)
        return checkpointer


def _lock_of(owner: object) -> Any:
    """The owner's ``checkpoint_lock`` (threaded actors set one), else a no-op context."""
    return owner.__dict__.get("checkpoint_lock") or contextlib.nullcontext()


def _gate_held(owner: object) -> bool:
    gate = owner.__dict__.get("_raychaos_gate")
    if gate is None or not gate.try_hold():
        return gate is not None
    gate.release()
    return False


def _run_to_end(coroutine: Any) -> Any:
    """Run a replayed async mutation to its end from synchronous code: on this thread when no
    event loop runs here, else on a thread of its own (this loop is blocked meanwhile)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


class RestartUnknown(CheckpointError):
    """``restore="auto"`` could not tell whether Ray restarted this actor, so it restored
    nothing and committed nothing: guessed as a first start, a restart would commit the
    initial state as the newest checkpoint. Pass ``restore="always"`` or ``"never"``."""


class StorageNotFresh(CheckpointError):
    """A first start under ``restore="auto"`` found committed checkpoints in its storage:
    starting fresh would bury them under the initial state, restoring would resume a run
    nobody asked for. Nothing was written. Pass ``restore="always"`` or ``"never"``."""


#: The fix both refusals of ``restore="auto"`` name.
CHOOSE_RESTORE = ('pass restore="always" to resume the storage\'s newest checkpoint, or '
                  'restore="never" to start fresh over it')


def _reconstructed() -> bool:
    """Whether Ray restarted the actor this code runs in.

    Outside Ray, and in a Ray process that is no actor (a driver, a task), nothing was
    restarted. Inside an actor the GCS answers; when it cannot (an error, no record of the
    actor) this raises instead of guessing "first start", which would commit the initial
    state over the newest checkpoint.

    Raises:
        RestartUnknown: inside an actor, the GCS gave no answer.
    """
    import ray

    if not ray.is_initialized():
        return False
    try:
        context = ray.get_runtime_context()
        actor_id = context.get_actor_id()
        if actor_id is None:  # a driver or a task: no actor to have been restarted
            return False
        with warnings.catch_warnings():  # Ray 2.60 warns about its own use of actor_id here
            warnings.simplefilter("ignore", DeprecationWarning)
            answer = context.was_current_actor_reconstructed
    except Exception as exc:  # any failure of the lookup is a doubt, never "first start"
        raise RestartUnknown(f"could not ask Ray whether this actor was restarted ({exc!r}); "
                             f"{CHOOSE_RESTORE}") from exc
    if not isinstance(answer, bool):  # Ray answers {} when the GCS has no record of the actor
        raise RestartUnknown(f"Ray answered {answer!r} for whether actor {actor_id} was restarted, "
                             f"not True or False; {CHOOSE_RESTORE}")
    return answer


@dataclass(frozen=True, slots=True)
class LoggedCall:
    """One write-ahead log record: a ``@mutation`` call, by its method's name, with its
    arguments (a state tree each: arrays, tensors, JSON values; never pickled)."""

    method: str
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]

    def encode(self) -> bytes:
        return _codec.encode({"m": self.method, "a": list(self.args), "k": dict(self.kwargs)})

    @staticmethod
    def decode(payload: bytes) -> LoggedCall:
        """The call in a log record's payload.

        Raises:
            CheckpointError: the payload is not a logged call (its fields or their types).
        """
        tree = _codec.decode(payload)
        if not isinstance(tree, dict):
            tree = {}
        method, args, kwargs = tree.get("m"), tree.get("a"), tree.get("k")
        if not (isinstance(method, str) and isinstance(args, list) and isinstance(kwargs, dict)):
            raise CheckpointError(f"a log record holds method {method!r}, args of type {type(args).__name__} "
                                  f"and kwargs of type {type(kwargs).__name__}: not a call this raychaos logged")
        return LoggedCall(method, tuple(args), kwargs)


#: Where a checkpoint of an actor with idempotent mutations keeps the writer table, and its own state.
_WRITERS, _STATE = "raychaos_writers", "raychaos_state"


def _has_idempotent(cls: type) -> bool:
    """Whether any method of ``cls``, as overrides resolve, is an idempotent mutation."""
    return any(getattr(inspect.getattr_static(cls, name), "__raychaos_idempotent__", False)
               for name in dir(cls))


class _Checkpointer:
    """Drives one actor's checkpoints and WAL; private to :class:`Checkpointable`."""

    def __init__(self, owner: Checkpointable, config: CheckpointConfig, clock: Callable[[], float]):
        self.owner, self.config, self.clock = owner, config, clock
        self.dedupe = _has_idempotent(type(owner))  # the writer table is saved with the state
        self.store = CheckpointStore(config.storage, keep=config.keep)
        if config.durability == "wal" and not self.store.is_local:
            raise InvalidConfig(
                f"WAL durability needs a POSIX filesystem, got storage {config.storage!r}; "
                "use a local or shared mounted directory, or durability='policy'"
            )
        self.fence = Fence(self.store.root) if config.fence and self.store.is_local else None
        self.writer: _wal.WalWriter | None = None
        self.since, self.records, self.count = 0, 0, 0
        self.last_seq, self.last_time, self.deltas = 0, clock(), 0
        self.restore_info = RestoreInfo(restored=False, seq=0, replayed=0, seconds=0.0)
        self.failed_checkpoints = 0
        self.diverged = ""  # why memory no longer matches the log, once it does not
        self.terminating, self.final_done, self.sigterm_pending = False, False, False
        self.previous_sigterm: Any = signal.SIG_DFL

    def start(self, restore: bool, *, over_old: bool) -> RestoreInfo:
        """Restore (``restore``) or commit the initial state; ``over_old``: a fresh start may
        bury the checkpoints already in the storage."""
        start = time.perf_counter()
        if not restore and not over_old:
            self._refuse_old_checkpoints()  # before the fence: a refused start supersedes nothing
        if self.fence is not None:
            # Then: from here on no older incarnation commits, so what is restored stays whole.
            self.fence.take()
        if not restore:
            self.checkpoint()
            return self.restore_info
        loaded = self._load_latest()
        if loaded is not None:
            self._load(loaded.seq, loaded.chain)
        failpoint(fp.RESTORE_LOADED)
        replayed, torn = self._replay() if self.config.durability == "wal" else (0, 0)
        skipped = loaded.skipped if loaded else tuple(self.store.seqs())  # none restored: all
        self.restore_info = RestoreInfo(restored=True, seq=self.last_seq, replayed=replayed,
                                        seconds=time.perf_counter() - start, skipped=skipped, torn_bytes=torn)
        return self.restore_info

    def _load_latest(self) -> LoadedCheckpoint | None:
        """The newest checkpoint that restores. Under the WAL one the storage cannot read is
        passed over when an older one restores and the log from it on is all there: replaying
        that log gives what the unreadable one held. Otherwise the restore stops."""
        try:
            return self.store.load_latest()
        except StorageUnreachable as exc:
            if self.config.durability != "wal":
                raise
            older = self.store.load_latest(skip_unreadable=True)
            if older is None or older.seq not in _wal.segment_seqs(self.store.root):
                raise
            warnings.warn(f"restoring checkpoint {older.seq} and the log after it, since {exc}",
                          CheckpointWarning, stacklevel=2)
            return older

    def _refuse_old_checkpoints(self) -> None:
        """A first start must not commit its initial state as the newest checkpoint over
        checkpoints already there: a restart Ray did not report, or a previous run's storage,
        would then lose what they hold without a word."""
        seqs = self.store.seqs()
        if seqs:
            raise StorageNotFresh(
                f"{type(self.owner).__name__} starts for the first time (no restart that Ray reports) but "
                f"its storage {self.config.storage!r} already holds checkpoints up to #{seqs[-1]}; "
                f"nothing was written: {CHOOSE_RESTORE}, or give the actor empty storage")

    def _load(self, seq: int, chain: Sequence[Mapping[str, Any]]) -> None:
        self.last_seq = seq
        self.owner.load_state_dict(self._unwrap(chain[0]))
        for delta in chain[1:]:
            self.owner.load_delta_state_dict(self._unwrap(delta))
        self.deltas = len(chain) - 1
        self.owner.mark_checkpointed()

    def _replay(self) -> tuple[int, int]:
        """Apply the log after the restored checkpoint; return records replayed, torn bytes dropped."""
        root = self.store.root
        replayed, torn = 0, 0
        segments = [s for s in _wal.segment_seqs(root) if s >= self.last_seq]
        for i, seq in enumerate(segments):
            path = f"{root}/{_wal.segment_name(seq)}"
            records, valid = _wal.read_segment(path)
            for payload in records:
                self._apply(LoggedCall.decode(payload))
                failpoint(fp.RESTORE_REPLAYED)
            replayed += len(records)
            torn = os.path.getsize(path) - valid
            if torn and i < len(segments) - 1:
                self.checkpoint()  # a tear mid-lineage: start a clean one from here
                return replayed, torn
        last = segments[-1] if segments else self.last_seq
        self._open_segment(last, valid_length=valid if segments else None)
        return replayed, torn

    def _apply(self, record: LoggedCall) -> None:
        method = getattr(getattr(type(self.owner), record.method, None), "__raychaos_mutation__", None)
        if method is None:
            raise CheckpointError(
                f"the log holds a call to {record.method!r}, which {type(self.owner).__name__} does not "
                "mark with @mutation; decorate it (an override too) or restore from fresh storage")
        self.owner.__dict__["_raychaos_depth"] = 1  # replaying: nested mutations log nothing
        try:
            result = method(self.owner, *record.args, **record.kwargs)
            if inspect.isawaitable(result):
                _run_to_end(result)
            _applied(self.owner, getattr(type(self.owner), record.method).__raychaos_idempotent__,
                     record.kwargs)
        finally:
            self.owner.__dict__["_raychaos_depth"] = 0

    def _open_segment(self, seq: int, *, valid_length: int | None = None) -> None:
        if self.writer is not None:
            self.writer.close()
        path = f"{self.store.root}/{_wal.segment_name(seq)}"
        self.writer = _wal.WalWriter(
            path,
            valid_length=valid_length,
            fsync_every=self.config.fsync_every,
            fsync_interval=self.config.fsync_interval,
            clock=self.clock,
        )

    def fenced(self) -> contextlib.AbstractContextManager[None]:
        """Hold the storage for a commit (refused once a later incarnation started)."""
        return self.fence.held() if self.fence is not None else contextlib.nullcontext()

    def refuse_if_stale(self) -> None:
        """Raise what a mutation would meet now: this incarnation superseded, or diverged."""
        if self.fence is not None and self.fence.refused:
            raise Superseded(self.fence.refused)
        if self.diverged:
            raise MutationNotLogged(self.diverged, undone=False)

    def after_mutation(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        with contextlib.ExitStack() as held:
            try:
                held.enter_context(self.fenced())  # a superseded incarnation acknowledges nothing
            except OSError as exc:  # the fence unreadable: the call cannot be committed, undo it
                self._undo(name, exc)
            self._after_mutation(name, args, kwargs)

    def _after_mutation(self, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        if self.diverged:
            raise MutationNotLogged(self.diverged, undone=False)
        if self.writer is not None:
            try:
                self.writer.append(LoggedCall(name, args, kwargs).encode())
            except Exception as exc:  # noqa: BLE001 - whatever stopped the record, undo the call
                self._undo(name, exc)
            self.records += 1
        self.since += 1
        if self._due():
            self._checkpoint_due(name)

    def checkpoint_on_sigterm(self) -> None:
        """Install the SIGTERM hook (see ``CheckpointConfig.checkpoint_on_sigterm``) now if this
        is the main thread, where Python runs signal handlers, else at the first mutation that
        runs there (Ray 2.60 runs ``__init__`` on another thread, a sync actor's methods on the
        main one): until then nothing was acknowledged that a checkpoint lacks."""
        self.sigterm_pending = True
        self.install_sigterm()

    def install_sigterm(self) -> None:
        if self.sigterm_pending and threading.current_thread() is threading.main_thread():
            self.sigterm_pending = False
            self.previous_sigterm = signal.getsignal(signal.SIGTERM)
            signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum: int, frame: Any) -> None:
        self.terminating = True
        if self.final_done or not (self.owner.__dict__.get("_raychaos_depth", 0) or _gate_held(self.owner)):
            self.final_checkpoint()
        # else a mutation is half done: it checkpoints once it is whole and logged (see _log)

    def final_checkpoint(self) -> None:
        """The checkpoint of a graceful stop, then the stop itself: SIGTERM again, to the
        handler that was there before (Ray's ends the worker)."""
        try:
            if not self.final_done:
                self.checkpoint()
                self.final_done = True
        finally:
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, self.previous_sigterm)
            os.kill(os.getpid(), signal.SIGTERM)  # from another thread: this handler, then that

    def _undo(self, name: str, exc: Exception) -> None:
        """The call ran but the log cannot replay it: restore the last logged state, so memory
        and log agree again, and fail the call (it was never acknowledged)."""
        root = self.store.root
        try:
            self._reload()
        except Exception as reload_exc:  # noqa: BLE001 - memory now holds what no log replays
            self.diverged = (f"{name}() could not be logged ({exc}) nor undone ({reload_exc}): the "
                             f"actor refuses mutations until it restarts from {root}")
            raise MutationNotLogged(self.diverged, undone=False) from exc
        raise MutationNotLogged(
            f"{name}() ran but its log record could not be written to {root} ({exc}); its effect "
            f"was undone (state back at checkpoint {self.last_seq} plus the log). Free space "
            "there, or fix the cause, and call it again", undone=True) from exc

    def _reload(self) -> None:
        loaded = self.store.load_latest()
        self.last_seq, self.deltas = 0, 0
        self.owner.__dict__["_raychaos_writers"] = WriterSeqs()  # the undone call's seq goes too
        if loaded is not None:
            self._load(loaded.seq, loaded.chain)
        self._replay()

    def _checkpoint_due(self, name: str) -> None:
        """A checkpoint the policy asks for after ``name``. With the WAL the call is already
        durable, so a failed checkpoint only waits for the next mutation (warned); without
        it the call's durability was this checkpoint, and the caller must hear it failed."""
        try:
            self.checkpoint()
        except CommittedNotSynced as exc:  # committed: a restart restores it; a power loss may not
            warnings.warn(f"checkpoint after {name}() committed, but not synced ({exc}): a power loss "
                          "may drop it", CheckpointRetried, stacklevel=3)
        except OSError as exc:
            if self.config.durability != "wal":
                raise CheckpointError(f"{name}() was applied but the checkpoint the policy takes "
                                      f"after it failed ({exc}): a crash before the next one "
                                      f"loses it. Free space under {self.store.root}") from exc
            self.failed_checkpoints += 1
            warnings.warn(f"checkpoint after {name}() failed ({exc}); the log holds the call and "
                          "the checkpoint is tried again after the next mutation",
                          CheckpointRetried, stacklevel=3)

    def _due(self) -> bool:
        if self.config.policy == "every_n":
            return self.since >= self.config.every_n
        if self.config.policy == "every_seconds":
            return self.clock() - self.last_time >= self.config.every_seconds
        return False

    def checkpoint(self, *, full: bool = False) -> CheckpointInfo:
        # No mutation may slip between the snapshot and the log rotation, and no newer
        # incarnation may have started: its checkpoints are not to be written over.
        with _lock_of(self.owner), self.fenced():
            return self._checkpoint(full=full)

    def _checkpoint(self, *, full: bool) -> CheckpointInfo:
        delta = None
        if self.config.incremental and not full and self.last_seq and \
                self.deltas < self.config.full_every - 1:
            delta = self.owner.delta_state_dict()
        try:
            info = self.store.save(self._wrap(self.owner.state_dict() if delta is None else delta),
                                   parent=None if delta is None else self.last_seq)
        except CommittedNotSynced as exc:
            # Renamed into place, so a restart restores it: the log must roll to it all the
            # same, or what is acknowledged next lands in a segment that restore skips.
            self._committed(exc.info)
            raise
        return self._committed(info)

    def _committed(self, info: CheckpointInfo) -> CheckpointInfo:
        self.deltas = 0 if info.parent is None else self.deltas + 1
        self.owner.mark_checkpointed()
        self.last_seq, self.last_time, self.since = info.seq, self.clock(), 0
        self.count += 1
        if self.config.durability == "wal":
            failpoint(fp.WAL_ROLL)
            self._open_segment(info.seq)
            failpoint(fp.WAL_ROLLED)
            self._prune_segments()
        return info

    def _wrap(self, tree: StateTree) -> StateTree:
        """The tree saved: the actor's own, with the writer table beside it when the actor has
        idempotent mutations (whole in every checkpoint and delta: it is small)."""
        if not self.dedupe:
            return tree
        return {_WRITERS: _writers(self.owner).state_dict(), _STATE: tree}

    def _unwrap(self, tree: Mapping[str, Any]) -> Any:
        """The actor's own tree of a saved one, restoring the writer table it carries (a
        checkpoint saved before the actor had idempotent mutations carries none)."""
        if not (_WRITERS in tree and _STATE in tree):
            return tree
        _writers(self.owner).load_state_dict(tree[_WRITERS])
        return tree[_STATE]

    def _prune_segments(self) -> None:
        seqs = self.store.seqs()
        oldest = seqs[0] if seqs else 0
        for seq in _wal.segment_seqs(self.store.root):
            if seq < oldest:
                os.remove(f"{self.store.root}/{_wal.segment_name(seq)}")

    def stats(self) -> CheckpointStats:
        repeats = _writers(self.owner).duplicates if self.dedupe else 0
        return CheckpointStats(checkpoints=self.count, last_seq=self.last_seq, mutations_since_checkpoint=self.since,
                               wal_records=self.records, restore=self.restore_info, repeats=repeats)
