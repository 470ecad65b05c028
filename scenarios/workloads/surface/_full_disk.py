"""A full disk under the checkpoint storage."""

from __future__ import annotations

from actors import CheckpointedCounter
from scenarios.model._records import Verdict
from scenarios.model._workload import CALL_TIMEOUT, Workload
from scenarios.workloads._kit import Ack, Ledger, new_counter

__all__ = ["FullDisk"]


class FullDisk(Workload):
    """A WAL counter on a small tmpfs that the fault fills: adds that cannot be logged fail
    (undone), none acknowledged is lost across a restart, and adds succeed once space returns."""

    BASELINE = True  # the fault-free twin: every trace of the fault must be missing there
    FAULT_VERDICTS = ("disk_full_surfaces", "recovers_when_space_returns")
    INVARIANTS = ("disk_full_surfaces", "nothing_acknowledged_lost", "recovers_when_space_returns")
    counter_class: type = CheckpointedCounter

    def setup(self) -> None:
        import ray

        self.ledger = Ledger(new_counter(self.ctx, "counter", cls=self.counter_class, durability="wal",
                                      every_n=50), "driver")
        ray.get(self.ledger.actor.get.remote(), timeout=CALL_TIMEOUT)  # the run's time is for calls

    def step(self) -> bool:
        self.ledger.add()
        self.ctx.count("adds")
        return True

    def probe(self) -> str:
        import ray

        return f"counter {ray.get(self.ledger.actor.get.remote(), timeout=5)}"

    def invariants(self) -> list[Verdict]:
        import ray

        last = self.ledger.last
        undone, refused = self.ledger.counts[Ack.UNDONE], last.get(Ack.UNDONE)
        recovered = refused is not None and last.get(Ack.ACKED, 0.0) > refused
        ray.kill(self.ledger.actor, no_restart=False)  # a crash: what is on disk is all it has
        return [Verdict.of("disk_full_surfaces", undone > 0,
                        f"{undone} adds refused with MutationNotLogged (undone) while the disk was full"),
                self.ledger.verdict("nothing_acknowledged_lost"),
                Verdict.of("recovers_when_space_returns", recovered,
                        "adds acknowledged again after the last refusal" if recovered
                        else "no add was acknowledged after the last refusal")]

    def teardown(self) -> None:
        import ray

        ray.kill(self.ledger.actor)
