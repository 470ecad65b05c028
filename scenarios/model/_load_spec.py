"""What an attack file says of its load and objectives (``[load]``, ``[[load.routes]]``,
``[slo]``), as typed models, and the names of an attack's verdicts. Imports nothing of the
scenario loader: the attack workload reads these too."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["PROBE_VERDICTS", "SLO_VERDICTS", "LoadSpec", "RouteSpec", "SloSpec"]

#: The verdicts of an attack's probes, and of its load.
PROBE_VERDICTS = ("probes_pass_after_heal", "probes_recover")
SLO_VERDICTS = ("slo_steady_state", "slo_availability", "slo_latency", "slo_recovered")


class RouteSpec(BaseModel):
    """One kind of request of the load (`[[load.routes]]`), drawn by its weight against the others'."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    #: The path (and query) on the load's host.
    path: str = Field(default="/", pattern=r"^/")
    method: Literal["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"] = "GET"
    headers: dict[str, str] = Field(default_factory=dict)
    #: The request's body.
    data: str = ""
    weight: float = Field(default=1.0, gt=0)
    #: Text each 200 of this route must contain ("" checks none).
    body: str = ""


class LoadSpec(BaseModel):
    """An open-loop HTTP load (`[load]`): `rate` requests a second, each sent at its time whatever
    the others are doing, to `url` or to its `routes` on that host; each answer judged against
    `timeout`."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    url: str = Field(pattern=r"^https?://[^/]+(/.*)?$")
    rate: float = Field(default=20.0, gt=0, le=2000)
    timeout: float = Field(default=2.0, gt=0, le=60)
    #: Text each 200 of the default route (`url`) must contain ("" checks none).
    body: str = ""
    routes: list[RouteSpec] = Field(default_factory=list)


class SloSpec(BaseModel):
    """The service level objectives the load is judged by (`[slo]`), fault by fault, against its
    steady state before the first fault."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    #: The share of requests answered (200, the body right, within the timeout) in each fault's window.
    availability: float = Field(default=0.99, gt=0, le=1)
    #: Each fault window's p99 at most the steady state's times this...
    p99_factor: float = Field(default=3.0, ge=1)
    #: ... plus this many milliseconds.
    p99_slack_ms: float = Field(default=50.0, ge=0)
    #: Seconds from each fault's confirmation it is judged over (its own length if longer).
    window: float = Field(default=5.0, gt=0, le=600)
    #: Seconds after each fault's window until a second of requests meets the objective again.
    recover_within: float = Field(default=10.0, gt=0, le=3600)
