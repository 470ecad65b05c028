"""Project-wide test helpers. The Ray harness itself lives in the plugin (chaos.pytest_plugin)."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

CALL_TIMEOUT = 30.0
# The suite's Ray workers run the replay buffer on its numpy trees: each restarted actor would
# otherwise load numba (about 0.6 s and 120 MiB), which made the Ray-backed replay tests half as
# slow again and the fast tier overrun its budget. The compiled trees are bit for bit the numpy
# path (tests/test_replay_buffer.py runs both; tests/test_trees_default.py pins the default in
# processes of its own). `RAYCHAOS_TREES=compiled make test` runs the whole suite on them.
os.environ.setdefault("RAYCHAOS_TREES", "numpy")
#: Hypothesis's own defaults: the ``default`` and ``ci`` profiles have these.
BASE_EXAMPLES, BASE_STEPS = 100, 50


def _depth() -> float:
    """How many times deeper than ``ci`` the loaded Hypothesis profile runs (10 for ``thorough``)."""
    return settings.default.max_examples / BASE_EXAMPLES


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Every summary.json and journal the session's tests wrote under its temporary folder is
    held to the published schemas (``raychaos schema --summary``, ``--journal``): one that is not
    fails the session, each named."""
    from scenarios.reports._schemas import off_schema

    factory = getattr(session.config, "_tmp_path_factory", None)
    base = factory.getbasetemp() if factory is not None and factory._basetemp is not None else None
    found = off_schema(str(base)) if base is not None else []
    for line in found:
        print(f"report off its published schema: {line}")
    if found and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(tryfirst=True)  # before -m deselects: a deep test is slow, so make test never runs it
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test marked ``deep`` is marked ``slow`` too (``deep`` is a kind of slow test: make test's
    ``-m "not slow"`` must leave it out). The last-resort per-test bound (pyproject's ``timeout``)
    grows with the profile's depth for the suite's own properties: under ``thorough`` one runs
    ten times the examples, so a fixed bound would fail it for being thorough. ``--timeout`` on
    the command line wins; every wait inside a property keeps its own deadline either way."""
    for item in items:
        if item.get_closest_marker("deep") and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
    depth = _depth()
    if depth <= 1.0 or config.getoption("timeout", None) is not None:
        return
    bound = float(config.getini("timeout") or 0) * depth
    for item in items:
        if bound and item.get_closest_marker("property") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(bound))


def open_under(folder: str | os.PathLike[str]) -> list[str]:
    """The files under ``folder`` this process holds open, one path per descriptor: a leak
    check that other tests' descriptors (closed by a garbage collection, opened by a
    background thread) cannot move."""
    root = os.path.realpath(folder) + os.sep
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed since it was listed (the listing's own descriptor among them)
            continue
        if target.startswith(root):
            found.append(target)
    return sorted(found)


def unheld(run: Any) -> str:
    """A run's error, each verdict that did not hold and each fault, in full: an assertion
    message that is not a string is cut to a few hundred characters."""
    lines = [f"error: {run.error!r}"] + [f"NOT HELD {v.name}: {v.detail}" for v in run.verdicts if not v.held]
    return "\n".join(lines + [f"fault: {f}" for f in run.faults])


def scaled(examples: int, *, steps: int | None = None, **options: Any) -> settings:
    """Settings for one of this suite's properties: ``examples`` (and ``steps`` per stateful
    example) under Hypothesis's ``default`` or ``ci`` profile, scaled with the loaded profile
    (``--hypothesis-profile=thorough``: ten times both). Read when the test module is
    imported, after ``--hypothesis-profile`` has been loaded."""
    depth = _depth()
    chosen: dict[str, Any] = {"max_examples": max(1, math.ceil(examples * depth)), "deadline": None,
                              "suppress_health_check": list(HealthCheck)}
    if steps is not None:
        chosen["stateful_step_count"] = max(1, math.ceil(
            steps * settings.default.stateful_step_count / BASE_STEPS))
    return settings(**{**chosen, **options})


def ci_sample(values: list[Any], *, keep: set[Any]) -> list[Any]:
    """``values`` as test parameters, those not in ``keep`` marked ``deep``: CI's ``make slow``
    runs the sample, ``make deep`` the rest (one of each kind keeps the tier within CI's budget)."""
    missing = keep - set(values)
    assert not missing, f"ci_sample: {sorted(missing)} kept but not among the values {values}"
    return [v if v in keep else pytest.param(v, marks=pytest.mark.deep) for v in values]


def default_sigint() -> None:
    """``preexec_fn`` for a child the test will Ctrl-C: a background job, ``nohup`` or a CI
    runner may have started this suite with SIGINT ignored, which the child would inherit
    (and Python installs no KeyboardInterrupt handler then)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for_ray_start_head(address: str, *, env: Mapping[str, str], what: str, timeout: float = 90.0) -> None:
    """Until ``ray status`` lists a node of the ``ray start --head`` cluster at ``address``: its GCS
    answering is not enough. On Ray 2.54 a driver started before the head's raylet registered
    dies at once ("No node info found matching node ids"); 2.55 waits for the node instead."""
    from chaos import wait_until

    ray = os.path.join(os.path.dirname(sys.executable), "ray")

    def listed() -> bool:
        out = subprocess.run([ray, "status", f"--address={address}"], capture_output=True, text=True,
                             env=dict(env), timeout=30, check=False)
        return out.returncode == 0 and " node_" in out.stdout

    wait_until(listed, timeout=timeout, interval=1.0, what=what)


def stop_ray_start(proc: subprocess.Popen[Any], *, grace: float = 5.0) -> None:
    """End a ``ray start --block`` started with ``start_new_session=True``, and its node: SIGTERM
    to its process group, SIGKILL to the group after ``grace`` seconds. With actors alive its
    graceful stop took 33.5 s here, against 6 s this way; nothing is left either way."""
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def actor_pid(actor: Any) -> int:
    import ray

    return ray.get(actor.pid.remote(), timeout=CALL_TIMEOUT)


def sigkill_and_wait_restart(actor: Any, *, timeout: float = 30.0) -> int:
    """SIGKILL the actor's worker and wait (bounded) until a new process answers; return its pid."""
    from chaos import wait_until

    old = actor_pid(actor)
    os.kill(old, signal.SIGKILL)
    return wait_until(lambda: (pid := actor_pid(actor)) != old and pid,
                      timeout=timeout, what=f"restart of actor after SIGKILL of pid {old}")


@pytest.fixture
def storage(tmp_path: Any) -> str:
    """A fresh local checkpoint directory."""
    return str(tmp_path / "ckpt")


@pytest.fixture
def sigkill() -> Callable[..., int]:
    return sigkill_and_wait_restart
