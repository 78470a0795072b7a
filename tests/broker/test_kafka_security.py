"""Apache Kafka with SASL/SCRAM and ACLs, as `venn up` runs it: each service signs in as
its own principal and may write only its own topics (issue 12, defect 4)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError, KafkaError, TopicAuthorizationFailedError

from venn.broker import security, topics
from venn.broker.kafka import KafkaBroker
from venn.broker.security import Credentials, client_options
from venn.broker.topics import ensure_topics

USERS = {p: f"{p}-secret-{i}" for i, p in enumerate(security.PRINCIPALS)}


@pytest.fixture(scope="module")
def secured(broker_kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if broker_kind != "kafka":
        pytest.skip("needs Apache Kafka (VENN_TEST_BROKER_KIND=tansu)")
    cluster = KafkaBroker(tmp_path_factory.mktemp("secured") / "kafka", users=USERS)
    cluster.start()
    try:
        admin = Credentials(security.ADMIN, USERS[security.ADMIN])
        security.apply_acls(cluster.bootstrap, admin, "venn-scheduler", "venn-recorder")
        asyncio.run(ensure_topics(cluster.bootstrap, 2, options=client_options(admin)))
        yield cluster.bootstrap
    finally:
        cluster.stop()


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
        ("gateway", topics.JOBS, topics.ASSIGNMENTS),  # the job API submits, never assigns
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
