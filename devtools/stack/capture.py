"""Read back everything published on some topics (for invariant checks and benches)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from venn import events
from venn.events import Event

QUIET_S = 1.5
"""A topic is read to its end once no record came for this long (end offsets are not
trusted on Tansu, see kafka-notes)."""


async def read_topics(
    bootstrap: str,
    names: Iterable[str],
    timeout: float = 60.0,
    options: Mapping[str, Any] | None = None,
) -> dict[str, list[Event]]:
    """Every valid event on ``names``, per topic, in partition order (partitions in turn);
    batches are read as their items."""
    names = list(names)
    if not names:
        return {}
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **dict(options or {}))
    await producer.start()
    try:
        parts = [
            TopicPartition(name, p)
            for name in names
            for p in sorted(await producer.partitions_for(name))
        ]
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        **dict(options or {}),
    )
    await consumer.start()
    out: dict[str, list[Event]] = {name: [] for name in names}
    try:
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        deadline = time.monotonic() + timeout
        last = time.monotonic()
        while time.monotonic() < deadline and time.monotonic() - last < QUIET_S:
            batch = await consumer.getmany(timeout_ms=200, max_records=10_000)
            for tp, records in batch.items():
                last = time.monotonic()
                for record in records:
                    try:
                        event = events.decode(record.value)
                    except events.InvalidEvent:
                        continue
                    out[tp.topic].extend(events.unbatch(event))
    finally:
        await consumer.stop()
    return out
