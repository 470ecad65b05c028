"""Receipts sent with a window of them in flight, as the warehouse's scanners send them."""

import time
from collections import deque

import ray

from actors import Writer


def receive_for(stock, sku: str, seconds: float, *, window: int = 16) -> int:
    """Send receipts of one unit for ``seconds``, ``window`` of them in flight; return how many
    were acknowledged (every one sent, or this raises)."""
    me, in_flight, acked = Writer(), deque(), 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        in_flight.append(stock.receive.remote(sku, 1, **me.next()))
        if len(in_flight) >= window:
            ray.get(in_flight.popleft(), timeout=60)
            acked += 1
    return acked + len(ray.get(list(in_flight), timeout=60))
