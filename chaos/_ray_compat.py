"""What differs between the Ray minor releases raychaos runs on, each a fact in one place.

raychaos touches a few private Ray APIs; where a release moved or lacks one, the difference is
named here once, by the release it came in, and the rest of the code asks this module. Read
from the installed package's metadata, not ``ray.__version__``: nothing of Ray is imported until
a fact is used.

| fact | since | before it |
|---|---|---|
| token authentication (`ray._private.authentication`) | 2.52 | no token: every client is let in |
| `init_grpc_channel` in `ray._private.grpc_utils` | 2.52 | in `ray._private.utils` |
| `ray.exceptions.ActorAlreadyExistsError` (a `ValueError`) | 2.53 | a plain `ValueError` |
| `upload_py_modules_if_needed(include_gitignore=...)` | 2.53 | no such argument (nothing ignored) |
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from importlib.metadata import PackageNotFoundError, version
from typing import Any

__all__ = [
    "SINCE_2_53",
    "TOKEN_AUTH_SINCE",
    "actor_exists_error",
    "auth_headers",
    "ensure_token",
    "init_grpc_channel",
    "ray_minor",
    "token_auth",
    "token_auth_enabled",
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
