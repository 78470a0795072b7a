"""The dashboard part of the gateway (services/gateway/dashboard.py) served alone on an
in-memory context: the public page, the operator-only event stream of snapshots, and a
token that expires mid-stream ending it."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

import aiohttp
from aiohttp import web

from services.gateway import dashboard
from services.gateway.context import GatewayContext
from services.gateway.dashboard_view import DeadLetterTally
from tests.gateway_parts import bearer, memory_gateway, serve
from venn import events as ev

PERIOD_S = 0.05


def registered(tally: DeadLetterTally) -> Callable[[web.Application, GatewayContext], None]:
    def register(app: web.Application, ctx: GatewayContext) -> None:
        dashboard.register(app, ctx, tally, period_s=PERIOD_S)

    return register


async def events(response: aiohttp.ClientResponse, count: int) -> list[tuple[str, str]]:
    """The first ``count`` server-sent events (name, data) of the stream."""
    found: list[tuple[str, str]] = []
    name = data = ""
    async with asyncio.timeout(10):
        async for raw in response.content:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: "):
                data = line[6:]
            elif not line and name:
                found.append((name, data))
                name = data = ""
                if len(found) == count:
                    break
    return found


async def test_the_page_is_public_and_locked_down() -> None:
    memory = memory_gateway()
    async with serve(memory, registered(DeadLetterTally())) as (http, url):
        async with http.get(f"{url}/") as r:
            assert r.status == 200 and "text/html" in r.headers["Content-Type"]
            assert "default-src 'none'" in r.headers["Content-Security-Policy"]
        async with http.get(f"{url}/static/../dashboard.py") as r:
            assert r.status in (403, 404)
        async with http.get(f"{url}{dashboard.EVENTS_PATH}") as r:
            assert r.status == 401
        assert memory.tokens is not None
        job_token = bearer(memory.tokens.issue("job", "a", jobs=["a"], ttl_s=60))
        async with http.get(f"{url}{dashboard.EVENTS_PATH}", headers=job_token) as r:
            assert r.status == 403
    assert memory.stats.unauthorized == 2


async def test_snapshots_show_the_view_and_the_dead_letters() -> None:
    memory = memory_gateway()
    assert memory.tokens is not None
    registration = ev.JobRegistered(
        event_id="reg-a", time=1.0, job_id="job-a", requirement={"ram": 2}, demand=3,
        rounds=2, deadline_s=60, workload_s=5,
    )  # fmt: skip
    memory.view.apply(registration)
    tally = DeadLetterTally()
    tally.add(ev.dead_letter_for(b"junk", "not_an_object: x", "venn.checkins", 0, 7, 1.0))
    admin = bearer(memory.tokens.issue("admin", "ops", ttl_s=60))
    async with (
        serve(memory, registered(tally)) as (http, url),
        http.get(f"{url}{dashboard.EVENTS_PATH}", headers=admin) as r,
    ):
        assert r.status == 200 and r.headers["Content-Type"] == "text/event-stream"
        (name, data), _ = await events(r, 2)
    assert name == "snapshot"
    snapshot = json.loads(data)
    assert snapshot["gateway"] == {
        "id": "gw-memory", "view_ready": True, "broker_available": True
    }  # fmt: skip
    assert [job["job_id"] for job in snapshot["jobs"]] == ["job-a"]
    assert json.dumps(snapshot["dead_letters"]).count("venn.checkins") >= 1


async def test_a_token_that_expires_ends_the_stream_with_an_auth_event() -> None:
    memory = memory_gateway()
    assert memory.tokens is not None
    short = bearer(memory.tokens.issue("admin", "ops", ttl_s=1))
    async with (
        serve(memory, registered(DeadLetterTally())) as (http, url),
        http.get(f"{url}{dashboard.EVENTS_PATH}", headers=short) as r,
    ):
        assert r.status == 200
        seen = await events(r, 200)  # ends at the auth event: the server closes the stream
    names = [name for name, _ in seen]
    assert names[-1] == "auth" and set(names[:-1]) == {"snapshot"}
    assert json.loads(seen[-1][1])["error"] == "expired_token"
    assert memory.stats.unauthorized == 1
