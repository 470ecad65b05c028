"""What differs between the Ray minor releases raychaos runs on, each a fact in one place.

raychaos touches a few private Ray APIs; where a release moved or lacks one, the difference is
named here once, by the release it came in, and the rest of the code asks this module. Read
from the installed package's metadata, not ``ray.__version__``: nothing of Ray is imported until
a fact is used.

The facts are :data:`FACTS` (the documentation's table is generated from them).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from typing import Any

__all__ = [
    "DRIVER_PICKS_HEAD_SINCE",
    "FACTS",
    "MIXED_AUTH_SINCE",
    "OWNER_DIED_SURFACES_SINCE",
    "RPC_IN_FLIGHT_SINCE",
    "RPC_KNOB_JSON_SINCE",
    "SINCE_2_53",
    "TOKEN_AUTH_SINCE",
    "ReleaseFact",
    "actor_exists_error",
    "auth_headers",
    "client_auth_mode",
    "ensure_token",
    "facts_markdown",
    "init_grpc_channel",
    "ray_minor",
    "rpc_failure_knob",
    "rpc_in_flight",
    "shared_host_worker_args",
    "token_auth",
    "token_auth_enabled",
    "token_found",
    "upload_py_modules",
]

#: The first minor release with token authentication (and ``ray._private.grpc_utils``).
TOKEN_AUTH_SINCE = (2, 52)


@cache
def ray_minor() -> tuple[int, int]:
    """The installed Ray's (major, minor); (0, 0) when Ray is not installed."""
    try:
        major, minor = version("ray").split(".")[:2]
    except (PackageNotFoundError, ValueError):
        return (0, 0)
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def token_auth() -> bool:
    """Whether the installed Ray has token authentication at all."""
    return ray_minor() >= TOKEN_AUTH_SINCE


def token_auth_enabled() -> bool:
    """Whether this process authenticates with a token (never before token authentication)."""
    if not token_auth():
        return False
    from ray._private.authentication.authentication_utils import is_token_auth_enabled

    return bool(is_token_auth_enabled())


def auth_headers() -> dict[str, str]:
    """The HTTP headers that authenticate this process to the dashboard (none without a token)."""
    if not token_auth():
        return {}
    from ray._private.authentication.http_token_authentication import get_auth_headers_if_auth_enabled

    return dict(get_auth_headers_if_auth_enabled({}))


def ensure_token(system_config: Mapping[str, Any]) -> None:
    """In token mode, a token for a cluster this process starts, created at Ray's default path
    when none is found, as ``ray.init`` does for a new local cluster. ``ray.cluster_utils`` does
    not: its head's GCS aborts ("Token authentication is enabled but Ray couldn't find an
    authentication token") in a process whose mode is token and whose HOME has no token yet."""
    if not token_auth():
        return
    from ray._private.authentication.authentication_token_setup import ensure_token_if_auth_enabled

    ensure_token_if_auth_enabled(dict(system_config), create_token_if_missing=True)


#: The first minor release with ``ActorAlreadyExistsError`` and ``include_gitignore``.
SINCE_2_53 = (2, 53)


def actor_exists_error() -> type[Exception]:
    """What creating a named actor whose name is taken raises."""
    if ray_minor() < SINCE_2_53:
        return ValueError
    from ray.exceptions import ActorAlreadyExistsError

    error: type[Exception] = ActorAlreadyExistsError
    return error


def upload_py_modules(runtime_env: Mapping[str, Any], *, scratch_dir: str) -> dict[str, Any]:
    """Ray's own upload of a runtime env's ``py_modules`` (as ``ray.init`` does), every file kept."""
    from ray._private.runtime_env.py_modules import upload_py_modules_if_needed

    keep = {"include_gitignore": False} if ray_minor() >= SINCE_2_53 else {}
    uploaded: dict[str, Any] = upload_py_modules_if_needed(dict(runtime_env), scratch_dir=scratch_dir, **keep)
    return uploaded


def init_grpc_channel(address: str) -> Any:
    """A gRPC channel to ``address`` as Ray's own clients open one (with the token, since 2.52)."""
    if token_auth():
        from ray._private.grpc_utils import init_grpc_channel as channel
    else:
        from ray._private.utils import init_grpc_channel as channel
    return channel(address)


#: The first minor release whose RPC failure knob fails calls while the request is in flight.
RPC_IN_FLIGHT_SINCE = (2, 52)
#: The first minor release that reads the RPC failure knob as JSON.
RPC_KNOB_JSON_SINCE = (2, 54)


def rpc_in_flight() -> bool:
    """Whether the installed Ray's RPC failure knob has in-flight failures."""
    return ray_minor() >= RPC_IN_FLIGHT_SINCE


def rpc_failure_knob(entries: Mapping[str, tuple[int, int, int, int]]) -> str:
    """``RAY_testing_rpc_failure``'s value for the installed Ray: per method, (most failures,
    request %, response %, in-flight %). Before 2.54 Ray reads ``M=max:req:resp`` entries (and
    a fourth field, in flight, from 2.52): a field count it does not expect fails a check in
    every process at start-up, so the in-flight share is left out before 2.52 (the caller
    refuses a non-zero one, see :func:`rpc_in_flight`)."""
    if ray_minor() >= RPC_KNOB_JSON_SINCE:
        return json.dumps({method: {"num_failures": most, "req_failure_prob": req, "resp_failure_prob": resp,
                                    "in_flight_failure_prob": in_flight}
                           for method, (most, req, resp, in_flight) in entries.items()})
    fields = 4 if rpc_in_flight() else 3
    return ",".join(f"{method}=" + ":".join(str(v) for v in shares[:fields]) for method, shares in entries.items())


#: The first minor release where ``ray.get`` on a dead owner's refs raises OwnerDiedError at once.
OWNER_DIED_SURFACES_SINCE = (2, 51)

#: The first minor release whose client in token mode also works with a cluster without token auth.
MIXED_AUTH_SINCE = (2, 59)


def token_found() -> bool:
    """Whether this process has a token where Ray's loader looks: ``RAY_AUTH_TOKEN``,
    ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``."""
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or os.path.join(os.path.expanduser("~"), ".ray", "auth_token")
    return bool(os.environ.get("RAY_AUTH_TOKEN")) or os.path.exists(path)


def client_auth_mode() -> str | None:
    """The ``RAY_AUTH_MODE`` a client of a cluster it did not start asks for (None: Ray's own
    default). Token mode sends the token, which a cluster with token authentication demands;
    before 2.59 a client in token mode fails with a cluster without it (its actors die, or it
    waits: seen on 2.52, 2.53, 2.54, 2.57 and 2.58), so there it asks for token mode only when it holds a token."""
    if not token_auth():
        return None
    return "token" if ray_minor() >= MIXED_AUTH_SINCE or token_found() else None


#: The first minor release whose driver, on a host with several nodes, attaches to the head.
DRIVER_PICKS_HEAD_SINCE = (2, 54)


def shared_host_worker_args() -> dict[str, str]:
    """``add_node`` arguments for a worker node on the driver's own host. Before 2.54 a driver
    attaches to any node of its IP address, a worker node too: killing that node then kills
    every actor the driver owns ("Owner's node has crashed"). A worker node at the loopback
    address leaves the head the only node of the host's address."""
    return {} if ray_minor() >= DRIVER_PICKS_HEAD_SINCE else {"node_ip_address": "127.0.0.1"}


@dataclass(frozen=True, slots=True, kw_only=True)
class ReleaseFact:
    """One difference between Ray minor releases that raychaos meets."""

    what: str  #: what came in that release
    since: tuple[int, int]  #: the first minor release that has it
    before: str  #: what the releases before it do instead
    verdict: str = ""  #: how it changes a verdict, if it does


FACTS: tuple[ReleaseFact, ...] = (
    ReleaseFact(what="`ray.get` on the refs of an owner that died raises `OwnerDiedError`",
                since=OWNER_DIED_SURFACES_SINCE,
                before="it waits out its timeout (`GetTimeoutError` at 30 s: 3 of 5 refs, 2 runs on 2.50.1) or "
                       "keeps returning the value (5 of 5 refs for 10 s, 1 run)",
                verdict="the `owner-death` scenario's `owner_death_surfaces` is broken"),
    ReleaseFact(what="token authentication (`ray._private.authentication`)", since=TOKEN_AUTH_SINCE,
                before="no token: every client is let in"),
    ReleaseFact(what="`init_grpc_channel` in `ray._private.grpc_utils`", since=TOKEN_AUTH_SINCE,
                before="in `ray._private.utils`"),
    ReleaseFact(what="RPC failures while the request is in flight (the knob's third share)",
                since=RPC_IN_FLIGHT_SINCE, before="request and response failures only",
                verdict="an `RpcFailure` with `in_flight_percent` is refused, naming the release"),
    ReleaseFact(what="`ray.exceptions.ActorAlreadyExistsError` (a `ValueError`)", since=SINCE_2_53,
                before="a plain `ValueError`"),
    ReleaseFact(what="`upload_py_modules_if_needed(include_gitignore=...)`", since=SINCE_2_53,
                before="no such argument (nothing ignored)"),
    ReleaseFact(what="a client in token mode works with a cluster without token authentication",
                since=MIXED_AUTH_SINCE,
                before="its actors die (`ActorDiedError`: seen on 2.53, 2.54, 2.57, 2.58) or it waits (2.52)",
                verdict="`run --address` and `attack` ask for token mode before 2.59 only when a token is "
                        "found (`RAY_AUTH_TOKEN`, `RAY_AUTH_TOKEN_PATH`, `~/.ray/auth_token`)"),
    ReleaseFact(what="a driver on a host of several nodes attaches to the head node", since=DRIVER_PICKS_HEAD_SINCE,
                before="to any node of its IP address: a node kill may take the driver's actors ('Owner's node has "
                       "crashed')",
                verdict="embedded clusters put their worker nodes at 127.0.0.1 before 2.54, so a killed node "
                        "never holds the driver"),
    ReleaseFact(what="`ray.init(address=...)` on a host whose raylet has not registered yet waits for it",
                since=(2, 55),
                before="2.54 raises at once (`RuntimeError: No node info found matching node ids`, from "
                       "`get_node_to_connect_for_driver`, new in 2.54); 2.53 and earlier pick the node another way",
                verdict="a program, or `raychaos attack`, started right after `ray start` on 2.54 may die in "
                        "`ray.init`: wait until `ray status` lists the node (raychaos's own tests do)"),
    ReleaseFact(what="`RAY_gcs_server_port_wait_time_s`: how long a starting GCS may take (raychaos gives 90 s)",
                since=(2, 57), before="Ray's own fixed wait; the variable is not read"),
    ReleaseFact(what="the RPC failure knob (`RAY_testing_rpc_failure`) read as JSON", since=RPC_KNOB_JSON_SINCE,
                before="`Method=max:req:resp[:in_flight],...` (another field count fails a check at start-up)"),
)


def facts_markdown() -> str:
    """The table of :data:`FACTS`, as the documentation shows it."""
    rows = ["| since | what | before it | changes a verdict |", "|---|---|---|---|"]
    rows += [f"| {f.since[0]}.{f.since[1]} | {f.what} | {f.before} | {f.verdict or 'no'} |"
             for f in sorted(FACTS, key=lambda f: f.since)]
    return "\n".join(rows) + "\n"
