"""The requirements of a compatibility venv: raychaos's own dependencies and its `test` and
`disk` extras from pyproject.toml, with Ray pinned to the minor release asked for
(``ray[default]==2.55.*``: its newest patch). One per line, for ``uv pip install -r``.

    python .ci/compat_requirements.py 2.55 [findings] > requirements.txt
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

SUPPORTED = range(50, 61)  # the minor releases 2.50 to 2.60


def minor_or_exit(minor: str) -> str:
    """The minor release given, checked: "2.5x" within SUPPORTED, else exit naming the fix."""
    match = re.fullmatch(r"2\.(\d+)", minor)
    if not match or int(match.group(1)) not in SUPPORTED:
        sys.exit(f"RAY={minor!r}: give a minor release from 2.50 to 2.60, e.g. RAY=2.55")
    return minor


# `findings`: what findings/ needs beyond the subset: Ray Train and the CPU torch make test pins.
EXTRAS = {"findings": ("ray[train]", "torch==2.13.0")}


def main() -> None:
    minor = minor_or_exit(sys.argv[1] if len(sys.argv) > 1 else "")
    extras = sys.argv[2:]
    if unknown := [e for e in extras if e not in EXTRAS]:
        sys.exit(f"{unknown}: not an extra here; give one of {sorted(EXTRAS)}")
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["test"],
              *project["optional-dependencies"]["disk"], *(r for e in extras for r in EXTRAS[e])]
    for requirement in wanted:
        name = re.match(r"ray\[([^\]]+)\]", requirement)
        print(f"ray[{name.group(1)}]=={minor}.*" if name else requirement)


if __name__ == "__main__":
    main()
