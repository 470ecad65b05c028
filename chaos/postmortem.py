"""``python -m chaos.postmortem``: after a test run that failed, print what the Ray clusters it
left behind logged last: their errors and fatal lines.

An embedded cluster removes its folder when it ends normally. A process that ended abruptly
(a Ray driver that exits when its GCS is unreachable, an OOM kill) leaves its clusters' folders
under ``/tmp/rc-*``, and their logs say why. ``make test`` runs this when pytest fails, so a CI
log shows the cause beside the failure. Reads text only; always exits 0.
"""

from __future__ import annotations

import argparse
import glob
import os
import re

#: Ray's C++ log lines: ``[2026-12-04 19:41:08,703 C 24222 24222] (raylet) file.cc:971: ...``;
#: E is an error, C (critical) a fatal one that ends the process.
_SEVERE = re.compile(r"^\[\S+ \S+ [EC] \d+ \d+\]")
#: The logs worth reading: the GCS, the raylets, the drivers' core workers, and what their
#: processes wrote to stderr.
_LOGS = ("gcs_server.out", "gcs_server.err", "raylet*.out", "raylet*.err", "python-core-driver-*.log")


def severe_lines(path: str, *, last: int) -> list[str]:
    """The last ``last`` error or fatal lines of a Ray log (all lines of a ``.err`` file)."""
    try:
        with open(path, errors="replace") as text:
            lines = [line.rstrip() for line in text]
    except OSError:
        return []
    if not path.endswith(".err"):
        lines = [line for line in lines if _SEVERE.match(line)]
    return [line[:400] for line in lines if line.strip()][-last:]


def report(root_glob: str = "/tmp/rc-*", *, last: int = 8) -> list[str]:
    """Lines naming each cluster folder left behind and the severe lines of its logs."""
    out = []
    for root in sorted(glob.glob(root_glob)):
        logs = sorted({p for pattern in _LOGS for p in glob.glob(os.path.join(root, "session_*", "logs", pattern))})
        out.append(f"postmortem: Ray cluster folder left behind: {root} ({len(logs)} logs read)")
        for path in logs:
            if found := severe_lines(path, last=last):
                out.append(f"  {os.path.relpath(path, root)}:")
                out.extend(f"    {line}" for line in found)
    return out or ["postmortem: no Ray cluster folder was left behind (every cluster ended normally)"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.postmortem", description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="/tmp/rc-*", help="the cluster folders' glob (default /tmp/rc-*)")
    parser.add_argument("--last", type=int, default=8, help="severe lines per log (default 8)")
    args = parser.parse_args(argv)
    print("\n".join(report(args.root, last=args.last)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
