"""One part of the gateway served alone over real HTTP, on an in-memory `GatewayContext`:
a `DemandView` folded from what the part publishes (as the gateway's consumer would fold it
back from venn.jobs), a token issuer, and switches for the broker and the view."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from services.gateway.context import BrokerUnavailable, GatewayContext, NoJobsPrincipal
from services.gateway.demand import DemandView
from services.gateway.http import errors, uncompressed
from services.gateway.stats import GatewayStats
from venn import events as ev
from venn.auth import Tokens
from venn.core.status import SchedulerStatus
from venn.settings import Settings

SECRET = "a-test-secret-of-at-least-32-bytes!"


@dataclass
class MemoryGateway:
    """The state behind an in-memory context; flip its fields to change what parts see."""

    settings: Settings
    tokens: Tokens | None
    view: DemandView = field(default_factory=DemandView)
    stats: GatewayStats = field(default_factory=GatewayStats)
    ready: bool = True
    broker: bool = True
    may_write_jobs: bool = True
    status: SchedulerStatus | None = None
    published: list[ev.Event] = field(default_factory=list)

    async def publish(self, event: ev.Event) -> None:
        if not self.may_write_jobs:
            raise NoJobsPrincipal()
        if not self.broker:
            raise BrokerUnavailable("down")
        self.published.append(event)
        self.view.apply(event)

    def context(self) -> GatewayContext:
        return GatewayContext(
            settings=self.settings,
            gateway_id="gw-memory",
            tokens=self.tokens,
            view=self.view,
            stats=self.stats,
            view_ready=lambda: self.ready,
            status=lambda: self.status,
            broker_available=lambda: self.broker,
            publish_job_event=self.publish,
        )


def memory_gateway(auth: bool = True, **gateway: object) -> MemoryGateway:
    settings = Settings.from_env({}, running=False)
    settings = dataclasses.replace(settings, auth_secret=SECRET if auth else "")
    if gateway:
        settings = settings.with_gateway(**gateway)
    return MemoryGateway(settings, Tokens(SECRET) if auth else None)


@contextlib.asynccontextmanager
async def serve(
    memory: MemoryGateway, register: Callable[[web.Application, GatewayContext], object]
) -> AsyncIterator[tuple[aiohttp.ClientSession, str]]:
    """The part's routes (with the gateway's middlewares) on a real local port."""
    config = memory.settings.gateway
    app = web.Application(
        client_max_size=config.max_body_bytes,
        middlewares=[uncompressed, errors(memory.stats, config.busy_retry_after_s)],
    )
    register(app, memory.context())
    server = TestServer(app, auto_decompress=False)
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as session:
            yield session, str(server.make_url("")).rstrip("/")
    finally:
        await server.close()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
