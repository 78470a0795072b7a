"""The gateway's copy of the scheduler's latest status snapshot: follows venn.status (a
compacted topic, read from its beginning with a group-less consumer) and keeps the newest
`SchedulerStatus` it decodes. A record that is not a snapshot is skipped and counted."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os

import msgspec
from aiokafka import AIOKafkaConsumer, TopicPartition

from venn.broker import topics
from venn.broker.topics import ensure_topics
from venn.core.status import SchedulerStatus, decode_status
from venn.settings import Settings

log = logging.getLogger("venn.gateway.status")


class StatusFeed:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.latest: SchedulerStatus | None = None
        self.bad_records = 0
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None

    def offer(self, raw: bytes | None) -> None:
        """Keep the snapshot in ``raw`` if it is newer than the one held."""
        if raw is None:
            return
        try:
            status = decode_status(raw)
        except (msgspec.ValidationError, msgspec.DecodeError):
            self.bad_records += 1
            return
        if self.latest is None or status.time >= self.latest.time:
            self.latest = status

    async def start(self) -> None:
        s = self.settings
        counts = await ensure_topics(
            s.broker, s.topic_partitions, options=s.kafka_options, names=(topics.STATUS,)
        )
        consumer = AIOKafkaConsumer(
            bootstrap_servers=s.broker,
            client_id=f"venn-gateway-status-{os.getpid()}",
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            **s.kafka_options,
        )
        await consumer.start()
        self._consumer = consumer
        parts = [TopicPartition(topics.STATUS, p) for p in range(counts[topics.STATUS])]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        self._task = asyncio.create_task(self._follow(consumer), name="gateway-status")

    async def _follow(self, consumer: AIOKafkaConsumer) -> None:
        while True:
            try:
                batches = await consumer.getmany(timeout_ms=500, max_records=100)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("status consumer failed; retrying")
                await asyncio.sleep(1.0)
                continue
            for messages in batches.values():
                for m in messages:
                    self.offer(m.value)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None
