"""What the gateway's HTTP parts (device endpoints, job API, dashboard) may use of the
gateway process: its settings and id, the token checker, the demand view and whether it is
caught up, the scheduler's latest status, the broker's state, the counters, and a publisher
of job events. Nothing else: no producer, consumer or pending map."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from services.gateway.demand import DemandView
from services.gateway.stats import GatewayStats
from venn import events as ev
from venn.auth import Tokens
from venn.core.status import SchedulerStatus
from venn.settings import GatewaySettings, Settings


class NoJobsPrincipal(Exception):
    """This gateway may not write venn.jobs (it serves devices only)."""


class BrokerUnavailable(Exception):
    """The broker did not take the record (or is known to be down)."""


@dataclass(frozen=True)
class GatewayContext:
    settings: Settings
    gateway_id: str
    tokens: Tokens | None
    """None where the deployment does not authenticate."""
    view: DemandView
    """The fold of venn.jobs and venn.rounds (jobs, open rounds, assignments seen)."""
    stats: GatewayStats
    view_ready: Callable[[], bool]
    """True once the view has read venn.jobs and venn.rounds to their end."""
    status: Callable[[], SchedulerStatus | None]
    """The scheduler's latest snapshot read from venn.status (None before the first)."""
    broker_available: Callable[[], bool]
    publish_job_event: Callable[[ev.Event], Awaitable[None]]
    """Publish to venn.jobs, acknowledged; NoJobsPrincipal or BrokerUnavailable."""

    @property
    def config(self) -> GatewaySettings:
        return self.settings.gateway
