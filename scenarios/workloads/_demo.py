"""The smallest honest end-to-end run: a checkpointed actor SIGKILLed and restored.

For each durability mode, a :class:`actors.CheckpointedCounter` actor takes some adds,
its worker process is SIGKILLed, Ray restarts it, and it restores itself from its
checkpoint (and, in WAL mode, its log). The table shows the state before and after.
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from actors import CheckpointedCounter
from chaos import local_cluster, wait_until

CALL_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class DemoRow:
    """One durability mode's before/after figures."""

    durability: str
    adds: int
    before: int
    after: int
    restored_seq: int
    replayed: int
    old_pid: int
    new_pid: int
    mttr_s: float


def _kill_and_restore(storage: str, durability: str, adds: int) -> DemoRow:
    import ray

    actor_cls = ray.remote(max_restarts=3, max_task_retries=-1)(CheckpointedCounter)
    counter = actor_cls.remote(storage, durability=durability, every_n=5)
    for _ in range(adds):
        ray.get(counter.add.remote(1), timeout=CALL_TIMEOUT)
    before = ray.get(counter.get.remote(), timeout=CALL_TIMEOUT)
    old_pid = ray.get(counter.pid.remote(), timeout=CALL_TIMEOUT)
    start = time.monotonic()
    os.kill(old_pid, signal.SIGKILL)
    new_pid = wait_until(lambda: _other_pid(counter, old_pid), timeout=CALL_TIMEOUT,
                         what=f"restart of the counter actor (old pid {old_pid})")
    after = ray.get(counter.get.remote(), timeout=CALL_TIMEOUT)
    mttr = time.monotonic() - start
    info = ray.get(counter.restored.remote(), timeout=CALL_TIMEOUT)
    ray.kill(counter)
    return DemoRow(durability=durability, adds=adds, before=before, after=after, restored_seq=info.seq,
                   replayed=info.replayed, old_pid=old_pid, new_pid=new_pid, mttr_s=mttr)


def _other_pid(counter: object, old_pid: int) -> int | None:
    import ray

    pid = ray.get(counter.pid.remote(), timeout=CALL_TIMEOUT)  # type: ignore[attr-defined]
    return pid if pid != old_pid else None


def run_demo(*, adds: int = 12, console: Console | None = None) -> list[DemoRow]:
    """Run the demo on an embedded cluster and print the before/after table."""
    console = console or Console()
    console.print("[bold]raychaos demo[/]: a checkpointed counter actor, SIGKILLed and restored")
    with tempfile.TemporaryDirectory(prefix="raychaos-demo-") as root, local_cluster(num_cpus=2, log_to_driver=False):
        rows = [_kill_and_restore(f"{root}/{mode}", mode, adds) for mode in ("policy", "wal")]
    console.print(_table(rows))
    return rows


def _table(rows: list[DemoRow]) -> Table:
    table = Table(
        title="counter value before SIGKILL and after Ray's restart",
        caption="checkpoint every 5 adds; ckpt: folder restored; replayed: WAL records; "
        "MTTR: kill to first correct answer",
    )
    for col in ("mode", "acked", "before", "after", "lost", "ckpt", "replayed", "MTTR"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r.durability, str(r.adds), str(r.before), str(r.after),
                      str(r.before - r.after), f"#{r.restored_seq}", str(r.replayed),
                      f"{r.mttr_s:.2f} s")
    return table
