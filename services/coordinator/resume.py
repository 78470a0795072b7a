"""Where each job stands, read back from the log before a coordinator acts.

A coordinator that restarts must not start its jobs over: the scheduler ignores a round
request whose index is not above the job's last one, so a job restarted at attempt 0
waits forever (issue 12, defect 5). Before acting, the coordinator folds venn.jobs and
venn.rounds (`venn.core.lifecycle`) into each job's position (registered? rounds done,
the next attempt index, the open attempt) and reads the open attempt's assignments and
results from venn.assignments and venn.results, from the time it was requested on.
Everything is read up to the end offsets seen after the coordinator's own client started
listening, so nothing falls between the two. Job events count only if their token allowed
them when they were produced (`venn.broker.stream.authorized`, the rule every reader of
job events applies): a close, finish or cancel forged by another principal does not move a
job.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition

from venn import events as ev
from venn.broker import topics
from venn.broker.stream import Check, Unusable, record_of
from venn.core.lifecycle import JobBook, JobLife

LOOKBACK_S = 60.0
"""How far before an open attempt's request its assignments are looked for (clock skew)."""


@dataclass
class Position:
    life: JobLife
    assignments: list[ev.Assignment] = field(default_factory=list)
    results: list[ev.DeviceResult] = field(default_factory=list)


async def _read(
    consumer: AIOKafkaConsumer,
    starts: dict[TopicPartition, int],
    ends: dict[TopicPartition, int],
    check: Check | None = None,
) -> Iterable[ev.Event]:
    """Every valid event of ``[starts, ends)`` per partition that passes ``check`` (the others
    skipped: their owner dead-letters them)."""
    todo = {tp: end for tp, end in ends.items() if starts.get(tp, 0) < end}
    if not todo:
        return []
    consumer.assign(list(todo))
    for tp in todo:
        consumer.seek(tp, starts.get(tp, 0))
    out: list[ev.Event] = []
    deadline = time.monotonic() + 120
    while todo and time.monotonic() < deadline:
        batches = await consumer.getmany(*todo, timeout_ms=500, max_records=10_000)
        for tp, records in batches.items():
            allowed = ev.ALLOWED_ON[tp.topic]
            for record in records:
                if record.offset >= todo.get(tp, 0):
                    continue
                try:
                    event = ev.decode(record.value, allowed, 1 << 20)
                    if check is not None:
                        check(event, record_of(record))
                except (ev.InvalidEvent, Unusable):
                    continue
                out.append(event)
        for tp in list(todo):
            if await consumer.position(tp) >= todo[tp]:
                del todo[tp]
    return out


async def read_positions(
    bootstrap: str,
    job_ids: Collection[str],
    options: Mapping[str, Any] | None = None,
    check: Check | None = None,
) -> dict[str, Position]:
    """The position of each job of ``job_ids`` as the log has it now, from the job events
    that pass ``check`` (`venn.broker.stream.authorized`; None: no authentication)."""
    wanted = set(job_ids)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        client_id="venn-coordinator-resume",
        **dict(options or {}),
    )
    await consumer.start()
    try:
        lives = await topics.partitions_of(bootstrap, (topics.JOBS, topics.ROUNDS), options)
        ends = await consumer.end_offsets(lives)
        book = JobBook()
        for event in await _read(consumer, {}, ends, check):
            if getattr(event, "job_id", None) in wanted:
                book.apply(event)
        positions = {job_id: Position(book.get(job_id)) for job_id in wanted}
        open_since = [
            p.life.open_attempt.requested_at
            for p in positions.values()
            if p.life.open_attempt is not None and p.life.open_attempt.requested_at is not None
        ]
        if open_since:
            parts = await topics.partitions_of(
                bootstrap, (topics.ASSIGNMENTS, topics.RESULTS), options
            )
            await _read_open_rounds(consumer, parts, positions, min(open_since) - LOOKBACK_S)
    finally:
        await consumer.stop()
    return positions


async def _read_open_rounds(
    consumer: AIOKafkaConsumer,
    parts: list[TopicPartition],
    positions: dict[str, Position],
    since: float,
) -> None:
    ends = await consumer.end_offsets(parts)
    found = await consumer.offsets_for_times({tp: max(0, int(since * 1000)) for tp in parts})
    starts = {tp: (found[tp].offset if found.get(tp) else ends[tp]) for tp in parts}
    for event in await _read(consumer, starts, ends):
        position = positions.get(getattr(event, "job_id", ""))
        attempt = position.life.open_attempt if position is not None else None
        if position is None or attempt is None:
            continue
        if isinstance(event, ev.DeviceResult):
            if event.round_index == attempt.index:
                position.results.append(event)
            continue
        position.assignments += [
            a for a in ev.assignments_of(event) if a.round_index == attempt.index
        ]
