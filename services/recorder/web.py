"""The recorder's HTTP face: /healthz (is the broker there?) and /metrics (its counters as
venn_recorder_*_total), on VENN_RECORDER_PORT."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CollectorRegistry

from venn.broker.health import BrokerWatch
from venn.metrics import CONTENT_TYPE, StatsCollector, exposition


def recorder_app(stats: object, watch: BrokerWatch) -> web.Application:
    registry = CollectorRegistry()
    gauges = lambda: {"broker_available": float(watch.available)}  # noqa: E731
    registry.register(StatsCollector("venn_recorder", lambda: stats, gauges))

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=exposition(registry), headers={"Content-Type": CONTENT_TYPE})

    async def healthz(request: web.Request) -> web.Response:
        status = watch.status()
        ok = bool(status["available"])
        body = {"status": "ok" if ok else "broker_unavailable", "broker": status}
        return web.json_response(body, status=200 if ok else 503)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    return app


async def serve(app: web.Application, host: str, port: int) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
