"""The worker's two pages on Faust's web server: /metrics (Prometheus) and /healthz (the
broker's reachability, and whether the decider's loop still finishes its cycles)."""

from __future__ import annotations

from typing import Any

import faust
from faust.web import Request, Response, View
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from services.scheduler.inputs import DeciderLoop
from venn.broker.health import BrokerWatch

METRICS_CONTENT_TYPE = CONTENT_TYPE_LATEST.split(";")[0] + "; version=0.0.4"


STALLED_S = 30.0
"""A deciding worker whose loop has not finished a cycle for this long is not healthy (a
cycle waits at most a second for records, then for the broker's acknowledgements)."""


def health(broker: dict[str, object], stalled_s: float) -> tuple[dict[str, Any], int]:
    """/healthz's body and status code: 503 while the broker is away or the decider's loop
    is stuck."""
    body: dict[str, Any] = {
        "status": "ok" if broker["available"] else "broker_unavailable",
        "broker": broker,
    }
    if stalled_s > STALLED_S and broker["available"]:
        body["status"] = "stalled"
        body["stalled_s"] = round(stalled_s)
    return body, 200 if body["status"] == "ok" else 503


def add_pages(app: faust.App, broker: BrokerWatch, loop: DeciderLoop) -> None:
    @app.page("/metrics")
    class Metrics(View):
        async def get(self, request: Request) -> Response:
            # aiohttp refuses a charset inside content_type; the exposition is ASCII anyway.
            return self.bytes(generate_latest(), content_type=METRICS_CONTENT_TYPE)

    @app.page("/healthz")
    class Health(View):
        async def get(self, request: Request) -> Response:
            body, status = health(broker.status(), loop.stalled_s())
            return self.json(body, status=status)
