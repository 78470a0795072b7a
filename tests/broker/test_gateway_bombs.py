"""Bounded input at the gateway (issue 26, items 3, 4 and 10): compressed bodies, YAML
bombs, overload, ids and attributes that no device should send, and enrolment over an
existing device id, against a real gateway on the session's Kafka, over real HTTP.

A compressed request body is refused (415) before anything decompresses it: a 1.6 KB
brotli body expands to 1 GB, and aiohttp decompressed it in its parser, on the event loop,
for several seconds, whatever the path and without a token. A job spec is bounded (size,
no anchors or aliases, depth) and parsed off the event loop: a 427-byte YAML alias bomb
froze the gateway for 15 s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import brotli
import pytest

from services.gateway import GatewayServer
from tests.factories import UNJUDGED
from venn.auth import Tokens
from venn.broker.topics import ensure_topics
from venn.settings import Settings

SECRET = secrets.token_urlsafe(32)
WAIT_S = 1.0
"""The check-in's bound (VENN_GATEWAY_WAIT_S) of the gateway under test."""
SLACK_S = 1.0
"""Client-side allowance over the bound: connection set-up and a machine shared by tests."""

YAML_ALIAS_BOMB = b"""\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""
"""The billion laughs in YAML (9^9 strings once every alias is followed): 427 bytes."""


def brotli_bomb(expanded: int = 1 << 30) -> bytes:
    """``expanded`` zero bytes, brotli-compressed (1 GiB -> about 1.6 KB), made in chunks."""
    compressor = brotli.Compressor(quality=3)
    chunk = bytes(1 << 24)
    parts = [compressor.process(chunk) for _ in range(expanded // len(chunk))]
    return b"".join([*parts, compressor.finish()])


@dataclasses.dataclass
class Gateway:
    server: GatewayServer
    http: aiohttp.ClientSession
    tokens: Tokens

    @property
    def url(self) -> str:
        return self.server.url

    async def post(
        self,
        path: str,
        body: bytes,
        token: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, Any]]:
        sent = {"Content-Type": "application/json", **(headers or {})}
        if token:
            sent["Authorization"] = f"Bearer {token}"
        async with self.http.post(f"{self.url}{path}", data=body, headers=sent) as r:
            return r.status, await r.json(content_type=None)


def checkin_body(device: str, attrs: dict[str, float] | None = None) -> bytes:
    return json.dumps(
        {"device_id": device, "attrs": attrs or {"ram": 4}, "speed_ms_per_sample": 1,
         "bandwidth_kbps": 2}
    ).encode()  # fmt: skip


@pytest.fixture(scope="module")
def bomb() -> bytes:
    return brotli_bomb()


@pytest.fixture
async def gateway(broker: str, partitions: int) -> AsyncIterator[Gateway]:
    settings = Settings(broker=broker, topic_partitions=partitions, auth_secret=SECRET)
    await ensure_topics(broker, partitions)
    server = GatewayServer(settings.with_gateway(port=0, wait_s=WAIT_S).with_admission(**UNJUDGED))
    await server.start()
    deadline = time.monotonic() + 30
    while not server.gateway.view_ready:
        assert time.monotonic() < deadline, "the gateway's views never caught up"
        await asyncio.sleep(0.1)
    http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30), auto_decompress=False)
    try:
        yield Gateway(server, http, Tokens(SECRET))
    finally:
        await http.close()
        await server.stop()


async def test_a_compressed_body_is_refused_before_it_is_decompressed(
    gateway: Gateway, bomb: bytes
) -> None:
    """Item 3: 415 for any Content-Encoding, on any path, with or without a token."""
    assert len(bomb) < 2048
    device = f"dev-{uuid.uuid4().hex[:8]}"
    token = gateway.tokens.issue("device", device, ttl_s=600)
    for path in ("/v1/checkin", "/v1/results", "/v1/devices", "/v1/jobs", "/nowhere"):
        for encoding in ("br", "gzip", "deflate", "zstd", "identity, br"):
            status, body = await gateway.post(path, bomb, None, {"Content-Encoding": encoding})
            assert (status, body["error"]) == (415, "unsupported_encoding"), (path, encoding)
            assert encoding.split(",")[-1].strip() in body["detail"]
    status, body = await gateway.post("/v1/checkin", bomb, token, {"Content-Encoding": "br"})
    assert (status, body["error"]) == (415, "unsupported_encoding")
    # An uncompressed body (identity is no encoding) is served as before.
    status, body = await gateway.post(
        "/v1/checkin", checkin_body(device), token, {"Content-Encoding": "identity"}
    )
    assert status == 200 and body["assigned"] is False, body
    assert gateway.server.gateway.stats.checkins == 1


async def test_a_yaml_bomb_is_refused_without_being_expanded(gateway: Gateway) -> None:
    """Item 4: a job spec with anchors or aliases, nested too deep or too large gets a 4xx,
    also with a valid job token of another job; a plain YAML spec is accepted."""
    other = gateway.tokens.issue("job", "mallory", jobs=["unrelated-job"], ttl_s=600)
    cases: list[tuple[bytes, int, str, str]] = [
        (b"requirement: &r {ram: 1}\nother: *r\n", 400, "malformed_spec", "alias"),
        (YAML_ALIAS_BOMB, 400, "malformed_spec", "alias"),
        (b"job_id: x\nrequirement: " + b"[" * 5000 + b"]" * 5000 + b"\n", 400,
         "malformed_spec", "deep"),
        (b"job_id: x\nrequirement: " + b"{a: " * 2000 + b"1" + b"}" * 2000 + b"\n", 400,
         "malformed_spec", "deep"),
        (b"job_id: x\ndemand: " + b"9" * 6000 + b"\n", 400, "malformed_spec", "not JSON or YAML"),
        (b"pad: '" + b"x" * 20000 + b"'\n", 413, "too_large", "bytes"),
    ]  # fmt: skip
    for spec, status, error, fragment in cases:
        got, body = await gateway.post("/v1/jobs", spec, other)
        assert (got, body["error"]) == (status, error), (spec[:40], body)
        assert fragment in body["detail"], body
    # Without a valid token the body is not even parsed.
    got, body = await gateway.post("/v1/jobs", YAML_ALIAS_BOMB, None)
    assert (got, body["error"]) == (401, "missing_token")
    job = f"yaml-{uuid.uuid4().hex[:8]}"
    owner = gateway.tokens.issue("job", "owner", jobs=[job], ttl_s=600)
    plain = f"job_id: {job}\nrequirement: {{only-{job}: 1}}\ndemand: 2\nrounds: 1\ndeadline_s: 30\n"
    got, body = await gateway.post("/v1/jobs", plain.encode(), other)
    assert (got, body["error"]) == (403, "forbidden")
    got, body = await gateway.post("/v1/jobs", plain.encode(), owner)
    assert got == 201 and body["job_id"] == job, body


async def test_checkins_are_answered_while_bombs_arrive_every_second(
    gateway: Gateway, bomb: bytes
) -> None:
    """Items 3 and 4: an enrolled device's check-ins are all answered (200) within their
    bound while a brotli bomb and a YAML bomb arrive once a second each."""
    enroll = gateway.tokens.issue("enroll", "fleet", ttl_s=600)
    device = f"dev-{uuid.uuid4().hex[:8]}"
    status, enrolled = await gateway.post(
        "/v1/devices", f'{{"device_id": "{device}"}}'.encode(), enroll
    )
    assert status == 201, enrolled
    token = enrolled["token"]
    job_token = gateway.tokens.issue("job", "mallory", jobs=["unrelated-job"], ttl_s=600)
    stop = asyncio.Event()
    refused: list[int] = []

    async def bombs() -> None:
        while not stop.is_set():
            answers = await asyncio.gather(
                gateway.post("/v1/checkin", bomb, None, {"Content-Encoding": "br"}),
                gateway.post("/v1/jobs", YAML_ALIAS_BOMB, job_token),
            )
            refused.extend(status for status, _ in answers)
            await asyncio.sleep(1.0)

    sender = asyncio.create_task(bombs())
    answers: list[tuple[int, str | None, float]] = []
    try:
        bound = aiohttp.ClientTimeout(total=WAIT_S + SLACK_S)
        for _ in range(16):
            start = time.monotonic()
            try:
                async with gateway.http.post(
                    f"{gateway.url}/v1/checkin", data=checkin_body(device),
                    headers={"Authorization": f"Bearer {token}"}, timeout=bound,
                ) as r:  # fmt: skip
                    body = await r.json()
                    answers.append((r.status, body.get("reason"), time.monotonic() - start))
            except TimeoutError:
                answers.append((0, "no answer within the bound", time.monotonic() - start))
            await asyncio.sleep(0.25)
    finally:
        stop.set()
        await sender
    assert [(s, reason) for s, reason, _ in answers] == [(200, "no_open_round")] * 16, answers
    assert len(refused) >= 8 and set(refused) == {400, 415}, refused


async def test_ids_with_invisible_or_bidi_characters_and_negative_attributes_get_422(
    gateway: Gateway,
) -> None:
    """Item 10: U+202E made "evil-gpj.exe" read as "evil-exe.jpg" on a dashboard; a device
    reported "ram": -4 and was accepted."""
    enroll = gateway.tokens.issue("enroll", "fleet", ttl_s=600)
    for char in ("\u202e", "\u202a", "\u2066", "\u2069", "\u200f", "\u200b", "\ufeff", "\u061c",
                 "\u00a0", "\u2028", "\u3000"):  # fmt: skip
        device = f"dev{char}gpj.exe"
        token = gateway.tokens.issue("device", device, ttl_s=600)
        status, body = await gateway.post("/v1/checkin", checkin_body(device), token)
        assert (status, body.get("error")) == (422, "invalid_request"), (hex(ord(char)), body)
        assert "$.device_id" in body["detail"]
        name = json.dumps({"device_id": device}).encode()
        status, body = await gateway.post("/v1/devices", name, enroll)
        assert (status, body.get("error")) == (422, "invalid_request"), (hex(ord(char)), body)
        job = gateway.tokens.issue("job", "owner", jobs=["*"], ttl_s=600)
        spec = {"job_id": f"job{char}x", "requirement": {"ram": 1}, "demand": 1, "rounds": 1,
                "deadline_s": 5}  # fmt: skip
        status, body = await gateway.post("/v1/jobs", json.dumps(spec).encode(), job)
        assert (status, body.get("error")) == (422, "invalid_request"), (hex(ord(char)), body)
    device = f"dev-{uuid.uuid4().hex[:8]}"
    token = gateway.tokens.issue("device", device, ttl_s=600)
    for attrs in ({"ram": -4.0}, {"ram": 4.0, "cpu": -0.5}):
        status, body = await gateway.post("/v1/checkin", checkin_body(device, attrs), token)
        assert (status, body.get("error")) == (422, "invalid_request"), body
        assert ">= 0" in body["detail"] and "$.attrs" in body["detail"]
    assert gateway.server.gateway.stats.checkins == 0
    # Non-ASCII letters stay welcome, and zero is a value.
    device = f"gerät-{uuid.uuid4().hex[:6]}-日本"
    token = gateway.tokens.issue("device", device, ttl_s=600)
    status, body = await gateway.post("/v1/checkin", checkin_body(device, {"gpu": 0.0}), token)
    assert status == 200 and body["reason"] == "no_open_round", body


async def test_check_ins_the_broker_cannot_take_yet_are_answered_overloaded(
    gateway: Gateway,
) -> None:
    """Item 10: with batches piling up in front of a broker that is up, a check-in was
    answered 429 "broker_unavailable" (90,000 times in a 60 s flood)."""
    gw = gateway.server.gateway
    assert gw.batcher is not None and gw.broker.available
    device = f"dev-{uuid.uuid4().hex[:8]}"
    token = gateway.tokens.issue("device", device, ttl_s=600)
    gw.batcher.max_unsent = 0  # every batch counts as waiting for the broker
    # No open round admits the device: only a gateway whose demand view is not ready yet
    # forwards its check-in (a ready one answers it at once and sends nothing).
    gw.view_ready = False
    try:
        status, body = await gateway.post("/v1/checkin", checkin_body(device), token)
    finally:
        gw.batcher.max_unsent = 64
        gw.view_ready = True
    assert (status, body["reason"]) == (429, "overloaded"), body
    assert gw.stats.overloaded == 1 and gw.stats.kafka_errors == 0
    status, body = await gateway.post("/v1/checkin", checkin_body(device), token)
    assert status == 200, body
