"""The gateway's followers of a whole topic (venn/broker/follow.py) on the session's
Kafka: the status feed keeps the newest snapshot, the dead-letter feed tallies letters;
records that are not what the topic carries are counted and skipped, never the end of
the feed."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable

from aiokafka import AIOKafkaProducer

from services.gateway.dashboard import DeadLetterFeed
from services.gateway.status_feed import StatusFeed
from venn import events as ev
from venn.broker import topics
from venn.broker.topics import ensure_topics
from venn.core.status import SchedulerStatus, encode_status
from venn.settings import Settings


def snapshot(at: float, worker: str) -> SchedulerStatus:
    return SchedulerStatus(
        time=at, worker=worker, policy="venn", window=0, checkin_rate_per_s=0.0,
        busy_devices=0, device_groups=[], job_groups=[], jobs=[],
    )  # fmt: skip


async def until(check: Callable[[], bool], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not seen in time"
        await asyncio.sleep(0.1)


async def test_feeds_follow_their_topics_and_skip_what_they_cannot_read(
    broker: str, partitions: int
) -> None:
    settings = Settings(broker=broker, topic_partitions=partitions)
    await ensure_topics(broker, partitions)
    tag = uuid.uuid4().hex[:8]
    status, letters = StatusFeed(settings), DeadLetterFeed(settings)
    await status.start()
    await letters.start()
    producer = AIOKafkaProducer(bootstrap_servers=broker, acks="all")
    await producer.start()
    try:
        far = time.time() + 10_000  # newer than any snapshot another test published
        for value in (b"not a snapshot", encode_status(snapshot(far, f"old-{tag}"))):
            await producer.send_and_wait(topics.STATUS, value, key=b"plan")
        await producer.send_and_wait(
            topics.STATUS, encode_status(snapshot(far + 1, f"new-{tag}")), key=b"plan"
        )
        offset = int(tag, 16)  # its event id names the offset: one no other letter has
        letter = ev.dead_letter_for(b"x", f"test {tag}", topics.JOBS, 0, offset, time.time())
        for value in (b"\xff not an event", ev.encode(letter)):
            await producer.send_and_wait(topics.DEAD_LETTERS, value, key=b"k")

        await until(lambda: status.latest is not None and status.latest.worker == f"new-{tag}")
        await until(lambda: letter.event_id in letters.tally)
        assert status.bad_records >= 1 and letters.bad_records >= 1
        assert not letters.tally.unavailable
    finally:
        await producer.stop()
        await status.stop()
        await letters.stop()
