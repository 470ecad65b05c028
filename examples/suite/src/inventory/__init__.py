"""A warehouse's stock as a Ray actor: the project a raychaos-tested suite belongs to."""

from inventory.stock import Stock

__all__ = ["Stock"]
