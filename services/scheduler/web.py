"""The worker's two pages on Faust's web server: /metrics (Prometheus) and /healthz (the
broker's reachability and the partitions the stall guard sees stalled)."""

from __future__ import annotations

import time
from typing import Any

import faust
from faust.web import Request, Response, View
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from services.scheduler.stall import StallWatch
from venn.broker.health import BrokerWatch

METRICS_CONTENT_TYPE = CONTENT_TYPE_LATEST.split(";")[0] + "; version=0.0.4"


def health(
    broker: dict[str, object], stalled: list[tuple[str, int, float]]
) -> tuple[dict[str, Any], int]:
    """/healthz's body and status code: 503 while the broker is away or a partition is
    stalled."""
    body: dict[str, Any] = {
        "status": "ok" if broker["available"] else "broker_unavailable",
        "broker": broker,
    }
    if stalled and broker["available"]:
        body["status"] = "stalled"
        body["stalled"] = [{"topic": t, "partition": p, "seconds": round(s)} for t, p, s in stalled]
    return body, 200 if body["status"] == "ok" else 503


def add_pages(app: faust.App, broker: BrokerWatch, stalls: StallWatch) -> None:
    @app.page("/metrics")
    class Metrics(View):
        async def get(self, request: Request) -> Response:
            # aiohttp refuses a charset inside content_type; the exposition is ASCII anyway.
            return self.bytes(generate_latest(), content_type=METRICS_CONTENT_TYPE)

    @app.page("/healthz")
    class Health(View):
        async def get(self, request: Request) -> Response:
            body, status = health(broker.status(), stalls.stalled(time.monotonic()))
            return self.json(body, status=status)
