"""The recorder's HTTP face: /healthz (are the broker and the audit database there?) and
/metrics (its counters as venn_recorder_*_total), on VENN_RECORDER_PORT."""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CollectorRegistry

from venn.audit.health import DatabaseWatch
from venn.broker.health import BrokerWatch
from venn.metrics import CONTENT_TYPE, StatsCollector, exposition


def recorder_app(stats: object, watch: BrokerWatch, database: DatabaseWatch) -> web.Application:
    registry = CollectorRegistry()

    def gauges() -> dict[str, float]:
        return {
            "broker_available": float(watch.available),
            "database_available": float(database.available),
        }

    registry.register(StatsCollector("venn_recorder", lambda: stats, gauges))

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=exposition(registry), headers={"Content-Type": CONTENT_TYPE})

    async def healthz(request: web.Request) -> web.Response:
        broker, db = watch.status(), database.status()
        status = (
            "ok"
            if broker["available"] and db["available"]
            else "broker_unavailable"
            if not broker["available"]
            else "database_unavailable"
        )
        body = {"status": status, "broker": broker, "database": db}
        return web.json_response(body, status=200 if status == "ok" else 503)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    return app


async def serve(app: web.Application, host: str, port: int) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
