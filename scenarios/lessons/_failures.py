"""The failure-mode lessons: each mistake and its fix run side by side under a fault (a SIGKILL,
a SIGSTOP, a transient error, a driver's exit) and measured in what was lost, applied twice or
left hanging. These are raychaos's own, not the chapter's: its section is ``failure``.

Every figure is a count or a bounded time measured in the run; the faults are real signals to
real Ray processes, always healed (a stopped process is continued in ``finally``).
"""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chaos import HangError, wait_until
from chaos.errors import FaultIneffective
from scenarios.lessons._kit import TIMEOUT, Result, remote
from scenarios.lessons._model import Lesson, Measure, lesson

SECTION = "failure"
CALLS = 10


def _here() -> dict[str, Any]:
    """Options that keep a task or actor on the driver's node: the lesson signals its process by
    pid, which names that process only on this machine (and its files are this machine's)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(),
                                                                  soft=False)}


class _Counter:
    def __init__(self) -> None:
        self.value = 0

    def add(self, n: int, pause: float = 0.0) -> int:
        time.sleep(pause)  # the call's work
        self.value += n
        return self.value

    def pid(self) -> int:
        return os.getpid()


def _sigkill(actor: Any) -> int:
    import ray

    pid = int(ray.get(actor.pid.remote(), timeout=TIMEOUT))
    os.kill(pid, signal.SIGKILL)
    return pid


def _failed(refs: list[Any]) -> int:
    """How many of these calls raised (an actor error, a timeout) instead of answering."""
    import ray

    failed = 0
    for ref in refs:
        try:
            ray.get(ref, timeout=TIMEOUT)
        except (ray.exceptions.RayError, TimeoutError):
            failed += 1
    return failed


def _calls_after_a_kill(**options: Any) -> int:
    import ray

    actor = remote(_Counter, num_cpus=0, **_here(), **options).remote()
    try:
        _sigkill(actor)
        return _failed([actor.add.remote(1) for _ in range(CALLS)])
    finally:
        ray.kill(actor)


@lesson(id="18-actor-without-restarts", section=SECTION, title="An actor that is not told to restart",
        mistake="an actor with Ray's defaults (max_restarts=0), SIGKILLed once",
        fix="max_restarts=-1, max_task_retries=-1: Ray restarts it and resends the calls",
        why="By default an actor that dies stays dead: every later call raises ActorDiedError. "
            "max_restarts brings the process back; max_task_retries resends the calls that hit the gap.")
def actor_without_restarts(address: str) -> Result:
    mistake = _calls_after_a_kill()
    fix = _calls_after_a_kill(max_restarts=-1, max_task_retries=-1)
    return [Measure(what="calls failed after one SIGKILL", unit=f"of {CALLS}", mistake=mistake, fix=fix)], []


def _calls_in_flight_at_a_kill(**options: Any) -> int:
    import ray

    actor = remote(_Counter, num_cpus=0, max_restarts=-1, **_here(), **options).remote()
    try:
        pid = int(ray.get(actor.pid.remote(), timeout=TIMEOUT))  # asked first: a call runs after those before it
        refs = [actor.add.remote(1, 0.2) for _ in range(CALLS + 1)]
        ray.get(refs[0], timeout=TIMEOUT)  # the first answered: the other ten are queued or running
        os.kill(pid, signal.SIGKILL)
        return _failed(refs[1:])
    finally:
        ray.kill(actor)


@lesson(id="19-calls-in-flight", section=SECTION, title="Restarts without task retries",
        mistake="max_restarts=-1 alone: SIGKILL while ten calls are queued",
        fix="max_restarts=-1 with max_task_retries=-1",
        why="max_restarts brings the actor back, but the calls it had queued or running when it died fail "
            "with it unless max_task_retries lets Ray resend them to the new process.")
def calls_in_flight(address: str) -> Result:
    mistake = _calls_in_flight_at_a_kill()
    fix = _calls_in_flight_at_a_kill(max_task_retries=-1)
    return [Measure(what="calls in flight failed", unit=f"of {CALLS}", mistake=mistake, fix=fix)], []


def _flaky(marker: str) -> int:
    """Fails its first attempt with a transient error (the dependency it calls blinked)."""
    path = Path(marker)
    if not path.exists():
        path.touch()
        raise ConnectionError("the store it reads was briefly unreachable")
    return 1


def _tasks_failed(root: Path, label: str, **options: Any) -> int:
    task = remote(_flaky, max_retries=3, **_here(), **options)
    return _failed([task.remote(str(root / f"{label}-{i}")) for i in range(5)])


@lesson(id="20-exceptions-not-retried", section=SECTION, title="Retries cover crashes, not exceptions",
        mistake="max_retries=3 and a transient ConnectionError in each task's first attempt",
        fix="retry_exceptions=[ConnectionError] beside max_retries",
        why="max_retries resends a task whose worker died; an exception the task raised is its answer "
            "and reaches ray.get at once. Name the transient exceptions in retry_exceptions.")
def exceptions_not_retried(address: str) -> Result:
    with tempfile.TemporaryDirectory(prefix="raychaos-lesson-") as tmp:
        root = Path(tmp)
        mistake = _tasks_failed(root, "mistake")
        fix = _tasks_failed(root, "fix", retry_exceptions=[ConnectionError])
    return [Measure(what="tasks failed", unit="of 5", mistake=mistake, fix=fix)], []


def _until_killed(stem: str) -> None:
    """Where an attempt is killed: it writes its pid and waits for the lesson's mark, which the
    lesson writes only after its SIGKILL, so the first attempt never passes; the retry finds it."""
    Path(f"{stem}.pid").write_text(str(os.getpid()), encoding="utf-8")
    try:
        wait_until(Path(f"{stem}.killed").exists, timeout=TIMEOUT, what="the lesson's kill")
    except HangError:
        return  # never killed: the lesson sees no second attempt and says so


def _append(path: Path, key: str, *, idempotent: bool) -> list[str]:
    """The side effect: ``key`` appended to the file (skipped, when idempotent, if already there);
    returns the keys that were there before."""
    keys = path.read_text(encoding="utf-8").split() if path.exists() else []
    if not (idempotent and key in keys):
        with path.open("a", encoding="utf-8") as out:
            out.write(f"{key}\n")
    return keys


def _charge(ledger: str, key: str, *, idempotent: bool) -> int:
    """Appends a charge to the ledger (the side effect), then works on (and is killed there)."""
    _append(Path(ledger), key, idempotent=idempotent)
    _until_killed(f"{ledger}.{key}")
    return 1


def _written(path: Path) -> str | None:
    return path.read_text(encoding="utf-8") if path.exists() else None


def _kill_attempt(stem: str) -> int:
    """SIGKILL the attempt waiting at ``stem`` (see :func:`_until_killed`), then let its retry pass."""
    pid_file = Path(f"{stem}.pid")
    pid = int(wait_until(lambda: _written(pid_file), timeout=TIMEOUT, what=f"{pid_file.name} to be written"))
    pid_file.unlink()
    os.kill(pid, signal.SIGKILL)
    Path(f"{stem}.killed").touch()
    return pid


def _retried(stem: str, killed: int) -> None:
    """The retry ran: a second attempt, in another process, wrote its pid. Without one the fault
    did not do what the lesson counts on, and no figure is given."""
    again = _written(Path(f"{stem}.pid"))
    if not again or int(again) == killed:
        raise FaultIneffective(f"{Path(stem).name}: no second attempt after the SIGKILL of {killed}: the lesson "
                               "measured nothing; run it again")


def _each_killed_once(path: Path, submit: Callable[[str], Any]) -> int:
    """Three effects (``submit(key)``), each one's attempt SIGKILLed after its write and retried;
    how many of the three the file holds twice."""
    import ray

    for key in ("a", "b", "c"):
        ref = submit(key)
        killed = _kill_attempt(f"{path}.{key}")
        ray.get(ref, timeout=TIMEOUT)  # the retry's answer
        _retried(f"{path}.{key}", killed)
    keys = path.read_text(encoding="utf-8").split()
    return sum(1 for key in set(keys) if keys.count(key) > 1)


def _applied_twice(ledger: Path, *, idempotent: bool) -> int:
    task = remote(_charge, max_retries=3, **_here())
    return _each_killed_once(ledger, lambda key: task.remote(str(ledger), key, idempotent=idempotent))


@lesson(id="21-side-effect-twice", section=SECTION, title="A retried task repeats its side effect",
        mistake="a task (max_retries=3) that appends a charge, its worker SIGKILLed after the append",
        fix="the same task, idempotent: it skips a charge whose key is already in the ledger",
        why="Ray retries a task from the start: whatever the killed attempt did outside Ray is done "
            "again. Make side effects idempotent (a key per effect, checked before writing).")
def side_effect_twice(address: str) -> Result:
    with tempfile.TemporaryDirectory(prefix="raychaos-lesson-") as tmp:
        mistake = _applied_twice(Path(tmp) / "mistake.ledger", idempotent=False)
        fix = _applied_twice(Path(tmp) / "fix.ledger", idempotent=True)
    return [Measure(what="charges applied twice", unit="of 3", mistake=mistake, fix=fix)], []


class _Account:
    """Keeps its deposits in a file, so a restart has them; each deposit named by a key."""

    def __init__(self, log: str, idempotent: bool) -> None:
        self.log, self.idempotent = Path(log), idempotent

    def deposit(self, key: str) -> int:
        keys = _append(self.log, key, idempotent=self.idempotent)
        _until_killed(f"{self.log}.{key}")  # before the reply: the actor is killed here
        return len(keys) + 1

    def pid(self) -> int:
        return os.getpid()


def _deposited_twice(log: Path, *, idempotent: bool) -> int:
    import ray

    account = remote(_Account, num_cpus=0, max_restarts=-1, max_task_retries=-1, **_here()).remote(
        str(log), idempotent)
    try:
        return _each_killed_once(log, account.deposit.remote)
    finally:
        ray.kill(account)


@lesson(id="22-method-applied-twice", section=SECTION, title="A resent actor call applied twice",
        mistake="deposit() on a durable actor with max_task_retries=-1, SIGKILLed after the write",
        fix="deposit(key) that skips a key it already holds",
        why="A call whose reply was lost with the actor is resent to the restarted actor: with state that "
            "survives the restart, the effect is applied again. Name each call and ignore repeats.")
def method_applied_twice(address: str) -> Result:
    with tempfile.TemporaryDirectory(prefix="raychaos-lesson-") as tmp:
        mistake = _deposited_twice(Path(tmp) / "mistake.log", idempotent=False)
        fix = _deposited_twice(Path(tmp) / "fix.log", idempotent=True)
    return [Measure(what="deposits applied twice", unit="of 3", mistake=mistake, fix=fix)], []


#: How long the lesson lets the mistake's get block before calling it stuck.
STUCK = 8.0


def _blocked(get: Callable[[], Any]) -> float:
    """Seconds ``get`` kept this driver waiting, observed for at most ``STUCK`` seconds."""
    start, done = time.monotonic(), threading.Event()

    def call() -> None:
        try:
            get()
        except Exception:  # noqa: BLE001 - a timeout is the fix's way out; any end counts
            pass
        finally:
            done.set()

    threading.Thread(target=call, daemon=True, name="lesson-get").start()
    return STUCK if not done.wait(timeout=STUCK) else time.monotonic() - start


def _frozen_wait(*, timeout: float | None) -> float:
    import ray

    actor = remote(_Counter, num_cpus=0, **_here()).remote()
    try:
        pid = int(ray.get(actor.pid.remote(), timeout=TIMEOUT))
        os.kill(pid, signal.SIGSTOP)
        try:
            ref = actor.add.remote(1)
            return _blocked(lambda: ray.get(ref, timeout=timeout))
        finally:
            os.kill(pid, signal.SIGCONT)  # healed whatever happened
    finally:
        ray.kill(actor)


@lesson(id="23-get-without-timeout", section=SECTION, title="ray.get with no timeout on a frozen actor",
        mistake=f"ray.get(call) with no timeout, the actor's process SIGSTOPped (cut at {STUCK:g} s here)",
        fix="ray.get(call, timeout=2): GetTimeoutError, and the driver goes on",
        why="A frozen process is not a dead one: Ray sees its worker connected and raises nothing, so a get "
            "without a timeout waits as long as the freeze lasts. A timeout turns the hang into an error.")
def get_without_timeout(address: str) -> Result:
    mistake = _frozen_wait(timeout=None)
    fix = _frozen_wait(timeout=2.0)
    note = f"the mistake's get was still waiting when the lesson stopped watching it at {STUCK:g} s"
    return ([Measure(what="driver blocked", unit="s", mistake=mistake, fix=fix, margin=3.0)],
            [note] if mistake >= STUCK else [])


class _Producer:
    def make(self, wrapped: bool) -> Any:
        import ray

        value = b"x" * 200_000  # past Ray's inline limit: it lives in the object store
        return [ray.put(value)] if wrapped else value

    def pid(self) -> int:
        return os.getpid()


#: How long after the owner's death a value may still be read: a copy in this node's store serves
#: a get until the raylet frees it (about a second here).
SURFACE = 8.0


def _raises(ref: Any) -> bool:
    import ray

    try:
        ray.get(ref, timeout=5.0)
    except (ray.exceptions.RayError, TimeoutError):
        return True
    return False


def _lost_with_owner(*, wrapped: bool) -> int:
    """Of five values made by an actor, how many no get could read ``SURFACE`` s after its death."""
    import ray

    producer = remote(_Producer, num_cpus=0, **_here()).remote()
    try:
        made = [producer.make.remote(wrapped) for _ in range(5)]
        refs = [ray.get(ref, timeout=TIMEOUT)[0] for ref in made] if wrapped else made
        ray.wait(refs, num_returns=len(refs), timeout=TIMEOUT)
        _sigkill(producer)
    finally:
        ray.kill(producer)
    return _unreadable(refs, deadline=time.monotonic() + SURFACE)


def _unreadable(refs: list[Any], *, deadline: float) -> int:
    """How many of ``refs`` a get could not read by ``deadline`` (each asked until it raises)."""
    lost = 0
    for ref in refs:
        try:
            wait_until(functools.partial(_raises, ref), timeout=max(0.1, deadline - time.monotonic()), interval=0.2,
                       what="a get of the dead owner's object to raise")
            lost += 1
        except HangError:
            continue  # still read at the deadline: not lost
    return lost


@lesson(id="24-owner-died", section=SECTION, title="An object whose owner dies",
        mistake="an actor that ray.put()s a value and hands out the ref; the actor SIGKILLed",
        fix="the actor returns the value: the caller owns the result",
        why="Whoever calls ray.put owns the object, and an object dies with its owner (OwnerDiedError), "
            "wherever its copies are. Return values from tasks and calls, so the caller owns them.")
def owner_died(address: str) -> Result:
    mistake = _lost_with_owner(wrapped=True)
    fix = _lost_with_owner(wrapped=False)
    return [Measure(what="values lost", unit="of 5", mistake=mistake, fix=fix)], []


_DRIVER = textwrap.dedent("""\
    import sys
    import ray

    address, namespace, name, detached = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == "1"
    ray.init(address=address, namespace=namespace, log_to_driver=False)

    @ray.remote(num_cpus=0)
    class Cache:
        def ping(self):
            return True

    cache = Cache.options(name=name, lifetime="detached" if detached else None).remote()
    ray.get(cache.ping.remote(), timeout=60)
""")


def _alive_after_driver(address: str, *, detached: bool, grace: float) -> tuple[int, float]:
    """Starts a driver that makes a named actor and exits; whether the actor is alive ``grace``
    seconds after (or once seen dead), and how long that took. The actor is killed in the end,
    whatever happened: the lesson leaves nothing behind."""
    namespace, name = f"lesson-{uuid.uuid4().hex[:8]}", "cache"
    try:
        subprocess.run([sys.executable, "-c", _DRIVER, address, namespace, name, "1" if detached else "0"],
                       check=True, timeout=120, capture_output=True)
        start = time.monotonic()
        try:
            wait_until(functools.partial(_all_dead, address, namespace), timeout=grace, interval=0.2,
                       what="the actor to end with its driver")
            return 0, time.monotonic() - start
        except HangError:
            return 1, time.monotonic() - start
    finally:
        _kill_named(name, namespace)


def _all_dead(address: str, namespace: str) -> bool:
    from ray.util.state import list_actors

    rows = list_actors(address=address, filters=[("ray_namespace", "=", namespace)], timeout=TIMEOUT)
    return bool(rows) and all(r.state == "DEAD" for r in rows)


def _kill_named(name: str, namespace: str) -> None:
    import ray

    try:
        ray.kill(ray.get_actor(name, namespace=namespace))
    except ValueError:
        return  # no such actor alive: nothing to clean


@lesson(id="25-detached-leak", section=SECTION, title="A detached actor outlives its driver",
        mistake='lifetime="detached" for a helper of one job; the driver exits',
        fix="Ray's default lifetime: the actor ends with the job that made it",
        why="A detached actor belongs to no job: it stays (holding its resources) after its driver exits or "
            "crashes, until someone calls ray.kill on it. Keep detached for services meant to outlive jobs.")
def detached_leak(address: str) -> Result:
    fix, took = _alive_after_driver(address, detached=False, grace=TIMEOUT)
    mistake, _ = _alive_after_driver(address, detached=True, grace=took + 2.0)
    return [Measure(what="actors alive after their driver exited", unit="of 1", mistake=mistake, fix=fix)], [
        f"the job's own actor was seen dead {took:.1f} s after its driver exited; the detached one was "
        f"checked {took + 2.0:.1f} s after"]


LESSONS: tuple[Lesson, ...] = (actor_without_restarts, calls_in_flight, exceptions_not_retried, side_effect_twice,
                               method_applied_twice, get_without_timeout, owner_died, detached_leak)
