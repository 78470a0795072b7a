"""Device authentication at the gateway (issue 12, defect 4): enrolment issues signed device
tokens; check-ins and results need one, for the device they name; revoked and expired
tokens are refused; a result is accepted only from the device the round assigned."""

from __future__ import annotations

import asyncio
import dataclasses
import secrets
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from services.gateway import GatewayServer
from venn import events as ev
from venn.auth import Tokens
from venn.broker import topics
from venn.broker.topics import ensure_topics
from venn.settings import Settings

SECRET = secrets.token_urlsafe(32)


@dataclasses.dataclass
class Authed:
    server: GatewayServer
    http: aiohttp.ClientSession
    tokens: Tokens
    broker: str

    @property
    def url(self) -> str:
        return self.server.url

    async def post(
        self, path: str, body: dict[str, Any] | None, token: str | None = None
    ) -> tuple[int, dict[str, Any], Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with self.http.post(f"{self.url}{path}", json=body, headers=headers) as r:
            return r.status, await r.json(), r.headers

    async def enrol(
        self, body: dict[str, Any], token: str | None
    ) -> tuple[int, dict[str, Any], Any]:
        """POST /v1/devices as a device does: again after a 429 (the gateway still reading
        venn.enrolments, or the write not read back within its wait, on a busy machine)."""
        for _ in range(30):
            status, answer, headers = await self.post("/v1/devices", body, token)
            if status != 429:
                break
            await asyncio.sleep(float(headers.get("Retry-After", 1)))
        return status, answer, headers


@pytest.fixture
async def gateway(broker: str, partitions: int) -> AsyncIterator[Authed]:
    settings = Settings(broker=broker, topic_partitions=partitions, auth_secret=SECRET)
    await ensure_topics(broker, partitions)
    server = GatewayServer(settings.with_gateway(port=0, wait_s=1.0))
    await server.start()
    http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
    try:
        yield Authed(server, http, Tokens(SECRET), broker)
    finally:
        await http.close()
        await server.stop()


def checkin(device: str) -> dict[str, Any]:
    return {"device_id": device, "attrs": {"ram": 4}, "speed_ms_per_sample": 1, "bandwidth_kbps": 2}


def result(device: str, job: str) -> dict[str, Any]:
    return {"device_id": device, "job_id": job, "round_index": 0, "ok": True, "response_time_s": 1}


async def test_enrolment_and_the_tokens_a_check_in_needs(gateway: Authed) -> None:
    enroll = gateway.tokens.issue("enroll", "fleet-provisioner", ttl_s=600)
    status, body, _ = await gateway.enrol({}, None)
    assert (status, body["error"]) == (401, "missing_token")
    device_token = gateway.tokens.issue("device", "some-device", ttl_s=600)
    status, body, _ = await gateway.enrol({}, device_token)
    assert (status, body["error"]) == (403, "forbidden")  # a device cannot enrol devices
    status, enrolled, _ = await gateway.enrol({"device_id": "d-1"}, enroll)
    assert status == 201 and enrolled["device_id"] == "d-1"
    token = enrolled["token"]

    # The enrolled device checks in; nobody else may use its token, nor check in without one.
    status, body, _ = await gateway.post("/v1/checkin", checkin("d-1"), token)
    assert status == 200 and body["assigned"] is False
    status, body, headers = await gateway.post("/v1/checkin", checkin("d-1"))
    assert (status, body["error"]) == (401, "missing_token")
    assert headers["WWW-Authenticate"].startswith("Bearer")
    status, body, _ = await gateway.post("/v1/checkin", checkin("d-2"), token)
    assert (status, body["error"]) == (403, "forbidden")
    forged = Tokens(secrets.token_urlsafe(32)).issue("device", "d-1", ttl_s=600)
    status, body, _ = await gateway.post("/v1/checkin", checkin("d-1"), forged)
    assert (status, body["error"]) == (401, "invalid_token")
    status, body, _ = await gateway.post("/v1/checkin", checkin("d-1"), token + "x")
    assert (status, body["error"]) == (401, "invalid_token")
    expired = gateway.tokens.issue("device", "d-1", ttl_s=60, now=time.time() - 3600)
    status, body, _ = await gateway.post("/v1/checkin", checkin("d-1"), expired)
    assert (status, body["error"]) == (401, "expired_token")
    assert gateway.server.gateway.stats.checkins == 1  # nothing refused reached Kafka


async def test_a_revoked_token_is_refused(gateway: Authed) -> None:
    device = f"rev-{uuid.uuid4().hex[:6]}"
    token = gateway.tokens.issue("device", device, ttl_s=600)
    assert (await gateway.post("/v1/checkin", checkin(device), token))[0] == 200
    claims = gateway.tokens.check(token, "device")
    revoked = ev.TokenRevoked(
        event_id=f"revoke-{claims.token_id}", time=time.time(), token_id=claims.token_id,
        expires_at=claims.expires_at, reason="lost device",
    )  # fmt: skip
    producer = AIOKafkaProducer(bootstrap_servers=gateway.broker)
    await producer.start()
    try:
        await producer.send_and_wait(topics.REVOCATIONS, ev.encode(revoked), key=ev.key_of(revoked))
    finally:
        await producer.stop()
    deadline = time.monotonic() + 20
    while claims.token_id not in gateway.server.gateway.tokens.revocations:  # type: ignore[union-attr]
        assert time.monotonic() < deadline, "the gateway never saw the revocation"
        await asyncio.sleep(0.1)
    status, body, _ = await gateway.post("/v1/checkin", checkin(device), token)
    assert (status, body["error"]) == (401, "revoked_token")


async def test_a_result_only_from_the_device_the_round_assigned(gateway: Authed) -> None:
    """Issue 12, defect 4: forged results made a job finish every round with no device."""
    job = f"job-{uuid.uuid4().hex[:6]}"
    mallory = gateway.tokens.issue("device", "mallory", ttl_s=600)
    status, body, _ = await gateway.post("/v1/results", result("mallory", job), mallory)
    assert (status, body["error"]) == (403, "not_assigned")

    assignment = ev.Assignment(
        event_id=f"asg:x:{job}:0", time=time.time(), job_id=job, round_index=0,
        device_id="alice", task_url="http://c/t", speed_ms_per_sample=1, bandwidth_kbps=1,
    )  # fmt: skip
    producer = AIOKafkaProducer(bootstrap_servers=gateway.broker)
    await producer.start()
    try:
        await producer.send_and_wait(topics.ASSIGNMENTS, ev.encode(assignment), key=job.encode())
    finally:
        await producer.stop()
    deadline = time.monotonic() + 20
    while (job, 0, "alice") not in gateway.server.gateway.assigned:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.1)
    alice = gateway.tokens.issue("device", "alice", ttl_s=600)
    status, body, _ = await gateway.post("/v1/results", result("alice", job), mallory)
    assert (status, body["error"]) == (403, "forbidden")  # mallory's token, alice's name
    status, body, _ = await gateway.post("/v1/results", result("alice", job), alice)
    assert status == 202 and body["accepted"] is True


async def test_an_enrol_token_cannot_take_over_an_enrolled_device_id(gateway: Authed) -> None:
    """Issue 26, item 10: any enrol token got a device token for an enrolled device's id,
    and with it that device's assignments and results. The first enrolment holds the id,
    also for a gateway started later (venn.enrolments); its owner may enrol it again (a
    node restarting with a fresh enrol token of the same owner), an operator too."""
    device = f"victim-{uuid.uuid4().hex[:8]}"
    fleet = gateway.tokens.issue("enroll", "fleet-a", ttl_s=600)
    status, body, _ = await gateway.enrol({"device_id": device}, fleet)
    assert status == 201 and body["device_id"] == device, body
    mallory = gateway.tokens.issue("enroll", "mallory", ttl_s=600)
    status, body, _ = await gateway.enrol({"device_id": device}, mallory)
    assert (status, body["error"]) == (409, "device_exists"), body
    assert "token" not in body
    again = gateway.tokens.issue("enroll", "fleet-a", ttl_s=600)
    status, body, _ = await gateway.enrol({"device_id": device}, again)
    assert status == 201, body
    admin = gateway.tokens.issue("admin", "operator", ttl_s=600)
    status, body, _ = await gateway.enrol({"device_id": device}, admin)
    assert status == 201, body
    # A generated id is held as well: nobody names it later to take it.
    status, generated, _ = await gateway.enrol({}, fleet)
    assert status == 201
    status, body, _ = await gateway.enrol({"device_id": generated["device_id"]}, mallory)
    assert (status, body["error"]) == (409, "device_exists"), body
    assert gateway.server.gateway.stats.refused_enrolments == 2

    later = GatewayServer(gateway.server.settings.with_gateway(port=0, wait_s=5.0))
    await later.start()
    try:
        for token, expected in ((mallory, 409), (again, 201)):
            async with gateway.http.post(
                f"{later.url}/v1/devices",
                json={"device_id": device},
                headers={"Authorization": f"Bearer {token}"},
            ) as r:
                assert r.status == expected, await r.text()
    finally:
        await later.stop()


async def test_one_enrol_token_enrols_a_bounded_number_of_devices(gateway: Authed) -> None:
    """Issue 34, item 11: enrolments per enrol token were unbounded (and every gateway keeps
    every enrolled id for good). An enrol token enrols at most
    VENN_GATEWAY_MAX_ENROLMENTS_PER_TOKEN new ids; enrolling one it holds again is free;
    another token, or an operator, is not held by it; a gateway started later counts the
    same from venn.enrolments."""
    settings = gateway.server.settings.with_gateway(port=0, max_enrolments_per_token=3)
    bounded = GatewayServer(settings)
    await bounded.start()
    url = bounded.url
    try:
        fleet = gateway.tokens.issue("enroll", "fleet-b", ttl_s=600)

        async def enrol(device: str, token: str, at: str = url) -> tuple[int, dict[str, Any]]:
            headers = {"Authorization": f"Bearer {token}"}
            async with gateway.http.post(
                f"{at}/v1/devices", json={"device_id": device}, headers=headers
            ) as r:
                return r.status, await r.json()

        tag = uuid.uuid4().hex[:6]
        got = [await enrol(f"b{i}-{tag}", fleet) for i in range(4)]
        assert [s for s, _ in got] == [201, 201, 201, 403], got
        assert got[3][1]["error"] == "enrolment_limit"
        assert (await enrol(f"b0-{tag}", fleet))[0] == 201  # held already: free
        other = gateway.tokens.issue("enroll", "fleet-b", ttl_s=600)
        assert (await enrol(f"b4-{tag}", other))[0] == 201
        admin = gateway.tokens.issue("admin", "operator", ttl_s=600)
        assert (await enrol(f"b5-{tag}", admin))[0] == 201
        later = GatewayServer(settings)
        await later.start()
        try:
            deadline = time.monotonic() + 30
            while not later.gateway.view_ready:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
            status, body = await enrol(f"b6-{tag}", fleet, later.url)
            assert (status, body.get("error")) == (403, "enrolment_limit"), body
        finally:
            await later.stop()
    finally:
        await bounded.stop()


async def test_a_bad_enrolment_record_gets_one_dead_letter_across_restarts(
    gateway: Authed, partitions: int
) -> None:
    """Issue 34, item 11: every gateway reads venn.enrolments from its beginning at each
    start and dead-lettered a bad record again each time. A gateway now reads the letters
    written before it decides what to write."""
    producer = AIOKafkaProducer(bootstrap_servers=gateway.broker)
    await producer.start()
    try:
        meta = await producer.send_and_wait(
            topics.ENROLMENTS, b"not an enrolment", key=f"bad-{uuid.uuid4().hex}".encode()
        )
    finally:
        await producer.stop()
    letter = ev.dead_letter_id(topics.ENROLMENTS, meta.partition, meta.offset)
    for _ in range(2):  # a gateway started, stopped, started again
        server = GatewayServer(gateway.server.settings.with_gateway(port=0))
        await server.start()
        try:
            deadline = time.monotonic() + 30
            while not server.gateway.view_ready:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
        finally:
            await server.stop()  # its producer flushed: what it wrote is on the topic
    assert await letters_with_id(gateway.broker, partitions, letter) == 1


async def letters_with_id(broker: str, partitions: int, letter_id: str) -> int:
    """How many records of venn.dead-letters carry this dead letter id."""
    consumer = AIOKafkaConsumer(bootstrap_servers=broker, enable_auto_commit=False)
    await consumer.start()
    try:
        parts = [TopicPartition(topics.DEAD_LETTERS, p) for p in range(partitions)]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        ends = await consumer.end_offsets(parts)
        found = 0

        async def behind() -> bool:
            return any([await consumer.position(tp) < ends[tp] for tp in parts])

        while await behind():
            for messages in (await consumer.getmany(timeout_ms=1000)).values():
                found += sum(letter_id.encode() in (m.value or b"") for m in messages)
        return found
    finally:
        await consumer.stop()
