"""The redis-loss scenario end to end on its own cluster and Redis: green with its fault-free
twin missing every trace of the faults, and each invariant red under a plant (a GCS that
hangs, a supervisor too slow, a Redis that lost acknowledged writes, an actor that needs the
GCS to answer). Each run is a subprocess: it starts its own cluster, as ``raychaos run`` does."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ray import cloudpickle

from actors import CheckpointedCounter, mutation
from chaos import FaultKind
from scenarios.workloads.gcs._redis_loss import RedisLoss

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/
pytestmark = [pytest.mark.ray, pytest.mark.slow]

ROOT = Path(__file__).parents[1]
RAYCHAOS = str(Path(sys.executable).parent / "raychaos")
#: The invariants that need a fault to have bitten: the fault-free twin must find them broken.
FAULT_TRACES = {"gcs_never_hung", "gcs_fate_as_documented", "recovered_after_heal", "actors_served_throughout"}


def test_the_redis_loss_scenario_holds_and_its_twin_misses_every_fault(tmp_path: Path) -> None:
    out = subprocess.run([RAYCHAOS, "run", "redis-loss", "--report", str(tmp_path)], capture_output=True,
                         text=True, timeout=300)
    assert (tmp_path / "summary.json").exists(), out.stdout[-3000:] + out.stderr[-3000:]
    baseline, chaos = json.loads((tmp_path / "summary.json").read_text())["runs"]
    broken = [v for v in chaos["verdicts"] if not v["held"]]
    assert out.returncode == 0 and chaos["status"] == "completed" and not broken, (broken, out.stdout[-3000:])
    fates = next(v["detail"] for v in chaos["verdicts"] if v["name"] == "gcs_fate_as_documented")
    assert all(f"{kind}: {fate}" in fates for kind, fate in (
        ("kill_redis", "exited"), ("redis_client_kill", "exited"), ("redis_idle_timeout", "exited"))), fates
    assert {v["name"] for v in baseline["verdicts"] if not v["held"]} == FAULT_TRACES, baseline["verdicts"]


# -- the plants -----------------------------------------------------------------------------------


class FrozenGcs(RedisLoss):
    """Through the idle timeout the GCS is SIGSTOPped past the hang bound: alive, silent."""

    frozen = False

    def step(self) -> bool:
        idle = next(e.at for e in self.ctx.plan.entries if e.kind is FaultKind.REDIS_IDLE_TIMEOUT)
        if self.frozen or self.ctx.elapsed() < idle + 2.0:  # once the timeout is confirmed
            return super().step()
        self.frozen, pid = True, self.gcs_pid
        os.kill(pid, signal.SIGSTOP)
        try:
            # Past the bound however the quiet probes fall: silent for longer than it.
            self.ctx.stop.wait(self.p.hang_bound + self.p.quiet_every + self.p.probe_timeout + 2.0)
        finally:
            os.kill(pid, signal.SIGCONT)
        return True

    def call_bounds(self) -> dict[str, float]:
        return {**super().call_bounds(), "step": 30.0}


class NeedsTheGcs(CheckpointedCounter):
    """Writes to the GCS's key-value store on every add: it cannot answer while the GCS is down."""

    @mutation
    def add(self, k: int = 1, *, writer_id: Any = None, seq: Any = None) -> int:
        from ray.experimental import internal_kv

        internal_kv._internal_kv_put(b"planted", b"1", overwrite=True, namespace="raychaos-planted")
        return super().add(k, writer_id=writer_id, seq=seq)


class ForgetfulSlowRecovery(RedisLoss):
    """Redis loses the GCS's acknowledged writes while the GCS is down (what a Redis without
    fsync loses in a crash), the supervisor restarts the GCS late (``restart_delay`` past the
    recovery bound), and the detached actor needs the GCS for every add."""

    counter_class = NeedsTheGcs

    def _restart_gcs(self) -> None:
        for table in self.server.command("KEYS", "*@KV") or []:  # type: ignore[union-attr]
            fields = [f for f in self.server.command("HKEYS", table) or []  # type: ignore[union-attr]
                      if self._namespace() in f]  # type: ignore[operator]
            if fields:
                self.server.command("HDEL", table, *fields)  # type: ignore[arg-type]
        super()._restart_gcs()


PLANT = """
import json, sys
sys.path.insert(0, {tests!r})
import test_redis_loss as t
from chaos import Schedule
from chaos.gcs import KillRedis, RedisIdleTimeout
from scenarios import Scenario, run_scenario
from scenarios.runner import SteadyState
cls = getattr(t, {plant!r})
faults = {{"kill_redis": KillRedis(seconds=5), "redis_idle_timeout": RedisIdleTimeout(timeout=1, seconds=11)}}
schedule = Schedule.explicit([(3.0 + 13.0 * i, faults[kind]) for i, kind in enumerate({kinds!r})])
scenario = Scenario(name="planted-redis-loss", description="planted", workload="planted", schedule=schedule,
                    duration={duration!r}, invariants=cls.INVARIANTS, params={params!r},
                    gcs_fault_tolerance=True, steady_state=SteadyState(before=False, after=False))
(result,) = run_scenario(scenario, baseline=False, workloads={{"planted": cls}})
print("VERDICTS " + json.dumps({{v.name: [v.held, v.detail] for v in result.verdicts}}))
"""


def planted(plant: str, kinds: list[str], params: dict[str, Any], *, duration: float) -> dict[str, tuple[bool, str]]:
    script = PLANT.format(tests=str(ROOT / "tests"), plant=plant, kinds=kinds, params=params, duration=duration)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=ROOT)
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("VERDICTS ")), None)
    assert line is not None, out.stdout[-3000:] + out.stderr[-3000:]
    return {name: (held, detail) for name, (held, detail) in json.loads(line.removeprefix("VERDICTS ")).items()}


@pytest.mark.deep  # CI's budget
def test_a_gcs_alive_and_silent_past_the_bound_breaks_never_hung_and_the_documented_fate() -> None:
    verdicts = planted("FrozenGcs", ["kill_redis", "redis_idle_timeout"], {}, duration=30)
    assert {n for n, (held, _) in verdicts.items() if not held} == {"gcs_never_hung", "gcs_fate_as_documented"}, \
        verdicts
    assert "redis_idle_timeout: hung" in verdicts["gcs_never_hung"][1]


@pytest.mark.deep  # CI's budget: the scenario's twin shows its fault verdicts false in make slow
def test_a_late_restart_lost_writes_and_an_actor_that_needs_the_gcs_break_their_invariants() -> None:
    verdicts = planted("ForgetfulSlowRecovery", ["kill_redis"], {"restart_delay": 6.0, "recover_within": 3.0},
                       duration=14)
    assert {n for n, (held, _) in verdicts.items() if not held} == {
        "recovered_after_heal", "actors_served_throughout", "acknowledged_state_kept"}, verdicts
    late = re.search(r"bound 3 s; kill_redis: exited, (not served again|served again ([\d.]+) s after)",
                     verdicts["recovered_after_heal"][1])
    assert late and (late[2] is None or float(late[2]) > 3.0), verdicts["recovered_after_heal"]
    assert " lost (first: ('kv', " in verdicts["acknowledged_state_kept"][1]
