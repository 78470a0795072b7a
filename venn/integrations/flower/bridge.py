"""The Venn Flower bridge: how the ServerApps of a SuperLink speak to Venn.

    python -m venn.integrations.flower.bridge        # beside the SuperLink; VENN_RUN_DIR set

A ServerApp wrapped in `venn_flower.VennStrategy` needs neither Kafka nor this package: it
calls the bridge over HTTP (`venn_flower.bridge.Bridge`), and the bridge turns each call
into the run's Venn job events with the SDK (`venn.sdk.VennClient`, one per run, signed in
as a coordinator with the run's job token, or one minted from the deployment's secret).

- ``PUT /v1/runs/{job}``: register the run's job (again: the same registration);
  answers the requirement as Venn reads it.
- ``POST /v1/runs/{job}/rounds/{r}``: request round attempt ``r`` of ``demand`` nodes.
- ``GET /v1/runs/{job}/rounds/{r}?have=N&wait=S``: the attempt's devices, once more than
  ``N`` are assigned (or its demand is, or ``S`` seconds passed), and ``heard_s``: how long
  ago the bridge last read anything from Venn's assignment and result topics (any job's),
  which tells a ServerApp whether Venn is silent or only busy.
- ``POST /v1/runs/{job}/rounds/{r}/close``, ``.../finish``, ``.../cancel``, ``.../alive``.
- ``GET /healthz``.

A call that cannot reach the broker within ``VENN_FLOWER_BRIDGE_CALL_TIMEOUT_S`` answers
503 at once (the ServerApp then samples its own nodes); the broker's own error lines are
kept out of the log (one line when it goes, one when it is back). A run the bridge heard
nothing of for ``VENN_FLOWER_BRIDGE_IDLE_S`` is dropped (its ServerApp is gone: its job's
heartbeats stop and Venn expires it).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import logging
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiokafka.errors import KafkaError

from venn.auth.local import job_token
from venn.core.model import Requirement
from venn.core.round_tally import RoundTally
from venn.sdk import VennClient
from venn.settings import Settings

log = logging.getLogger("venn.flower.bridge")

Json = dict[str, Any]
OPEN_ATTEMPTS = 8
"""Round attempts of one run the bridge follows at once (older ones never closed are
forgotten)."""


class Unavailable(Exception):
    """The broker did not take a call in time."""


@dataclass
class RunJob:
    """One run's Venn job, as the bridge follows it."""

    job_id: str
    client: VennClient
    submit_token: str = field(default_factory=lambda: uuid.uuid4().hex)
    arrival: float = field(default_factory=time.time)
    tallies: dict[int, RoundTally] = field(default_factory=dict)
    """Open round attempts (a run may have a replacement attempt beside its round's)."""
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    last_call: float = field(default_factory=time.monotonic)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    async def follow(self) -> None:
        async for assignment in self.client.assignments(self.job_id):
            tally = self.tallies.get(assignment.round_index)
            if tally is not None and tally.on_assignment(assignment, time.time()):
                self.changed.set()

    async def drain_results(self) -> None:
        async for result in self.client.results(self.job_id):
            tally = self.tallies.get(result.round_index)
            if tally is not None:
                tally.on_result(result)


class FlowerBridge:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings.for_role("coordinator")
        self.timeout_s = settings.flower.bridge_call_timeout_s
        self.idle_s = settings.flower.bridge_idle_s
        self.runs: dict[str, RunJob] = {}
        self.heard_at: float | None = None
        self._counts: dict[str, int] = {}
        self._broker_ok: bool | None = None
        self._watch: asyncio.Task[None] | None = None

    # -- Venn's side -------------------------------------------------------------------
    def _broker(self, ok: bool, why: str = "") -> None:
        if ok and self._broker_ok is False:
            log.info("broker reachable again")
        elif not ok and self._broker_ok is not False:
            log.warning("broker unreachable (%s): calls answer 503 until it is back", why)
        self._broker_ok = ok

    async def _bounded(self, call: Awaitable[Any]) -> Any:
        try:
            async with asyncio.timeout(self.timeout_s):
                result = await call
        except (TimeoutError, OSError, KafkaError) as exc:
            self._broker(False, repr(exc)[:200])
            raise Unavailable(repr(exc)[:200]) from None
        self._broker(True)
        return result

    async def _start_client(self, job_id: str, token: str | None) -> VennClient:
        s = self.settings
        client = VennClient(
            s.broker,
            client_id=f"venn-flower-bridge-{job_id}",
            token=token or job_token(s, [job_id], owner="flower") or None,
            kafka_options=s.kafka_options,
            heartbeat_s=s.job_heartbeat_s,
        )
        try:
            await self._bounded(client.start())
        except Unavailable:
            with contextlib.suppress(Exception):
                await client.close()
            raise
        return client

    async def _drop(self, run: RunJob) -> None:
        self.runs.pop(run.job_id, None)
        self._counts.pop(run.job_id, None)
        run.client.unsubscribe(run.job_id)
        for task in run.tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(run.client.close(), 10)

    async def watch(self) -> None:
        """Note when Venn was last heard from; drop runs whose ServerApp went silent."""
        while True:
            await asyncio.sleep(0.5)
            now = time.monotonic()
            for job_id, run in list(self.runs.items()):
                stats = run.client.stats
                seen = stats.dispatched + stats.ignored
                if seen != self._counts.get(job_id):
                    if job_id in self._counts:
                        self.heard_at = now
                    self._counts[job_id] = seen
                if now - run.last_call > self.idle_s:
                    log.info("run %s: nothing heard for %.0f s, dropped", job_id, self.idle_s)
                    await self._drop(run)

    # -- HTTP --------------------------------------------------------------------------
    def _run(self, request: web.Request) -> RunJob:
        run = self.runs.get(request.match_info["job_id"])
        if run is None:
            raise web.HTTPNotFound(
                text='{"error": "unknown_run", "detail": "register the run first (PUT)"}',
                content_type="application/json",
            )
        run.last_call = time.monotonic()
        return run

    @staticmethod
    async def _body(request: web.Request) -> Json:
        try:
            body = await request.json()
        except ValueError:
            raise web.HTTPBadRequest(text="body: not JSON") from None
        if not isinstance(body, dict):
            raise web.HTTPBadRequest(text="body: expected an object")
        return body

    def _heard_s(self) -> float | None:
        return None if self.heard_at is None else round(time.monotonic() - self.heard_at, 3)

    async def register(self, request: web.Request) -> web.Response:
        job_id = request.match_info["job_id"]
        body = await self._body(request)
        try:
            requirement = Requirement.of(
                {str(k): float(v) for k, v in dict(body.get("requirement") or {}).items()}
            )
            demand, rounds = int(body["demand"]), int(body["rounds"])
            deadline_s = float(body.get("deadline_s", 300.0))
            workload_s = float(body.get("workload_s", 30.0))
        except (KeyError, TypeError, ValueError) as exc:
            raise web.HTTPBadRequest(text=f"registration: {exc!r}") from None
        token = _bearer(request)
        run = self.runs.get(job_id)
        if run is None:
            run = RunJob(job_id, await self._start_client(job_id, token))
            self.runs[job_id] = run
            run.tasks = [
                asyncio.create_task(run.follow(), name=f"bridge-follow-{job_id}"),
                asyncio.create_task(run.drain_results(), name=f"bridge-results-{job_id}"),
            ]
        run.last_call = time.monotonic()
        await self._bounded(
            run.client.register_job(
                job_id,
                requirement.as_dict(),
                demand,
                rounds,
                deadline_s,
                workload_s,
                submit_token=run.submit_token,
            )
        )
        log.info("run %s registered: %s, demand %d, %d rounds", job_id, requirement, demand, rounds)
        return web.json_response({"job_id": job_id, "requirement": requirement.as_dict()})

    async def request_round(self, request: web.Request) -> web.Response:
        run = self._run(request)
        index = int(request.match_info["round_index"])
        body = await self._body(request)
        demand = int(body.get("demand", 0))
        if demand < 1:
            raise web.HTTPBadRequest(text="demand: at least 1")
        run.tallies[index] = RoundTally(index, demand)
        for old in sorted(run.tallies)[:-OPEN_ATTEMPTS]:  # never closed: forgotten
            del run.tallies[old]
        run.changed.set()
        await self._bounded(run.client.request_round(run.job_id, index, demand))
        return web.json_response({"round_index": index})

    async def assignments(self, request: web.Request) -> web.Response:
        run = self._run(request)
        index = int(request.match_info["round_index"])
        have = int(request.query.get("have", "0"))
        wait = min(float(request.query.get("wait", "0")), 60.0)
        loop = asyncio.get_running_loop()
        until = loop.time() + wait
        while True:
            tally = run.tallies.get(index)
            if tally is None:
                return web.json_response(
                    {"error": "unknown_round", "detail": f"attempt {index} is not open here"},
                    status=503,
                )
            got = len(tally.assigned)
            left = until - loop.time()
            if got > have or got >= tally.demand or left <= 0:
                break
            run.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(run.changed.wait(), left)
        devices = list(tally.assigned)[: tally.demand]
        return web.json_response({"devices": devices, "heard_s": self._heard_s()})

    async def close_round(self, request: web.Request) -> web.Response:
        run = self._run(request)
        index = int(request.match_info["round_index"])
        body = await self._body(request)
        outcome = body.get("outcome")
        if outcome not in ("succeeded", "failed"):
            raise web.HTTPBadRequest(text="outcome: 'succeeded' or 'failed'")
        tally = run.tallies.pop(index, None)
        now = time.time()
        opened = float(body.get("opened_at") or now)
        started = float(body.get("started_at") or opened)
        await self._bounded(
            run.client.close_round(
                run.job_id,
                index,
                outcome,
                demand=tally.demand if tally else max(1, int(body.get("demand") or 1)),
                assigned=len(tally.assigned) if tally else int(body.get("assigned") or 0),
                results=int(body.get("results", 0)),
                opened_at=opened,
                closed_at=now,
                reason=str(body.get("reason") or "")[:200],
                sched_delay_s=max(0.0, started - opened),
                response_time_s=max(0.0, now - started),
            )
        )
        return web.json_response({"closed": index})

    async def alive(self, request: web.Request) -> web.Response:
        self._run(request)
        return web.json_response({"ok": True, "heard_s": self._heard_s()})

    async def finish(self, request: web.Request) -> web.Response:
        run = self._run(request)
        body = await self._body(request)
        await self._bounded(
            run.client.finish_job(
                run.job_id,
                rounds_completed=int(body.get("rounds_completed", 0)),
                arrival=run.arrival,
                finished_at=time.time(),
            )
        )
        await self._drop(run)
        return web.json_response({"finished": run.job_id})

    async def cancel(self, request: web.Request) -> web.Response:
        run = self._run(request)
        body = await self._body(request)
        reason = str(body.get("reason") or "cancelled by its Flower run")[:200]
        await self._bounded(run.client.cancel_job(run.job_id, reason))
        await self._drop(run)
        return web.json_response({"cancelled": run.job_id})

    async def healthz(self, request: web.Request) -> web.Response:
        health = {"ok": True, "runs": len(self.runs), "broker_ok": self._broker_ok}
        return web.json_response({**health, "heard_s": self._heard_s()})

    def app(self) -> web.Application:
        app = web.Application(middlewares=[_unavailable])
        job = "/v1/runs/{job_id}"
        app.router.add_get("/healthz", self.healthz)
        app.router.add_put(job, self.register)
        app.router.add_post(f"{job}/rounds/{{round_index:\\d+}}", self.request_round)
        app.router.add_get(f"{job}/rounds/{{round_index:\\d+}}", self.assignments)
        app.router.add_post(f"{job}/rounds/{{round_index:\\d+}}/close", self.close_round)
        app.router.add_post(f"{job}/alive", self.alive)
        app.router.add_post(f"{job}/finish", self.finish)
        app.router.add_post(f"{job}/cancel", self.cancel)
        app.cleanup_ctx.append(self._lifecycle)
        return app

    async def _lifecycle(self, app: web.Application) -> Any:
        self._watch = asyncio.create_task(self.watch(), name="bridge-watch")
        yield
        self._watch.cancel()
        for run in list(self.runs.values()):
            await self._drop(run)


def _bearer(request: web.Request) -> str | None:
    header = request.headers.get("Authorization", "")
    return header[7:].strip() or None if header.startswith("Bearer ") else None


@web.middleware
async def _unavailable(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    try:
        return await handler(request)
    except Unavailable as exc:
        return web.json_response({"error": "venn_unavailable", "detail": str(exc)}, status=503)


def quiet_kafka_logs() -> None:
    """aiokafka logs every failed reconnect (thousands of lines while a broker is down);
    the bridge says it once itself."""
    for name in ("aiokafka", "kafka"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


async def serve(settings: Settings, ready: Callable[[int], None] | None = None) -> None:
    """Serve until cancelled."""
    flower = settings.flower
    runner = web.AppRunner(FlowerBridge(settings).app(), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, flower.bridge_host, flower.bridge_port)
    await site.start()
    log.info("Venn Flower bridge on http://%s:%d", flower.bridge_host, flower.bridge_port)
    if ready is not None:
        ready(flower.bridge_port)
    try:
        await asyncio.Event().wait()
    finally:
        await runner.cleanup()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m venn.integrations.flower.bridge")
    parser.add_argument("--port", type=int, help="(VENN_FLOWER_BRIDGE_PORT)")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(
        level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    quiet_kafka_logs()
    settings = Settings.from_env()
    if args.port:
        settings = dataclasses.replace(
            settings, flower=dataclasses.replace(settings.flower, bridge_port=args.port)
        )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(settings))
    return 0


if __name__ == "__main__":
    sys.exit(main())
