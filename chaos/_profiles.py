"""The Hypothesis profiles raychaos registers, and the depth of an ``ActorChaosMachine``.

Registered, never loaded: a test suite that does not ask for them keeps its own settings (the
plugin is a guest). Hypothesis is imported here, so only code that uses it imports this module.
"""

from __future__ import annotations

from types import MappingProxyType

from hypothesis import HealthCheck, settings
from hypothesis.errors import InvalidArgument

from chaos._errors import InvalidConfig

__all__ = ["MACHINE_DEPTH", "machine_settings", "register_profiles"]

#: Examples and steps per example of an ``ActorChaosMachine`` under each raychaos profile. Every
#: step may kill and restart a real actor (about a second), so ``ci`` finishes in about a minute
#: and ``thorough`` searches ten times as many examples, each three times as long.
MACHINE_DEPTH = MappingProxyType({"ci": (5, 10), "thorough": (50, 30)})


def register_profiles() -> None:
    """Register ``thorough`` (ten times Hypothesis's default examples and steps) without loading it,
    unless a profile of that name is registered already (the suite's own wins)."""
    try:
        settings.get_profile("thorough")
        return
    except InvalidArgument:
        pass
    settings.register_profile(
        "thorough", max_examples=1000, stateful_step_count=500, deadline=None, print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


def machine_settings(profile: str) -> settings:
    """An ``ActorChaosMachine``'s default settings under ``profile`` (``ci`` or ``thorough``), on
    top of the Hypothesis profile loaded now (its derandomization, its database).

    Raises:
        InvalidConfig: ``profile`` is neither (the message names both).
    """
    if profile not in MACHINE_DEPTH:
        raise InvalidConfig(f"raychaos profile {profile!r} is not one of {sorted(MACHINE_DEPTH)}; set "
                         "--chaos-profile (or RAYCHAOS_PROFILE) to ci or thorough")
    examples, steps = MACHINE_DEPTH[profile]
    return settings(max_examples=examples, stateful_step_count=steps, deadline=None, print_blob=True,
                    suppress_health_check=list(HealthCheck))
