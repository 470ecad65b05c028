"""Scenario files: validated up front, every problem on its own line; the CLI's bad input exits 2."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from chaos import Kill, MemoryPressure, Pause
from scenarios import ScenarioError, Verdict, builtin_names, load_attack, load_scenario
from scenarios.cli import main
from scenarios.model._experiment import Overrides
from scenarios.model._records import Probe
from scenarios.model._workload import Params, RunContext, Workload
from scenarios.runner import SteadyState
from scenarios.runner._run import _recovery, aim_memory_faults, steady_verdicts

BUILTINS = ["async-actor", "bandwidth-starved", "corrupt-checkpoint", "dqn-cartpole", "drain-preemption",
            "env-worker-kill", "env-worker-kill-no-retries", "failing-checkpoint-disk", "full-disk", "gcs-restart",
            "lossy-network", "lost-objects", "memory-pressure", "node-loss", "node-unresponsive",
            "open-files", "owner-death", "parameter-server-crash", "partition-head", "partition-worker",
            "placement-group", "power-loss", "redis-loss", "replay-crash-loop", "replay-crash-loop-beyond",
            "rllib-ppo-cartpole", "rpc-failures", "rpc-failures-no-retries", "serve-controller-kill",
            "serve-node-loss", "serve-proxy-kill", "serve-replica-kill", "slow-checkpoint-disk",
            "spill-disk-faults", "starvation", "straggler", "train-torch-ddp", "train-torch-ddp-no-retries",
            "tune-trials"]
#: Built-ins whose faults are set up with the cluster, not scheduled (Ray's RPC failure knob).
NO_SCHEDULE = {"rpc-failures", "rpc-failures-no-retries"}


def test_every_builtin_scenario_loads() -> None:
    assert builtin_names() == BUILTINS
    for name in BUILTINS:
        scenario = load_scenario(name)
        assert scenario.name == name and scenario.invariants
        assert bool(scenario.schedule.entries) != (name in NO_SCHEDULE), name
        assert scenario.strict_faults, f"{name}: every built-in's faults are the schedule's, each confirmed"
        assert bool(scenario.rpc_failures) == (name in NO_SCHEDULE), name


def test_the_flagship_schedule_mixes_kills_a_pause_and_memory() -> None:
    kinds = {type(e.fault) for e in load_scenario("dqn-cartpole").schedule.entries}
    assert kinds == {Kill, Pause, MemoryPressure}


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "s.toml"
    path.write_text(text)
    return str(path)


BAD = """
name = "bad"
workload = "sampling"
duration = -3
nodes = 99
colour = "red"
invariants = ["results_correct", "no_such_invariant"]

[[faults]]
at = 1
kind = "teleport"

[[faults]]
at = 2
kind = "pause"
seconds = 0
target = { kind = "task", name = "sample_env" }
"""


def test_a_bad_file_reports_every_problem_once_each(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError) as info:
        load_scenario(_write(tmp_path, BAD))
    lines = str(info.value).splitlines()[1:]
    assert len(lines) == len(info.value.problems) == 6
    text = str(info.value)
    assert "colour = 'red': unknown field" in text
    assert "duration = -3: must be a number in [1, 3600]" in text
    assert "nodes = 99: must be a whole number in [1, 8]" in text
    assert "invariants[1] = 'no_such_invariant': not an invariant of this workload" in text
    assert "unknown fault kind 'teleport'" in text
    assert "`seconds` must be a duration in (0, 3600] seconds, got 0" in text


def test_unknown_names_list_the_choices(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError,
                       match="unknown; use a TOML file or one of async-actor, bandwidth-starved, "
                             "corrupt-checkpoint, dqn-cartpole"):
        load_scenario("no-such-scenario")
    with pytest.raises(ScenarioError,
                       match="workload = 'quantum': unknown workload; use one of async-actor, attack, "
                             "bandwidth-starved, corrupt-checkpoint, dqn-cartpole"):
        load_scenario(_write(tmp_path, 'name = "x"\nworkload = "quantum"\nduration = 5\ninvariants = []'))


def test_a_workload_named_by_module_and_class(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "my_workloads.py").write_text(
        "from scenarios import Workload\n"
        "class Mine(Workload):\n    INVARIANTS = ('mine_holds',)\n"
        "class NotOne:\n    pass\n")
    monkeypatch.chdir(tmp_path)  # resolved from the current directory, as `python -m` would
    head = 'name = "x"\nduration = 5\nstrict_faults = false\n'
    mine = load_scenario(_write(tmp_path, head + 'workload = "my_workloads:Mine"\ninvariants = ["mine_holds"]'))
    assert mine.workload == "my_workloads:Mine" and mine.invariants == ("mine_holds",)
    for workload, why in [("my_workloads:Missing", "module 'my_workloads' has no 'Missing'; name a scenarios.Workload "
                                                   "subclass it defines (Mine)"),
                          ("no_such_module:X", "cannot be imported: there is no module 'no_such_module' on sys.path"),
                          ("my_workloads:NotOne", "not a scenarios.Workload subclass")]:
        with pytest.raises(ScenarioError, match=re.escape(why)):
            load_scenario(_write(tmp_path, head + f'workload = "{workload}"\ninvariants = []'))
    with pytest.raises(ScenarioError, match="invariants\\[0\\] = 'other': not an invariant of this workload"):
        load_scenario(_write(tmp_path, head + 'workload = "my_workloads:Mine"\ninvariants = ["other"]'))


PAUSE = 'kind = "pause"\nseconds = 1\ntarget = { kind = "task", name = "sample_env" }\n'


def test_strict_faults_is_on_unless_the_file_says_otherwise(tmp_path: Path) -> None:
    head = 'name = "x"\nworkload = "sampling"\nduration = 5\ninvariants = ["results_correct"]\n'
    assert load_scenario(_write(tmp_path, head + "[[faults]]\nat = 1\n" + PAUSE)).strict_faults is True
    assert load_scenario(_write(tmp_path, head + "strict_faults = false")).strict_faults is False
    with pytest.raises(ScenarioError, match="strict_faults = 'no': must be true or false"):
        load_scenario(_write(tmp_path, head + 'strict_faults = "no"'))


def test_a_run_without_a_fault_is_refused_unless_the_file_says_so(tmp_path: Path) -> None:
    head = 'name = "x"\nworkload = "sampling"\nduration = 5\ninvariants = ["results_correct"]\n'
    with pytest.raises(ScenarioError, match=re.escape("faults = 'none': the run needs a [[faults]] entry")):
        load_scenario(_write(tmp_path, head))
    # A random schedule is drawn when the file loads: an empty draw is refused there, its odds named.
    rare = _write(tmp_path, head + "[random]\nrate = 0.01\nmenu = [{ " + PAUSE.strip().replace("\n", ", ") + " }]\n")
    with pytest.raises(ScenarioError, match=re.escape("random = 'rate 0.01 over 5 s, seed 0': drew no fault "
                                                      "(an empty draw has probability 95.1%)")):
        load_scenario(rare)
    assert load_scenario(rare, seed=next(s for s in range(100) if _draws(rare, s))).schedule.entries


def _draws(path: str, seed: int) -> bool:
    try:
        return bool(load_scenario(path, seed=seed).schedule.entries)
    except ScenarioError:
        return False


def test_invalid_toml_is_one_problem(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"is not valid TOML \(.*\); fix the syntax"):
        load_scenario(_write(tmp_path, "name = [unclosed"))


def test_a_random_schedule_is_drawn_from_the_seed(tmp_path: Path) -> None:
    text = ('name = "r"\nworkload = "sampling"\nduration = 60\ninvariants = ["results_correct"]\n[random]\nrate = 0.5\n'
            'menu = [{ kind = "kill", target = { kind = "task", name = "sample_env" } }]\n')
    path = _write(tmp_path, text)
    first, again, other = (load_scenario(path, seed=s).schedule for s in (1, 1, 2))
    assert first == again and first != other and first.entries


def test_memory_faults_are_aimed_past_the_threshold() -> None:
    aimed = aim_memory_faults(load_scenario("memory-pressure"), 0.3)
    fault = aimed.schedule.entries[0].fault
    assert (fault.fraction, fault.host_cap) == (pytest.approx(0.35), pytest.approx(0.4))


@pytest.mark.parametrize(("args", "message"), [
    (["run", "no-such"], "scenario = 'no-such': unknown; use a TOML file or one of"),
    (["run", "straggler", "--nodes", "0"], "Invalid value for '--nodes': 0 is not in the range 1<=x<=8"),
    (["run", "straggler", "--duration", "0"], "Invalid value for '--duration': 0.0 is not in the range 1<=x<=3600"),
    (["run", "straggler", "--seed", "-1"], "Invalid value for '--seed': -1 is not in the range"),
    (["run", "straggler", "--address", "10.0.0.1:6379", "--nodes", "3"], "exclude each other"),
    (["replay", "/no/such/journal.jsonl"], "does not exist"),
])
def test_bad_cli_input_exits_2_and_says_why(args: list[str], message: str) -> None:
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_a_bad_scenario_file_exits_2_with_one_line_per_problem(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["run", _write(tmp_path, BAD)])
    assert result.exit_code == 2
    assert result.output.startswith("error: ") and "6 problem(s)" in result.output
    assert sum(line.startswith("  ") for line in result.output.splitlines()) == 6


def test_replay_refuses_a_journal_without_a_run(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_text('{"kind": "end", "mono": 1.0, "wall": 1.0, "outcome": "completed"}\n')
    result = CliRunner().invoke(main, ["replay", str(path)])
    assert result.exit_code == 2 and "has no start event from `raychaos run`" in result.output


def test_replay_refuses_a_damaged_journal_naming_the_line(tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_text('{"kind": "inject", "mono": 1.0, "wall": 1.0}\n{"kind": "end"}\n')
    result = CliRunner().invoke(main, ["replay", str(path)])
    assert result.exit_code == 2
    assert f"{path}:1 is not a journal event (inject.fault: Field required)" in result.output


def test_list_names_every_builtin() -> None:
    result = CliRunner().invoke(main, ["list"])
    assert result.exit_code == 0
    rows = [line.split()[0] for line in result.output.splitlines()[1:] if line and not line[0].isspace()]
    assert rows == BUILTINS


class _ProbeAfter(Workload):
    """A workload whose probe fails until its ``healthy_after``-th call."""

    def __init__(self, ctx: RunContext, healthy_after: int) -> None:
        super().__init__(ctx)
        self.calls, self.healthy_after = 0, healthy_after

    def probe(self) -> str:
        self.calls += 1
        if self.calls < self.healthy_after:
            raise RuntimeError("not yet")
        return "ok"


def _stopped_context() -> RunContext:
    ctx = RunContext(address="", namespace="t", seed=0, params=Params(), storage="", duration=1.0, faults=True)
    ctx.stop.set()  # the workload ended the run itself, as owner-death does on its fault
    return ctx


def test_recovery_counts_a_holding_probe_after_the_run_stopped() -> None:
    ctx = _stopped_context()
    mttr, text = _recovery(_ProbeAfter(ctx, healthy_after=1), ctx, ctx.elapsed())
    assert text == "recovered after the run ended" and mttr is not None and mttr >= 0


def test_recovery_while_the_run_goes_on_is_plain_recovered() -> None:
    ctx = RunContext(address="", namespace="t", seed=0, params=Params(), storage="", duration=60.0, faults=True)
    mttr, text = _recovery(_ProbeAfter(ctx, healthy_after=2), ctx, ctx.elapsed())
    assert text == "recovered" and mttr is not None and mttr >= 0


def test_recovery_gives_up_on_a_failing_probe_once_the_run_stopped() -> None:
    ctx = _stopped_context()
    mttr, text = _recovery(_ProbeAfter(ctx, healthy_after=3), ctx, ctx.elapsed())
    assert mttr is None and text == "the run ended before the steady state returned"


def test_a_verdict_over_nothing_seen_does_not_hold() -> None:
    assert Verdict.over("no_loss", 3, held=True, detail="3 adds") == Verdict.of("no_loss", True, "3 adds", seen=3)
    assert not Verdict.over("no_loss", 3, held=False, detail="3 adds").held
    vacuous = Verdict.over("no_loss", 0, held=True, detail="0 adds")
    assert (vacuous.held, vacuous.seen) == (False, 0) and vacuous.detail.endswith("0 adds"), vacuous


def test_a_steady_state_check_no_probe_reached_does_not_hold() -> None:
    asked = SteadyState(before=True, after=True, during_min=0.5, probe_every=2.0)
    probes = [Probe("before", 0.0, True, "ok"), Probe("during", 2.0, True, "ok"), Probe("during", 4.0, False, "x"),
              Probe("after", 5.0, True, "ok")]
    assert [(v.name, v.held) for v in steady_verdicts(asked, probes)] == [
        ("steady state before", True), ("steady state after", True), ("steady state during", True)]
    # A run shorter than probe_every: no probe during it, and still a verdict.
    short = steady_verdicts(asked, [p for p in probes if p.phase != "during"])
    assert [(v.name, v.held, v.seen) for v in short][-1] == ("steady state during", False, 0), short
    assert [v.held for v in steady_verdicts(asked, [])] == [False, False, False]
    assert steady_verdicts(SteadyState(before=False, after=False), probes) == []


def test_run_scenario_refuses_a_scenario_without_a_fault_before_anything_starts() -> None:
    from dataclasses import replace

    from chaos import Schedule
    from chaos.errors import InvalidConfig
    from scenarios import run_scenario

    faultless = replace(load_scenario("env-worker-kill"), schedule=Schedule(()))
    with pytest.raises(InvalidConfig, match="has no fault, so its run would pass untested"):
        run_scenario(faultless, address="127.0.0.1:1")  # no cluster there: refused before any call


def test_a_file_without_invariants_checks_the_workloads_defaults_which_can_hold_together(tmp_path: Path) -> None:
    from scenarios.workloads._registry import builtin_workloads

    WORKLOADS = builtin_workloads()

    text = 'name = "mine"\nworkload = "sampling"\nduration = 10\n\n[[faults]]\nat = 2\nkind = "kill"\n' \
           'target = { kind = "task", name = "sample_env" }\n'
    scenario = load_scenario(_write(tmp_path, text))
    assert scenario.invariants == WORKLOADS["sampling"].DEFAULT_INVARIANTS
    # crashes_surface (max_retries = 0) and no_error_visible (retries on) cannot both hold.
    assert not {"crashes_surface", "no_error_visible"} <= set(scenario.invariants)
    for name, cls in WORKLOADS.items():
        assert set(cls.DEFAULT_INVARIANTS or cls.INVARIANTS) <= set(cls.INVARIANTS), name


@pytest.mark.parametrize(("file_bound", "flag", "both"), [(None, 12.0, 12.0), (20.0, 12.0, 12.0), (20.0, None, 20.0)])
def test_an_attack_judges_probes_and_faults_by_one_recovery_bound(tmp_path: Path, file_bound: float | None,
                                                                  flag: float | None, both: float) -> None:
    # --recover-within 12 must not leave each fault's recovery judged against another bound; the
    # command line wins over the file, whose value stands when the option is left out.
    line = "" if file_bound is None else f"recovery_within = {file_bound}\n"
    path = tmp_path / "a.toml"
    path.write_text(f'duration = 5\n{line}[[faults]]\nat = 1\nkind = "kill"\n'
                    'target = { kind = "actor", name = "x" }\n', encoding="utf-8")
    scenario = load_attack(str(path), overrides=Overrides(probes=({"kind": "command", "command": "true"},),
                                                      recovery_within=flag))
    assert (scenario.recovery_within, scenario.params["recover_within"]) == (both, both)


def test_a_network_scenario_without_root_exits_2_naming_root_and_starts_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    import psutil

    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    before = {p.pid for p in psutil.process_iter()}
    result = CliRunner().invoke(main, ["run", "partition-worker"])
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "network = true" in lines[0] and "root" in lines[0], result.output
    assert not [p for p in psutil.process_iter() if p.pid not in before and "ray" in " ".join(p.cmdline())]
