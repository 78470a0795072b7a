"""`gather_fetches` on Apache Kafka: records that trickle in are read in a few fetches, none
is lost or reordered, and without it each record costs a fetch of its own."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from venn.broker.faust_adapter import gather_fetches
from venn.broker.topics import ensure_topics

RECORDS = 30
SPACING_S = 0.01
GATHER_S = 0.1


async def trickle(bootstrap: str, topic: str, gather_s: float) -> tuple[list[bytes], int, float]:
    """Send RECORDS one by one, SPACING_S apart; (what was read, fetch responses that
    brought records, seconds from the first send to the last record read)."""
    tp = TopicPartition(topic, 0)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1)
    await consumer.start()
    await producer.start()
    try:
        consumer.assign([tp])
        await consumer.seek_to_end(tp)
        await consumer.position(tp)
        if gather_s:
            gather_fetches(consumer, gather_s)
        read: list[bytes] = []
        responses = 0

        async def reader() -> None:
            nonlocal responses
            while len(read) < RECORDS:
                batch = await consumer.getmany(tp, timeout_ms=1000)
                if batch.get(tp):
                    responses += 1
                    read.extend(r.value or b"" for r in batch[tp])

        task = asyncio.create_task(reader())
        await asyncio.sleep(0.3)  # the reader's fetch parks at the broker
        started = time.monotonic()
        for i in range(RECORDS):
            await producer.send_and_wait(topic, f"r{i}".encode(), partition=0)
            await asyncio.sleep(SPACING_S)
        await asyncio.wait_for(task, 30)
        return read, responses, time.monotonic() - started
    finally:
        await producer.stop()
        await consumer.stop()


@pytest.mark.parametrize("gather_s", [GATHER_S, 0.0])
async def test_records_that_trickle_in_are_read_in_few_fetches_and_in_order(
    broker: str, broker_kind: str, unique: str, gather_s: float
) -> None:
    if broker_kind != "kafka":
        pytest.skip("Tansu holds a parked fetch for its whole wait: nothing to gather")
    topic = f"gather{unique}"
    await ensure_topics(broker, 1, names=[topic])
    read, responses, seconds = await trickle(broker, topic, gather_s)
    assert read == [f"r{i}".encode() for i in range(RECORDS)]
    if gather_s:
        # At most one response per gather interval, plus the first (no wait after quiet).
        assert responses <= seconds / gather_s + 2, (responses, seconds)
    else:
        # Each record arrives alone: the broker answers a parked fetch at once.
        assert responses > RECORDS / 2, (responses, seconds)
