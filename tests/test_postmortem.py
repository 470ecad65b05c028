"""``python -m chaos.postmortem``: the severe lines of the Ray logs a failed run left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from chaos.postmortem import main, report

INFO = "[2026-12-04 19:41:08,632 I 24222 24222] (raylet) accessor.cc:475: node is alive"
FATAL = ("[2026-12-04 19:41:08,703 C 24222 24222] (raylet) node_manager.cc:971: [Timeout] Exiting "
         "because this node manager has mistakenly been marked as dead by the GCS")
ERROR = "[2026-12-04 19:42:01,001 E 100 120] core_worker.cc:1: Failed to connect to GCS within 60 seconds"


def left_behind(tmp_path: Path) -> Path:
    logs = tmp_path / "rc-abc" / "session_2026-12-04_19-40-00_1_1" / "logs"
    logs.mkdir(parents=True)
    (logs / "raylet.out").write_text(f"{INFO}\n{FATAL}\n{INFO}\n")
    (logs / "raylet.err").write_text("\n*** SIGTERM received\n")
    (logs / "python-core-driver-01000000_100.log").write_text(f"{INFO}\n{ERROR}\n")
    (logs / "gcs_server.out").write_text(f"{INFO}\n")
    return tmp_path


def test_the_severe_lines_of_each_log_are_printed_and_nothing_else(tmp_path: Path) -> None:
    lines = report(str(left_behind(tmp_path) / "rc-*"))
    assert lines[0].startswith(f"postmortem: Ray cluster folder left behind: {tmp_path}/rc-abc (4 logs read)")
    body = "\n".join(lines[1:])
    assert FATAL in body and ERROR in body and "*** SIGTERM received" in body
    assert INFO not in body and "gcs_server.out" not in body  # a log with nothing severe is not named


def test_the_last_lines_only(tmp_path: Path) -> None:
    logs = next(left_behind(tmp_path).glob("rc-abc/session_*/logs"))
    (logs / "raylet.out").write_text("".join(f"{ERROR} #{i}\n" for i in range(20)))
    body = report(str(tmp_path / "rc-*"), last=3)
    assert [line.strip()[-3:] for line in body if "#" in line] == ["#17", "#18", "#19"]


def test_no_folder_left_is_said_and_the_exit_code_is_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--root", str(tmp_path / "rc-*")]) == 0
    assert "no Ray cluster folder was left behind" in capsys.readouterr().out
