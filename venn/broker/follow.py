"""Following a topic from its beginning, without a consumer group: every partition
assigned, read forever, each record's value handed to `offer`. What the gateway's views of
venn.status and venn.dead-letters share; a consumer error is logged and retried, never
the end of the view, and so is a record `offer` fails on (skipped and counted: these
followers read without a consumer group, so the topic's owner, `topics.DEAD_LETTER_OWNER`,
dead-letters it)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import TopicAuthorizationFailedError

from venn.broker.topics import ensure_topics
from venn.settings import Settings

log = logging.getLogger(__name__)

RETRY_S = 1.0


class TopicFollower:
    """Subclasses say what a record means (`offer`) and, optionally, what to do when the
    principal may not read the topic (`refused`)."""

    topic: str
    max_records = 1000

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._ends: dict[TopicPartition, int] = {}
        self.failed = 0
        """Records whose `offer` raised (skipped)."""
        self.caught_up = asyncio.Event()
        """Set once every record the topic held at `start` was offered (or it may not be
        read)."""

    def offer(self, raw: bytes | None) -> None:
        raise NotImplementedError

    def refused(self) -> bool:
        """No read access to the topic: True stops following, False retries."""
        return False

    async def start(self) -> None:
        s = self.settings
        counts = await ensure_topics(
            s.broker, s.topic_partitions, options=s.kafka_options, names=(self.topic,)
        )
        name = self.topic.removeprefix("venn.")
        consumer = AIOKafkaConsumer(
            bootstrap_servers=s.broker,
            client_id=f"venn-follow-{name}-{os.getpid()}",
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            **s.kafka_options,
        )
        await consumer.start()
        self._consumer = consumer
        parts = [TopicPartition(self.topic, p) for p in range(counts[self.topic])]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        self._ends = await consumer.end_offsets(parts)
        self._task = asyncio.create_task(self._follow(consumer), name=f"follow-{name}")

    async def _follow(self, consumer: AIOKafkaConsumer) -> None:
        while True:
            try:
                batches = await consumer.getmany(timeout_ms=500, max_records=self.max_records)
            except asyncio.CancelledError:
                raise
            except TopicAuthorizationFailedError:
                if self.refused():
                    self.caught_up.set()
                    return
                await asyncio.sleep(RETRY_S)
                continue
            except Exception:
                log.exception("following %s failed; retrying", self.topic)
                await asyncio.sleep(RETRY_S)
                continue
            for messages in batches.values():
                for m in messages:
                    try:
                        self.offer(m.value)
                    except Exception:
                        # A record `offer` did not expect must not end the view (issue 26):
                        # its topic's owner dead-letters it (topics.DEAD_LETTER_OWNER).
                        self.failed += 1
                        log.exception(
                            "%s[%d]@%d could not be used; skipped", m.topic, m.partition, m.offset
                        )
            if not self.caught_up.is_set():
                positions = [(tp, await consumer.position(tp)) for tp in self._ends]
                if all(at >= self._ends[tp] for tp, at in positions):
                    self.caught_up.set()

    async def stop(self) -> None:
        await stop_reader(self._task, self._consumer)
        self._task, self._consumer = None, None


async def stop_reader(task: asyncio.Task[None] | None, consumer: AIOKafkaConsumer | None) -> None:
    """Cancel a task that reads with ``consumer``, then stop the consumer (None: nothing
    to stop)."""
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    if consumer is not None:
        await consumer.stop()
