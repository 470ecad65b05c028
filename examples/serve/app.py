"""A small Ray Serve app to validate under faults: counts the words of a text.

``GET /?text=the+quick+brown+fox`` answers ``{"words": 4, "letters": 16}``. Run it alone with
``serve run app:app``; run it under the schedule of ``serve-app.toml`` with
``raychaos run serve-app.toml`` from this folder.
"""

from __future__ import annotations

import os

from ray import serve
from starlette.requests import Request

#: EXAMPLE_NO_FT=1 turns fault tolerance off: one replica, so a killed replica costs every
#: request until Serve has started its replacement (the run then fails).
REPLICAS = 1 if os.environ.get("EXAMPLE_NO_FT") == "1" else 2


@serve.deployment(num_replicas=REPLICAS, ray_actor_options={"num_cpus": 0.25})
class WordCount:
    """Splits the text of the query into words and sums their lengths."""

    async def __call__(self, request: Request) -> dict[str, int]:
        words = request.query_params.get("text", "").split()
        return {"words": len(words), "letters": sum(len(word) for word in words)}


app = WordCount.bind()
