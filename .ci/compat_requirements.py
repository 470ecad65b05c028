"""The requirements of a compatibility venv: raychaos's own dependencies and its `test` and
`disk` extras from pyproject.toml, with Ray pinned to the minor release asked for
(``ray[default]==2.55.*``: its newest patch). One per line, for ``uv pip install -r``.

    python .ci/compat_requirements.py 2.55 > requirements.txt
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

SUPPORTED = range(50, 61)  # the minor releases 2.50 to 2.60


def main() -> None:
    minor = sys.argv[1] if len(sys.argv) > 1 else ""
    match = re.fullmatch(r"2\.(\d+)", minor)
    if not match or int(match.group(1)) not in SUPPORTED:
        sys.exit(f"RAY={minor!r}: give a minor release from 2.50 to 2.60, e.g. RAY=2.55")
    project = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    wanted = [*project["dependencies"], *project["optional-dependencies"]["test"],
              *project["optional-dependencies"]["disk"]]
    for requirement in wanted:
        print(f"ray[default]=={minor}.*" if requirement.startswith("ray[") else requirement)


if __name__ == "__main__":
    main()
