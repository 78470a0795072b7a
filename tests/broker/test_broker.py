"""The local brokers (Apache Kafka, Tansu), topic creation and a produce/consume round trip."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from devtools.brokers import read_detached, start_detached, stop_detached
from devtools.tansu import TansuBroker, wait_ready
from venn.broker.health import metadata_brokers
from venn.broker.topics import (
    ALL_TOPICS,
    TopicError,
    changelog_topic,
    delete_topics,
    ensure_topics,
    prefixed,
)
from venn.events import RoundRequested, decode, encode, key_of


async def partitions_of(bootstrap: str) -> dict[str, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        return {t["topic"]: len(t["partitions"]) for t in await admin.describe_topics(None)}
    finally:
        await admin.close()


async def test_ensure_topics_creates_with_asked_partitions(broker: str, unique: str) -> None:
    names = prefixed(f"t{unique}.")
    changelogs = [changelog_topic(f"t{unique}-app", "plan"), changelog_topic(f"t{unique}-app", "q")]
    try:
        created = await ensure_topics(broker, 3, extra=changelogs, names=names)
        assert created == dict.fromkeys([*names, *changelogs], 3)
        actual = await partitions_of(broker)
        assert {n: actual[n] for n in created} == created
        # idempotent
        assert await ensure_topics(broker, 3, extra=changelogs, names=names) == created
        # a topic that exists with another partition count cannot be fixed in place
        with pytest.raises(TopicError, match="partition count other than 5"):
            await ensure_topics(broker, 5, names=names[:1])
    finally:
        deleted = await delete_topics(broker, [*names, *changelogs])
    assert sorted(deleted) == sorted([*names, *changelogs])
    remaining = await partitions_of(broker)
    assert not set(deleted) & set(remaining)
    assert await delete_topics(broker, names) == []  # missing topics are ignored


def test_default_topic_catalogue() -> None:
    assert ALL_TOPICS == (
        "venn.checkins",
        "venn.jobs",
        "venn.assignments",
        "venn.results",
        "venn.rounds",
        "venn.dead-letters",
        "venn.replies",
        "venn.revocations",
        "venn.status",
        "venn.enrolments",
    )
    assert changelog_topic("venn-scheduler", "jobs") == "venn-scheduler-jobs-changelog"


async def test_tansu_auto_creates_unknown_topics_with_4_partitions(
    tansu_broker: str, unique: str
) -> None:
    """Why ensure_topics must run first: a mere produce creates the topic, with 4 partitions."""
    topic = f"auto{unique}"
    producer = AIOKafkaProducer(bootstrap_servers=tansu_broker)
    await producer.start()
    try:
        await producer.send_and_wait(topic, b"x")
    finally:
        await producer.stop()
    try:
        assert (await partitions_of(tansu_broker))[topic] == 4
    finally:
        await delete_topics(tansu_broker, [topic])


async def test_produce_consume_round_trip(broker: str, unique: str) -> None:
    topic = f"rt{unique}.venn.jobs"
    await ensure_topics(broker, 3, names=[topic])
    sent = [
        RoundRequested(
            event_id=f"{unique}-{i}", time=float(i), job_id=f"job{i % 4}", round_index=i, demand=2
        )
        for i in range(40)
    ]
    producer = AIOKafkaProducer(bootstrap_servers=broker)
    await producer.start()
    try:
        for event in sent:
            await producer.send(topic, encode(event), key=key_of(event))
        await producer.flush()
    finally:
        await producer.stop()

    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=broker,
        group_id=f"g{unique}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    received: dict[TopicPartition, list[RoundRequested]] = {}
    try:
        for _ in range(100):
            batch = await consumer.getmany(timeout_ms=200)
            for tp, recs in batch.items():
                received.setdefault(tp, []).extend(decode(r.value) for r in recs)  # type: ignore[misc]
            if sum(len(v) for v in received.values()) >= len(sent):
                break
    finally:
        await consumer.stop()
        await delete_topics(broker, [topic])

    got = [e for events in received.values() for e in events]
    assert sorted(got, key=lambda e: e.round_index) == sent
    # same key -> same partition, in order
    for events in received.values():
        jobs = {e.job_id for e in events}
        for job in jobs:
            indexes = [e.round_index for e in events if e.job_id == job]
            assert indexes == sorted(indexes)
    partition_of = {e.job_id: tp.partition for tp, events in received.items() for e in events}
    assert len(partition_of) == 4


@pytest.mark.tansu
@pytest.mark.own_broker
def test_tansu_broker_context_manager_and_stop() -> None:
    with TansuBroker() as b:
        pid = b.pid
        assert pid is not None and b.running()
        wait_ready(b.host, b.port, timeout=2)
    assert not b.running()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.tansu
@pytest.mark.own_broker
def test_detached_broker_lifecycle(tmp_path: Path) -> None:
    started = start_detached(tmp_path, "tansu")
    try:
        record = read_detached(tmp_path)
        assert record == started and record.kind == "tansu"
        host, port = record.bootstrap.split(":")
        wait_ready(host, int(port), timeout=2)
        assert start_detached(tmp_path, "tansu") == record  # reused, not a second broker
    finally:
        assert stop_detached(tmp_path) is True
    assert read_detached(tmp_path) is None
    assert stop_detached(tmp_path) is False
    with pytest.raises(ProcessLookupError):
        os.kill(record.pids[0], 0)


def test_the_session_broker_answers_metadata(broker: str, broker_kind: str) -> None:
    host, port = broker.split(",")[0].split(":")
    assert metadata_brokers(host, int(port), timeout=5) == 1
