"""The job API on the gateway's address (issue 15, item 1): submit, list, show and cancel
jobs; the scheduler's plan and the device supply.

- ``POST /v1/jobs``: a spec (`venn.jobspec`, JSON or YAML) -> JobRegistered on venn.jobs,
  once admission (`services.gateway.admission_gate`) admits it: refused is 409 with the
  reason and its counts, ``?queue=true`` queues it instead (202, admitted later in order),
  ``?finish_by=T`` (or the spec's ``finish_by``) refuses it if its completion estimate is
  later, unless ``?accept_late=true``; every decision is a JobAdmission on venn.jobs.
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
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, Literal

from aiohttp import web

from services.gateway.admission_gate import (
    due,
    fresh,
    judge,
    request_of,
    tenant_cap,
    to_estimate,
)
from services.gateway.context import BrokerUnavailable, GatewayContext, NoJobsPrincipal
from services.gateway.estimates import Estimates, EstimatesBusy
from services.gateway.http import json_response, refused
from services.gateway.job_view import job_list, job_summary, plan_of, supply_of
from venn import events as ev
from venn.auth import AuthError, Claims, bearer
from venn.auth.tokens import Kind
from venn.core.admission import Limits
from venn.core.lifecycle import JobLife
from venn.core.model import DEFAULT_TENANT
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
SPEC_READERS_PER_OWNER = 1
"""Of those, how many one owner (a token's subject) may hold: a flood of large valid specs
from one token took both and every other owner got 429 ``busy`` (issue 34, item 11)."""


class ApiError(Exception):
    def __init__(self, status: int, error: str, detail: str, extra: Json | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.error = error
        self.detail = detail
        self.extra = extra or {}


def _job_fields(spec: JobSubmission) -> dict[str, Any]:
    """What a registration, and a queued job's admission, carry of the submitted spec."""
    return {
        "requirement": dict(spec.requirement),
        "demand": spec.demand,
        "rounds": spec.rounds,
        "deadline_s": spec.deadline_s,
        "workload_s": spec.workload_s,
        "submit_token": spec.submit_token,
    }


class JobsApi:
    """The handlers, over one gateway's views and job publisher."""

    def __init__(self, ctx: GatewayContext) -> None:
        self.ctx = ctx
        self.readers = ThreadPoolExecutor(SPEC_READERS, thread_name_prefix="venn-jobspec")
        self.reading = 0
        self.reading_by: Counter[str] = Counter()
        self.estimates = Estimates()
        self.queueing: Counter[str] = Counter()
        """Submissions being queued now, per owner, not in the view yet: the queue's bounds
        count them, so concurrent ones cannot pass them together."""

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
        life = self.ctx.view.job(job_id) or self._decided(job_id)
        if life is None:
            raise ApiError(404, "unknown_job", f"no job {job_id!r}")
        return life

    def _decided(self, job_id: str) -> JobLife | None:
        """A job admission queued or refused (not registered)."""
        life = self.ctx.view.book.jobs.get(job_id)
        return life if life is not None and life.admission is not None else None

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

    async def read_spec(self, body: bytes, owner: str | None = None) -> JobSubmission:
        """The spec in ``body``, read in a thread (`venn.jobspec` bounds the document, so
        that ends soon; the loop never runs it); 429 while SPEC_READERS are busy, or
        SPEC_READERS_PER_OWNER of ``owner``'s (None: a caller without a token)."""
        if self.reading >= SPEC_READERS:
            raise ApiError(429, "busy", "too many job specs being read at once; retry")
        if owner is not None and self.reading_by[owner] >= SPEC_READERS_PER_OWNER:
            raise ApiError(429, "busy", "your previous job spec is still being read; retry")
        self.reading += 1
        if owner is not None:
            self.reading_by[owner] += 1
        read = asyncio.get_running_loop().run_in_executor(self.readers, parse_job_spec, body)

        def done(_: object) -> None:
            self.reading -= 1
            if owner is not None:
                self.reading_by[owner] -= 1
                if not self.reading_by[owner]:
                    del self.reading_by[owner]

        read.add_done_callback(done)
        try:
            async with asyncio.timeout(self.ctx.config.wait_s):
                return await asyncio.shield(read)  # the thread runs on; `done` counts it
        except JobSpecError as exc:
            error = "malformed_spec" if exc.status == 400 else "invalid_request"
            raise ApiError(exc.status, error, exc.detail) from None
        except TimeoutError:
            raise ApiError(429, "busy", "the job spec was not read in time; retry") from None

    async def submit(
        self, claims: Claims | None, body: bytes, query: Mapping[str, str]
    ) -> web.Response:
        spec = await self.read_spec(body, claims.subject if claims is not None else None)
        # Judged before anything else, a retry's too (schemathesis ST201: a retry of a known
        # submission with a bad ?finish_by was answered 200).
        finish_by = _number(query, "finish_by")
        queue, accept_late = _flag(query, "queue"), _flag(query, "accept_late")
        job_id = self._job_id_for(spec, claims)
        if claims is not None:
            claims.require_job(job_id)
        self._ready()
        subject = claims.subject if claims is not None else "anonymous"
        known = self.ctx.view.book.jobs.get(job_id)
        if known is not None and (known.registered is not None or known.waiting_admission):
            first = known.registered or known.queued
            token = first.submit_token if first is not None else None
            if spec.submit_token is None or token != spec.submit_token:
                raise ApiError(409, "job_exists", f"job {job_id!r} was submitted before")
            if known.registered is None:
                return json_response(self._queued(job_id, subject, known.admission), 202)
            return json_response(self._accepted(job_id, subject, created=False), 200)
        now = time.time()
        tenant = subject if claims is not None else DEFAULT_TENANT
        cap = tenant_cap(self.ctx.settings.tenants, tenant)
        req = request_of(spec, job_id, finish_by, queue, accept_late, tenant, cap)
        status = self.ctx.status()
        on = to_estimate(req, self.ctx.view, status, self.limits, now)
        try:
            estimate = await self.estimates.completion(on, req) if on is not None else None
        except EstimatesBusy as exc:
            raise ApiError(429, "busy", str(exc)) from None
        decision = judge(req, self.ctx.view, status, self.limits, now, estimate)
        attempt = spec.submit_token or uuid.uuid4().hex
        said = f"{decision.reason}: {decision.detail}"
        if decision.verdict == "refused":
            refusal = f"refuse:{job_id}:{attempt}"
            await self._publish(
                self._admission(job_id, "refused", said, decision.estimate, refusal)
            )
            extra = {
                "counts": decision.counts,
                "estimated_finish": decision.estimate,
                "estimated_finish_p90": decision.estimate_p90,
            }
            raise ApiError(409, decision.reason, decision.detail, extra)
        if decision.verdict == "queued":
            self._room_in_queue(subject)
            queued = self._admission(
                job_id,
                "queued",
                said,
                None,
                f"queue:{job_id}:{attempt}",
                **_job_fields(spec),
                priority=spec.priority or None,
                owner=subject if claims is not None else None,
            )
            self.queueing[subject] += 1
            try:
                await self._publish(queued)
                await self._seen(lambda: self.ctx.view.book.get(job_id).waiting_admission)
            finally:
                self.queueing[subject] -= 1
                if not self.queueing[subject]:
                    del self.queueing[subject]
            return json_response(self._queued(job_id, subject, queued), 202)
        if decision.estimate is not None or decision.warning is not None:
            # Judged against finish_by: the decision says how (a plain admission is the
            # registration alone).
            note = decision.warning or decision.detail
            admission = f"admit:{job_id}:{attempt}"
            await self._publish(
                self._admission(job_id, "admitted", note, decision.estimate, admission)
            )
        event = ev.JobRegistered(
            event_id=f"submit:{job_id}:{attempt}",
            time=now,
            job_id=job_id,
            **_job_fields(spec),
            token=self._event_token(job_id, subject),
            # The job's tenant is its token's owner (venn.core.tenants).
            tenant=subject if claims is not None else None,
            priority=spec.priority or None,
        )
        await self._publish(event)
        await self._seen(lambda: self._registered(job_id))
        life = self.ctx.view.book.get(job_id)
        if life.registered is not None and life.registered.event_id != event.event_id:
            # Another submission of the id reached the log first (two owners racing for
            # one id both got 201 and a token: issue 34, item 11).
            raise ApiError(409, "job_exists", f"job {job_id!r} was submitted before")
        if fresh(self.ctx.status(), time.time()) is not None:
            # A scheduler is deciding: its verdict on the registration (the limits judged
            # where the decision is made) is the answer.
            await self._seen(lambda: life.verdict is not None)
        if life.refused:
            said = life.verdict.reason if life.verdict is not None else ""
            reason, _, detail = said.partition(": ")
            raise ApiError(409, reason or "refused", detail or said, {"counts": {}})
        answer = self._accepted(job_id, subject, created=True)
        answer["estimated_finish"] = decision.estimate
        answer["estimated_finish_p90"] = decision.estimate_p90
        answer["warning"] = decision.warning
        return json_response(answer, 201)

    @property
    def limits(self) -> Limits:
        return self.ctx.settings.admission.limits()

    def _room_in_queue(self, owner: str) -> None:
        """429 ``queue_full`` past VENN_MAX_QUEUED_JOBS, or VENN_MAX_QUEUED_PER_OWNER of
        ``owner``'s: a queued job costs every gateway its spec in the view and a look at
        each queue check, so one token must not queue without bound (issue 34, item 2)."""
        settings = self.ctx.settings.admission
        waiting = self.ctx.view.waiting
        total = len(waiting) + sum(self.queueing.values())
        if total >= settings.max_queued_jobs:
            raise ApiError(
                429, "queue_full", f"{total} jobs wait for admission, the most there may be"
            )
        mine = self.queueing[owner] + sum(
            1
            for life in waiting.values()
            if life.queued is not None and (life.queued.owner or "anonymous") == owner
        )
        if mine >= settings.max_queued_per_owner:
            raise ApiError(
                429,
                "queue_full",
                f"{owner} has {mine} jobs waiting for admission, the most one owner may have",
            )

    def _admission(
        self,
        job_id: str,
        decision: Literal["admitted", "queued", "refused"],
        reason: str,
        estimate: float | None,
        event_id: str,
        **spec: Any,
    ) -> ev.JobAdmission:
        token = None
        if self.ctx.tokens is not None:
            token = self.ctx.tokens.issue("admin", "venn-admission", ttl_s=EVENT_TOKEN_TTL_S)
        return ev.JobAdmission(
            event_id=event_id,
            time=time.time(),
            job_id=job_id,
            decision=decision,
            reason=ev.clean_text(reason),
            estimate=estimate,
            token=token,
            **spec,
        )

    def _queued(self, job_id: str, subject: str, admission: ev.JobAdmission | None) -> Json:
        answer = self._accepted(job_id, subject, created=True)
        answer["state"] = "queued"
        answer["detail"] = admission.reason if admission is not None else "queued"
        return answer

    async def admit_due(self) -> int:
        """Admit the queued jobs that are due (what any gateway would: the same events)."""
        if not self.ctx.view_ready():
            return 0
        admitted = 0
        caps = partial(tenant_cap, self.ctx.settings.tenants)
        for life, req in due(self.ctx.view, self.ctx.status(), self.limits, time.time(), caps):
            queued = life.queued
            if queued is None:
                continue
            owner = queued.owner or "anonymous"
            ending = f"{req.job_id}:{queued.event_id}"
            note = "admitted from the queue: a limit or the supply allows it now"
            await self._publish(
                self._admission(req.job_id, "admitted", note, None, f"admit:{ending}")
            )
            await self._publish(
                ev.JobRegistered(
                    event_id=f"submit:{ending}",
                    time=time.time(),
                    job_id=req.job_id,
                    requirement=dict(queued.requirement or {}),
                    demand=req.demand,
                    rounds=req.rounds,
                    deadline_s=req.deadline_s,
                    workload_s=req.workload_s,
                    submit_token=queued.submit_token,
                    token=self._event_token(req.job_id, owner),
                    # As a direct admission registers it: its owner's tenant, its class.
                    tenant=queued.owner,
                    priority=queued.priority,
                )
            )
            await self._seen(partial(self._registered, req.job_id))
            admitted += 1
        return admitted

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
        if life.ended or (life.registered is None and not life.waiting_admission):
            # A refused submission never ran: nothing to cancel.
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


def _flag(query: Mapping[str, str], name: str) -> bool:
    value = query.get(name, "false")
    if value not in ("true", "false"):
        raise ApiError(422, "invalid_request", f"{name} must be true or false")
    return value == "true"


def _number(query: Mapping[str, str], name: str) -> float | None:
    if name not in query:
        return None
    try:
        value = float(query[name])
    except ValueError:
        raise ApiError(422, "invalid_request", f"{name} must be a number of seconds") from None
    if not 0 <= value <= 1e11:
        raise ApiError(422, "invalid_request", f"{name} is out of range")
    return value


def register(app: web.Application, ctx: GatewayContext) -> JobsApi:
    """Add the job API's routes to the gateway's app."""
    api = JobsApi(ctx)
    limit = ctx.config.max_body_bytes

    async def admit_queued() -> None:
        while True:
            await asyncio.sleep(ctx.settings.admission.queue_check_s)
            try:
                await api.admit_due()
            except ApiError as exc:  # the broker did not take it: the next pass retries
                log.info("queued jobs not admitted now: %s", exc.detail)

    async def readers(_app: web.Application) -> AsyncIterator[None]:
        queue = asyncio.create_task(admit_queued())
        yield
        queue.cancel()
        await asyncio.gather(queue, return_exceptions=True)
        api.readers.shutdown(wait=False, cancel_futures=True)
        api.estimates.close()

    app.cleanup_ctx.append(readers)

    async def answer(run: Any) -> web.Response:
        try:
            result = await run()
        except ApiError as exc:
            retry = 1 if exc.status == 429 else None
            body = {"error": exc.error, "detail": exc.detail, **exc.extra}
            return json_response(body, exc.status, retry)
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
            return await api.submit(claims, await read_body(request), request.query)

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
