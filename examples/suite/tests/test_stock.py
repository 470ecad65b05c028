"""The stock actor on one node: counts, and counts through a SIGKILL with receipts in flight."""

import pytest
import ray
from receipts import receive_for

from actors import Writer
from chaos import ActorTarget, Kill


def test_receipts_add_up(stock):
    me = Writer()
    ray.get([stock.receive.remote("apple", 2, **me.next()) for _ in range(5)], timeout=60)
    assert ray.get(stock.count.remote("apple"), timeout=60) == 10


@pytest.mark.chaos(seed=3, faults=[(1.0, Kill(ActorTarget(name="stock")))])  # SIGKILL 1 s into the body
def test_no_receipt_is_lost_or_doubled_by_a_kill(stock, chaos):
    acked = receive_for(stock, "pear", seconds=3.0)
    assert ray.get(stock.count.remote("pear"), timeout=60) == acked
