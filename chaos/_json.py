"""The JSON value type: what the journal, fault records and runtime envs serialise to."""

from __future__ import annotations

from typing import TypeAlias

__all__ = ["JsonValue"]

JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"
