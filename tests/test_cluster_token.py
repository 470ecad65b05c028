"""A multi-node embedded cluster in a process whose Ray authentication mode is token and whose
HOME holds no token yet (a pytester subprocess of a suite whose session started Ray; seen in CI:
the head's GCS aborted on "Token authentication is enabled but Ray couldn't find an
authentication token", and the start failed on its port file). raychaos makes the token, as
``ray.init`` does for a new local cluster."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.ray, pytest.mark.usefixtures("no_shared_cluster")]

START = textwrap.dedent("""\
    import ray
    from chaos.cluster import live_nodes, local_cluster

    with local_cluster(nodes=2, num_cpus=1):
        print("nodes", len(live_nodes()))
""")


def test_a_multi_node_cluster_starts_in_token_mode_without_a_token_in_home(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH_TOKEN")}
    env |= {"HOME": str(tmp_path), "RAY_AUTH_MODE": "token"}
    out = subprocess.run([sys.executable, "-c", START], capture_output=True, text=True, timeout=240, env=env,
                         check=False)
    assert out.returncode == 0 and "nodes 2" in out.stdout, out.stdout[-2000:] + out.stderr[-4000:]
    assert (tmp_path / ".ray" / "auth_token").exists()  # made where Ray looks for it
