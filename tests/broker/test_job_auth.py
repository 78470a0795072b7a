"""Job owners' tokens on Kafka (issue 12, defect 4): with VENN_AUTH_SECRET, the scheduler
dead-letters a job or round event without a valid token for its job (missing, forged,
expired, revoked, or another job's) and the recorder audits none of them, while the owner's
own events still work."""

from __future__ import annotations

import asyncio
import secrets
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest
import sqlalchemy as sa

from services.recorder import RecorderStats, run_recorder
from services.scheduler.process import start_worker, stop_worker
from tests.broker.scheduler_bus import (
    READY_TIMEOUT,
    Bus,
    checkins,
    finished,
    job,
    round_request,
    scheduler_env,
)
from venn import events as ev
from venn.audit import make_engine
from venn.auth import Tokens
from venn.broker import topics
from venn.net import free_port
from venn.settings import Settings

SECRET = secrets.token_urlsafe(32)
TOKENS = Tokens(SECRET)


def signed(event: ev.Event, token: str | None) -> ev.Event:
    return msgspec.structs.replace(event, token=token)  # type: ignore[type-var]


def closed(job_id: str, token: str | None) -> ev.RoundClosed:
    return ev.RoundClosed(
        event_id=f"rc-{uuid.uuid4().hex}", time=time.time(), job_id=job_id, round_index=0,
        outcome="succeeded", demand=1, assigned=1, results=1, opened_at=1.0, closed_at=2.0,
        reason="", sched_delay_s=0.5, response_time_s=0.5, token=token,
    )  # fmt: skip


@pytest.fixture(scope="module")
async def stack(
    broker: str, run_dir: Path, partitions: int, pg_url: str
) -> AsyncIterator[tuple[Bus, RecorderStats]]:
    env = await scheduler_env(
        broker, run_dir, partitions, "auth",
        VENN_AUTH_SECRET=SECRET, VENN_SCHEDULER_WEB_PORT=str(free_port()),
    )  # fmt: skip
    app_id = env["VENN_APP_ID"]
    bus = Bus(broker, partitions)
    await bus.start()
    with open(run_dir / f"{app_id}.log", "ab") as log:
        worker = start_worker(env, log)
    stop, stats = asyncio.Event(), RecorderStats()
    recorder_settings = Settings(
        broker=broker, database_url=pg_url, topic_partitions=partitions, auth_secret=SECRET
    )
    recorder = asyncio.create_task(
        run_recorder(recorder_settings, stop, group_id=f"rec-{app_id}", stats=stats)
    )
    try:
        await bus.barrier(topics.CHECKINS, READY_TIMEOUT)
        yield bus, stats
    finally:
        stop.set()
        await asyncio.wait_for(recorder, 30)
        stop_worker(worker, timeout=10)
        await bus.stop()


async def refused(bus: Bus, topic: str, event: ev.Event, code: str) -> None:
    meta = await bus.send(topic, event)
    letter = await bus.published.dead_letter_of(topic, meta)
    assert letter.reason.startswith("unauthorized: "), letter.reason
    assert code in letter.reason, letter.reason


async def test_only_a_valid_token_for_the_job_acts_on_it(
    stack: tuple[Bus, RecorderStats], pg_url: str
) -> None:
    bus, recorder = stack
    tok = uuid.uuid4().hex[:8]
    attr, job_a = f"cpu_{tok}", f"a-{tok}"
    token_a = TOKENS.issue("job", "owner-a", jobs=[job_a], ttl_s=600)
    token_b = TOKENS.issue("job", "owner-b", jobs=[f"b-{tok}*"], ttl_s=600)

    # Without a valid token for job A nothing about it is accepted ...
    await refused(bus, topics.JOBS, job(job_a, attr, 1, demand=1), "missing_token")
    forged = Tokens(secrets.token_urlsafe(32)).issue("job", "x", jobs=[job_a], ttl_s=600)
    await refused(bus, topics.JOBS, signed(job(job_a, attr, 1, demand=1), forged), "invalid_token")
    expired = TOKENS.issue("job", "owner-a", jobs=[job_a], ttl_s=60, now=time.time() - 3600)
    await refused(bus, topics.JOBS, signed(job(job_a, attr, 1, demand=1), expired), "expired_token")
    await refused(bus, topics.JOBS, signed(job(job_a, attr, 1, demand=1), token_b), "forbidden")
    device_token = TOKENS.issue("device", "d", ttl_s=600)
    await refused(
        bus, topics.JOBS, signed(job(job_a, attr, 1, demand=1), device_token), "forbidden"
    )

    # ... its owner registers it and opens a round; job B's owner cannot cancel or close it.
    await bus.send(topics.JOBS, signed(job(job_a, attr, 1, demand=1), token_a))
    await bus.send(topics.JOBS, signed(round_request(job_a, 0, 1), token_a))
    await refused(
        bus, topics.JOBS, ev.JobCancelled(event_id=f"c-{tok}", time=time.time(), job_id=job_a,
                                          reason="hostile", token=token_b), "forbidden",
    )  # fmt: skip
    await refused(bus, topics.ROUNDS, closed(job_a, token_b), "forbidden")
    await refused(bus, topics.ROUNDS, closed(f"ghost-{tok}", None), "missing_token")
    await checkins(bus, [f"dev-{tok}"], {attr: 2})
    await bus.published.wait_for(lambda: len(bus.assigned({job_a})) == 1)

    # A revoked token stops working as soon as the revocation is read.
    claims = TOKENS.check(token_a, "job")
    revocation = ev.TokenRevoked(
        event_id=f"rev-{tok}", time=time.time(), token_id=claims.token_id,
        expires_at=claims.expires_at, reason="leaked",
    )  # fmt: skip
    await bus.send(topics.REVOCATIONS, revocation)
    await asyncio.sleep(3.0)  # the followers poll once a second
    await refused(bus, topics.ROUNDS, closed(job_a, token_a), "revoked_token")

    # The recorder audited none of it: no round of job A, no row for the ghost.
    await asyncio.sleep(2.0)
    assert recorder.unauthorized >= 8
    engine = make_engine(pg_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                sa.text("SELECT job_id FROM round_audit WHERE job_id IN (:a, :g)"),
                {"a": job_a, "g": f"ghost-{tok}"},
            ).all()
            registered = conn.execute(
                sa.text("SELECT demand FROM job_audit WHERE job_id = :a"), {"a": job_a}
            ).all()
    finally:
        engine.dispose()
    assert rows == []
    assert [tuple(r) for r in registered] == [(1,)]  # the owner's registration only
    admin = TOKENS.issue("admin", "operator", ttl_s=600)
    await bus.send(topics.ROUNDS, signed(finished(job_a), admin))
