"""One way to read events: records of some topics, each decoded strictly into an event its
topic may carry, and one dead-letter policy for the records that cannot be used.

The policy, the same in every service:
- A record that does not decode (`venn.events.decode`: oversized, not JSON, not allowed on
  its topic, ...) or whose event fails a check every reader makes alike (`Unusable`: a job
  event without a valid token, `authorized`) is dead-lettered by the one service that owns it
  (`topics.DEAD_LETTER_OWNER`, see `owned_by`); every other reader skips it and counts it.
  One bad record, one letter, however many services and processes read it.
- An event that only this reader cannot use (`Refused`: the database refuses its row) is
  this reader's own finding: it dead-letters it, whoever owns the topic.
- A handler that fails otherwise (a bug) is logged and treated as a bad record ("internal
  error").
- A letter is `publish.dead_letter` of the record, keyed by its own id (fixed by the
  record's position, so a replay gives the same letter). One that cannot be sent is
  logged and counted. Nothing here stops the stream.

`judge` is the policy's one decision (dead-letter here or skip, with which reason and
kind), for `EventStream` and for readers that send their letters their own way (the
scheduler's Faust agents). `authorized` is the one check of a job's events
(`venn.auth.checks`) as every reader applies it, judged at the record's `produced_at`.

`KafkaRecords` reads with an aiokafka consumer the caller has assigned or subscribed;
`MemoryRecords` is fed by hand, for unit tests (with `publish.MemoryEvents` for letters).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from aiokafka import AIOKafkaConsumer, ConsumerRecord

from venn import events as ev
from venn.auth.checks import CHECKED, check_job_event
from venn.auth.tokens import AuthError, Tokens
from venn.broker import topics
from venn.broker.publish import EventPublisher, publish_dead_letter

log = logging.getLogger(__name__)

INTERNAL = "internal"
UNAUTHORIZED = "unauthorized"
REJECTED = "rejected"
RETRY_S = 0.5
"""The pause after a read that failed."""


class Unusable(Exception):
    """A decoded event that no reader may use (the same check everywhere, e.g. its token):
    like a record that does not decode, its topic's owner dead-letters it."""

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


class DeadLetterUnsent(RuntimeError):
    """A dead letter the broker did not store (its record must not be committed)."""


class Refused(Exception):
    """A valid event that this reader alone cannot use: it dead-letters it itself."""

    def __init__(self, reason: str, kind: str = REJECTED) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


LOG_APPEND_TIME = 1
"""Kafka's timestamp type of a record the broker stamped when it stored it (0: CreateTime,
the producer's stamp)."""


@dataclass(frozen=True, slots=True)
class Record:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: float | None = None
    """The record's Kafka timestamp, in seconds."""
    timestamp_type: int = 0
    """Kafka's timestamp type: `LOG_APPEND_TIME` or 0 (CreateTime)."""


def produced_at(record: Record) -> float | None:
    """When the broker stored ``record``, if it stamped it (LogAppendTime): the time its
    event's token is judged at. None for a producer's stamp (CreateTime), which proves
    nothing (a holder of an expired token could backdate it): judged when read instead."""
    if record.timestamp_type == LOG_APPEND_TIME and record.timestamp is not None:
        return record.timestamp
    return None


Check = Callable[[ev.Event, Record], None]
"""A check every reader makes alike: raises `Unusable` for an event no reader may use."""


def authorized(tokens: Tokens | None) -> Check:
    """The one authorization rule of a job's events (`venn.auth.checks`) as a stream check:
    an event without a token that allowed it when it was produced is `Unusable`
    (``unauthorized``). Every reader of venn.jobs and venn.rounds applies it: the scheduler,
    the recorder, the gateway's views, a coordinator's resume."""

    def check(event: ev.Event, record: Record) -> None:
        if tokens is None or not isinstance(event, CHECKED):
            return
        try:
            check_job_event(tokens, event, produced_at(record))
        except AuthError as exc:
            raise Unusable(UNAUTHORIZED, f"{UNAUTHORIZED}: {exc}") from None

    return check


@dataclass(frozen=True, slots=True)
class Delivered:
    record: Record
    event: ev.Event


@dataclass(slots=True)
class Batch:
    """One read: every record (for offsets to commit) and the events decoded from them, in
    partition order."""

    records: list[Record] = field(default_factory=list)
    events: list[Delivered] = field(default_factory=list)

    def next_offsets(self) -> dict[tuple[str, int], int]:
        """(topic, partition) -> the offset after the last record read there."""
        return {(r.topic, r.partition): r.offset + 1 for r in self.records}


@dataclass(slots=True)
class StreamStats:
    bad_records: int = 0
    """Records that could not be used (dead-lettered here or left to their owner)."""
    skipped: dict[str, int] = field(default_factory=dict)
    """Kind -> bad records left to their topic's owner."""
    dead_letters: dict[str, int] = field(default_factory=dict)
    """Kind -> dead letters this reader published (a service may pass its own counter)."""
    unsent: int = 0
    """Dead letters the broker did not take."""
    internal_errors: int = 0
    """Handlers that failed."""
    read_errors: int = 0
    """Reads that failed (retried)."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the policy makes of a record that cannot be used."""

    reason: str
    kind: str
    """A small label set: an InvalidEvent kind, unauthorized, internal (a handler that
    failed), rejected, or a `Refused`'s own kind."""
    send: bool
    """True: this reader dead-letters the record; False: it skips it."""


def judge(
    record: Record, exc: Exception, owns: Callable[[Record], bool], stats: StreamStats
) -> Verdict:
    """The dead-letter policy (module doc) for ``record``, unusable because of ``exc``:
    InvalidEvent and `Unusable` are its owner's to dead-letter, `Refused` this reader's,
    anything else is a handler that failed (logged, then its owner's). Counted in
    ``stats``."""
    if isinstance(exc, Refused):
        verdict = Verdict(exc.reason, exc.kind, True)
    elif isinstance(exc, ev.InvalidEvent | Unusable):
        stats.bad_records += 1
        verdict = Verdict(exc.reason, exc.kind, owns(record))
    else:
        stats.internal_errors += 1
        stats.bad_records += 1
        log.error(
            "failed on %s[%d]@%d", record.topic, record.partition, record.offset, exc_info=exc
        )
        verdict = Verdict(f"internal error: {exc!r}", INTERNAL, owns(record))
    counts = stats.dead_letters if verdict.send else stats.skipped
    counts[verdict.kind] = counts.get(verdict.kind, 0) + 1
    if not verdict.send:
        log.debug(
            "skipped %s[%d]@%d: %s", record.topic, record.partition, record.offset, verdict.reason
        )
    return verdict


class RecordSource(Protocol):
    async def fetch(self, timeout_ms: int, max_records: int) -> list[Record]:
        """The next records, in order within each partition; [] after ``timeout_ms``."""


@dataclass
class KafkaRecords:
    consumer: AIOKafkaConsumer

    async def fetch(self, timeout_ms: int, max_records: int) -> list[Record]:
        batches = await self.consumer.getmany(timeout_ms=timeout_ms, max_records=max_records)
        return [record_of(m) for messages in batches.values() for m in messages]


def record_of(m: ConsumerRecord[bytes, bytes]) -> Record:
    """The `Record` of an aiokafka consumer record."""
    stamp = None if m.timestamp is None else m.timestamp / 1000
    return Record(m.topic, m.partition, m.offset, m.key, m.value, stamp, m.timestamp_type)


@dataclass
class MemoryRecords:
    """Records fed by hand (``add``), each partition numbered from offset 0."""

    pending: list[Record] = field(default_factory=list)
    ends: dict[tuple[str, int], int] = field(default_factory=dict)

    def add(
        self,
        topic: str,
        value: bytes | ev.Event | None,
        key: bytes | None = None,
        partition: int = 0,
        appended_at: float | None = None,
    ) -> Record:
        """``appended_at``: the broker's stamp (LogAppendTime); None: a producer's."""
        if isinstance(value, ev.Event):
            key = ev.key_of(value) if key is None else key
            value = ev.encode(value)
        offset = self.ends.get((topic, partition), 0)
        self.ends[(topic, partition)] = offset + 1
        if appended_at is None:
            record = Record(topic, partition, offset, key, value)
        else:
            record = Record(topic, partition, offset, key, value, appended_at, LOG_APPEND_TIME)
        self.pending.append(record)
        return record

    async def fetch(self, timeout_ms: int, max_records: int) -> list[Record]:
        await asyncio.sleep(0)
        taken, self.pending = self.pending[:max_records], self.pending[max_records:]
        return taken


def owned_by(service: str) -> Callable[[Record], bool]:
    """The owner rule of `topics.DEAD_LETTER_OWNER`: does ``service`` dead-letter this
    record when it cannot be used?"""
    return lambda record: topics.DEAD_LETTER_OWNER.get(record.topic) == service


def allowed_on(topic: str) -> tuple[type[ev.Event], ...]:
    """What a Venn topic carries (nothing for another topic: every record is bad)."""
    return ev.ALLOWED_ON.get(topic, ())


@dataclass
class EventStream:
    """Reads ``source``, decodes strictly, applies the dead-letter policy (module doc);
    letters go through ``letters`` to ``dead_letters_topic``."""

    source: RecordSource
    letters: EventPublisher
    owns: Callable[[Record], bool]
    max_bytes: int = ev.DEFAULT_MAX_BYTES
    allowed: Callable[[str], tuple[type[ev.Event], ...]] = allowed_on
    check: Check | None = None
    """Raises `Unusable` (or InvalidEvent) for an event no reader may use (`authorized`)."""
    dead_letters_topic: str = topics.DEAD_LETTERS
    stats: StreamStats = field(default_factory=StreamStats)
    written: Callable[[str], bool] | None = None
    """Whether the dead letter of this id is on the topic already: a reader that reads its
    input from the beginning at every start writes each record's letter once."""
    _sending: set[asyncio.Future[object]] = field(default_factory=set)
    _failure: BaseException | None = None
    """The first letter not stored since the last flush."""

    def decode(self, record: Record) -> ev.Event:
        """The record's event; InvalidEvent or Unusable if it has none a reader may use."""
        event = ev.decode(record.value, self.allowed(record.topic), self.max_bytes)
        if self.check is not None:
            self.check(event, record)
        return event

    async def read(self, timeout_ms: int = 200, max_records: int = 1000) -> Batch:
        """The next batch; its bad records are dead-lettered or skipped already. A source
        that fails is logged and counted, and the batch is empty after ``RETRY_S``."""
        try:
            records = await self.source.fetch(timeout_ms, max_records)
        except asyncio.CancelledError:
            raise
        except Exception:
            self.stats.read_errors += 1
            log.exception("reading %s failed; retrying", self.source)
            await asyncio.sleep(RETRY_S)
            return Batch()
        batch = Batch(records)
        for record in batch.records:
            try:
                batch.events.append(Delivered(record, self.decode(record)))
            except (ev.InvalidEvent, Unusable) as exc:
                await self.reject(record, exc)
        return batch

    async def apply(
        self, batch: Batch, handle: Callable[[ev.Event], Awaitable[None] | None]
    ) -> None:
        """``handle`` each event of ``batch``; what it refuses or fails on is dead-lettered
        as the policy says, and the events after it are handled all the same."""
        for item in batch.events:
            try:
                done = handle(item.event)
                if done is not None:
                    await done
            except Exception as exc:
                await self.reject(item.record, exc)

    async def reject(self, record: Record, exc: Exception) -> None:
        """A record that cannot be used because of ``exc``: dead-lettered or skipped, as
        `judge` says."""
        verdict = judge(record, exc, self.owns, self.stats)
        if verdict.send:
            await self._dead_letter(record, verdict.reason)

    async def refuse(self, record: Record, reason: str, kind: str = REJECTED) -> None:
        """A valid event this reader cannot use: its own finding, dead-lettered here."""
        await self.reject(record, Refused(reason, kind))

    async def _dead_letter(self, record: Record, reason: str) -> None:
        letter_id = ev.dead_letter_id(record.topic, record.partition, record.offset)
        if self.written is not None and self.written(letter_id):
            return
        log.warning(
            "dead letter %s[%d]@%d: %s", record.topic, record.partition, record.offset, reason
        )
        try:
            sent = await publish_dead_letter(
                self.letters,
                record.value,
                reason,
                record.topic,
                record.partition,
                record.offset,
                to=self.dead_letters_topic,
            )
        except Exception as exc:
            self._unsent(record, exc)
            return
        self._sending.add(sent)
        sent.add_done_callback(lambda done: self._settled(done, record))

    def _settled(self, done: asyncio.Future[object], record: Record) -> None:
        self._sending.discard(done)
        if done.cancelled():
            self._unsent(record, None)
        elif (exc := done.exception()) is not None:
            self._unsent(record, exc)

    def _unsent(self, record: Record, exc: BaseException | None) -> None:
        self.stats.unsent += 1
        if self._failure is None:
            self._failure = exc or asyncio.CancelledError()
        log.error(
            "could not dead-letter %s[%d]@%d", record.topic, record.partition, record.offset,
            exc_info=exc,
        )  # fmt: skip

    async def flush(self) -> None:
        """Wait until the broker has every letter sent so far (before committing the
        offsets of their records). Raises `DeadLetterUnsent` if one since the last flush
        was not stored (each is counted in ``unsent``)."""
        await asyncio.gather(*list(self._sending), return_exceptions=True)
        failure, self._failure = self._failure, None
        if failure is not None:
            raise DeadLetterUnsent("a dead letter was not stored") from failure
