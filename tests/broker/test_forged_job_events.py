"""Forged job events change nothing anyone reads (issue 26, item 1): the gateway's views
(what devices are told, what `GET /v1/jobs/{id}` says), a restarted gateway folding the log
again, and a coordinator's resume apply the scheduler's rule to every job event: a close,
cancel or finish of job B signed with job A's token, with no token, with a token of
another secret, or with B's own token after it expired, is skipped."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiokafka import AIOKafkaProducer

from services.coordinator.resume import read_positions
from services.gateway import GatewayServer
from tests.factories import UNJUDGED
from venn import events as ev
from venn.auth import Tokens
from venn.auth.tokens import GivenTokens
from venn.broker import topics
from venn.broker.stream import authorized
from venn.broker.topics import ensure_topics
from venn.settings import Settings

SECRET = secrets.token_urlsafe(32)
TOKENS = Tokens(SECRET)


async def gateway(broker: str, partitions: int) -> GatewayServer:
    settings = Settings(broker=broker, topic_partitions=partitions, auth_secret=SECRET)
    server = GatewayServer(settings.with_gateway(port=0, wait_s=1.0).with_admission(**UNJUDGED))
    await server.start()
    deadline = time.monotonic() + 30
    while not server.gateway.view_ready:
        assert time.monotonic() < deadline, "the gateway's views never caught up"
        await asyncio.sleep(0.1)
    return server


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        yield session


async def call(
    http: aiohttp.ClientSession, server: GatewayServer, method: str, path: str, token: str,
    body: Any = None,
) -> tuple[int, Any]:  # fmt: skip
    headers = {"Authorization": f"Bearer {token}"}
    data = json.dumps(body).encode() if body is not None else None
    async with http.request(method, server.url + path, data=data, headers=headers) as r:
        return r.status, await r.json()


async def publish(broker: str, *sends: tuple[str, ev.Event]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=broker, acks="all")
    await producer.start()
    try:
        for topic, event in sends:
            await producer.send_and_wait(topic, ev.encode(event), key=ev.key_of(event))
    finally:
        await producer.stop()


def cancel(job_id: str, event_id: str, token: str | None) -> ev.JobCancelled:
    return ev.JobCancelled(
        event_id=event_id, time=time.time(), job_id=job_id, reason="hostile", token=token
    )


def forgeries(job_id: str, token_a: str, token_b: str) -> list[tuple[str, ev.Event]]:
    """Ends of job B's round and life, none signed by a token that allowed it when sent."""
    now = time.time()
    other_secret = Tokens(secrets.token_urlsafe(32)).issue("job", "b", jobs=[job_id], ttl_s=600)
    expired_b = TOKENS.issue("job", "b", jobs=[job_id], ttl_s=60, now=now - 3600)
    close = ev.RoundClosed(
        event_id=f"forged-close-{job_id}", time=now, job_id=job_id, round_index=0,
        outcome="succeeded", demand=2, assigned=2, results=2, opened_at=now - 5, closed_at=now,
        reason="", sched_delay_s=1.0, response_time_s=1.0, token=token_a,
    )  # fmt: skip
    finish = ev.JobFinished(
        event_id=f"forged-finish-{job_id}", time=now, job_id=job_id, rounds_completed=2,
        arrival=now - 9, finished_at=now, jct_s=9.0, token=expired_b,
    )  # fmt: skip
    cancels = [cancel(job_id, f"forged-cancel-{i}-{job_id}", token)
               for i, token in enumerate((None, other_secret))]  # fmt: skip
    assert token_b  # B's own token, valid: what B's coordinator signs with
    return [(topics.ROUNDS, close), (topics.ROUNDS, finish), *((topics.JOBS, c) for c in cancels)]


async def test_forged_ends_of_a_job_change_no_view(
    broker: str, partitions: int, http: aiohttp.ClientSession
) -> None:
    await ensure_topics(broker, partitions)
    tag = uuid.uuid4().hex[:8]
    job_a, job_b = f"a-{tag}", f"b-{tag}"
    attrs = {f"only-{job_b}": 1.0}
    server = await gateway(broker, partitions)
    # Minted here, not at import: the module may run long after the suite was collected.
    admin = TOKENS.issue("admin", "test-operator", ttl_s=600)
    try:
        spec = {"job_id": job_b, "requirement": attrs, "demand": 2, "rounds": 2,
                "deadline_s": 30}  # fmt: skip
        status, submitted = await call(http, server, "POST", "/v1/jobs", admin, spec)
        assert status == 201
        token_b = submitted["token"]
        token_a = TOKENS.issue("job", "owner-a", jobs=[job_a], ttl_s=600)
        request = ev.RoundRequested(
            event_id=f"rr-{tag}", time=time.time(), job_id=job_b, round_index=0, demand=2,
            token=token_b,
        )  # fmt: skip
        await publish(broker, (topics.JOBS, request))
        view = server.gateway.view
        deadline = time.monotonic() + 20
        while not view.is_open(job_b):
            assert time.monotonic() < deadline, "B's round never opened in the view"
            await asyncio.sleep(0.1)

        skipped = server.gateway.stats.skipped_records
        before = skipped.get("unauthorized", 0)
        forged = forgeries(job_b, token_a, token_b)
        await publish(broker, *forged)
        deadline = time.monotonic() + 20
        while skipped.get("unauthorized", 0) < before + len(forged):
            assert time.monotonic() < deadline, f"forgeries read: {skipped}"
            await asyncio.sleep(0.1)

        # What devices are told, and what the job API says, did not move.
        assert view.is_open(job_b) and view.may_assign(attrs)
        status, job = await call(http, server, "GET", f"/v1/jobs/{job_b}", token_b)
        assert (status, job["state"], job["rounds_done"]) == (200, "running", 0), job
        assert job["open_round"]["demand"] == 2
    finally:
        await server.stop()

    # A restarted gateway folds the whole log again: the same.
    server = await gateway(broker, partitions)
    try:
        assert server.gateway.view.is_open(job_b)
        status, job = await call(http, server, "GET", f"/v1/jobs/{job_b}", admin)
        assert (status, job["state"]) == (200, "running"), job
    finally:
        await server.stop()

    # A coordinator resuming B: with the secret, or holding only B's token.
    for tokens in (Tokens(SECRET), GivenTokens([token_b])):
        position = (await read_positions(broker, [job_b], check=authorized(tokens)))[job_b]
        life = position.life
        assert life.registered is not None or isinstance(tokens, GivenTokens)
        assert not life.ended and life.closes == [] and life.conflicts == []
        assert life.open_attempt is not None and life.open_attempt.index == 0

    # The owner's own end still counts everywhere.
    await publish(broker, (topics.JOBS, ev.JobCancelled(
        event_id=f"cancel-{tag}", time=time.time(), job_id=job_b, reason="done", token=token_b,
    )))  # fmt: skip
    position = (await read_positions(broker, [job_b], check=authorized(TOKENS)))[job_b]
    assert position.life.status == "cancelled"
