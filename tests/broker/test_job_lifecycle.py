"""Job lifecycle on the real pipeline (issue 12, item 3): a job whose coordinator keeps
sending heartbeats lives, a silent one is expired by the scheduler and its demand released,
and the recorder keeps every job's history and state."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from services.recorder import RecorderStats, run_recorder
from services.scheduler.process import start_worker, stop_worker
from tests.broker.scheduler_bus import READY_TIMEOUT, Bus, checkins, scheduler_env
from tests.event_recorder import EventRecorder, Published
from venn import events as ev
from venn.audit import make_engine
from venn.broker import topics
from venn.net import free_port
from venn.sdk import VennClient
from venn.settings import Settings

TIMEOUT_S = 4.0


@pytest.fixture(scope="module")
async def stack(broker: str, run_dir: Path, partitions: int, pg_url: str) -> AsyncIterator[Bus]:
    env = await scheduler_env(
        broker, run_dir, partitions, "life",
        VENN_JOB_TIMEOUT_S=str(TIMEOUT_S), VENN_SCHEDULER_WEB_PORT=str(free_port()),
    )  # fmt: skip
    app_id = env["VENN_APP_ID"]
    bus = Bus(broker, partitions)
    await bus.start()
    with open(run_dir / f"{app_id}.log", "ab") as log:
        worker = start_worker(env, log)
    stop = asyncio.Event()
    settings = Settings(broker=broker, database_url=pg_url, topic_partitions=partitions)
    recorder = asyncio.create_task(
        run_recorder(settings, stop, group_id=f"rec-{app_id}", stats=RecorderStats())
    )
    try:
        await bus.barrier(topics.CHECKINS, READY_TIMEOUT)
        yield bus
    finally:
        stop.set()
        await asyncio.wait_for(recorder, 30)
        stop_worker(worker, timeout=10)
        await bus.stop()


def expired(jobs: EventRecorder, job_id: str) -> list[ev.JobExpired]:
    found = jobs.events(topics.JOBS, lambda e: isinstance(e, ev.JobExpired) and e.job_id == job_id)
    return found  # type: ignore[return-value]


async def test_heartbeats_keep_a_job_and_silence_expires_it(
    stack: Bus, pg_url: str, published: Published
) -> None:
    bus = stack
    jobs = await published(topics.JOBS)
    tok = uuid.uuid4().hex[:8]
    attr, alive, silent = f"cpu_{tok}", f"alive-{tok}", f"silent-{tok}"
    async with VennClient(bus.bootstrap, heartbeat_s=1.0) as owner:
        await owner.register_job(alive, {attr: 1}, 2, 3, deadline_s=600)
        await owner.request_round(alive, 0, 2)
        async with VennClient(bus.bootstrap, heartbeat_s=0) as quiet:  # no heartbeats
            await quiet.register_job(silent, {attr: 1}, 2, 3, deadline_s=600)
            await quiet.request_round(silent, 0, 2)
        await jobs.wait_for(lambda: expired(jobs, silent), 30)
        expiry = expired(jobs, silent)[0]
        assert expiry.last_seen <= time.time() - TIMEOUT_S
        # The silent job's demand is released: devices now go to the live job only.
        await checkins(bus, [f"d{i}-{tok}" for i in range(4)], {attr: 2})
        await bus.published.wait_for(lambda: len(bus.assigned({alive})) == 2)
        await asyncio.sleep(0.5)
        assert bus.assigned({silent}) == []
        await owner.finish_job(
            alive, rounds_completed=1, arrival=time.time() - 5, finished_at=time.time()
        )

    engine = make_engine(pg_url)
    try:

        def audited() -> tuple[list[str], dict[str, float | None]]:
            with engine.connect() as conn:
                kinds = [
                    r.kind
                    for r in conn.execute(
                        sa.text("SELECT kind FROM job_history WHERE job_id = :j ORDER BY time, id"),
                        {"j": silent},
                    )
                ]
                ends = {
                    r.job_id: r.expired_at
                    for r in conn.execute(
                        sa.text(
                            "SELECT job_id, expired_at FROM job_audit WHERE job_id IN (:a, :s)"
                        ),
                        {"a": alive, "s": silent},
                    )
                }
            return kinds, ends

        deadline = time.monotonic() + 20
        while audited()[0] != ["registered", "round_requested", "expired"]:
            assert time.monotonic() < deadline, audited()
            await asyncio.sleep(0.5)
        ends = audited()[1]
        assert ends[silent] is not None and ends[alive] is None
    finally:
        engine.dispose()
