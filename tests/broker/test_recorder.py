"""The recorder in-process against the real broker and real Postgres."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from typing import cast

import msgspec
import sqlalchemy as sa
from aiokafka import AIOKafkaProducer

from services.recorder import RecorderStats, RecorderTopics, run_recorder
from tests.event_recorder import Published
from tests.polling import until
from venn.audit import make_engine
from venn.broker.topics import delete_topics, ensure_topics
from venn.events import (
    DeadLetter,
    DeviceCheckin,
    Event,
    JobFinished,
    JobRegistered,
    RoundClosed,
    RoundRequested,
    encode,
)
from venn.settings import Settings

MAX_BYTES = 4096


def closed(job: str, index: int, outcome: str = "succeeded") -> RoundClosed:
    return RoundClosed(
        event_id=f"{job}-r{index}-closed",
        time=10.0 + index,
        job_id=job,
        round_index=index,
        outcome=outcome,  # type: ignore[arg-type]
        demand=4,
        assigned=4,
        results=4 if outcome == "succeeded" else 1,
        opened_at=float(index),
        closed_at=10.0 + index,
        reason="" if outcome == "succeeded" else "deadline: 1 of 4 results",
        sched_delay_s=0.25,
        response_time_s=9.75,
    )


async def publish(broker: str, messages: Sequence[tuple[str, bytes | None, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=broker)
    await producer.start()
    try:
        for topic, key, value in messages:
            await producer.send(topic, value, key=key)
        await producer.flush()
    finally:
        await producer.stop()


async def refuse_rounds_of(url: str, job_id: str, unique: str, install: bool) -> None:
    """A trigger that makes the real database refuse this job's round rows (a DataError),
    as a constraint or a column too small for a value would."""
    engine = make_engine(url)
    statements = (
        [
            f"""CREATE FUNCTION refuse_{unique}() RETURNS trigger AS $$ BEGIN
                IF NEW.job_id = '{job_id}' THEN
                    RAISE EXCEPTION 'value too long for the test' USING ERRCODE = '22001';
                END IF; RETURN NEW; END $$ LANGUAGE plpgsql""",
            f"""CREATE TRIGGER refuse_{unique} BEFORE INSERT ON round_audit
                FOR EACH ROW EXECUTE FUNCTION refuse_{unique}()""",
        ]
        if install
        else [
            f"DROP TRIGGER IF EXISTS refuse_{unique} ON round_audit",
            f"DROP FUNCTION IF EXISTS refuse_{unique}()",
        ]
    )
    try:
        with engine.begin() as conn:
            for statement in statements:
                conn.execute(sa.text(statement))
    finally:
        engine.dispose()


async def test_recorder_writes_idempotently_skips_junk_and_dead_letters_refusals(
    broker: str, pg_url: str, unique: str, published: Published
) -> None:
    names = RecorderTopics(
        rounds=f"{unique}.venn.rounds",
        jobs=f"{unique}.venn.jobs",
        dead_letters=f"{unique}.venn.dead-letters",
    )
    settings = Settings(
        broker=broker, database_url=pg_url, topic_partitions=2, max_event_bytes=MAX_BYTES
    )
    await ensure_topics(broker, 2, names=[names.rounds, names.jobs, names.dead_letters])
    dead_letters = await published(names.dead_letters)
    job = f"job-{unique}"
    other = f"other-{unique}"
    refused = f"refused-{unique}"
    k = job.encode()
    registered = JobRegistered(
        event_id=f"{job}-reg", time=1.0, job_id=job, requirement={"ram": 2.0},
        demand=4, rounds=2, deadline_s=30, workload_s=5,
    )  # fmt: skip
    finished = JobFinished(
        event_id=f"{job}-done", time=13.0, job_id=job, rounds_completed=2,
        arrival=1.0, finished_at=13.0, jct_s=12.0,
    )  # fmt: skip
    wrong_typed = json.loads(encode(closed(job, 7)))
    wrong_typed["round_index"] = "seven"
    oversized = json.loads(encode(closed(job, 8)))
    oversized["reason"] = "x" * MAX_BYTES
    checkin = DeviceCheckin(
        event_id="c1", time=1.0, device_id="d1", attrs={}, speed_ms_per_sample=1, bandwidth_kbps=1
    )
    bad: list[tuple[str, bytes, str]] = [
        (names.rounds, b"\x00\xff garbage \x13", "not_json"),
        (names.rounds, json.dumps(wrong_typed).encode(), "wrong_type"),
        (names.rounds, json.dumps(oversized).encode(), "oversized"),
        (names.jobs, encode(checkin), "not_allowed"),
    ]
    valid_before: list[tuple[str, Event]] = [
        (names.jobs, registered),
        (names.rounds, closed(job, 0)),
        (names.rounds, closed(job, 0)),  # replayed duplicate
        (names.rounds, closed(job, 1, "failed")),  # attempt 1 failed ...
    ]
    valid_after: list[tuple[str, Event]] = [
        (names.rounds, closed(job, 2)),  # ... attempt 2 is its retry
        (names.rounds, finished),
        (names.jobs, RoundRequested(event_id="rr", time=2.0, job_id=job, round_index=3, demand=4)),
        (names.rounds, closed(other, 0)),
    ]
    # Issue 12, defect 3: an event the database would not take wedged the recorder (it
    # retried forever and audited nothing after it). It is dead-lettered alone now.
    refused_close = closed(refused, 0)
    # Issue 12, defect 5: a second, different close of an attempt was dropped without a trace.
    conflicting = msgspec.structs.replace(
        closed(job, 0, "failed"), event_id=f"{job}-r0-closed-again"
    )
    messages = [(t, k, encode(e)) for t, e in valid_before]
    messages += [(t, k, raw) for t, raw, _ in bad]
    messages += [(names.rounds, refused.encode(), encode(refused_close))]
    messages += [(names.rounds, k, encode(conflicting))]
    messages += [(t, e.job_id.encode(), encode(e)) for t, e in valid_after]  # type: ignore[attr-defined]
    await refuse_rounds_of(pg_url, refused, unique, install=True)

    stop = asyncio.Event()
    stats = RecorderStats()
    await publish(broker, messages)
    task = asyncio.create_task(
        run_recorder(settings, stop, names=names, group_id=f"rec-{unique}", stats=stats)
    )
    engine = make_engine(pg_url)
    try:
        await until(lambda: stats.records >= len(messages) or task.done(), 30)
        stop.set()
        first = await asyncio.wait_for(task, 30)
        assert first.records == len(messages)
        assert first.invalid == len(bad)  # the scheduler owns these inputs' dead letters
        assert first.dead_letters == 2  # the refused one and the conflicting close
        assert first.rounds_added == 4  # job r0, r1, r2 and other r0
        assert first.ignored == 0  # round_requested is in the job history now
        # Issue 25: every offset of both topics accounted for, each with what became of it.
        by_outcome: dict[str, int] = {}
        for (_, _, outcome), n in first.offsets.items():
            by_outcome[outcome] = by_outcome.get(outcome, 0) + n
        assert by_outcome == {
            "handled": len(messages) - len(bad) - 2,
            "dead_lettered": len(bad) + 2,
        }

        with engine.connect() as conn:
            rounds = conn.execute(
                sa.text(
                    "SELECT job_id, round_index, outcome, results, reason FROM round_audit "
                    "WHERE job_id IN (:a, :b) ORDER BY job_id, round_index"
                ),
                {"a": job, "b": other},
            ).all()
            jobs = conn.execute(
                sa.text(
                    "SELECT registered_at, demand, rounds, finished_at, rounds_completed, jct_s "
                    "FROM job_audit WHERE job_id = :j"
                ),
                {"j": job},
            ).all()
        assert [tuple(r) for r in rounds] == [
            (job, 0, "succeeded", 4, ""),
            (job, 1, "failed", 1, "deadline: 1 of 4 results"),
            (job, 2, "succeeded", 4, ""),
            (other, 0, "succeeded", 4, ""),
        ]
        assert [tuple(r) for r in jobs] == [(1.0, 4, 2, 13.0, 2, 12.0)]

        await dead_letters.wait_for(lambda: len(dead_letters.records) >= 2)
        await asyncio.sleep(0.5)  # anything beyond them would show up now
        recorded = dead_letters.on(names.dead_letters)
        assert len(recorded) == len(dead_letters.records) == 2
        letters = {cast(DeadLetter, r.event).original_bytes(): r.event for r in recorded}
        assert all(r.key == r.event.event_id.encode() for r in recorded if r.event)  # own id
        conflict = cast(DeadLetter, letters[encode(conflicting)])
        assert conflict.reason == (
            f"conflicting close of round 0 of job {job}: the first close ({job}-r0-closed) stands"
        )
        letter = cast(DeadLetter, letters[encode(refused_close)])
        assert letter.source_topic == names.rounds
        assert letter.reason.startswith("audit write refused by the database")
        assert "value too long for the test" in letter.reason

        # Restart with the same group: committed offsets hold, and a full replay of every
        # valid event changes nothing.
        replay = [(t, k, encode(e)) for t, e in [*valid_before, *valid_after]]
        await publish(broker, replay)
        stop2 = asyncio.Event()
        stats2 = RecorderStats()
        task2 = asyncio.create_task(
            run_recorder(settings, stop2, names=names, group_id=f"rec-{unique}", stats=stats2)
        )
        await until(lambda: stats2.records >= len(replay) or task2.done(), 30)
        await asyncio.sleep(1.0)  # would any old message be re-read?
        stop2.set()
        second = await asyncio.wait_for(task2, 30)
        assert second.records == len(replay)
        assert (second.rounds_added, second.dead_letters, second.invalid) == (0, 0, 0)
        with engine.connect() as conn:
            count = conn.execute(
                sa.text("SELECT count(*) FROM round_audit WHERE job_id IN (:a, :b)"),
                {"a": job, "b": other},
            ).scalar_one()
        assert count == 4
    finally:
        stop.set()
        engine.dispose()
        await refuse_rounds_of(pg_url, refused, unique, install=False)
        await delete_topics(broker, [names.rounds, names.jobs, names.dead_letters])
