"""The device endpoints: `POST /v1/checkin`, `POST /v1/results` and `POST /v1/devices`
(enrolment). Each checks the device's token against its body, bounds the body and the time
it waits, and counts what it refused; the gateway's Kafka side (`DeviceDesk`) answers."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

from aiohttp import web

from services.gateway.context import GatewayContext
from services.gateway.http import Json, answer, busy, json_response, read_body, refused
from services.gateway.models import (
    CheckinRequest,
    RequestError,
    ResultRequest,
    decode_checkin,
    decode_enrollment,
    decode_result,
)
from venn import events as ev
from venn.auth import AuthError, Claims, bearer


class DeviceDesk(Protocol):
    """What the device endpoints ask of the gateway's Kafka side."""

    inflight: int
    """Device requests being answered (the gateway sheds load above its limit)."""

    def deadline(self) -> float | None: ...
    def overloaded(self) -> bool: ...
    async def checkin(self, req: CheckinRequest, deadline: float) -> tuple[int, Json]: ...
    async def result(self, req: ResultRequest, deadline: float) -> tuple[int, Json]: ...
    async def enrol(self, device_id: str, claims: Claims, deadline: float) -> str: ...


class _FromDevice(Protocol):
    @property
    def device_id(self) -> str: ...


FromDevice = TypeVar("FromDevice", bound=_FromDevice)


def register(app: web.Application, desk: DeviceDesk, ctx: GatewayContext) -> None:
    config = ctx.config
    stats = ctx.stats

    def shed(reason: str) -> web.Response:
        return answer(*busy(config.busy_retry_after_s, reason))

    def device(request: web.Request) -> Claims | None:
        """The caller's device token (None without authentication); AuthError if absent,
        invalid, expired, revoked or not a device's."""
        if ctx.tokens is None:
            return None
        return ctx.tokens.check(bearer(request.headers.get("Authorization")), "device")

    async def from_device(
        request: web.Request,
        deadline: float,
        decode: Callable[[bytes], FromDevice],
        act: Callable[[FromDevice, float], Awaitable[tuple[int, Json]]],
    ) -> web.Response:
        """A device's request: its token checked against the body's device_id, counted in
        flight while it is answered."""
        desk.inflight += 1
        try:
            claims = device(request)
            req = decode(await read_body(request, config.max_body_bytes, deadline))
            if claims is not None:
                claims.require_device(req.device_id)
            return answer(*await act(req, deadline))
        except RequestError as exc:
            stats.invalid += 1
            return json_response(exc.body(), exc.status)
        except AuthError as exc:
            return refused(stats, exc)
        finally:
            desk.inflight -= 1

    async def checkin(request: web.Request) -> web.Response:
        deadline = desk.deadline()
        if deadline is None:  # read after the loop stalled: its bound is (nearly) spent
            stats.late += 1
            return shed("late")
        if desk.overloaded():
            stats.overloaded += 1
            return shed("overloaded")
        return await from_device(request, deadline, decode_checkin, desk.checkin)

    async def results(request: web.Request) -> web.Response:
        deadline = asyncio.get_running_loop().time() + config.wait_s
        if desk.inflight >= config.max_inflight:
            stats.overloaded += 1
            return shed("overloaded")
        return await from_device(request, deadline, decode_result, desk.result)

    async def enroll(request: web.Request) -> web.Response:
        """A device token for a new (or named) device, for whoever holds an enrol token."""
        deadline = asyncio.get_running_loop().time() + config.wait_s
        if ctx.tokens is None:
            return json_response(
                {"error": "auth_disabled", "detail": "no VENN_AUTH_SECRET: no tokens needed"},
                404,
            )
        try:
            claims = ctx.tokens.check(bearer(request.headers.get("Authorization")), "enroll")
            body = await read_body(request, config.max_body_bytes, deadline)
            req = decode_enrollment(body or b"{}")
        except RequestError as exc:
            stats.invalid += 1
            return json_response(exc.body(), exc.status)
        except AuthError as exc:
            return refused(stats, exc)
        device_id = req.device_id or f"dev-{uuid.uuid4().hex}"
        try:
            holder = await desk.enrol(device_id, claims, deadline)
        except RequestError as exc:
            return json_response(exc.body(), exc.status, config.busy_retry_after_s)
        if holder != ev.clean_text(claims.subject) and claims.kind != "admin":
            # Any enrol token could take over an enrolled device's id.
            stats.refused_enrolments += 1
            return json_response(
                {
                    "error": "device_exists",
                    "detail": f"device {device_id!r} was enrolled by another enrol token's "
                    "owner; an operator (admin token) may enrol it again",
                },
                409,
            )
        ttl = ctx.settings.device_token_ttl_s
        token = ctx.tokens.issue("device", device_id, ttl_s=ttl)
        stats.enrolled += 1
        enrolled = {"device_id": device_id, "token": token, "expires_at": time.time() + ttl}
        return json_response(enrolled, 201)

    app.router.add_post("/v1/checkin", checkin)
    app.router.add_post("/v1/results", results)
    app.router.add_post("/v1/devices", enroll)
