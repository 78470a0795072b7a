"""The recorder's /healthz says the truth about its database (issue 34, item 1): it said
``ok`` while the embedded PostgreSQL was down (it looked at the broker only)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp

from devtools.postgres import EmbeddedPostgres
from devtools.process import private_dir
from services.recorder import RecorderStats
from services.recorder.web import recorder_app, serve
from venn.audit.health import DatabaseWatch
from venn.broker.health import BrokerWatch
from venn.net import free_port


async def health(http: aiohttp.ClientSession, url: str) -> tuple[int, dict[str, Any]]:
    async with http.get(url) as r:
        return r.status, await r.json()


async def until_status(http: aiohttp.ClientSession, url: str, want: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while True:
        status, body = await health(http, url)
        if body["status"] == want:
            assert status == (200 if want == "ok" else 503), (status, body)
            return body
        assert time.monotonic() < deadline, body
        await asyncio.sleep(0.2)


async def test_the_recorders_health_turns_red_while_its_database_is_down(
    broker: str, tmp_path: Path
) -> None:
    run = private_dir(tmp_path / "run")
    server = EmbeddedPostgres(run / "postgres", password="pw-health").start()
    watch = BrokerWatch(broker)
    database = DatabaseWatch(server.url(), interval_s=0.2, grace_s=1.0)
    watch.start()
    database.start()
    port = free_port()
    runner = await serve(recorder_app(RecorderStats(), watch, database), "127.0.0.1", port)
    url = f"http://127.0.0.1:{port}/healthz"
    try:
        async with aiohttp.ClientSession() as http:
            await until_status(http, url, "ok")
            server.stop()
            down = await until_status(http, url, "database_unavailable")
            assert down["database"]["available"] is False and down["broker"]["available"]
            server.start()
            await until_status(http, url, "ok")
    finally:
        await runner.cleanup()
        await watch.stop()
        await database.stop()
        server.stop()
