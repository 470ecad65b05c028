"""The suite's own fixtures, built on raychaos's session cluster (``ray_cluster``)."""

import pytest
import ray
from inventory import Stock


@pytest.fixture(scope="module")
def stock(ray_cluster, tmp_path_factory):
    """One ``Stock`` actor per test module, named ``stock``, on the session's cluster: restarted
    without limit, retried calls delivered again (at least once; ``Stock`` counts them once)."""
    storage = tmp_path_factory.mktemp("stock")
    actor = ray.remote(max_restarts=-1, max_task_retries=-1)(Stock).options(name="stock").remote(str(storage))
    ray.get(actor.total.remote(), timeout=60)
    yield actor
    ray.kill(actor)
