"""Workloads by name: the built-in ones, those registered with :func:`register_workload`,
and those installed packages declare under the ``raychaos.workloads`` entry-point group."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from importlib.metadata import entry_points

from chaos.errors import InvalidConfig
from scenarios.model._workload import Params, Workload

__all__ = ["ENTRY_POINT_GROUP", "builtin_workloads", "known_workloads", "register_workload"]

#: The entry-point group a package declares its workloads under, e.g. in its pyproject.toml:
#: ``[project.entry-points."raychaos.workloads"] my-workload = "mypkg.chaos:MyWorkload"``.
ENTRY_POINT_GROUP = "raychaos.workloads"

_registered: dict[str, type[Workload]] = {}
_lock = threading.Lock()


def register_workload(name: str, workload: type[Workload], *, replace: bool = False) -> type[Workload]:
    """Make ``workload`` available to scenario files as ``workload = "<name>"``.

    Args:
        replace: allow taking a name already registered (a built-in name never).

    Returns:
        ``workload``, so it also works as ``register_workload("x", X)`` after the class.

    Raises:
        InvalidConfig: the name is empty, holds ``:`` or is taken; the class is not a
            :class:`scenarios.Workload` subclass or its ``Params`` not a :class:`scenarios.Params`.
    """
    _check_class(name, workload)
    with _lock:
        taken = name in builtin_workloads() or (name in _registered and not replace)
        if not isinstance(name, str) or not name or ":" in name or taken:
            raise InvalidConfig(f"workload name {name!r}: {_name_fix(name, taken)}")
        _registered[name] = workload
    return workload


def _name_fix(name: object, taken: bool) -> str:
    if taken:
        return ("already taken (built-in or registered); choose another name, or pass "
                "replace=True to re-register your own")
    return "must be a non-empty string without ':' (a ':' names a module:Class path)"


def _check_class(name: object, workload: object) -> None:
    if not (isinstance(workload, type) and issubclass(workload, Workload)):
        raise InvalidConfig(f"workload {name!r}: {workload!r} is not a scenarios.Workload subclass")
    if not (isinstance(workload.Params, type) and issubclass(workload.Params, Params)):
        raise InvalidConfig(f"workload {name!r}: {workload.__name__}.Params = {workload.Params!r} "
                            "is not a scenarios.Params subclass; declare its fields on one")


def known_workloads() -> dict[str, type[Workload]]:
    """Every workload by name: built-ins, then installed entry points, then registered ones.

    Raises:
        InvalidConfig: an installed entry point cannot be loaded, is not a workload, or takes
            a built-in's name or another entry point's.
    """
    with _lock:
        registered = dict(_registered)
    return {**builtin_workloads(), **_installed(), **registered}


def _installed() -> dict[str, type[Workload]]:
    found: dict[str, type[Workload]] = {}
    builtin = builtin_workloads()
    for point in entry_points(group=ENTRY_POINT_GROUP):
        _check_point_name(point.name, point.value, builtin, found)
        try:
            loaded = point.load()
        except Exception as exc:
            raise InvalidConfig(f"entry point {point.name} = {point.value!r} in group {ENTRY_POINT_GROUP!r} "
                                f"cannot be loaded ({type(exc).__name__}: {exc}); fix or uninstall "
                                "the package that declares it") from exc
        _check_class(point.name, loaded)
        found[point.name] = loaded
    return found


def _check_point_name(name: str, value: str, builtin: Mapping[str, object], found: Mapping[str, object]) -> None:
    """An entry point may not take a built-in's name, nor one another entry point declared:
    either would silently replace a workload (as :func:`register_workload` refuses to)."""
    if name in builtin or name in found:
        whose = "a built-in workload" if name in builtin else "another installed entry point"
        raise InvalidConfig(f"entry point {name} = {value!r} in group {ENTRY_POINT_GROUP!r} takes the name of "
                            f"{whose}, which it would silently replace; declare it under another name in "
                            "the package's entry points, or uninstall one of the packages")


def builtin_workloads() -> dict[str, type[Workload]]:
    """The built-in workloads, area by area: the one table of them."""
    # Heavy (Ray's libraries): imported only when asked.
    from scenarios.workloads import _builtin, apps, disk, gcs, net, serve, surface, user

    areas = (_builtin.WORKLOADS, surface.WORKLOADS, disk.WORKLOADS, net.WORKLOADS, gcs.WORKLOADS, serve.WORKLOADS,
             apps.WORKLOADS, user.WORKLOADS)
    return {name: workload for area in areas for name, workload in area.items()}
