"""Apache Kafka with SASL/SCRAM and ACLs, as `venn up` runs it: each service signs in as
its own principal and may write only its own topics (issue 12, defect 4); exactly what each
principal may read and write, the device-facing gateway writing no job events (its job API
signs in as `jobs`), and results tied to assignments whoever may write venn.results
(issue 26, items 8 and 9)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import secrets
import time
import uuid
from pathlib import Path

import aiohttp
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaConnectionError, KafkaError, TopicAuthorizationFailedError

from services.gateway import GatewayServer
from tests.brokers import SessionBroker
from tests.factories import UNJUDGED
from venn import events as ev
from venn.auth import Tokens
from venn.broker import security, topics
from venn.broker.security import Credentials, client_options
from venn.broker.topics import ensure_topics
from venn.sdk import VennClient
from venn.settings import KafkaPasswords, Settings

SECRET = secrets.token_urlsafe(32)

USERS: dict[str, str] = {}
"""The principals' passwords of the session broker's SASL listener (set by `secured`)."""


@pytest.fixture(scope="module")
def secured(session_broker: SessionBroker, partitions: int) -> str:
    """The session broker's SASL listener, with the ACLs `venn up` grants."""
    if not session_broker.secured:
        pytest.skip("needs Apache Kafka (VENN_TEST_BROKER_KIND=tansu)")
    USERS.update(session_broker.users)
    admin = session_broker.credentials(security.ADMIN)
    security.apply_acls(session_broker.secured, admin, "venn-scheduler", "venn-recorder")
    options = client_options(admin)
    asyncio.run(ensure_topics(session_broker.secured, partitions, options=options))
    return session_broker.secured


async def produce(bootstrap: str, creds: Credentials | None, topic: str) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, request_timeout_ms=5000, **client_options(creds)
    )
    try:
        await asyncio.wait_for(producer.start(), 15)
        # A key, since compacted topics (venn.status) refuse records without one.
        await asyncio.wait_for(producer.send_and_wait(topic, b"x", key=b"k"), 15)
    finally:
        await producer.stop()


def as_(principal: str, password: str | None = None) -> Credentials:
    return Credentials(principal, password or USERS[principal])


async def test_a_client_without_credentials_is_refused(secured: str) -> None:
    with pytest.raises(KafkaConnectionError):
        await produce(secured, None, topics.CHECKINS)
    with pytest.raises((KafkaConnectionError, KafkaError)):
        await produce(secured, as_("gateway", "not-its-password"), topics.CHECKINS)


@pytest.mark.parametrize(
    ("principal", "allowed", "refused"),
    [
        ("gateway", topics.CHECKINS, topics.JOBS),  # its device side writes no job event
        ("jobs", topics.JOBS, topics.ASSIGNMENTS),  # the job API submits, never assigns
        ("jobs", topics.JOBS, topics.ROUNDS),
        ("gateway", topics.RESULTS, topics.ROUNDS),
        ("devices", topics.CHECKINS, topics.ASSIGNMENTS),
        ("coordinator", topics.JOBS, topics.CHECKINS),
        ("coordinator", topics.ROUNDS, topics.ASSIGNMENTS),
        ("scheduler", topics.ASSIGNMENTS, topics.CHECKINS),
        ("scheduler", topics.STATUS, topics.RESULTS),
        ("recorder", topics.DEAD_LETTERS, topics.ROUNDS),
    ],
)
async def test_each_principal_writes_only_its_own_topics(
    secured: str, principal: str, allowed: str, refused: str
) -> None:
    await produce(secured, as_(principal), allowed)
    with pytest.raises(TopicAuthorizationFailedError):
        await produce(secured, as_(principal), refused)


async def readable(bootstrap: str, creds: Credentials) -> set[str]:
    """The Venn topics ``creds`` may read: those it may see (DESCRIBE) and fetch (READ)."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
        request_timeout_ms=5000, **client_options(creds),
    )  # fmt: skip
    await asyncio.wait_for(consumer.start(), 15)
    found = set()
    try:
        for topic in await consumer.topics() & set(topics.ALL_TOPICS):
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            try:
                await consumer.getmany(tp, timeout_ms=500)
            except TopicAuthorizationFailedError:
                continue
            found.add(topic)
    finally:
        await consumer.stop()
    return found


async def writes(producer: AIOKafkaProducer, topic: str) -> bool:
    try:
        await asyncio.wait_for(producer.send_and_wait(topic, b"x", key=b"k"), 15)
        return True
    except TopicAuthorizationFailedError:
        return False


async def test_each_principal_reads_and_writes_exactly_what_it_is_granted(secured: str) -> None:
    """The table of docs/security.md, on the broker: every Venn topic, every principal."""
    grants = security.access("venn-scheduler", "venn-recorder")
    assert set(grants) == set(security.SERVICES)
    found: dict[str, tuple[set[str], set[str]]] = {}
    for principal in security.SERVICES:
        producer = AIOKafkaProducer(
            bootstrap_servers=secured, request_timeout_ms=5000, **client_options(as_(principal))
        )
        await asyncio.wait_for(producer.start(), 15)
        try:
            wrote = {t for t in topics.ALL_TOPICS if await writes(producer, t)}
        finally:
            await producer.stop()
        found[principal] = (await readable(secured, as_(principal)), wrote)
    expected = {p: (set(g.read), set(g.write)) for p, g in grants.items()}
    assert found == expected
    assert topics.JOBS not in found["gateway"][1] and found["jobs"] == (set(), {topics.JOBS})


async def test_acls_an_earlier_version_granted_are_taken_back(secured: str) -> None:
    """A deployment made before the job API had its own principal let the gateway write
    venn.jobs; `apply_acls` (run by `venn up` and `venn prepare --secure`) takes that back."""
    from confluent_kafka.admin import (
        AclBinding,
        AclOperation,
        AclPermissionType,
        AdminClient,
        ResourcePatternType,
        ResourceType,
    )

    admin = as_(security.ADMIN)
    client = AdminClient({"bootstrap.servers": secured, **security.librdkafka_options(admin)})
    old = AclBinding(
        ResourceType.TOPIC, topics.JOBS, ResourcePatternType.LITERAL, "User:gateway", "*",
        AclOperation.WRITE, AclPermissionType.ALLOW,
    )  # fmt: skip
    for future in client.create_acls([old]).values():
        future.result(15)
    await until_produces(secured, as_("gateway"), topics.JOBS, allowed=True)
    security.apply_acls(secured, admin, "venn-scheduler", "venn-recorder")
    await until_produces(secured, as_("gateway"), topics.JOBS, allowed=False)
    await produce(secured, as_("jobs"), topics.JOBS)


async def until_produces(bootstrap: str, creds: Credentials, topic: str, allowed: bool) -> None:
    """Wait until ``creds`` may (or may not) write ``topic``: ACLs reach the broker through
    the cluster metadata, a moment after they are made."""
    deadline = time.monotonic() + 30
    while True:
        try:
            await produce(bootstrap, creds, topic)
            if allowed:
                return
        except TopicAuthorizationFailedError:
            if not allowed:
                return
        assert time.monotonic() < deadline, f"{creds.user} on {topic}: still not {allowed}"
        await asyncio.sleep(0.5)


def gateway_settings(bootstrap: str, partitions: int) -> Settings:
    return Settings(
        broker=bootstrap, broker_kind="external", topic_partitions=partitions,
        auth_secret=SECRET, kafka_user="gateway", kafka_password=USERS["gateway"],
    )  # fmt: skip


async def test_the_job_api_writes_job_events_as_its_own_principal(
    secured: str, partitions: int, tmp_path: Path
) -> None:
    tokens = Tokens(SECRET)
    admin_token = tokens.issue("admin", "operator", ttl_s=600)
    job_id = f"api-{uuid.uuid4().hex[:8]}"
    spec = {"job_id": job_id, "requirement": {f"only-{job_id}": 1}, "demand": 1, "rounds": 1,
            "deadline_s": 30}  # fmt: skip
    headers = {"Authorization": f"Bearer {admin_token}"}
    for password, expected in (("", 503), (USERS[security.JOBS], 201)):
        # The jobs principal's password given, or none (and no run dir that has one).
        settings = gateway_settings(secured, partitions)
        settings = settings.with_gateway(port=0).with_admission(**UNJUDGED)
        passwords = KafkaPasswords(jobs=password)
        settings = dataclasses.replace(settings, kafka_passwords=passwords, run_dir=str(tmp_path))
        server = GatewayServer(settings)
        await server.start()
        try:
            async with aiohttp.ClientSession() as http:
                url = f"{server.url}/v1/jobs"
                deadline = time.monotonic() + 30
                while True:  # 429 until the gateway's views caught up
                    async with http.post(url, data=json.dumps(spec), headers=headers) as r:
                        status, body = r.status, await r.json()
                    if status != 429 or time.monotonic() > deadline:
                        break
                    await asyncio.sleep(0.2)
                assert status == expected, body
                if expected == 503:
                    assert body["error"] == "no_jobs_principal"
                    continue
                # The registration went through the jobs principal and the gateway read it.
                status_url = f"{url}/{job_id}"
                while True:
                    async with http.get(status_url, headers=headers) as r:
                        if r.status == 200 and (await r.json())["state"] == "submitted":
                            break
                    assert time.monotonic() < deadline, "the submission never came back"
                    await asyncio.sleep(0.2)
        finally:
            await server.stop()


async def test_a_result_for_a_device_never_assigned_is_not_handed_on(secured: str) -> None:
    """Issue 26, item 8: the devices principal may write venn.results, so any device's result
    can appear there; the SDK hands on only results of devices the job's round assigned (one
    that overtook its assignment, once the assignment comes)."""
    job_id = f"tie-{uuid.uuid4().hex[:8]}"

    def assignment(device: str) -> ev.Assignment:
        return ev.Assignment(
            event_id=f"asg:{device}:{job_id}:0", time=time.time(), job_id=job_id, round_index=0,
            device_id=device, task_url="http://t", speed_ms_per_sample=1.0, bandwidth_kbps=1.0,
        )  # fmt: skip

    def result(device: str) -> ev.DeviceResult:
        return ev.DeviceResult(
            event_id=f"res-{device}-{job_id}", time=time.time(), job_id=job_id, round_index=0,
            device_id=device, ok=True, response_time_s=1.0,
        )  # fmt: skip

    async with VennClient(
        secured, kafka_options=client_options(as_("coordinator")), heartbeat_s=0
    ) as client:
        client.subscribe(job_id)
        await send(secured, "scheduler", topics.ASSIGNMENTS, assignment("assigned"))
        # A device never assigned, and one whose result comes before its assignment.
        for device in ("assigned", "never-assigned", "early"):
            await send(secured, "devices", topics.RESULTS, result(device))
        await send(secured, "scheduler", topics.ASSIGNMENTS, assignment("early"))
        got: list[str] = []
        results = client.results(job_id)
        while len(got) < 2:
            got.append((await asyncio.wait_for(anext(results), 30)).device_id)
        # "never-assigned" came before "early" on the job's one partition: read, and held.
        assert got == ["assigned", "early"]
        assert client.stats.dispatched == 5  # 2 assignments, 3 results


async def send(bootstrap: str, principal: str, topic: str, event: ev.Event) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **client_options(as_(principal)))
    await producer.start()
    try:
        await producer.send_and_wait(topic, ev.encode(event), key=ev.key_of(event))
    finally:
        await producer.stop()
