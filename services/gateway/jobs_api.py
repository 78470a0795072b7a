"""The job API on the gateway's address (issue 15, item 1): submit, list, show and cancel
jobs; the scheduler's plan and the device supply.

- ``POST /v1/jobs``: a spec (`venn.jobspec`, JSON or YAML) -> JobRegistered on venn.jobs.
  Answers the job id and a job token scoped to that job alone. With the same
  ``submit_token`` a retried submission answers the same job (200, a fresh token), never
  a second one. Who may submit: an operator (admin token) or a job owner holding a job
  token for the id or for a prefix (``venn token job --jobs 'team-a-*'``).
- ``GET /v1/jobs``, ``/v1/plan``, ``/v1/devices``: an operator (admin token).
- ``GET|DELETE /v1/jobs/{id}``: an operator, or a job token for that job (403 for another).

The job registered here still needs a coordinator to run its rounds (request each round,
collect results, close it): Venn has no generic one; the job's own coordinator (an FL
server using `venn.sdk.VennClient`) acts with the returned job token. A job whose
coordinator stays silent is expired by the scheduler after VENN_JOB_TIMEOUT_S.

Reads come from views fed by Kafka: the core's lifecycle fold over venn.jobs/venn.rounds
(the gateway's `DemandView`) and the scheduler's snapshot on venn.status (`StatusFeed`).
Without VENN_AUTH_SECRET nothing is checked and no token is issued.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aiohttp import web

from services.gateway.context import BrokerUnavailable, GatewayContext, NoJobsPrincipal
from services.gateway.http import json_response, refused
from services.gateway.job_view import job_list, job_summary, plan_of, supply_of
from venn import events as ev
from venn.auth import AuthError, Claims, bearer
from venn.auth.tokens import Kind
from venn.core.lifecycle import JobLife
from venn.jobspec import JobSpecError, JobSubmission, parse_job_spec

log = logging.getLogger("venn.gateway.jobs")

Json = dict[str, Any]
JOB_TOKEN_TTL_S = 7 * 86400.0
"""Lifetime of the job token a submission returns (as `venn token job`'s default)."""
EVENT_TOKEN_TTL_S = 600.0
"""Lifetime of the token the gateway puts on an event it publishes for a caller."""
COORDINATOR_NOTE = (
    "registered for an external coordinator: it runs the rounds with this job token "
    "(venn.sdk.VennClient: request_round, close_round, finish_job)"
)
SPEC_READERS = 2
"""Job specs read at once, each in a thread of the job API's own (a flood of specs waits
for none of the device paths, and cannot take the loop's default executor)."""


class ApiError(Exception):
    def __init__(self, status: int, error: str, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.error = error
        self.detail = detail


class JobsApi:
    """The handlers, over one gateway's views and job publisher."""

    def __init__(self, ctx: GatewayContext) -> None:
        self.ctx = ctx
        self.readers = ThreadPoolExecutor(SPEC_READERS, thread_name_prefix="venn-jobspec")
        self.reading = 0

    # -- auth --------------------------------------------------------------------------
    def _claims(self, request: web.Request, *kinds: Kind) -> Claims | None:
        if self.ctx.tokens is None:
            return None
        return self.ctx.tokens.check(bearer(request.headers.get("Authorization")), *kinds)

    def operator(self, request: web.Request) -> None:
        self._claims(request, "admin")

    def job_caller(self, request: web.Request, job_id: str) -> Claims | None:
        claims = self._claims(request, "job")
        if claims is not None:
            claims.require_job(job_id)
        return claims

    def _event_token(
        self, job_id: str, subject: str, ttl_s: float = EVENT_TOKEN_TTL_S
    ) -> str | None:
        """A job token for this job alone (what the scheduler checks on its events)."""
        if self.ctx.tokens is None:
            return None
        return self.ctx.tokens.issue("job", subject, jobs=[job_id], ttl_s=ttl_s)

    # -- reads -------------------------------------------------------------------------
    def _ready(self) -> None:
        if not self.ctx.view_ready():
            raise ApiError(429, "view_not_ready", "the job view is still catching up; retry")

    def _life(self, job_id: str) -> JobLife:
        life = self.ctx.view.job(job_id)
        if life is None:
            raise ApiError(404, "unknown_job", f"no job {job_id!r}")
        return life

    def show(self, job_id: str) -> Json:
        return job_summary(self.ctx.view, self._life(job_id), self.ctx.status(), time.time())

    # -- writes ------------------------------------------------------------------------
    async def _publish(self, event: ev.Event) -> None:
        if not self.ctx.broker_available():
            raise ApiError(429, "broker_unavailable", "the broker does not answer; retry")
        try:
            async with asyncio.timeout(self.ctx.config.wait_s + 5):
                await self.ctx.publish_job_event(event)
        except NoJobsPrincipal:
            raise ApiError(
                503,
                "no_jobs_principal",
                "this gateway serves devices only: it has no credentials of the jobs principal"
                " (VENN_KAFKA_PASSWORD_JOBS), the only one that writes venn.jobs",
            ) from None
        except (BrokerUnavailable, TimeoutError) as exc:
            log.warning("could not publish %s: %r", event.event_id, exc)
            raise ApiError(429, "broker_unavailable", "the broker did not take it; retry") from None

    def _job_id_for(self, spec: JobSubmission, claims: Claims | None) -> str:
        if spec.job_id is None and claims is not None and claims.kind == "job":
            prefixes = [p[:-1] for p in claims.jobs if p.endswith("*")]
            if not prefixes:
                raise ApiError(
                    422, "invalid_request", "name the job (job_id) that your job token allows"
                )
            return spec.resolved_job_id(prefix=prefixes[0])
        return spec.resolved_job_id()

    async def read_spec(self, body: bytes) -> JobSubmission:
        """The spec in ``body``, read in a thread (`venn.jobspec` bounds the document, so
        that ends soon; the loop never runs it); 429 while SPEC_READERS are busy."""
        if self.reading >= SPEC_READERS:
            raise ApiError(429, "busy", "too many job specs being read at once; retry")
        self.reading += 1
        read = asyncio.get_running_loop().run_in_executor(self.readers, parse_job_spec, body)

        def done(_: object) -> None:
            self.reading -= 1

        read.add_done_callback(done)
        try:
            async with asyncio.timeout(self.ctx.config.wait_s):
                return await asyncio.shield(read)  # the thread runs on; `done` counts it
        except JobSpecError as exc:
            error = "malformed_spec" if exc.status == 400 else "invalid_request"
            raise ApiError(exc.status, error, exc.detail) from None
        except TimeoutError:
            raise ApiError(429, "busy", "the job spec was not read in time; retry") from None

    async def submit(self, claims: Claims | None, body: bytes) -> web.Response:
        spec = await self.read_spec(body)
        job_id = self._job_id_for(spec, claims)
        if claims is not None:
            claims.require_job(job_id)
        self._ready()
        subject = claims.subject if claims is not None else "anonymous"
        known = self.ctx.view.job(job_id)
        if known is not None and known.registered is not None:
            first = known.registered.submit_token
            if spec.submit_token is None or first != spec.submit_token:
                raise ApiError(409, "job_exists", f"job {job_id!r} was submitted before")
            return json_response(self._accepted(job_id, subject, created=False), 200)
        now = time.time()
        event = ev.JobRegistered(
            event_id=f"submit:{job_id}:{spec.submit_token or uuid.uuid4().hex}",
            time=now,
            job_id=job_id,
            requirement=dict(spec.requirement),
            demand=spec.demand,
            rounds=spec.rounds,
            deadline_s=spec.deadline_s,
            workload_s=spec.workload_s,
            submit_token=spec.submit_token,
            token=self._event_token(job_id, subject),
        )
        await self._publish(event)
        await self._seen(lambda: self._registered(job_id))
        return json_response(self._accepted(job_id, subject, created=True), 201)

    def _registered(self, job_id: str) -> bool:
        return self.ctx.view.job(job_id) is not None

    async def _seen(self, done: Callable[[], bool]) -> None:
        """Wait (at most the answer bound) until this gateway's own view of venn.jobs shows
        what it just published, so that the caller's next read finds it: a job submitted and
        then looked up at once got 404 (schemathesis, stateful phase)."""
        deadline = time.monotonic() + self.ctx.config.wait_s
        while not done() and time.monotonic() < deadline:
            await asyncio.sleep(0.01)

    def _accepted(self, job_id: str, subject: str, created: bool) -> Json:
        return {
            "job_id": job_id,
            "token": self._event_token(job_id, subject, JOB_TOKEN_TTL_S),
            "created": created,
            "coordinator": COORDINATOR_NOTE,
        }

    async def cancel(self, job_id: str, claims: Claims | None) -> web.Response:
        life = self._life(job_id)
        if life.ended:
            raise ApiError(409, "job_ended", f"job {job_id!r} is {life.status} already")
        subject = claims.subject if claims is not None else "anonymous"
        event = ev.JobCancelled(
            event_id=f"cancel:{job_id}",
            time=time.time(),
            job_id=job_id,
            reason=ev.clean_text(f"cancelled through the job API by {subject}"),
            token=self._event_token(job_id, subject),
        )
        await self._publish(event)
        await self._seen(lambda: self._life(job_id).ended)
        return json_response({"job_id": job_id, "state": "cancelling"}, 202)


def register(app: web.Application, ctx: GatewayContext) -> JobsApi:
    """Add the job API's routes to the gateway's app."""
    api = JobsApi(ctx)
    limit = ctx.config.max_body_bytes

    async def readers(_app: web.Application) -> AsyncIterator[None]:
        yield
        api.readers.shutdown(wait=False, cancel_futures=True)

    app.cleanup_ctx.append(readers)

    async def answer(run: Any) -> web.Response:
        try:
            result = await run()
        except ApiError as exc:
            retry = 1 if exc.status == 429 else None
            return json_response({"error": exc.error, "detail": exc.detail}, exc.status, retry)
        except AuthError as exc:
            return refused(ctx.stats, exc)
        return result if isinstance(result, web.Response) else json_response(result)

    async def read_body(request: web.Request) -> bytes:
        if request.content_length is not None and request.content_length > limit:
            raise ApiError(413, "too_large", f"the body exceeds {limit} bytes")
        try:
            async with asyncio.timeout(ctx.config.wait_s + 5):
                return await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise ApiError(413, "too_large", f"the body exceeds {limit} bytes") from None
        except TimeoutError:
            raise ApiError(408, "timeout", "the body did not arrive in time") from None

    async def submit(request: web.Request) -> web.Response:
        async def run() -> web.Response:
            # The token first (signature, expiry, revocation, kind): no body is read or
            # parsed for a caller who may not submit; its scope needs the spec's job id.
            claims = api._claims(request, "job")
            return await api.submit(claims, await read_body(request))

        return await answer(run)

    async def listing(request: web.Request) -> web.Response:
        async def run() -> Json:
            api.operator(request)
            api._ready()
            return {"jobs": job_list(ctx.view, ctx.status(), time.time())}

        return await answer(run)

    async def show(request: web.Request) -> web.Response:
        job_id = request.match_info["job_id"]

        async def run() -> Json:
            api.job_caller(request, job_id)
            api._ready()
            return api.show(job_id)

        return await answer(run)

    async def cancel(request: web.Request) -> web.Response:
        job_id = request.match_info["job_id"]

        async def run() -> web.Response:
            claims = api.job_caller(request, job_id)
            api._ready()
            return await api.cancel(job_id, claims)

        return await answer(run)

    async def plan(request: web.Request) -> web.Response:
        async def run() -> Json:
            api.operator(request)
            return plan_of(ctx.status(), time.time())

        return await answer(run)

    async def devices(request: web.Request) -> web.Response:
        async def run() -> Json:
            api.operator(request)
            return supply_of(ctx.status(), time.time())

        return await answer(run)

    app.router.add_post("/v1/jobs", submit)
    app.router.add_get("/v1/jobs", listing)
    app.router.add_get("/v1/jobs/{job_id}", show)
    app.router.add_delete("/v1/jobs/{job_id}", cancel)
    app.router.add_get("/v1/plan", plan)
    app.router.add_get("/v1/devices", devices)
    return api
