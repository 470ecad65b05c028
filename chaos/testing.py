"""Model-based chaos tests for checkpointed actors: subclass :class:`ActorChaosMachine`.

A Hypothesis ``RuleBasedStateMachine`` whose steps are your actor's operations plus
``checkpoint``, ``kill`` (SIGKILL through the chaos engine; ``just_saved=True`` right after
a checkpoint), ``pause`` (a straggler) and, when you say how to send a call without waiting
(:meth:`ActorChaosMachine.in_flight`), ``kill_in_flight``: a SIGKILL while a window of calls is
on its way, where a call applied but not yet acknowledged is lost or applied twice.
It keeps an in-process model next to the real actor and checks, after every fault, that
the actor equals the model: in ``"wal"`` durability exactly; in ``"policy"`` durability
as of the last checkpoint (exactly the unsaved suffix lost, nothing else). After
``max_restarts + 1`` kills every call must raise ``ActorDiedError`` within a bound. When a
property breaks, Hypothesis shrinks the sequence of operations *and faults* to the
shortest that breaks it.

Every fault step waits (with a deadline) for its effect — the process gone and the
restart done — before the next step, so a replayed schedule reproduces its outcome.

Bounded by default: a subclass runs :data:`chaos._profiles.MACHINE_DEPTH` examples and steps of
the raychaos profile in force (``ci``: 5 examples of 10 steps; ``thorough``: 50 of 30), chosen
with ``pytest --chaos-profile=thorough`` (or ``--hypothesis-profile=thorough``), the
``RAYCHAOS_PROFILE`` environment variable or the ``raychaos_profile`` ini option. Settings you
give (``@settings(...)`` on the class, or ``run_state_machine_as_test(M, settings=...)``) win.

Example (the README's, run by the tests)::

    class CounterMachine(ActorChaosMachine):
        def create(self, storage):
            return self.remote(CheckpointedCounter, storage, durability=self.durability,
                               policy="on_demand")

        def observe(self, actor):
            return self.call(actor.get.remote())

        @rule(k=st.integers(1, 5))
        def add(self, k):
            self.call(self.actor.add.remote(k))
            self.model += k
"""

from __future__ import annotations

import copy
import tempfile
import threading
from collections.abc import Callable
from typing import Any, ClassVar

from hypothesis import stateful
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from chaos import _suite
from chaos._profiles import MACHINE_DEPTH, machine_settings, register_profiles
from chaos._ray_state import short

__all__ = ["ActorChaosMachine"]


register_profiles()


def _alive(machine: ActorChaosMachine) -> bool:
    return not machine.dead


def _can_fly(machine: ActorChaosMachine) -> bool:
    """An in-flight kill needs calls to send, logged acknowledgements (the model is then exact)
    and a restart left (every call in flight must be acknowledged after it)."""
    return (not machine.dead and machine.durability == "wal" and machine.restarts_left() > 0
            and type(machine).in_flight is not ActorChaosMachine.in_flight)


class ActorChaosMachine(RuleBasedStateMachine):
    """Base machine; see the module docstring. Class attributes configure it:

    Attributes:
        durability: ``"policy"`` or ``"wal"``, passed on by :meth:`create`.
        max_restarts: the actor's ``max_restarts`` (used by :meth:`remote`); -1: without limit.
        call_timeout: the bound on every call, and on "dies within a bound".
        initial_model: the model's starting value (deep-copied per example).
    """

    durability: ClassVar[str] = "wal"
    max_restarts: ClassVar[int] = 2
    call_timeout: ClassVar[float] = 30.0
    initial_model: ClassVar[Any] = 0
    #: How many steps each failing example had, in the order Hypothesis ran them: the first
    #: is what the search found, the last the shrunk one it reports. Each subclass has its own.
    failing_lengths: ClassVar[list[int]] = []
    #: The raychaos profile this class's default settings came from (``ci`` or ``thorough``).
    profile: ClassVar[str] = "ci"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # The user's rules need the actor alive: once it is dead for good (the property
        # after max_restarts + 1 kills has been checked) only that property remains.
        super().__init_subclass__(**kwargs)
        cls.failing_lengths = []
        cls.profile = _suite.MACHINE_PROFILE
        cls.TestCase.settings = machine_settings(cls.profile)  # bounded; @settings on the class wins
        marker = stateful.RULE_MARKER
        for name, value in list(vars(cls).items()):
            if getattr(value, marker, None) is not None:
                setattr(cls, name, precondition(_alive)(value))

    def __init__(self) -> None:
        import ray

        from chaos._engine import Chaos

        super().__init__()
        self._dir = tempfile.TemporaryDirectory(prefix="raychaos-machine-")
        self.chaos = Chaos(address=ray.get_runtime_context().gcs_address)
        self.model = copy.deepcopy(self.initial_model)
        self.saved = copy.deepcopy(self.model)
        self.kills, self.dead, self._checks = 0, False, 0
        self.actor = self.create(f"{self._dir.name}/ckpt")
        self.observe(self.actor)  # wait until it is up

    # -- to override -----------------------------------------------------------------------

    def create(self, storage: str) -> Any:
        """Start the actor under test with checkpoints at ``storage`` (on-demand policy)."""
        raise NotImplementedError

    def observe(self, actor: Any) -> Any:
        """The actor's observable state, comparable with :meth:`expected`."""
        raise NotImplementedError

    def expected(self, model: Any) -> Any:
        """What :meth:`observe` must return for ``model`` (default: the model itself)."""
        return model

    def in_flight(self, actor: Any) -> tuple[Any, Callable[[Any], Any]]:
        """One mutation sent without waiting for it, for ``kill_in_flight``: its ObjectRef and
        what it does to the model once acknowledged. Called from a thread while the kill runs;
        Ray may run retried calls in another order, so these calls should commute. Not
        overridden: the machine never kills with calls in flight."""
        raise NotImplementedError

    # -- helpers ---------------------------------------------------------------------------

    def restarts_left(self) -> float:
        """How many more kills the actor restarts from (infinite with ``max_restarts=-1``)."""
        return float("inf") if self.max_restarts < 0 else self.max_restarts - self.kills

    def remote(self, cls: type, *args: Any, **kwargs: Any) -> Any:
        """``cls`` as a restartable actor (``max_task_retries=-1``), started with these args."""
        import ray

        options = {"max_restarts": self.max_restarts, "max_task_retries": -1}
        return ray.remote(**options)(cls).remote(*args, **kwargs)

    def call(self, ref: Any) -> Any:
        import ray

        return ray.get(ref, timeout=self.call_timeout)

    # -- fault rules -----------------------------------------------------------------------

    @precondition(_alive)
    @rule()
    def checkpoint(self) -> None:
        self.call(self.actor.checkpoint.remote())
        self.saved = copy.deepcopy(self.model)

    @precondition(_alive)
    @rule(just_saved=st.booleans())
    def kill(self, just_saved: bool = False) -> None:
        """SIGKILL the actor and wait for its restart. ``just_saved``: right after a
        checkpoint, when the restore alone decides what comes back (one step, not two, so
        the shrinker reaches it quickly)."""
        self.crash(just_saved=just_saved)

    def crash(self, *, just_saved: bool = False) -> None:
        """The kill rule's work, for your own rules too (a reply lost to a crash at an exact
        point): SIGKILL, confirmed, then the restart awaited (or ActorDiedError checked)."""
        from chaos._process_faults import Kill
        from chaos._targets import ActorTarget

        if just_saved:
            self.checkpoint()
        injection = self.chaos.kill(Kill(ActorTarget.of(self.actor)))
        self.kills += 1
        if self.restarts_left() < 0:
            self._expect_dead()
            return
        self.chaos.wait_restarted(injection.processes[0], timeout=self.call_timeout)
        if self.durability == "policy":
            self.model = copy.deepcopy(self.saved)  # exactly the unsaved suffix is lost

    @precondition(_can_fly)
    @rule(window=st.integers(4, 32))
    def kill_in_flight(self, window: int) -> None:
        """SIGKILL the actor while ``window`` calls of :meth:`in_flight` are on their way (a
        thread keeps the window full until the restart); then every call sent must be
        acknowledged, and the model takes each."""
        with _Pump(lambda: self.in_flight(self.actor), window=window, timeout=self.call_timeout) as pump:
            pump.started()
            self.crash()
        for ref, update in pump.sent:
            self.call(ref)
            self.model = update(self.model)

    @precondition(_alive)
    @rule(seconds=st.sampled_from([0.1, 0.3]))
    def pause(self, seconds: float) -> None:
        from chaos._process_faults import Pause
        from chaos._targets import ActorTarget

        with self.chaos.inject(Pause(ActorTarget.of(self.actor), seconds=seconds)):
            pending = self.observe_ref()
        if pending is not None:
            self.call(pending)  # the straggler answers once resumed

    @precondition(lambda self: self.dead)
    @rule()
    def stays_dead(self) -> None:
        """Every call on an actor killed past ``max_restarts`` fails fast with ActorDiedError."""
        from ray.exceptions import ActorDiedError

        try:
            self.observe(self.actor)
        except ActorDiedError:
            return
        raise AssertionError(f"a call succeeded after {self.kills} kills with max_restarts="
                             f"{self.max_restarts}; expected ActorDiedError")

    def observe_ref(self) -> Any:
        """An ObjectRef of a read issued while paused (None: skip); override to exercise it."""
        return None

    def _expect_dead(self) -> None:
        import ray
        from ray.exceptions import ActorDiedError

        from chaos._wait import wait_until

        def died() -> bool:
            try:
                self.observe(self.actor)
            except ActorDiedError:
                return True
            except ray.exceptions.RayActorError:
                return False
            return False

        wait_until(died, timeout=self.call_timeout, what="ActorDiedError after max_restarts + 1 kills")
        self.dead = True

    # -- the property ----------------------------------------------------------------------

    @invariant()
    def matches_the_model(self) -> None:
        self._checks += 1  # once before the first step, then after each step
        if not self.dead:
            got, want = self.observe(self.actor), self.expected(self.model)
            if got != want:
                type(self).failing_lengths.append(self._checks - 1)
                error = AssertionError(
                    f"actor state {got!r} != model {want!r} after {self.kills} kill(s)")
                error.add_note(self.journal_snippet())
                error.add_note(self.depth_note())
                raise error

    def depth_note(self) -> str:
        """Which settings searched, and how to search deeper."""
        examples, steps = MACHINE_DEPTH[self.profile]
        deeper = "" if self.profile == "thorough" else \
            f"; pytest --chaos-profile=thorough searches {MACHINE_DEPTH['thorough'][0]} examples"
        return (f"{type(self).__name__} runs, unless given settings of its own, raychaos's {self.profile!r} "
                f"profile: {examples} examples of up to {steps} steps{deeper}")

    def journal_snippet(self) -> str:
        """This example's faults as journal lines, replayable with ``Schedule.from_journal``."""
        from chaos._journal import dump_event

        lines = [dump_event(e) for e in self.chaos.journal.events]
        return "raychaos journal of this example (replay with Schedule.from_journal):\n" + \
            "\n".join(lines)

    def teardown(self) -> None:
        import ray

        from chaos._wait import wait_until

        self.chaos.heal_all()
        actor_id = self.actor._actor_id.hex()
        try:
            self._check_restarts(actor_id)
        finally:
            ray.kill(self.actor)
            # Wait until it is really gone, so examples never overlap (and replays are alike).
            wait_until(lambda: self._actor_row(actor_id, "state", "DEAD") == "DEAD",
                       timeout=self.call_timeout, what=f"actor {short(actor_id)} to be dead after the example")
            self._dir.cleanup()

    def _actor_row(self, actor_id: str, field: str, missing: Any) -> Any:
        from ray.util.state import get_actor

        return getattr(get_actor(actor_id, address=self.chaos.address, timeout=10), field, missing)

    def _check_restarts(self, actor_id: str) -> None:
        """The actor restarted exactly as often as this machine killed it (up to its
        ``max_restarts``): a restart nobody asked for (another test's fault, the OOM killer)
        would let a wrong model pass or fail for the wrong reason."""
        expected = self.kills if self.max_restarts < 0 else min(self.kills, self.max_restarts)
        restarts = self._actor_row(actor_id, "num_restarts", None)
        if restarts is not None and int(restarts) != expected:
            raise AssertionError(f"actor {short(actor_id)} restarted {restarts} time(s) but this machine killed it "
                                 f"{self.kills} time(s) (max_restarts={self.max_restarts}): something else "
                                 "killed it during the example")


class _Pump:
    """A thread that keeps ``window`` calls in flight until the block ends (bounded: it stops
    within one wait of the block's end); ``sent`` holds every call it sent, in order."""

    def __init__(self, send: Callable[[], tuple[Any, Callable[[Any], Any]]], *, window: int,
                 timeout: float) -> None:
        self.send, self.window, self.timeout = send, window, timeout
        self.sent: list[tuple[Any, Callable[[Any], Any]]] = []
        self.error: BaseException | None = None
        self._stop, self._first = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, name="raychaos-in-flight", daemon=True)

    def __enter__(self) -> _Pump:
        self._thread.start()
        return self

    def started(self) -> None:
        """Wait until the first call was answered: the actor is busy with the window now."""
        if not self._first.wait(self.timeout):
            raise AssertionError(f"no call of the in-flight window was answered within {self.timeout:g} s")
        if self.error is not None:
            raise self.error

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(self.timeout)
        if self._thread.is_alive() and exc[0] is None:  # else the block's own error is the one to show
            raise AssertionError(f"the in-flight window's thread did not stop within {self.timeout:g} s")
        if self.error is not None and exc[0] is None:
            raise self.error

    def _run(self) -> None:
        import ray

        pending: list[Any] = []
        try:
            while not self._stop.is_set():
                while len(pending) < self.window:
                    ref, update = self.send()
                    self.sent.append((ref, update))
                    pending.append(ref)
                done, pending = ray.wait(pending, num_returns=1, timeout=0.5)
                if done:
                    self._first.set()
        except BaseException as exc:  # noqa: BLE001 - raised on the machine's thread instead
            self.error = exc
            self._first.set()
