"""The dead letters already written, so that a bad record the scheduler reads again after a
restart (its offset was not committed before the worker died) keeps its one letter.

A letter's id is fixed by its record's position (`venn.broker.publish.dead_letter`); a
replay covers the records after the last commit, whose letters are the newest on
venn.dead-letters. So a starting worker reads the tail of each partition of that topic
(`TAIL` records) and skips a letter whose id is there (issue 26: a bad record got a second
letter after a scheduler restart)."""

from __future__ import annotations

import asyncio
import logging
import os

from aiokafka import AIOKafkaConsumer, TopicPartition

from services.scheduler.dedupe import RecentIds
from venn import events as ev
from venn.broker import topics
from venn.settings import Settings

log = logging.getLogger(__name__)

TAIL = 10_000
"""Letters read back per partition: more than a worker writes between two commits (a few
seconds) even under a flood of bad records."""


class WrittenLetters:
    """Ids of letters on venn.dead-letters: the tail read at start, then those sent here."""

    def __init__(self, partitions: int) -> None:
        self.ids = RecentIds(TAIL * max(1, partitions))
        self.ready = asyncio.Event()

    def first_time(self, letter_id: str) -> bool:
        """True (and remembered) if no letter of this id was written yet."""
        if letter_id in self.ids:
            return False
        self.ids.add(letter_id)
        return True

    async def load(self, settings: Settings) -> None:
        """Read the tail of venn.dead-letters; ready afterwards, even if it failed (a
        letter may then come twice, as before)."""
        try:
            for letter_id in await _tail_ids(settings):
                self.ids.add(letter_id)
        except Exception:
            log.exception("could not read the dead letters already written")
        finally:
            self.ready.set()


async def _tail_ids(settings: Settings) -> list[str]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.broker,
        client_id=f"venn-scheduler-letters-{os.getpid()}",
        group_id=None,
        enable_auto_commit=False,
        **settings.kafka_options,
    )
    await consumer.start()
    try:
        # Every Venn topic has the deployment's partition count (prepare_topics).
        parts = [TopicPartition(topics.DEAD_LETTERS, p) for p in range(settings.topic_partitions)]
        consumer.assign(parts)
        starts = await consumer.beginning_offsets(parts)
        ends = await consumer.end_offsets(parts)
        for tp in parts:
            consumer.seek(tp, max(starts[tp], ends[tp] - TAIL))
        ids: list[str] = []
        left = {tp for tp in parts if ends[tp] > max(starts[tp], ends[tp] - TAIL)}
        while left:
            batches = await consumer.getmany(*left, timeout_ms=1000, max_records=5000)
            for messages in batches.values():
                for m in messages:
                    try:
                        letter = ev.decode(m.value, (ev.DeadLetter,), settings.max_event_bytes)
                    except ev.InvalidEvent:
                        continue
                    ids.append(letter.event_id)
            for tp in list(left):
                if await consumer.position(tp) >= ends[tp]:
                    left.discard(tp)
        return ids
    finally:
        await consumer.stop()
