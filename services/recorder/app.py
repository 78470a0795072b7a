"""Audit recorder: consume venn.rounds and venn.jobs, write the audit DB.

Delivery is at least once: offsets are committed only after the batch is in the database
(and its dead letters are acknowledged by the broker), and every write is idempotent, so a
crash between the two only replays events that are then ignored.

Records are read as `venn.broker.stream` reads them, under its one dead-letter policy:
malformed records on these topics are the scheduler's to dead-letter (it owns both inputs,
`venn.broker.topics.DEAD_LETTER_OWNER`); the recorder skips and counts them. What it
dead-letters is its own finding (`stream.Refused`): a valid event the database refuses (a
constraint, a value it cannot hold). Such an event never blocks the ones after it; a
database that cannot be reached is retried with backoff until it answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from venn.audit import job_rows_from_events, make_engine, record_jobs, record_rounds, round_row
from venn.audit.writes import conflicting_closes, history_row, record_history
from venn.auth import Tokens
from venn.auth.revocations import follow_revocations
from venn.broker import topics
from venn.broker.ledger import OffsetLedger
from venn.broker.publish import KafkaEvents
from venn.broker.stream import (
    UNAUTHORIZED,
    Batch,
    Delivered,
    EventStream,
    KafkaRecords,
    Record,
    StreamStats,
    authorized,
    owned_by,
)
from venn.broker.topics import ensure_topics
from venn.events import (
    ALLOWED_ON,
    Event,
    JobAdmission,
    JobCancelled,
    JobExpired,
    JobFinished,
    JobRegistered,
    RoundClosed,
    RoundRequested,
)
from venn.metrics import consumer_lag, labelled
from venn.settings import Settings

log = logging.getLogger("venn.recorder")

AUDITED = (
    RoundClosed,
    RoundRequested,
    JobRegistered,
    JobFinished,
    JobCancelled,
    JobExpired,
    JobAdmission,
)


@dataclass(frozen=True, slots=True)
class RecorderTopics:
    """Topic names (overridable so tests can isolate themselves on a shared broker)."""

    rounds: str = topics.ROUNDS
    jobs: str = topics.JOBS
    dead_letters: str = topics.DEAD_LETTERS

    def allowed(self, topic: str) -> tuple[type[Event], ...]:
        if topic == self.rounds:
            return ALLOWED_ON[topics.ROUNDS]
        if topic == self.jobs:
            return ALLOWED_ON[topics.JOBS]
        return ()


@dataclass(slots=True)
class RecorderStats:
    batches: int = 0
    records: int = 0
    rounds_added: int = 0
    jobs_touched: int = 0
    dead_letters: int = 0
    """Valid events the database refused."""
    invalid: int = 0
    """Malformed records skipped (the scheduler dead-letters them)."""
    unauthorized: int = 0
    """Job and round events without a token for their job, skipped (the scheduler
    dead-letters them)."""
    ignored: int = 0
    """Valid events this service has no use for (e.g. round_requested)."""
    db_retries: int = 0
    reasons: list[str] = field(default_factory=list)
    dead_letter_reasons: dict[str, int] = field(default_factory=dict, metadata=labelled("reason"))
    """Dead letters by kind: refused_by_database, conflicting_close."""
    consumer_lag: dict[tuple[str, str], int] = field(
        default_factory=dict, metadata=labelled("topic", "partition", kind="gauge")
    )
    """(topic, partition) -> records not read yet (high watermark - position)."""
    offsets: dict[tuple[str, str, str], int] = field(
        default_factory=dict, metadata=labelled("topic", "partition", "outcome")
    )
    """(topic, partition, outcome) -> input offsets accounted for in the offset ledger
    (venn.broker.ledger): handled (written, or of no use here) or dead_lettered (here, or
    by the topic's owner)."""


REFUSED_BY_DATABASE = "refused_by_database"
CONFLICTING_CLOSE = "conflicting_close"


@dataclass(frozen=True, slots=True)
class _Written:
    rounds: int
    jobs: int
    conflicts: dict[str, str]
    """A second, different close of an attempt -> the event id of the close that stands."""


def _write(engine: Engine, events: Sequence[Event]) -> _Written:
    rounds = [round_row(e) for e in events if isinstance(e, RoundClosed)]
    jobs = job_rows_from_events(events)
    history = [row for row in map(history_row, events) if row is not None]
    with engine.begin() as conn:
        added = record_rounds(conn, rounds)
        conflicts = conflicting_closes(conn, rounds) if len(rounds) > added else {}
        # A conflicting second close is no part of the job's history (it is dead-lettered).
        record_history(conn, [r for r in history if r["event_id"] not in conflicts])
        return _Written(added, record_jobs(conn, jobs), conflicts)


def _transient(exc: Exception) -> bool:
    """A database that cannot be reached (retry) rather than one that refuses the rows."""
    if isinstance(exc, OperationalError | InterfaceError):
        return True
    return isinstance(exc, DBAPIError) and bool(exc.connection_invalidated)


class _Stopped(Exception):
    pass


async def _write_retrying(
    engine: Engine, events: Sequence[Event], stop: asyncio.Event, stats: RecorderStats
) -> _Written:
    """Write, retrying with backoff while the database cannot be reached. Raises what the
    database refuses (DBAPIError), or _Stopped when stopped first."""
    delay = 0.2
    while True:
        try:
            return await asyncio.to_thread(_write, engine, events)
        except Exception as exc:
            if not _transient(exc):
                raise
            stats.db_retries += 1
            log.warning("audit database unavailable (%s); retrying in %.1fs", exc, delay)
        try:
            await asyncio.wait_for(stop.wait(), delay)
            raise _Stopped
        except TimeoutError:
            delay = min(delay * 2, 10.0)


async def _record(
    engine: Engine, batch: Sequence[Delivered], stop: asyncio.Event, stats: RecorderStats
) -> tuple[tuple[int, int], list[tuple[Record, str, str]]]:
    """Write the batch; if the database refuses it, write event by event. Returns what was
    written and the records to dead-letter with why and its kind: the refused ones (so that
    none blocks the others) and second closes of an attempt that conflict with the first."""
    events = [item.event for item in batch]
    try:
        written = [await _write_retrying(engine, events, stop, stats)]
        refused: list[tuple[Record, str, str]] = []
    except DBAPIError as exc:
        log.warning("audit batch refused (%s); writing event by event", exc.orig)
        written, refused = [], []
        for item in batch:
            try:
                written.append(await _write_retrying(engine, [item.event], stop, stats))
            except DBAPIError as exc:
                reason = f"audit write refused by the database: {exc.orig}"
                refused.append((item.record, reason, REFUSED_BY_DATABASE))
    conflicts = {k: v for w in written for k, v in w.conflicts.items()}
    for item in batch:
        event = item.event
        first = conflicts.get(event.event_id)
        if first is not None and isinstance(event, RoundClosed):
            reason = (
                f"conflicting close of round {event.round_index} of job {event.job_id}: "
                f"the first close ({first}) stands"
            )
            refused.append((item.record, reason, CONFLICTING_CLOSE))
    return (sum(w.rounds for w in written), sum(w.jobs for w in written)), refused


async def run_recorder(
    settings: Settings,
    stop_event: asyncio.Event,
    *,
    names: RecorderTopics | None = None,
    group_id: str | None = None,
    create_topics: bool = True,
    max_records: int = 2000,
    stats: RecorderStats | None = None,
    consumer_options: dict[str, Any] | None = None,
) -> RecorderStats:
    """Run until `stop_event` is set. Returns counters (also updated live in `stats`)."""
    names = names or RecorderTopics()
    stats = stats if stats is not None else RecorderStats()
    if create_topics:
        # Subscribing to a missing topic would make Tansu auto-create it with 4 partitions.
        await ensure_topics(
            settings.broker,
            settings.topic_partitions,
            names=(names.rounds, names.jobs, names.dead_letters),
            options=settings.kafka_options,
        )
    engine = make_engine(settings.database_url)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=settings.broker,
        group_id=group_id or settings.recorder_group,
        client_id="venn-recorder",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        **settings.kafka_options,
        **{**settings.tuning.consumer_group(), **(consumer_options or {})},
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.broker,
        client_id="venn-recorder",
        acks=settings.tuning.acks,
        linger_ms=5,
        **settings.kafka_options,
    )
    tokens = Tokens(settings.auth_secret) if settings.auth_enabled else None
    revocations = (
        asyncio.create_task(
            follow_revocations(settings.broker, tokens.revocations, settings.kafka_options)
        )
        if tokens is not None
        else None
    )
    stream = EventStream(
        KafkaRecords(consumer),
        KafkaEvents(producer),
        owned_by("recorder"),
        max_bytes=settings.max_event_bytes,
        allowed=names.allowed,
        check=authorized(tokens),
        dead_letters_topic=names.dead_letters,
        stats=StreamStats(dead_letters=stats.dead_letter_reasons),
    )
    ledger = OffsetLedger()
    consumer.subscribe([names.rounds, names.jobs], listener=_Forget(ledger))
    await producer.start()
    await consumer.start()
    try:
        while not stop_event.is_set():
            batch = await stream.read(timeout_ms=300, max_records=max_records)
            stats.consumer_lag = await consumer_lag(consumer)
            skipped = stream.stats.skipped
            stats.unauthorized = skipped.get(UNAUTHORIZED, 0)
            stats.invalid = sum(skipped.values()) - stats.unauthorized
            if not batch.records:
                continue
            try:
                written, refused = await _record(engine, batch.events, stop_event, stats)
            except _Stopped:
                break  # stopped before the write landed: leave offsets uncommitted
            for record, reason, kind in refused:
                await stream.refuse(record, reason, kind)
            await stream.flush()  # the letters are stored before their records are committed
            await consumer.commit(await _account(consumer, ledger, batch, refused))
            stats.offsets = {(t, str(p), o): n for (t, p, o), n in ledger.counts.items()}
            useful = sum(1 for item in batch.events if _is_audited(item.event))
            stats.batches += 1
            stats.records += len(batch.records)
            stats.rounds_added += written[0]
            stats.jobs_touched += written[1]
            stats.dead_letters += len(refused)
            stats.ignored += len(batch.events) - useful
            stats.reasons.extend(reason for _, reason, _ in refused)
    finally:
        if revocations is not None:
            revocations.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await revocations
        await consumer.stop()
        await producer.stop()
        engine.dispose()
    return stats


class _Forget(ConsumerRebalanceListener):  # type: ignore[misc]
    """A revoked partition's ledger is forgotten: whoever gets it resumes from its commit."""

    def __init__(self, ledger: OffsetLedger) -> None:
        self.ledger = ledger

    async def on_partitions_revoked(self, revoked: list[TopicPartition]) -> None:
        for tp in revoked:
            self.ledger.forget(tp.topic, tp.partition)

    async def on_partitions_assigned(self, assigned: list[TopicPartition]) -> None:
        pass


async def _account(
    consumer: AIOKafkaConsumer,
    ledger: OffsetLedger,
    batch: Batch,
    refused: Sequence[tuple[Record, str, str]],
) -> dict[TopicPartition, int]:
    """Accounts for a batch whose events are written and whose letters are stored (a bad
    record is its owner's to dead-letter, a refused one was dead-lettered here); returns
    the offsets to commit: per partition, the ledger's lowest offset not accounted for."""
    records = batch.records
    used = {item.record for item in batch.events} - {record for record, _, _ in refused}
    tps = {TopicPartition(r.topic, r.partition) for r in records}
    for tp in tps:
        if not ledger.begun(tp.topic, tp.partition):
            start = await consumer.committed(tp)
            if start is None:
                start = (await consumer.beginning_offsets([tp]))[tp]
            ledger.begin(tp.topic, tp.partition, start)
    for r in records:
        ledger.account(r.topic, r.partition, r.offset, "handled" if r in used else "dead_lettered")
    return {
        tp: offset
        for tp in tps
        if (offset := ledger.next_offset(tp.topic, tp.partition)) is not None
    }


def _is_audited(event: Event) -> bool:
    return isinstance(event, AUDITED)
