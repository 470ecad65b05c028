"""The chaos agent travels with its actor: a node needs only ``ray[default]``. What is shipped
imports nothing else, the agent on a node runs the shipped copy, and an agent of another
protocol is refused, never used, and left alone."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from ray import cloudpickle

import chaos._ship as ship
from chaos._agent import AGENT_NAMESPACE, MISMATCH, PROTOCOL, AgentMismatch, agent_for, agent_name, stop_agents
from chaos.cluster import ClusterHandle

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/

#: Imports the shipped package in an interpreter without site-packages (no pydantic, no rich,
#: no installed raychaos), psutil from Ray's wheel as a Ray worker gets it; prints what it used.
IMPORT_SHIPPED = """\
import sys
import chaos._agent, chaos._healer
print(chaos.__file__)
print(" ".join(sorted(m for m in sys.modules if m.split(".")[0] not in {*sys.stdlib_module_names, "__main__"})))
"""


def _thirdparty() -> str:
    import ray

    return os.path.join(os.path.dirname(ray.__file__), "thirdparty_files")


def test_the_shipped_agent_imports_only_the_standard_library_and_psutil(tmp_path: Path) -> None:
    root = os.path.dirname(ship.agent_package())
    env = {"PYTHONPATH": f"{root}{os.pathsep}{_thirdparty()}", "PATH": os.environ["PATH"],
           "PYTHONDONTWRITEBYTECODE": "1"}  # the shipped directory stays as it is shipped
    out = subprocess.run([sys.executable, "-S", "-c", IMPORT_SHIPPED], env=env, capture_output=True, text=True,
                         cwd=tmp_path, timeout=60, check=False)  # cwd: not this checkout's chaos
    assert out.returncode == 0, out.stderr
    where, used = out.stdout.splitlines()
    assert where == os.path.join(root, "chaos", "__init__.py")
    assert {m.split(".")[0] for m in used.split()} == {"chaos", "psutil"}
    assert {m for m in used.split() if m.startswith("chaos.")} == {f"chaos.{m}" for m in ship.SHIPPED}


def test_the_shipped_package_is_the_agents_modules_and_an_empty_init() -> None:
    package = Path(ship.agent_package())
    assert sorted(p.name for p in package.iterdir()) == sorted(["__init__.py", *(f"{m}.py" for m in ship.SHIPPED)])
    (docstring,) = ast.parse((package / "__init__.py").read_text()).body  # a docstring, no import
    assert isinstance(docstring, ast.Expr)


# -- on a cluster --------------------------------------------------------------------------------


class _OtherVersion:
    """What another raychaos's agent answers."""

    def protocol(self) -> int:
        return PROTOCOL + 1


class _NoProtocol:
    """An actor holding the agent's name that has no ``protocol()`` (an older agent)."""

    def where(self) -> int:
        return os.getpid()


def _shipped_on_path(self: object) -> list[str]:
    """Run in the agent: the unpacked packages on its path (Ray puts them after the driver's
    own directories, so this checkout's ``chaos`` wins here; a node elsewhere has only these)."""
    return [p for p in sys.path if "runtime_resources" in p and "py_modules_files" in p]


@pytest.mark.ray
def test_the_agent_gets_its_package_shipped(ray_cluster: ClusterHandle) -> None:
    import ray

    agent = agent_for(ray.get_runtime_context().get_node_id())
    (where,) = ray.get(agent.__ray_call__.remote(_shipped_on_path), timeout=30)
    for module in ship.SHIPPED:
        assert Path(where, "chaos", f"{module}.py").read_bytes() == Path(ship.__file__).with_name(
            f"{module}.py").read_bytes()
    assert ray.get(agent.protocol.remote(), timeout=30) == PROTOCOL
    (uri,) = ship.agent_runtime_env()["py_modules"]
    assert uri.startswith("gcs://_ray_pkg_") and uri.endswith(".zip") and Path(where).name in uri


@pytest.mark.ray
@pytest.mark.parametrize(("squatter", "said"), [(_OtherVersion, f"speaks protocol {PROTOCOL + 1}, "),
                                                (_NoProtocol, "speaks protocol none (")])
def test_an_agent_of_another_protocol_is_refused_and_left_alone(ray_cluster: ClusterHandle, squatter: type,
                                                                said: str) -> None:
    import ray

    stop_agents()  # this process's own agents go: the node's name is free for the other version's
    node = ray.get_runtime_context().get_node_id()
    other: Any = ray.remote(squatter).options(name=agent_name(node), namespace=AGENT_NAMESPACE,
                                              lifetime="detached", num_cpus=0).remote()
    try:
        refused = f"{re.escape(said)}.*{MISMATCH} {PROTOCOL}: another raychaos"
        with pytest.raises(AgentMismatch, match=refused) as caught:
            agent_for(node)
        assert caught.value.node_id == node and "ray.kill(ray.get_actor(" in str(caught.value)
        with pytest.raises(AgentMismatch):  # refused again: never cached, never half-used
            agent_for(node)
        assert stop_agents() == 0  # not ours to remove
        ray.get(getattr(other, "protocol" if squatter is _OtherVersion else "where").remote(), timeout=30)
    finally:
        ray.kill(other)
