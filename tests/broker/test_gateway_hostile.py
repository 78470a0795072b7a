"""The gateway's work that grows with jobs stays off its event loop or within a bound
(issue 34, items 2 and 3), on a gateway over the session's Apache Kafka, real HTTP.

On 7b90043 one job token queued 12,374 jobs in 228 s (a quarter of honest check-ins got
429, one answered in 2.64 s past the 2 s bound; with one dashboard open, check-ins p50
2.3 s), and a ``finish_by`` submission ran its completion estimate on the event loop,
quadratic in the scheduler's jobs (2,000 jobs: 6.8 s, every check-in waiting as long).
Here both floods run at their largest allowed size at once, with a dashboard open: the
queue up to its bound, then 429 ``queue_full``; estimates over a snapshot of 2,000 jobs,
one at a time in a worker process, then 429 ``busy``; and every check-in is answered within its
bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import msgspec
import pytest
from aiokafka import AIOKafkaProducer

from services.gateway import GatewayServer
from venn.auth import Tokens
from venn.broker import topics
from venn.broker.topics import ensure_topics
from venn.core import JobSpec, Requirement, make_scheduler
from venn.core.status import SchedulerStatus, encode_status, scheduler_status
from venn.core.supply import AttributeMix
from venn.settings import Settings

SECRET = secrets.token_urlsafe(32)
WAIT_S = 2.0
"""The check-in's bound (VENN_GATEWAY_WAIT_S, its default)."""
SLACK_S = 1.0
"""Client-side allowance over the bound: connection set-up and a machine shared by tests."""
SNAPSHOT_JOBS = 2000
"""Jobs in the scheduler's snapshot: an estimate over them costs about 2 s of CPU."""
MAX_QUEUED = 150
"""VENN_MAX_QUEUED_JOBS and VENN_MAX_QUEUED_PER_OWNER of the gateway under test: the size
the queue flood reaches."""


def snapshot(jobs: int) -> SchedulerStatus:
    """A scheduler's snapshot holding ``jobs`` running jobs of eight requirements (ram >=
    1..8) and a window of 1,000 check-ins of devices with ram 1..16 (none with a gpu)."""
    core = make_scheduler("venn")
    for i in range(jobs):
        spec = JobSpec(
            f"load-{i}", Requirement.of(ram=float(1 + i % 8)), 50, 20 + i % 7, 600.0, workload_s=60
        )
        core.add_job(spec, 0.0)
        core.request_round(spec.job_id, 0, 0.0)
    mix = AttributeMix()
    for k in range(1000):
        attrs = {"ram": float(1 + k % 16)}
        core.checkin(core.slot_of(attrs), k / 100, device_id=f"w{k}")
        mix.observe(attrs)
    return scheduler_status(core, core.table(10.0), 10.0, "test", "venn", mix, estimates={})


@pytest.fixture
async def stack(broker: str, partitions: int) -> AsyncIterator[tuple[GatewayServer, Tokens]]:
    settings = Settings(broker=broker, topic_partitions=partitions, auth_secret=SECRET)
    await ensure_topics(broker, partitions)
    settings = settings.with_gateway(port=0, wait_s=WAIT_S).with_admission(
        max_queued_jobs=MAX_QUEUED, max_queued_per_owner=MAX_QUEUED
    )
    server = GatewayServer(settings)
    await server.start()
    deadline = time.monotonic() + 30
    while not server.gateway.view_ready:
        assert time.monotonic() < deadline, "the gateway's views never caught up"
        await asyncio.sleep(0.1)
    try:
        yield server, Tokens(SECRET)
    finally:
        await server.stop()


async def publish_status(broker: str, status: SchedulerStatus, stop: asyncio.Event) -> None:
    """The snapshot, stamped now, every second (a scheduler's, as the gateway reads it)."""
    producer = AIOKafkaProducer(bootstrap_servers=broker)
    await producer.start()
    try:
        while not stop.is_set():
            fresh = msgspec.structs.replace(status, time=time.time())
            await producer.send_and_wait(topics.STATUS, encode_status(fresh), key=b"plan")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
    finally:
        await producer.stop()


def spec(job_id: str, requirement: dict[str, float]) -> bytes:
    body = {"job_id": job_id, "requirement": requirement, "demand": 20, "rounds": 50}
    return json.dumps({**body, "deadline_s": 600}).encode()


async def test_checkins_are_answered_while_the_queue_and_estimates_flood_at_their_bounds(
    broker: str, stack: tuple[GatewayServer, Tokens]
) -> None:
    server, tokens = stack
    url = server.url
    stop = asyncio.Event()
    status_task = asyncio.create_task(publish_status(broker, snapshot(SNAPSHOT_JOBS), stop))
    answers: Counter[tuple[str, int, str]] = Counter()
    http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120))

    async def post(kind: str, path: str, body: bytes, token: str) -> tuple[int, dict[str, Any]]:
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        async with http.post(url + path, data=body, headers=headers) as r:
            got = await r.json(content_type=None)
            answers[(kind, r.status, got.get("error") or got.get("state") or "")] += 1
            return r.status, got

    feed = server.gateway.status
    deadline = time.monotonic() + 60
    while feed.latest is None or len(feed.latest.jobs) < SNAPSHOT_JOBS:
        assert time.monotonic() < deadline, "the gateway never read the snapshot"
        await asyncio.sleep(0.2)

    flooder = tokens.issue("job", "mallory", jobs=["flood-*"], ttl_s=600)

    async def queue_flood() -> None:
        full = 0
        while not stop.is_set() and full < 10:
            job = f"flood-{uuid.uuid4().hex[:10]}"
            _, got = await post("queue", "/v1/jobs?queue=true", spec(job, {"gpu": 1}), flooder)
            full += got.get("error") == "queue_full"

    late = tokens.issue("job", "oscar", jobs=["late-*"], ttl_s=600)

    async def finish_by_flood() -> None:
        while not stop.is_set():
            job = f"late-{uuid.uuid4().hex[:10]}"
            path = f"/v1/jobs?finish_by={time.time() + 60:.0f}"
            await post("finish_by", path, spec(job, {"ram": 2}), late)

    admin = tokens.issue("admin", "ops", ttl_s=600)

    async def dashboard() -> None:
        headers = {"Authorization": f"Bearer {admin}"}
        async with http.get(url + "/v1/events/dashboard", headers=headers) as r:
            assert r.status == 200
            async for _ in r.content:
                if stop.is_set():
                    return

    enroll = tokens.issue("enroll", "fleet", ttl_s=600)
    device = f"dev-{uuid.uuid4().hex[:8]}"
    body = json.dumps({"device_id": device}).encode()
    status, enrolled = await post("enrol", "/v1/devices", body, enroll)
    assert status == 201, enrolled
    queueing = [asyncio.create_task(queue_flood()) for _ in range(4)]
    floods = [
        *queueing,
        *(asyncio.create_task(finish_by_flood()) for _ in range(3)),
        asyncio.create_task(dashboard()),
    ]
    checkins: list[tuple[int, str | None, float]] = []
    bound = aiohttp.ClientTimeout(total=WAIT_S + SLACK_S)
    checkin = {
        "device_id": device,
        "attrs": {"ram": 4},
        "speed_ms_per_sample": 1,
        "bandwidth_kbps": 2,
    }
    try:
        await asyncio.sleep(1.0)  # the floods under way
        # Until the queue is full and two estimates were made (each about 2 s of CPU in a
        # niced worker: on a busy machine one took the whole time the queue took to fill).
        while (
            len(checkins) < 40
            or not all(task.done() for task in queueing)
            or answers[("finish_by", 409, "finish_by_missed")] < 2
        ):
            assert len(checkins) < 400, ("the queue never filled, or no estimates", answers)
            start = time.monotonic()
            try:
                async with http.post(
                    url + "/v1/checkin", json=checkin, timeout=bound,
                    headers={"Authorization": f"Bearer {enrolled['token']}"},
                ) as r:  # fmt: skip
                    got = await r.json()
                    checkins.append((r.status, got.get("reason"), time.monotonic() - start))
            except TimeoutError:
                checkins.append((0, "no answer within the bound", time.monotonic() - start))
            await asyncio.sleep(0.25)
        # Read while the snapshot is fresh: once its publisher stops, a gateway whose snapshot
        # is older than STATUS_FRESH_S judges no supply and admits the queued jobs (the last
        # floods' estimates can take longer than that to end on a busy machine).
        queued = len(server.gateway.view.waiting)
    finally:
        stop.set()
        await asyncio.gather(*floods, return_exceptions=True)
        await status_task
        await http.close()
    # Every check-in answered, at once. The gateway sheds a check-in (429 ``overloaded``)
    # while its loop lags past VENN_GATEWAY_MAX_LAG_S, which a machine busy with other work
    # causes too (the floods' clients share this test's loop): a few, not the quarter of
    # 7b90043.
    kinds = Counter((s, reason) for s, reason, _ in checkins)
    assert set(kinds) <= {(200, "no_open_round"), (429, "overloaded")}, checkins
    assert kinds[(429, "overloaded")] * 10 <= len(checkins), checkins
    assert queued == MAX_QUEUED, (queued, answers)
    assert answers[("queue", 429, "queue_full")] >= 40, answers
    estimated = answers[("finish_by", 409, "finish_by_missed")]
    assert estimated >= 2, answers  # estimates were made (and were late: finish_by in 60 s)
    assert not [a for a in answers if a[1] >= 500], answers


def padded_spec(job_id: str, size: int = 16000) -> bytes:
    """A valid YAML spec of about ``size`` bytes (comments): 10-15 ms of the YAML reader's."""
    base = f"job_id: {job_id}\nrequirement: {{ram: 4}}\ndemand: 2\nrounds: 1\ndeadline_s: 30\n"
    pad = "".join(f"# {'x' * 70}\n" for _ in range(size // 73))
    return (base + pad).encode()[: size - 1]


async def test_a_flood_of_large_specs_from_one_owner_leaves_room_for_the_others(
    stack: tuple[GatewayServer, Tokens],
) -> None:
    """Issue 34, item 11: a flood of large valid YAML specs took both of the job API's spec
    readers and it answered 429 ``busy`` to everyone. One owner now holds one reader at a
    time: the flood is answered busy, another owner's submissions are not."""
    server, tokens = stack
    flooder = tokens.issue("job", "mallory", jobs=["flood-*"], ttl_s=600)
    honest = tokens.issue("job", "alice", jobs=["alice-*"], ttl_s=600)
    stop = asyncio.Event()
    flood_answers: Counter[int] = Counter()

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:

        async def post(body: bytes, token: str) -> tuple[int, dict[str, Any]]:
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/yaml"}
            async with http.post(server.url + "/v1/jobs", data=body, headers=headers) as r:
                return r.status, await r.json(content_type=None)

        async def flood() -> None:
            while not stop.is_set():
                # Read in full, then refused for its id (outside the token's jobs): 403.
                status, _ = await post(padded_spec("not-mine"), flooder)
                flood_answers[status] += 1

        floods = [asyncio.create_task(flood()) for _ in range(8)]
        got = []
        try:
            await asyncio.sleep(0.5)
            for i in range(10):
                job = f"alice-{uuid.uuid4().hex[:8]}-{i}"
                got.append(await post(padded_spec(job, 2000), honest))
        finally:
            stop.set()
            await asyncio.gather(*floods)
    assert [status for status, _ in got] == [201] * 10, got
    assert flood_answers[403] >= 10 and flood_answers[429] >= 10, flood_answers
    assert set(flood_answers) <= {403, 429}, flood_answers


async def test_two_owners_racing_for_one_job_id_get_one_job(
    stack: tuple[GatewayServer, Tokens],
) -> None:
    """Issue 34, item 11: two owners submitting one job id at once both got 201 and a job
    token. The registration the log holds first is the job; the other submission is told
    the id is taken (409 ``job_exists``), without a token."""
    server, tokens = stack
    job = f"race-{uuid.uuid4().hex[:8]}"
    owners = [tokens.issue("job", who, jobs=[job], ttl_s=600) for who in ("alice", "bob")]
    body = f"job_id: {job}\nrequirement: {{ram: 4}}\ndemand: 2\nrounds: 1\ndeadline_s: 30\n"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:

        async def submit(token: str) -> tuple[int, dict[str, Any]]:
            headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/yaml"}
            async with http.post(server.url + "/v1/jobs", data=body, headers=headers) as r:
                return r.status, await r.json(content_type=None)

        got = await asyncio.gather(*(submit(t) for t in owners))
        assert sorted(status for status, _ in got) == [201, 409], got
        assert sum("token" in answer for _, answer in got) == 1, got
        again = await asyncio.gather(*(submit(t) for t in owners))
        assert [status for status, _ in again] == [409, 409], again
