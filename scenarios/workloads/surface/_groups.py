"""Placement groups losing a bundle's node."""

from __future__ import annotations

from chaos import wait_until, watch
from chaos.cluster import short
from chaos.engine import StuckCause
from scenarios.model._records import Verdict
from scenarios.model._workload import CALL_TIMEOUT, Params, Workload
from scenarios.workloads._kit import dead_nodes

__all__ = ["GroupLoss", "GroupLossParams", "Member"]


class Member:
    def ping(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())


class GroupLossParams(Params):
    recover_within: float = CALL_TIMEOUT


class GroupLoss(Workload):
    """A placement group of two bundles spread over the worker nodes, an actor in each; a node
    holding a bundle dies: the group is rescheduled, its actors answer again, and a group that
    can never be placed is named by the watchdog instead of hanging."""

    BASELINE = True  # the fault-free twin: every trace of the fault must be missing there
    FAULT_VERDICTS = ("group_rescheduled",)
    INVARIANTS = ("group_rescheduled", "actors_restarted", "infeasible_group_named")
    Params = GroupLossParams
    member_class: type = Member

    def setup(self) -> None:
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        self.group = placement_group([{"worker": 1, "CPU": 0.1}] * 2, strategy="SPREAD")
        ray.get(self.group.ready(), timeout=CALL_TIMEOUT)
        self.before = self._bundle_nodes()
        self.members = [ray.remote(max_restarts=-1, max_task_retries=-1, num_cpus=0.1,
                                   resources={"worker": 1})(self.member_class).options(
            scheduling_strategy=PlacementGroupSchedulingStrategy(self.group, i)).remote() for i in range(2)]
        ray.get([m.ping.remote() for m in self.members], timeout=CALL_TIMEOUT)
        self.recover = self.ctx.params_as(GroupLossParams).recover_within

    def _bundle_nodes(self) -> list[str]:
        from ray.util.placement_group import placement_group_table

        return list(placement_group_table(self.group)["bundles_to_node_id"].values())

    def step(self) -> bool:
        import ray

        ray.get([m.ping.remote() for m in self.members], timeout=CALL_TIMEOUT)
        self.ctx.count("pings", 2)
        self.ctx.stop.wait(0.05)  # the workload's pace
        return True

    def probe(self) -> str:
        import ray

        return f"members on {[n[:8] for n in ray.get([m.ping.remote() for m in self.members], timeout=10)]}"

    def invariants(self) -> list[Verdict]:
        return [self._rescheduled(), self._restarted(), self._infeasible_named()]

    def _rescheduled(self) -> Verdict:
        from ray.util.placement_group import placement_group_table

        dead = dead_nodes(self.ctx.address)  # the bundles' nodes were alive at the start
        hit = [short(n) for n in self.before if n in dead]

        def placed() -> bool:
            table = placement_group_table(self.group)
            return table["state"] == "CREATED" and not set(table["bundles_to_node_id"].values()) & dead

        try:
            wait_until(placed, timeout=self.recover, interval=0.2, what="the group to be placed again")
            ok = bool(hit)
        except Exception:  # noqa: BLE001 - the verdict shows the table
            ok = False
        table = placement_group_table(self.group)
        return Verdict.of("group_rescheduled", ok,
                       f"bundles were on {[short(n) for n in self.before]}, dead among them {hit or 'none'}; "
                       f"now {table['state']} on {[short(n) for n in table['bundles_to_node_id'].values()]}")

    def _restarted(self) -> Verdict:
        import ray

        try:
            nodes = ray.get([m.ping.remote() for m in self.members], timeout=self.recover)
        except Exception as exc:  # noqa: BLE001 - the verdict shows it
            return Verdict.of("actors_restarted", False, f"{type(exc).__name__}: {exc}"[:200])
        return Verdict.of("actors_restarted", True, f"both members answer, on {[short(n) for n in nodes]}")

    def _infeasible_named(self) -> Verdict:
        from ray.util.placement_group import placement_group, remove_placement_group

        never = placement_group([{"CPU": 64.0}])
        try:
            stuck = watch([never], deadline=3.0, address=self.ctx.address, raise_on_hang=False).stuck
        finally:
            remove_placement_group(never)
        named = [s for s in stuck if s.kind is StuckCause.INFEASIBLE_GROUP]
        return Verdict.of("infeasible_group_named", bool(named),
                       (named or stuck)[0].cause[:240] if (named or stuck) else "it was placed: nothing to name")

    def teardown(self) -> None:
        import ray
        from ray.util.placement_group import remove_placement_group

        for member in self.members:
            ray.kill(member)
        remove_placement_group(self.group)
