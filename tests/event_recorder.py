"""The event recorder of the broker tests: "these events, in this order, were published".

An `EventRecorder` notes the end of every partition of its topics when it starts and from
then on keeps every record published there, decoded with `venn.events` as the topic's
readers decode it (a record that does not decode is kept with `event` None: the broker is
shared, other tests publish garbage on purpose). Records are kept in the order they were
read, which is offset order within a partition; Kafka orders nothing across partitions.

Tests get one through the `published` fixture (tests/conftest.py); a module-scoped stack
opens one itself with ``async with EventRecorder(...)``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
from aiokafka import AIOKafkaConsumer

from venn import events as ev
from venn.broker.follow import stop_reader
from venn.broker.stream import KafkaRecords, Record
from venn.broker.topics import partitions_of

WAIT_S = 20.0


@dataclass(frozen=True, slots=True)
class Recorded(Record):
    event: ev.Event | None = None
    """None when the value is not an event this topic may carry."""
    seen_at: float = 0.0
    """Wall-clock time (``time.time()``) the recorder read it."""


def allowed_on(topic: str) -> tuple[type[ev.Event], ...]:
    """What ``topic`` may carry; a test's prefixed copy of a Venn topic
    (``<token>.venn.rounds``) carries what the Venn topic does."""
    for name, allowed in ev.ALLOWED_ON.items():
        if topic == name or topic.endswith("." + name):
            return allowed
    return ev.EVENT_TYPES


@dataclass
class EventRecorder:
    bootstrap: str
    topics: Sequence[str]
    max_bytes: int = 1 << 20
    records: list[Recorded] = field(default_factory=list)
    _consumer: AIOKafkaConsumer | None = None
    _task: asyncio.Task[None] | None = None

    async def start(self) -> EventRecorder:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False
        )
        await consumer.start()
        self._consumer = consumer
        parts = await partitions_of(self.bootstrap, self.topics)
        missing = set(self.topics) - {tp.topic for tp in parts}
        assert not missing, f"no such topics (create them first): {sorted(missing)}"
        consumer.assign(parts)
        await consumer.seek_to_end(*parts)
        for tp in parts:  # resolved now: everything published from here on is recorded
            await consumer.position(tp)
        self._task = asyncio.create_task(self._read(consumer), name="event-recorder")
        return self

    async def stop(self) -> None:
        await stop_reader(self._task, self._consumer)
        self._task, self._consumer = None, None

    async def __aenter__(self) -> EventRecorder:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _read(self, consumer: AIOKafkaConsumer) -> None:
        source = KafkaRecords(consumer)
        while True:
            records = await source.fetch(timeout_ms=200, max_records=10_000)
            now = time.time()
            for r in records:
                try:
                    event: ev.Event | None = ev.decode(r.value, allowed_on(r.topic), self.max_bytes)
                except ev.InvalidEvent:
                    event = None
                record = (r.topic, r.partition, r.offset, r.key, r.value)
                stamp = (r.timestamp, r.timestamp_type)
                self.records.append(Recorded(*record, *stamp, event=event, seen_at=now))

    # -- what was published ------------------------------------------------------------
    def on(
        self, topic: str | None = None, where: Callable[[Any], bool] | None = None
    ) -> list[Recorded]:
        """The decoded records (of ``topic``, whose event ``where`` accepts), as read."""
        return [
            r
            for r in self.records
            if r.event is not None
            and (topic is None or r.topic == topic)
            and (where is None or where(r.event))
        ]

    def events(
        self, topic: str | None = None, where: Callable[[Any], bool] | None = None
    ) -> list[ev.Event]:
        return [r.event for r in self.on(topic, where) if r.event is not None]

    def items(
        self, topic: str | None = None, where: Callable[[Any], bool] | None = None
    ) -> list[ev.Event]:
        """Every event of ``topic`` with batches read as their items (which ``where``
        filters)."""
        out = [item for e in self.events(topic) for item in ev.unbatch(e)]
        return [e for e in out if where is None or where(e)]

    def assignments(self, job_ids: Iterable[str]) -> list[ev.Assignment]:
        """Assignments for ``job_ids`` (alone or in batches), as read."""
        jobs = set(job_ids)
        return [a for e in self.events() for a in ev.assignments_of(e) if a.job_id in jobs]

    def dead_letters(self) -> dict[str, ev.DeadLetter]:
        return {e.event_id: e for e in self.events() if isinstance(e, ev.DeadLetter)}

    # -- waiting and asserting -----------------------------------------------------------
    async def wait_for(self, predicate: Callable[[], Any], timeout: float = WAIT_S) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s")
            await asyncio.sleep(0.05)

    async def dead_letter_of(self, topic: str, meta: Any, timeout: float = WAIT_S) -> ev.DeadLetter:
        """The dead letter of the record ``meta`` (a send's RecordMetadata) on ``topic``."""
        letter_id = f"dead:{topic}:{meta.partition}:{meta.offset}"
        await self.wait_for(lambda: letter_id in self.dead_letters(), timeout)
        return self.dead_letters()[letter_id]

    async def expect(
        self,
        topic: str,
        expected: Sequence[ev.Event],
        where: Callable[[Any], bool],
        *,
        ignore: Sequence[str] = (),
        settle_s: float = 0.5,
        timeout: float = WAIT_S,
    ) -> list[Recorded]:
        """Assert that the events of ``topic`` that ``where`` selects are exactly
        ``expected`` (compared without the fields named in ``ignore``, e.g. a time the
        publisher sets), each under its partition key (`venn.events.key_of`), in this
        order within each partition. Waits until they are all there, then ``settle_s``
        more for anything unexpected. Returns their records."""
        with contextlib.suppress(AssertionError):  # reported below, with what came
            await self.wait_for(lambda: len(self.on(topic, where)) >= len(expected), timeout)
        await asyncio.sleep(settle_s)
        got = self.on(topic, where)
        assert_sequence(got, expected, ignore)
        return got


Published = Callable[..., Awaitable[EventRecorder]]
"""The `published` fixture: ``await published(topic, ...)`` starts a recorder."""


def assert_sequence(
    got: Sequence[Recorded], expected: Sequence[ev.Event], ignore: Sequence[str] = ()
) -> None:
    """``got`` holds exactly the events of ``expected`` (compared without the fields in
    ``ignore``), each keyed by its partition key, and each partition's records come in the
    order ``expected`` lists them."""

    def seen(event: ev.Event) -> bytes:
        # Through a decode, as a reader sees it (an int given for a float field, 300 for 300.0).
        kept = msgspec.structs.replace(event, **dict.fromkeys(ignore, 0))
        return ev.encode(ev.decode(ev.encode(kept), max_bytes=1 << 20))

    events = [r.event for r in got if r.event is not None]
    assert len(events) == len(got), "a record that is not an event"
    assert Counter(map(seen, events)) == Counter(map(seen, expected)), (
        f"published: {events}\nexpected: {list(expected)}"
    )
    for r, event in zip(got, events, strict=True):
        assert r.key == ev.key_of(event), (r.key, event)
    partition_of = {seen(e): r.partition for r, e in zip(got, events, strict=True)}
    for p in sorted({r.partition for r in got}):
        in_order = [seen(e) for e in expected if partition_of[seen(e)] == p]
        there = [seen(e) for r, e in zip(got, events, strict=True) if r.partition == p]
        assert there == in_order, f"partition {p}: not in the expected order"
