"""One way to put an event on a topic: its key and encoding chosen here, its type checked
against what the topic carries, and one dead-letter policy.

`KafkaEvents` wraps an aiokafka producer; `MemoryEvents` keeps what was published, for
unit tests of code that publishes. Services that batch through a producer of their own
(the scheduler's Faust output producer) use `message` for the same key and bytes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiokafka import AIOKafkaProducer

from venn import events as ev
from venn.broker import topics


class NotAllowedOnTopic(TypeError):
    """A programming error: this kind of event never goes to that topic."""


def message(topic: str, event: ev.Event) -> tuple[bytes, bytes]:
    """(key, value) of `event` on `topic`: the partition key of `venn.events.key_of` and the
    event's JSON."""
    allowed = ev.ALLOWED_ON.get(topic)
    if allowed is not None and not isinstance(event, allowed):
        raise NotAllowedOnTopic(f"{event.type_name()} is not carried by {topic}")
    return ev.key_of(event), ev.encode(event)


def dead_letter(
    raw: bytes | None,
    reason: str,
    topic: str,
    partition: int,
    offset: int,
    now: float | None = None,
) -> ev.DeadLetter:
    """The dead letter of the record at `topic`[`partition`]@`offset`: a bounded prefix of
    it, its size and hash, and `reason` (`venn.events.dead_letter_for`); keyed by its own
    id, which the record's position fixes, so a re-processed bad record yields the same
    letter."""
    return ev.dead_letter_for(
        raw, reason, topic, partition, offset, time.time() if now is None else now
    )


class EventPublisher(Protocol):
    async def publish(self, topic: str, event: ev.Event) -> None:
        """Publish and wait until the broker has it."""

    async def enqueue(self, topic: str, event: ev.Event) -> asyncio.Future[object]:
        """Queue for sending; the future resolves when the broker has it."""


@dataclass
class KafkaEvents:
    producer: AIOKafkaProducer

    async def publish(self, topic: str, event: ev.Event) -> None:
        key, value = message(topic, event)
        await self.producer.send_and_wait(topic, value, key=key)

    async def enqueue(self, topic: str, event: ev.Event) -> asyncio.Future[object]:
        key, value = message(topic, event)
        future: asyncio.Future[object] = await self.producer.send(topic, value, key=key)
        return future


async def send_events(
    bootstrap: str, events: Iterable[tuple[str, ev.Event]], **options: Any
) -> None:
    """Send (topic, event) pairs in order through a producer of their own (``options``: the
    principal's Kafka options), and return once the broker has them all."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks=1, **options)
    await producer.start()
    try:
        sender = KafkaEvents(producer)
        for topic, event in events:
            await sender.enqueue(topic, event)
        await producer.flush()
    finally:
        await producer.stop()


@dataclass
class MemoryEvents:
    """What was published, in order: (topic, key, event)."""

    published: list[tuple[str, bytes, ev.Event]] = field(default_factory=list)

    async def publish(self, topic: str, event: ev.Event) -> None:
        key, _ = message(topic, event)
        self.published.append((topic, key, event))

    async def enqueue(self, topic: str, event: ev.Event) -> asyncio.Future[object]:
        await self.publish(topic, event)
        done: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    def on(self, topic: str) -> list[ev.Event]:
        return [event for t, _, event in self.published if t == topic]


async def publish_dead_letter(
    publisher: EventPublisher,
    raw: bytes | None,
    reason: str,
    topic: str,
    partition: int,
    offset: int,
    *,
    to: str = topics.DEAD_LETTERS,
) -> asyncio.Future[object]:
    """Queue the dead letter of a record that cannot be used (on ``to``, a test's own copy
    of venn.dead-letters); resolves once it is stored."""
    return await publisher.enqueue(to, dead_letter(raw, reason, topic, partition, offset))
