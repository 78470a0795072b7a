"""What only a real Apache Kafka does: idempotent and transactional producers, and a
replicated three-node cluster that loses a node."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from devtools.kafka import KafkaBroker
from venn.broker.topics import delete_topics, ensure_topics


@pytest.fixture
def kafka(broker: str, broker_kind: str) -> str:
    if broker_kind != "kafka":
        pytest.skip("needs Apache Kafka (VENN_TEST_BROKER_KIND=tansu)")
    return broker


async def read_all(bootstrap: str, topic: str, expected: int, isolation: str) -> list[bytes]:
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        isolation_level=isolation,
    )
    await consumer.start()
    values: list[bytes] = []
    try:
        for _ in range(50):
            batch = await consumer.getmany(timeout_ms=200)
            values += [r.value for records in batch.values() for r in records if r.value]
            if len(values) >= expected:
                # one more poll: nothing beyond what was expected may arrive
                batch = await consumer.getmany(timeout_ms=500)
                values += [r.value for records in batch.values() for r in records if r.value]
                break
    finally:
        await consumer.stop()
    return values


async def test_idempotent_producer_gets_a_producer_id(kafka: str, unique: str) -> None:
    topic = f"idem{unique}"
    await ensure_topics(kafka, 2, names=[topic])
    producer = AIOKafkaProducer(bootstrap_servers=kafka, enable_idempotence=True)
    await producer.start()  # InitProducerId: Tansu refuses it
    try:
        sent = [f"m{i}".encode() for i in range(20)]
        for value in sent:
            await producer.send(topic, value, key=value[-1:])
        await producer.flush()  # an idempotent send needs the producer id InitProducerId gave
    finally:
        await producer.stop()
    try:
        assert sorted(await read_all(kafka, topic, len(sent), "read_uncommitted")) == sorted(sent)
    finally:
        await delete_topics(kafka, [topic])


async def test_transactions_commit_and_abort(kafka: str, unique: str) -> None:
    topic = f"txn{unique}"
    await ensure_topics(kafka, 2, names=[topic])
    producer = AIOKafkaProducer(bootstrap_servers=kafka, transactional_id=f"venn-test-{unique}")
    await producer.start()
    try:
        async with producer.transaction():
            for i in range(5):
                await producer.send(topic, f"committed-{i}".encode())
        with pytest.raises(RuntimeError, match="abort me"):
            async with producer.transaction():
                await producer.send(topic, b"aborted")
                await producer.flush()
                raise RuntimeError("abort me")
    finally:
        await producer.stop()
    try:
        committed = await read_all(kafka, topic, 5, "read_committed")
        assert sorted(committed) == [f"committed-{i}".encode() for i in range(5)]
        everything = await read_all(kafka, topic, 6, "read_uncommitted")
        assert b"aborted" in everything  # written, but hidden from read_committed readers
    finally:
        await delete_topics(kafka, [topic])


@pytest.mark.own_broker
async def test_a_three_node_cluster_keeps_serving_with_one_node_down(
    broker_kind: str, tmp_path: Path, unique: str
) -> None:
    if broker_kind != "kafka":
        pytest.skip("needs Apache Kafka (VENN_TEST_BROKER_KIND=tansu)")
    cluster = KafkaBroker(tmp_path / "kafka", nodes=3)
    cluster.start()
    try:
        bootstrap = cluster.bootstrap
        topic = f"rf{unique}"
        await ensure_topics(bootstrap, 3, names=[topic])
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            (described,) = await admin.describe_topics([topic])
        finally:
            await admin.close()
        assert {len(p["replicas"]) for p in described["partitions"]} == {3}

        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await producer.start()
        try:
            for i in range(10):
                await producer.send_and_wait(topic, f"before-{i}".encode())
            cluster.kill_node(2)
            for i in range(10):  # min.insync.replicas=2: acks=all still succeeds
                await producer.send_and_wait(topic, f"during-{i}".encode())
        finally:
            await producer.stop()
        cluster.start_node(2)
        values = await read_all(bootstrap, topic, 20, "read_uncommitted")
        assert sorted(values) == sorted(
            [f"before-{i}".encode() for i in range(10)]
            + [f"during-{i}".encode() for i in range(10)]
        )
    finally:
        cluster.stop()
