"""The raychaos command: version, commands, and the demo end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from scenarios.cli import main


def test_bare_command_prints_version_and_commands() -> None:
    result = CliRunner().invoke(main, [])
    assert result.exit_code == 0
    assert result.output.startswith("raychaos 0.1.0")
    assert "run" in result.output and "Commands:" in result.output


def test_bad_option_exits_2_with_the_reason() -> None:
    result = CliRunner().invoke(main, ["demo", "--adds", "0"])
    assert result.exit_code == 2
    assert "Invalid value for '--adds': 0 is not in the range 1<=x<=10000" in result.output


@pytest.mark.ray
@pytest.mark.slow
def test_demo_kills_and_restores_in_both_modes() -> None:
    # A subprocess: the demo starts its own embedded cluster, and a process can drive only one.
    exe = Path(sys.executable).parent / "raychaos"
    assert exe.exists(), f"raychaos console script is not installed next to {sys.executable}"
    out = subprocess.run([str(exe), "demo", "--adds", "7"], capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    rows = {line.split("│")[1].strip(): line for line in out.stdout.splitlines()
            if line.startswith("│")}
    policy, wal = (rows[m].split("│") for m in ("policy", "wal"))
    assert [c.strip() for c in policy[2:6]] == ["7", "7", "5", "2"]  # checkpoint at 5 adds
    assert [c.strip() for c in wal[2:6]] == ["7", "7", "7", "0"]


# -- a CLI that explains itself: nothing below starts Ray ------------------------------------------

def _no_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any start of a cluster or a run fail the test: these commands must start nothing."""
    import ray

    import chaos
    import scenarios.runner._run

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("this command must start nothing")

    monkeypatch.setattr(ray, "init", refuse)
    monkeypatch.setattr(chaos, "local_cluster", refuse)
    monkeypatch.setattr(scenarios.runner._run, "run_scenario", refuse)


def test_help_lists_every_exit_code() -> None:
    from scenarios.cli import EXIT_BAD_INPUT, EXIT_DEVIATED, EXIT_INTERRUPTED, EXIT_NOISY

    out = CliRunner().invoke(main, ["--help"]).output
    codes = [line.split()[0] for line in out.split("Exit codes:")[1].splitlines() if line.strip()[:1].isdigit()]
    assert codes == ["0", str(EXIT_DEVIATED), str(EXIT_BAD_INPUT), str(EXIT_NOISY), str(EXIT_INTERRUPTED)]


def test_run_without_a_scenario_lists_them_and_starts_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from scenarios.cli import NO_SCENARIO

    _no_cluster(monkeypatch)
    result = CliRunner().invoke(main, ["run"])
    assert result.exit_code == 2, result.output
    assert "dqn-cartpole" in result.output and "straggler" in result.output
    assert result.output.rstrip().endswith(f"error: {NO_SCENARIO}")


def test_validate_passes_every_builtin_and_prints_its_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    from scenarios import builtin_names

    _no_cluster(monkeypatch)
    result = CliRunner().invoke(main, ["validate", *builtin_names()])
    assert result.exit_code == 0, result.output
    assert sum(": valid — " in line for line in result.output.splitlines()) == len(builtin_names())
    assert "at   2.00 s  kill             one actor(s) of class EnvWorker" in result.output


def test_validate_a_broken_file_exits_2_with_one_line_per_problem(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _no_cluster(monkeypatch)
    path = tmp_path / "broken.toml"
    path.write_text('name = "x"\nworkload = "nope"\nduration = -1\nbogus = 1\n', encoding="utf-8")
    result = CliRunner().invoke(main, ["validate", "straggler", str(path)])
    assert result.exit_code == 2, result.output
    problems = [line for line in result.output.splitlines() if line.startswith(f"{path}: ")]
    assert [p.split(": ")[1].split(" = ")[0] for p in problems] == ["bogus", "workload", "duration", "faults"]
    assert "straggler: valid" in result.output


def test_show_prints_the_builtin_file() -> None:
    root = Path(__file__).resolve().parents[1]
    result = CliRunner().invoke(main, ["show", "straggler"])
    assert result.exit_code == 0
    assert result.output == (root / "scenarios" / "builtin" / "straggler.toml").read_text(encoding="utf-8")
    unknown = CliRunner().invoke(main, ["show", "nope"])
    assert unknown.exit_code == 2 and "no built-in scenario 'nope'" in unknown.output


def _list_rows(output: str) -> dict[str, tuple[str, str]]:
    """``raychaos list``'s rows: name -> (needs, whole description), its wrapped lines joined."""
    lines = output.splitlines()
    needs_at, text_at = lines[0].index("needs"), lines[0].index("description")
    rows: dict[str, list[list[str]]] = {}
    name = ""
    for line in lines[1:]:
        if line and not line[0].isspace():
            name = line.split()[0]
            rows[name] = [[], []]
        rows[name][0].append(line[needs_at:text_at].strip())
        rows[name][1].append(line[text_at:].strip())
    return {n: (" ".join(filter(None, needs)), " ".join(filter(None, text))) for n, (needs, text) in rows.items()}


def test_list_shows_whole_descriptions_and_what_each_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    from scenarios import builtin_names, load_scenario

    _no_cluster(monkeypatch)
    result = CliRunner().invoke(main, ["list"])
    assert result.exit_code == 0, result.output
    rows = _list_rows(result.output)
    assert list(rows) == builtin_names()
    for name, (_, text) in rows.items():
        assert text == " ".join(load_scenario(name).description.split()), name
    needs = {name: need for name, (need, _) in rows.items()}
    assert needs["dqn-cartpole"] == "raychaos[rl]" and needs["tune-trials"] == "raychaos[apps]"
    assert needs["gcs-restart"] == "redis-server" and needs["full-disk"] == "root"
    assert needs["node-loss"] == "3 nodes" and needs["straggler"] == "-"
    assert needs["slow-checkpoint-disk"] == "raychaos[disk], FUSE 3 (fuse3)"


def test_messages_are_printed_literally_never_as_markup() -> None:
    from rich.console import Console

    from scenarios.model._records import RunLabel, RunResult, RunStatus, Verdict
    from scenarios.reports._console import print_results

    said = "the dqn-cartpole workload needs torch; install it with pip install 'raychaos[rl]'"
    result = RunResult(scenario="dqn-cartpole", label=RunLabel.CHAOS, seed=0, status=RunStatus.ABORTED, seconds=1.0,
                       verdicts=(Verdict.of("no_lost_transitions", False,
                                            f"[bold]{said}"),), probes=(), samples=(), faults=(),
                       error=f"MissingExtra: {said}")
    console = Console(record=True, width=400)
    print_results([result], None, console=console)
    text = console.export_text()
    assert f"aborted: MissingExtra: {said}" in text and f"[bold]{said}" in text


@pytest.mark.parametrize(("scenario", "extra"), [("dqn-cartpole", "rl"), ("rllib-ppo-cartpole", "apps")])
def test_a_missing_extra_is_named_intact_and_is_the_one_cause(scenario: str, extra: str, tmp_path: Path) -> None:
    from tests.test_without_rl_extra import without_rl

    exe = Path(sys.executable).parent / "raychaos"
    out = subprocess.run([str(exe), "run", scenario], capture_output=True, text=True, env=without_rl(tmp_path),
                         timeout=120)
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stdout == ""
    assert out.stderr == (f"error: scenario {scenario!r}: its workload {scenario!r} needs torch"
                          f"{', gymnasium, which are' if extra == 'rl' else ', which is'} not installed; "
                          f"install it with pip install 'raychaos[{extra}]'\n")


def test_ctrl_c_in_any_command_exits_130(monkeypatch: pytest.MonkeyPatch) -> None:
    import scenarios.lessons._catalog

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(scenarios.lessons._catalog, "run_lesson", interrupted)
    result = CliRunner().invoke(main, ["explain", "03"])
    assert result.exit_code == 130 and result.output == "interrupted\n"


def test_a_run_the_runner_refuses_before_starting_exits_2(monkeypatch: pytest.MonkeyPatch) -> None:
    import scenarios.runner._run
    from chaos.errors import InvalidConfig

    def refuse(*args: object, **kwargs: object) -> None:
        raise InvalidConfig("scenario 'straggler' sets up the cluster it runs on")

    monkeypatch.setattr(scenarios.runner._run, "run_scenario", refuse)
    result = CliRunner().invoke(main, ["run", "straggler"])
    assert result.exit_code == 2
    assert result.output.endswith("error: scenario 'straggler' sets up the cluster it runs on\n")


def test_validate_draws_a_random_schedule_from_the_seed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _no_cluster(monkeypatch)
    path = tmp_path / "random.toml"
    path.write_text('name = "r"\nworkload = "sampling"\nduration = 30\n\n[random]\nrate = 0.5\nmenu = [\n'
                    '    { kind = "kill", target = { kind = "task", name = "sample_env" } },\n'
                    '    { kind = "pause", seconds = 1, target = { kind = "worker" } },\n]\n', encoding="utf-8")

    def plan(seed: int) -> list[str]:
        result = CliRunner().invoke(main, ["validate", str(path), "--seed", str(seed)])
        assert result.exit_code == 0, result.output
        return [line for line in result.output.splitlines() if line.startswith("  at ")]

    assert plan(3) == plan(3) and plan(3) != plan(4) and len(plan(3)) > 3


def test_the_progress_lines_name_the_phase_not_our_source_file(tmp_path: Path) -> None:
    from rich.console import Console

    from scenarios import load_scenario
    from scenarios.reports._console import progress_display

    console = Console(record=True, width=200, force_terminal=False)
    with progress_display(load_scenario("straggler"), console=console) as progress:
        progress("straggler [chaos]: setting up", None)
    text = console.export_text()
    assert "straggler [chaos]: setting up" in text  # brackets kept: printed literally
    assert "_console.py" not in text and ".py:" not in text
