"""A lost broker is visible and survivable (issue 12, defect 6): while Apache Kafka is down
the gateway's and the scheduler's health turn red and check-ins are refused instead of
answered from a stale view; when it is back, every service resumes by itself and what
was written before the outage is processed."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from sqlalchemy import select

from devtools.brokers import start_detached, stop_detached
from devtools.stack.capture import read_topics
from devtools.stack.local import StackInfo, kafka_users
from tests.e2e.harness import own_database, venn_up
from tests.polling import wait_until
from venn import events as ev
from venn.audit.db import make_engine
from venn.audit.models import RoundAudit
from venn.auth.local import issuer, job_token
from venn.broker import topics
from venn.net import free_port
from venn.sdk import VennClient
from venn.settings import Settings

pytestmark = [pytest.mark.e2e, pytest.mark.own_broker]  # its broker stopped and restarted

DEVICE = {"cpu_f": 9.0, "ram": 8.0, "fp16_mem": 8.0, "android_os": 12.0}


def http(
    url: str, body: dict[str, Any] | None = None, token: str | None = None
) -> tuple[int, dict[str, Any]]:
    """(status, JSON body); (0, {}) when nothing listens (yet)."""
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")
    except urllib.error.URLError:
        return 0, {}


@pytest.fixture(scope="module")
def stack(
    pg_admin_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[StackInfo, Settings]]:
    """One `venn up` for the module: the dead-letter test first, then the outage (the
    broker's stop and restart) last."""
    run_dir = tmp_path_factory.mktemp("outage") / "run"
    port = str(free_port())
    with (
        own_database(pg_admin_url) as url,
        venn_up(run_dir, VENN_SCHEDULER_WEB_PORT=port, VENN_DATABASE_URL=url) as stack,
    ):
        yield stack


def checkin(settings: Settings, device: str) -> tuple[int, dict[str, Any]]:
    url = f"http://127.0.0.1:{settings.gateway.port}/v1/checkin"
    body = {"device_id": device, "attrs": DEVICE, "speed_ms_per_sample": 50, "bandwidth_kbps": 5e3}
    tokens = issuer(settings)
    assert tokens is not None  # venn up authenticates
    return http(url, body, tokens.issue("device", device, ttl_s=600))


def test_each_bad_record_gets_exactly_one_dead_letter(stack: tuple[StackInfo, Settings]) -> None:
    """Issue 12, defect 8: a bad record on venn.jobs or venn.rounds got two dead letters
    (scheduler and recorder), on venn.results one more per SDK client, on venn.replies and
    venn.revocations none. Now each gets one, from the service that owns that topic's
    input."""
    _, settings = stack
    gateway = f"http://127.0.0.1:{settings.gateway.port}/healthz"
    wait_until(lambda: http(gateway)[0] == 200, 60, "the gateway to serve")
    gateway_id = http(gateway)[1]["gateway_id"]
    admin = settings.for_role("admin").kafka_options
    marker = uuid.uuid4().hex
    bad = {
        topics.JOBS: b"not json " + marker.encode(),
        topics.ROUNDS: b'{"type": "round_closed", "marker": "' + marker.encode() + b'"}',
        topics.RESULTS: b"[" + marker.encode() + b"]",
        topics.REPLIES: b"\xff" + marker.encode(),
        topics.REVOCATIONS: b'{"type": "token_revoked", "marker": "' + marker.encode() + b'"}',
    }

    async def run() -> list[ev.DeadLetter]:
        options = settings.for_role("coordinator").kafka_options
        async with VennClient(settings.broker, kafka_options=options):  # an SDK reader too
            producer = AIOKafkaProducer(bootstrap_servers=settings.broker, **admin)
            await producer.start()
            try:
                for topic, value in bad.items():
                    key = gateway_id if topic == topics.REPLIES else f"k-{marker}"
                    await producer.send_and_wait(topic, value, key=key.encode())
            finally:
                await producer.stop()
            await asyncio.sleep(8.0)  # every reader has read them
        found = await read_topics(settings.broker, [topics.DEAD_LETTERS], options=admin)
        return [
            e
            for e in found[topics.DEAD_LETTERS]
            if isinstance(e, ev.DeadLetter) and marker.encode() in e.original_bytes()
        ]

    letters = asyncio.run(run())
    by_topic: dict[str, int] = {}
    for letter in letters:
        by_topic[letter.source_topic] = by_topic.get(letter.source_topic, 0) + 1
    assert by_topic == dict.fromkeys(bad, 1), by_topic


def test_broker_loss_turns_health_red_and_everything_resumes(
    stack: tuple[StackInfo, Settings],
) -> None:
    info, settings = stack
    gateway = f"http://127.0.0.1:{settings.gateway.port}/healthz"
    scheduler = f"http://127.0.0.1:{settings.scheduler.web_port}/healthz"
    job = "outage-job"

    async def open_round(close_previous: bool) -> None:
        token = job_token(settings, [job])
        options = settings.for_role("coordinator").kafka_options
        async with VennClient(settings.broker, token=token, kafka_options=options) as client:
            if close_previous:
                # Written just before the outage (acks from the broker): audited after it.
                await client.close_round(
                    job, 0, "succeeded", demand=2, assigned=2, results=2,
                    opened_at=time.time() - 5, closed_at=time.time(),
                )  # fmt: skip
                await client.request_round(job, 1, 2)
            else:
                await client.register_job(job, {"cpu_f": 1}, 2, 3, deadline_s=600)
                await client.request_round(job, 0, 2)

    wait_until(lambda: http(gateway)[0] == http(scheduler)[0] == 200, 60, "both to serve")
    asyncio.run(open_round(close_previous=False))
    wait_until(lambda: checkin(settings, "before")[1].get("assigned") is True, 60, "assignment")
    asyncio.run(open_round(close_previous=True))

    assert stop_detached(info.run_dir)
    wait_until(lambda: http(gateway)[0] == 503, 30, "the gateway to report the broker lost")
    status, health = http(gateway)
    assert health["status"] == "broker_unavailable" and health["broker"]["available"] is False
    status, answer = checkin(settings, "during")
    assert (status, answer["reason"]) == (429, "broker_unavailable")
    wait_until(lambda: http(scheduler)[0] == 503, 30, "the scheduler to report the broker lost")

    start_detached(info.run_dir, "kafka", settings.broker, users=kafka_users(settings))
    wait_until(lambda: http(gateway)[0] == 200, 60, "the gateway to see the broker back")
    wait_until(lambda: http(scheduler)[0] == 200, 60, "the scheduler to see the broker back")
    # The scheduler resumes: the round requested before the outage gets its devices.
    wait_until(
        lambda: checkin(settings, f"after-{time.monotonic_ns()}")[1].get("assigned") is True,
        180,
        "an assignment after the outage",
    )

    def audited() -> bool:
        engine = make_engine(settings.database_url)
        try:
            with engine.connect() as conn:
                rows = conn.execute(
                    select(RoundAudit.round_index).where(RoundAudit.job_id == job)
                ).all()
        finally:
            engine.dispose()
        return [r.round_index for r in rows] == [0]

    wait_until(audited, 120, "the recorder to audit the close written before the outage")
