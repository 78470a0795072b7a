"""The device endpoints part of the gateway (services/gateway/devices.py) served alone on
an in-memory context, in front of a desk that records what reaches it: tokens against the
body's device, bounds, load shedding and enrolment."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

import msgspec
from aiohttp import web

from services.gateway import devices
from services.gateway.context import GatewayContext
from services.gateway.http import Json
from services.gateway.models import CheckinRequest, RequestError, ResultRequest
from tests.gateway_parts import MemoryGateway, bearer, memory_gateway, serve
from venn.auth import Claims

CHECKIN = {"device_id": "dev-1", "attrs": {"ram": 4}, "speed_ms_per_sample": 5,
           "bandwidth_kbps": 100}  # fmt: skip


@dataclass
class Desk:
    """Answers as told; keeps what it was asked."""

    inflight: int = 0
    late: bool = False
    overloaded_now: bool = False
    answer: tuple[int, Json] = (200, {"assigned": False, "retry_after": 5, "reason": "x"})
    holders: dict[str, str] = field(default_factory=dict)
    checkins: list[CheckinRequest] = field(default_factory=list)
    results: list[ResultRequest] = field(default_factory=list)

    def deadline(self) -> float | None:
        return None if self.late else asyncio.get_running_loop().time() + 1.0

    def overloaded(self) -> bool:
        return self.overloaded_now

    async def checkin(self, req: CheckinRequest, deadline: float) -> tuple[int, Json]:
        assert self.inflight == 1  # counted in flight while it is answered
        self.checkins.append(req)
        return self.answer

    async def result(self, req: ResultRequest, deadline: float) -> tuple[int, Json]:
        self.results.append(req)
        return 202, {"accepted": True}

    async def enrol(self, device_id: str, claims: Claims, deadline: float) -> str:
        if device_id == "busy":
            raise RequestError(429, "view_not_ready", "retry")
        return self.holders.setdefault(device_id, claims.subject)


def registered(desk: Desk) -> Callable[[web.Application, GatewayContext], None]:
    def register(app: web.Application, ctx: GatewayContext) -> None:
        devices.register(app, desk, ctx)

    return register


def device_token(memory: MemoryGateway, device: str) -> dict[str, str]:
    assert memory.tokens is not None
    return bearer(memory.tokens.issue("device", device, ttl_s=60))


async def test_a_check_in_needs_the_token_of_the_device_it_names() -> None:
    memory, desk = memory_gateway(), Desk()
    body = msgspec.json.encode(CHECKIN)
    async with serve(memory, registered(desk)) as (http, url):
        async with http.post(f"{url}/v1/checkin", data=body) as r:
            assert r.status == 401 and "WWW-Authenticate" in r.headers
        async with http.post(
            f"{url}/v1/checkin", data=body, headers=device_token(memory, "dev-2")
        ) as r:
            assert r.status == 403
        async with http.post(
            f"{url}/v1/checkin", data=body, headers=device_token(memory, "dev-1")
        ) as r:
            assert (r.status, await r.json()) == desk.answer
    assert [c.device_id for c in desk.checkins] == ["dev-1"]
    assert memory.stats.unauthorized == 2 and desk.inflight == 0


async def test_bad_bodies_are_refused_and_counted_before_the_desk_sees_them() -> None:
    memory, desk = memory_gateway(auth=False), Desk()
    limit = memory.settings.gateway.max_body_bytes
    async with serve(memory, registered(desk)) as (http, url):
        async with http.post(f"{url}/v1/checkin", data=b"{not json") as r:
            assert (r.status, (await r.json())["error"]) == (400, "malformed_json")
        async with http.post(f"{url}/v1/checkin", data=b"x" * (limit + 1)) as r:
            assert r.status == 413
        gz = {"Content-Encoding": "br"}
        async with http.post(f"{url}/v1/checkin", data=b"\x0b\x02", headers=gz) as r:
            assert (r.status, (await r.json())["error"]) == (415, "unsupported_encoding")
    assert desk.checkins == [] and memory.stats.invalid == 2


async def test_an_overloaded_or_late_gateway_sheds_at_once_with_retry_after() -> None:
    memory, desk = memory_gateway(auth=False), Desk()
    body = msgspec.json.encode(CHECKIN)
    retry = str(memory.settings.gateway.busy_retry_after_s)
    async with serve(memory, registered(desk)) as (http, url):
        desk.overloaded_now = True
        async with http.post(f"{url}/v1/checkin", data=body) as r:
            assert (r.status, (await r.json())["reason"], r.headers["Retry-After"]) == (
                429, "overloaded", retry
            )  # fmt: skip
        desk.overloaded_now, desk.late = False, True
        async with http.post(f"{url}/v1/checkin", data=body) as r:
            assert (r.status, (await r.json())["reason"]) == (429, "late")
        desk.late, desk.answer = False, (429, {"assigned": False, "retry_after": 7})
        async with http.post(f"{url}/v1/checkin", data=body) as r:
            assert (r.status, r.headers["Retry-After"]) == (429, "7")
    assert len(desk.checkins) == 1
    assert (memory.stats.overloaded, memory.stats.late) == (1, 1)


async def test_enrolment_gives_a_device_token_unless_another_owner_holds_the_id() -> None:
    memory, desk = memory_gateway(), Desk()
    assert memory.tokens is not None
    team_a = bearer(memory.tokens.issue("enroll", "team-a", ttl_s=60))
    team_b = bearer(memory.tokens.issue("enroll", "team-b", ttl_s=60))
    named = msgspec.json.encode({"device_id": "dev-9"})
    async with serve(memory, registered(desk)) as (http, url):
        async with http.post(f"{url}/v1/devices", data=named, headers=team_a) as r:
            assert r.status == 201
            token = (await r.json())["token"]
        assert memory.tokens.check(token, "device").subject == "dev-9"
        async with http.post(f"{url}/v1/devices", data=named, headers=team_b) as r:
            assert (r.status, (await r.json())["error"]) == (409, "device_exists")
        async with http.post(f"{url}/v1/devices", headers=team_b) as r:
            assert r.status == 201 and (await r.json())["device_id"].startswith("dev-")
        busy = msgspec.json.encode({"device_id": "busy"})
        async with http.post(f"{url}/v1/devices", data=busy, headers=team_a) as r:
            assert r.status == 429 and "Retry-After" in r.headers
        async with http.post(
            f"{url}/v1/devices", data=named, headers=device_token(memory, "d")
        ) as r:
            assert r.status == 403
    assert memory.stats.refused_enrolments == 1 and memory.stats.enrolled == 2


async def test_without_authentication_there_is_nothing_to_enrol() -> None:
    memory, desk = memory_gateway(auth=False), Desk()
    async with (
        serve(memory, registered(desk)) as (http, url),
        http.post(f"{url}/v1/devices") as r,
    ):
        assert (r.status, (await r.json())["error"]) == (404, "auth_disabled")
