"""Model-based chaos tests for checkpointed actors: subclass :class:`ActorChaosMachine`.

A Hypothesis ``RuleBasedStateMachine`` whose steps are your actor's operations plus
``checkpoint``, ``kill`` (SIGKILL through the chaos engine; ``just_saved=True`` right after
a checkpoint) and ``pause`` (a straggler).
It keeps an in-process model next to the real actor and checks, after every fault, that
the actor equals the model: in ``"wal"`` durability exactly; in ``"policy"`` durability
as of the last checkpoint (exactly the unsaved suffix lost, nothing else). After
``max_restarts + 1`` kills every call must raise ``ActorDiedError`` within a bound. When a
property breaks, Hypothesis shrinks the sequence of operations *and faults* to the
shortest that breaks it.

Every fault step waits (with a deadline) for its effect — the process gone and the
restart done — before the next step, so a replayed schedule reproduces its outcome.

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
from typing import Any, ClassVar

from hypothesis import stateful
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from chaos._ray_state import short

__all__ = ["ActorChaosMachine"]


def _alive(machine: ActorChaosMachine) -> bool:
    return not machine.dead


class ActorChaosMachine(RuleBasedStateMachine):
    """Base machine; see the module docstring. Class attributes configure it:

    Attributes:
        durability: ``"policy"`` or ``"wal"``, passed on by :meth:`create`.
        max_restarts: the actor's ``max_restarts`` (used by :meth:`remote`).
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

    def __init_subclass__(cls, **kwargs: Any) -> None:
        # The user's rules need the actor alive: once it is dead for good (the property
        # after max_restarts + 1 kills has been checked) only that property remains.
        super().__init_subclass__(**kwargs)
        cls.failing_lengths = []
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

    # -- helpers ---------------------------------------------------------------------------

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
        if self.kills > self.max_restarts:
            self._expect_dead()
            return
        self.chaos.wait_restarted(injection.processes[0], timeout=self.call_timeout)
        if self.durability == "policy":
            self.model = copy.deepcopy(self.saved)  # exactly the unsaved suffix is lost

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
                raise error

    def journal_snippet(self) -> str:
        """This example's faults as journal lines, replayable with ``Schedule.from_journal``."""
        from chaos._journal import dump_event

        lines = [dump_event(e) for e in self.chaos.journal.events]
        return "raychaos journal of this example (replay with Schedule.from_journal):\n" + \
            "\n".join(lines)

    def teardown(self) -> None:
        import ray
        from ray.util.state import get_actor

        from chaos._wait import wait_until

        self.chaos.heal_all()
        ray.kill(self.actor)
        # Wait until it is really gone, so examples never overlap (and replays are alike).
        actor_id = self.actor._actor_id.hex()
        wait_until(lambda: getattr(get_actor(actor_id, address=self.chaos.address, timeout=10),
                                   "state", "DEAD") == "DEAD",
                   timeout=self.call_timeout, what=f"actor {short(actor_id)} to be dead after the example")
        self._dir.cleanup()
