"""The chaos agent travels with its actor: a node needs only ``ray[default]``. What is shipped
imports nothing else, the agent on a node runs the shipped copy, and its identity is its protocol
and the hash of that code: an agent of other code is never used, and left alone. A driver heals
only what it injected, and kills only the agents it started."""

from __future__ import annotations

import ast
import contextlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import psutil
import pytest
from ray import cloudpickle

import chaos.agents._agent as agent_module
import chaos.agents._ship as ship
from chaos import wait_until
from chaos.agents._agent import (
    AGENT_NAMESPACE,
    MISMATCH,
    PROTOCOL,
    AgentIdentity,
    AgentMismatch,
    ChaosAgent,
    agent_for,
    agent_name,
    driver_token,
    stop_agents,
)
from chaos.agents._identity import SHIPPED, SHIPPED_PACKAGES, code_hash, code_hash_of, shipped_file
from chaos.cluster import ClusterHandle

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests/

#: The driver's ``chaos`` folder, whose shipped modules the agent's package copies.
CHAOS = Path(ship.__file__).parents[1]

#: Imports the shipped package in an interpreter without site-packages (no pydantic, no rich,
#: no installed raychaos), psutil from Ray's wheel as a Ray worker gets it; prints what it used.
IMPORT_SHIPPED = """\
import sys
import chaos.agents._agent, chaos.agents._healer
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
    assert {m for m in used.split() if m.startswith("chaos.")} == {f"chaos.{m}" for m in (*SHIPPED, *SHIPPED_PACKAGES)}


def test_the_shipped_package_is_the_agents_modules_and_an_empty_init() -> None:
    package = Path(ship.agent_package())
    inits = [Path("__init__.py"), *(shipped_file(p).with_suffix("") / "__init__.py" for p in SHIPPED_PACKAGES)]
    assert sorted(p.relative_to(package) for p in package.rglob("*.py")) == sorted(
        [*inits, *(shipped_file(m) for m in SHIPPED)])
    for init in inits:
        (docstring,) = ast.parse((package / init).read_text()).body  # a docstring, no import
        assert isinstance(docstring, ast.Expr)


# -- the agent's identity: its protocol and its code -----------------------------------------------


def _copy_shipped(folder: Path) -> Path:
    for module in SHIPPED:
        (folder / shipped_file(module)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(CHAOS / shipped_file(module), folder / shipped_file(module))
    return folder


def test_the_code_hash_is_the_shipped_modules_bytes(tmp_path: Path) -> None:
    copy = _copy_shipped(tmp_path / "chaos")
    assert code_hash_of(copy) == code_hash() == code_hash_of(Path(ship.agent_package()))  # byte-identical copies
    for module in SHIPPED:  # one byte more in any shipped module is other code
        source = copy / shipped_file(module)
        original = source.read_bytes()
        source.write_bytes(original + b"\n")
        assert code_hash_of(copy) != code_hash(), module
        source.write_bytes(original)
    assert code_hash_of(copy) == code_hash()


def test_an_agents_name_holds_its_node_and_its_codes_hash(monkeypatch: pytest.MonkeyPatch) -> None:
    node = "ab12" * 14
    assert agent_name(node) == f"agent-{node[:16]}-{code_hash()[:12]}"
    monkeypatch.setattr(agent_module, "code_hash", lambda: "f" * 64)  # another build's driver
    assert agent_name(node) == f"agent-{node[:16]}-ffffffffffff"  # looks for another agent: no collision


def test_an_agent_answers_its_identity_and_who_started_it() -> None:
    agent = ChaosAgent(owner=driver_token())
    assert agent.identity() == AgentIdentity(protocol=PROTOCOL, code=code_hash(), owner=driver_token())
    assert agent.protocol() == PROTOCOL  # what an agent before identities answers, kept as it was


def test_the_driver_token_is_one_per_process() -> None:
    program = "from chaos.agents._agent import driver_token; print(driver_token())"
    other = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=60,
                           check=True).stdout.strip()
    assert driver_token() == driver_token() != other and other


@pytest.mark.parametrize(("theirs", "said"), [
    (AgentIdentity(protocol=PROTOCOL, code="0" * 64), f"is protocol {PROTOCOL}, code 000000000000; "),
    (AgentIdentity(protocol=PROTOCOL + 1, code="0" * 64), f"is protocol {PROTOCOL + 1}, code 000000000000; "),
    (None, "is none (it has no identity() method"),
    (PROTOCOL, f"is unreadable ({PROTOCOL})")], ids=["other-code", "other-protocol", "no-identity", "unreadable"])
def test_an_agent_of_other_code_is_refused_naming_both_identities_and_the_fix(theirs: object, said: str) -> None:
    node = "ab12" * 14
    mine = f"{MISMATCH} protocol {PROTOCOL}, code {code_hash()[:12]}: it runs other code"
    with pytest.raises(AgentMismatch, match=f"{re.escape(said)}.*{re.escape(mine)}") as caught:
        agent_module._checked(node, theirs)
    assert caught.value.node_id == node
    assert f"ray.kill(ray.get_actor({agent_name(node)!r}, namespace={AGENT_NAMESPACE!r}))" in str(caught.value)


def test_an_agent_of_this_code_started_by_another_driver_is_used() -> None:
    theirs = AgentIdentity(protocol=PROTOCOL, code=code_hash(), owner="another driver")
    assert agent_module._checked("n" * 56, theirs) is theirs


# -- ownership: a driver heals what it injected and kills what it started -------------------------


def _state(pid: int) -> str:
    try:
        return str(psutil.Process(pid).status())
    except psutil.NoSuchProcess:
        return "gone"


def test_a_heal_by_owner_stops_only_that_drivers_hogs() -> None:
    agent = ChaosAgent(owner="a")
    try:
        (mine,) = agent.cpu_hog(1, 30.0, owner="a")
        (theirs,) = agent.cpu_hog(1, 30.0, owner="b")
        assert agent.stop_hogs(owner="a") == 1  # an engine's heal of its CpuHog
        assert _state(mine) == "gone" and _state(theirs) != "gone"
        (mine,) = agent.cpu_hog(1, 30.0, owner="a")
        assert agent.heal_all(owner="a") == 1  # what stop_agents asks for
        assert _state(mine) == "gone" and _state(theirs) != "gone"
    finally:
        agent.heal_all()
    assert _state(theirs) == "gone"


def test_a_heal_by_owner_resumes_only_that_drivers_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    # Plain children of this process stand in for a node's Ray workers (no raylet here).
    monkeypatch.setattr(agent_module, "check_target", lambda pid, **_: psutil.Process(pid))
    sleepers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(2)]
    agent = ChaosAgent(owner="a")
    try:
        agent.pause(sleepers[0].pid, 30.0, owner="a")
        agent.pause(sleepers[1].pid, 30.0, owner="a")
        agent.pause(sleepers[1].pid, 30.0, owner="b")  # another driver's later pause of it holds it now
        assert agent.heal_all(owner="a") == 1
        assert _state(sleepers[0].pid) != psutil.STATUS_STOPPED
        assert _state(sleepers[1].pid) == psutil.STATUS_STOPPED
        assert agent.heal_all() == 1  # without an owner: everything (the agent's own last word)
        assert _state(sleepers[1].pid) != psutil.STATUS_STOPPED
    finally:
        agent.heal_all()
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait(timeout=10)


class _FakeHandle:
    """A cached agent's handle: records the heals asked of it (``ray.get`` returns what ``remote`` gives)."""

    def __init__(self) -> None:
        self.heals: list[dict[str, Any]] = []
        self.heal_all = SimpleNamespace(remote=self._heal)

    def _heal(self, **options: Any) -> int:
        self.heals.append(options)
        return 0


def test_stop_agents_heals_only_this_drivers_faults_and_kills_only_the_agents_it_started(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    killed: list[_FakeHandle] = []
    monkeypatch.setattr(ray, "get_runtime_context", lambda: SimpleNamespace(gcs_address="gcs:1"))
    monkeypatch.setattr(ray, "get", lambda ref, timeout: ref)
    monkeypatch.setattr(ray, "kill", killed.append)
    started, adopted, elsewhere = _FakeHandle(), _FakeHandle(), _FakeHandle()
    monkeypatch.setattr(agent_module, "_AGENTS", {
        ("gcs:1", "n1"): agent_module._Known(handle=started, ours=True),
        ("gcs:1", "n2"): agent_module._Known(handle=adopted, ours=False),
        ("gcs:2", "n1"): agent_module._Known(handle=elsewhere, ours=True)})
    assert stop_agents() == 1
    assert killed == [started]  # the adopted agent runs on, for the driver that started it
    assert started.heals == adopted.heals == [{"owner": driver_token()}] and elsewhere.heals == []
    assert list(agent_module._AGENTS) == [("gcs:2", "n1")]


# -- on a cluster --------------------------------------------------------------------------------


class _OtherCode:
    """An actor under this code's agent's name that answers another code's identity (a squatter)."""

    def protocol(self) -> int:
        return PROTOCOL

    def identity(self) -> AgentIdentity:
        return AgentIdentity(protocol=PROTOCOL, code="0" * 64, owner="another driver")


class _NoIdentity:
    """An actor under this code's agent's name that has no ``identity()`` (an agent from before them)."""

    def protocol(self) -> int:
        return PROTOCOL

    def where(self) -> int:
        return os.getpid()


class _StaleBuild:
    """An agent of this protocol built from other code, under the name every build of the protocol
    once shared (``agent-<node id>``): left on a long-lived cluster by an earlier attack."""

    def protocol(self) -> int:
        return PROTOCOL

    def where(self) -> tuple[int, str]:
        import ray

        return os.getpid(), ray.get_runtime_context().get_node_id()


def _free(name: str) -> None:
    """Free an agent's name: this process's agents stop, then whatever else holds the name is
    killed (an agent another test's driver started and left)."""
    import ray

    stop_agents()
    with contextlib.suppress(ValueError):  # none holds it
        ray.kill(ray.get_actor(name, namespace=AGENT_NAMESPACE))


def _shipped_on_path(self: object) -> list[str]:
    """Run in the agent: the unpacked packages on its path (Ray puts them after the driver's
    own directories, so this checkout's ``chaos`` wins here; a node elsewhere has only these)."""
    return [p for p in sys.path if "runtime_resources" in p and "py_modules_files" in p]


@pytest.mark.ray
def test_the_agent_gets_its_package_shipped(ray_cluster: ClusterHandle) -> None:
    import ray

    agent = agent_for(ray.get_runtime_context().get_node_id())
    (where,) = ray.get(agent.__ray_call__.remote(_shipped_on_path), timeout=30)
    for module in SHIPPED:
        assert Path(where, "chaos", shipped_file(module)).read_bytes() == (CHAOS / shipped_file(module)).read_bytes()
    assert ray.get(agent.protocol.remote(), timeout=30) == PROTOCOL
    assert ray.get(agent.identity.remote(), timeout=30) == AgentIdentity(  # hashed there: the same code
        protocol=PROTOCOL, code=code_hash(), owner=driver_token())
    (uri,) = ship.agent_runtime_env()["py_modules"]
    assert uri.startswith("gcs://_ray_pkg_") and uri.endswith(".zip") and Path(where).name in uri


@pytest.mark.ray
@pytest.mark.parametrize(("squatter", "said"), [(_OtherCode, f"is protocol {PROTOCOL}, code 000000000000; "),
                                                (_NoIdentity, "is none (it has no identity() method")],
                         ids=["other-code", "no-identity"])
def test_an_agent_of_other_code_is_refused_and_left_alone(ray_cluster: ClusterHandle, squatter: type,
                                                          said: str) -> None:
    import ray

    node = ray.get_runtime_context().get_node_id()
    _free(agent_name(node))  # the name is free for the squatter
    other: Any = ray.remote(squatter).options(name=agent_name(node), namespace=AGENT_NAMESPACE,
                                              lifetime="detached", num_cpus=0).remote()
    try:
        refused = f"{re.escape(said)}.*{MISMATCH} protocol {PROTOCOL}, code {code_hash()[:12]}: it runs other code"
        with pytest.raises(AgentMismatch, match=refused) as caught:
            agent_for(node)
        assert caught.value.node_id == node and "ray.kill(ray.get_actor(" in str(caught.value)
        with pytest.raises(AgentMismatch):  # refused again: never cached, never half-used
            agent_for(node)
        assert stop_agents() == 0  # not ours to remove
        ray.get(other.protocol.remote(), timeout=30)
    finally:
        ray.kill(other)


@pytest.mark.ray
def test_an_agent_of_this_protocol_but_other_code_is_not_reused(ray_cluster: ClusterHandle) -> None:
    import ray

    node = ray.get_runtime_context().get_node_id()
    _free(f"agent-{node[:16]}")
    stale: Any = ray.remote(_StaleBuild).options(name=f"agent-{node[:16]}", namespace=AGENT_NAMESPACE,
                                                 lifetime="detached", num_cpus=0).remote()
    try:
        stale_pid, _ = ray.get(stale.where.remote(), timeout=30)
        agent = agent_for(node)  # this code's own agent, started beside the stale one
        assert ray.get(agent.where.remote(), timeout=30)[0] != stale_pid
        assert ray.get(agent.identity.remote(), timeout=30).code == code_hash()
        stop_agents()
        assert ray.get(stale.where.remote(), timeout=30)[0] == stale_pid  # left alone
    finally:
        ray.kill(stale)


#: Another driver on the same cluster: pauses the victim through the node's agent, which it starts,
#: holds the pause until told, then heals it and stops its agents, as ``raychaos attack`` does.
OTHER_DRIVER = """\
import sys
sys.path.insert(0, sys.argv[3])
import ray
from chaos import ActorTarget, Chaos, Pause
from chaos.agents import stop_agents
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
with Chaos(address=sys.argv[1]).inject(Pause(ActorTarget(actor_id=sys.argv[2]), seconds=60.0)):
    print("paused", flush=True)
    sys.stdin.readline()
print("stopped", stop_agents(), flush=True)
"""


class _Victim:
    def pid(self) -> int:
        return os.getpid()


@pytest.mark.ray
def test_an_adopted_agent_is_neither_healed_nor_killed_by_the_driver_that_adopted_it(
        ray_cluster: ClusterHandle) -> None:
    import ray

    node = ray.get_runtime_context().get_node_id()
    _free(agent_name(node))  # the other driver starts the node's agent: it is that driver's
    victim: Any = ray.remote(_Victim).remote()
    pid = ray.get(victim.pid.remote(), timeout=30)
    other = subprocess.Popen([sys.executable, "-c", OTHER_DRIVER, ray_cluster.address, victim._actor_id.hex(),
                              str(Path(__file__).resolve().parents[1])],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdin is not None and other.stdout is not None
        assert other.stdout.readline().strip() == "paused"
        agent = agent_for(node)  # found running: adopted
        stopped = stop_agents()
        assert _state(pid) == psutil.STATUS_STOPPED  # the other driver's pause holds
        ray.get(agent.where.remote(), timeout=30)  # its agent lives on
        assert stopped == 0
        out, _ = other.communicate("\n", timeout=60)
        assert other.returncode == 0 and out.split() == ["stopped", "1"]  # its starter stops it
        wait_until(lambda: _state(pid) != psutil.STATUS_STOPPED, timeout=10, what="the victim resumed")
    finally:
        if other.poll() is None:
            other.kill()
            other.wait(timeout=30)
        ray.kill(victim)
