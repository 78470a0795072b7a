"""The gateway's followers of a whole topic (venn/broker/follow.py) on the session's
Kafka: the status feed keeps the newest snapshot, the dead-letter feed tallies letters;
records that are not what the topic carries are counted and skipped, never the end of
the feed."""

from __future__ import annotations

import time
import uuid

from aiokafka import AIOKafkaProducer

from services.gateway.dashboard import DeadLetterFeed
from services.gateway.status_feed import StatusFeed
from tests.polling import until
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


async def test_feeds_follow_their_topics_and_skip_what_they_cannot_read(
    broker: str, partitions: int
) -> None:
    settings = Settings(broker=broker, topic_partitions=partitions)
    tag = uuid.uuid4().hex[:8]

    class PrivateStatus(StatusFeed):
        topic = f"test.status-{tag}"  # other tests' schedulers publish on venn.status

    class PrivateLetters(DeadLetterFeed):
        topic = f"test.dead-letters-{tag}"

    await ensure_topics(broker, partitions, names=(PrivateStatus.topic, PrivateLetters.topic))
    status, letters = PrivateStatus(settings), PrivateLetters(settings)
    await status.start()
    await letters.start()
    producer = AIOKafkaProducer(bootstrap_servers=broker, acks="all")
    await producer.start()
    try:
        now = time.time()
        published = [
            b"not a snapshot",
            encode_status(snapshot(now, "old")),
            encode_status(snapshot(now + 3600, "future")),  # a wrong clock: refused
            encode_status(snapshot(now + 1, "new")),
            encode_status(snapshot(now - 5, "late")),  # older than the one held
        ]
        for value in published:
            await producer.send_and_wait(PrivateStatus.topic, value, key=b"plan")
        letter = ev.dead_letter_for(b"x", "test", topics.JOBS, 0, 7, now)
        for value in (b"\xff not an event", ev.encode(letter)):
            await producer.send_and_wait(PrivateLetters.topic, value, key=b"k")

        await until(lambda: status.bad_records == 2 and letters.bad_records == 1)
        await until(lambda: letter.event_id in letters.tally)
        assert status.latest is not None and status.latest.worker == "new"
        assert letters.tally.total == 1 and not letters.tally.unavailable
    finally:
        await producer.stop()
        await status.stop()
        await letters.stop()


async def test_the_status_feed_goes_on_after_any_bad_record(broker: str, partitions: int) -> None:
    """Issue 26, item 6: a record that msgspec refuses with UnicodeDecodeError (an invalid
    UTF-8 sequence inside a string) ended the feed, and with it /v1/plan and the dashboard,
    also after a restart. Now it is skipped and counted, and the next snapshot is kept."""
    settings = Settings(broker=broker, topic_partitions=partitions)
    tag = uuid.uuid4().hex[:8]

    class PrivateStatus(StatusFeed):
        topic = f"test.status-bad-{tag}"

    await ensure_topics(broker, partitions, names=(PrivateStatus.topic,))
    producer = AIOKafkaProducer(bootstrap_servers=broker, acks="all")
    await producer.start()
    now = time.time()
    bad = [b'{"worker": "\xed\xa0\x80"}', b"[" * 100_000, b""]
    try:
        for value in [*bad, encode_status(snapshot(now, "after"))]:
            await producer.send_and_wait(PrivateStatus.topic, value, key=b"plan")
    finally:
        await producer.stop()
    for _ in range(2):  # and again after a restart: the feed reads from the beginning
        status = PrivateStatus(settings)
        await status.start()
        try:
            await until(
                lambda feed=status: feed.latest is not None and feed.latest.worker == "after"  # type: ignore[misc]
            )
            assert status.bad_records == len(bad)
        finally:
            await status.stop()
