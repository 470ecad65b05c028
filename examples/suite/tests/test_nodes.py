"""The stock actor on a worker node of a three-node cluster, through the loss of a node."""

import pytest
import ray
from inventory import Stock
from receipts import receive_for

from chaos import KillNode, NodeTarget

# A cluster of this shape for these tests (the rest of the suite keeps the one-node cluster).
pytestmark = pytest.mark.ray_cluster(nodes=3, cpus=1, resources={"worker": 4})


@pytest.fixture(scope="module")
def stock_on_a_worker(ray_cluster, tmp_path_factory):
    """A ``Stock`` kept off the head (``worker`` resource), its checkpoints where every node of
    this one-machine cluster reads them."""
    storage = tmp_path_factory.mktemp("stock-nodes")
    actor = ray.remote(max_restarts=-1, max_task_retries=-1, resources={"worker": 1})(Stock).remote(str(storage))
    ray.get(actor.total.remote(), timeout=60)
    yield actor
    ray.kill(actor)


@pytest.mark.chaos(seed=5, faults=[(1.0, KillNode(NodeTarget()))])  # a worker node, chosen by the seed
def test_no_receipt_is_lost_or_doubled_when_a_node_dies(stock_on_a_worker, chaos):
    acked = receive_for(stock_on_a_worker, "plum", seconds=6.0)
    assert ray.get(stock_on_a_worker.count.remote("plum"), timeout=60) == acked
