"""A scheduler worker restarted over what its logs hold (issue 26): changelog records that
are not rows, or rows out of range, are skipped and counted and scheduling goes on; the
changelogs are compacted tables; a bad input record keeps its one dead letter when the
worker restarts after writing it.

A worker of its own (its own app id, so its own changelogs) on the session's broker."""

from __future__ import annotations

import asyncio
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import msgspec
import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from services.scheduler.process import kill_worker, stop_worker
from tests.broker.scheduler_bus import (
    READY_TIMEOUT,
    Bus,
    Worker,
    checkin,
    job,
    round_request,
    scheduler_env,
    scheduler_on_bus,
)
from venn import events as ev
from venn.broker import topics
from venn.core import JobSpec, Requirement, make_scheduler
from venn.core.snapshot import snapshot_job


@pytest.fixture(scope="module")
async def stack(
    broker: str, run_dir: Path, partitions: int
) -> AsyncIterator[tuple[Bus, Worker, str]]:
    env = await scheduler_env(
        broker, run_dir, partitions, "restarts",
        VENN_POLICY="venn",
        # Nothing committed before a kill: the successor reads every input again (the
        # check-ins as old as the module are still fresh enough to decide).
        VENN_SCHEDULER_COMMIT_INTERVAL_S="3600",
        VENN_CHECKIN_MAX_AGE_S="3600",
    )  # fmt: skip
    async with scheduler_on_bus(broker, partitions, env) as (bus, worker):
        yield bus, worker, env["VENN_APP_ID"]


async def restart(bus: Bus, worker: Worker, kill: bool = False) -> None:
    assert worker.proc is not None
    if kill:
        kill_worker(worker.proc)
    else:
        stop_worker(worker.proc, timeout=10)
    worker.start()
    for topic in (topics.CHECKINS, topics.JOBS):
        try:
            await bus.barrier(topic, READY_TIMEOUT)
        except AssertionError as exc:
            raise AssertionError(f"{topic} not served: {exc}\n{worker.diagnosis()}") from exc


async def test_a_checkin_is_decided_once_across_a_kill(stack: tuple[Bus, Worker, str]) -> None:
    """Failover bench at 0dbf9cc, runs 3 and 4: a check-in assigned to a job that ended
    just after (its expiry), read again by the successor past the last commit, went to
    another job: its device assigned twice. The successor now starts the check-ins where
    its tables' decisions end (the ``decided`` rows), not at the commit."""
    bus, worker, _ = stack
    tok = uuid.uuid4().hex[:8]
    attr = f"cpu_{tok}"
    gone, live = f"gone-{tok}", f"live-{tok}"
    await bus.send(topics.JOBS, job(gone, attr, 1, demand=2))
    await bus.send(topics.JOBS, round_request(gone, 0, 2))
    await bus.barrier(topics.JOBS)
    first = [f"d{i}-{tok}" for i in range(2)]
    for device in first:
        await bus.send(topics.CHECKINS, checkin(device, {attr: 2}))
    await bus.published.wait_for(lambda: len(bus.assigned({gone})) == 2)
    now = time.time()
    ended = ev.JobFinished(
        event_id=f"fin-{gone}", time=now, job_id=gone, rounds_completed=1, arrival=now - 1,
        finished_at=now, jct_s=1.0,
    )  # fmt: skip
    await bus.send(topics.ROUNDS, ended)  # its devices are free again
    await bus.send(topics.JOBS, job(live, attr, 1, demand=3))
    await bus.send(topics.JOBS, round_request(live, 0, 3))
    await bus.barrier(topics.ROUNDS)
    await bus.barrier(topics.JOBS)

    await restart(bus, worker, kill=True)

    fresh = f"fresh-{tok}"
    await bus.send(topics.CHECKINS, checkin(fresh, {attr: 2}))
    await bus.published.wait_for(lambda: any(a.device_id == fresh for a in bus.assigned({live})))
    await bus.barrier(topics.CHECKINS)
    assert {a.device_id for a in bus.assigned({live})} == {fresh}
    assert {a.device_id for a in bus.assigned({gone})} == set(first)


def unreadable_rows(worker: Worker) -> float:
    url = f"http://127.0.0.1:{worker.env['VENN_SCHEDULER_WEB_PORT']}/metrics"
    text = urllib.request.urlopen(url, timeout=5).read().decode()
    name = 'venn_scheduler_unreadable_rows_total{table="jobs"} '
    return sum(float(line[len(name) :]) for line in text.splitlines() if line.startswith(name))


def overflowing_row(job_id: str) -> bytes:
    """A jobs row whose open round wants 2^63 devices (a snapshot as the scheduler writes
    it, then altered)."""
    core = make_scheduler("venn")
    core.add_job(JobSpec(job_id, Requirement.of({}), demand=3, rounds=5, deadline=60.0), 1.0)
    core.request_round(job_id, 0, 2.0, 3)
    snap = msgspec.to_builtins(snapshot_job(core.jobs[job_id]))
    snap["demand"] = snap["remaining"] = 2**63
    return msgspec.json.encode({"partition": 0, "removed": False, "core": snap})


BAD_ROWS = {
    "not_utf8": lambda job_id: b"\xff\xfe{" + job_id.encode(),
    "demand_2_63": overflowing_row,
}


@pytest.mark.parametrize("kind", list(BAD_ROWS))
async def test_a_restart_over_a_bad_jobs_row_skips_it_and_schedules(
    stack: tuple[Bus, Worker, str], kind: str
) -> None:
    bus, worker, app_id = stack
    tok = uuid.uuid4().hex[:8]
    attr = f"cpu_{tok}"
    good, bad = f"good-{tok}", f"bad-{tok}"
    await bus.send(topics.JOBS, job(good, attr, 1, demand=2))
    await bus.send(topics.JOBS, round_request(good, 0, 2))
    await bus.barrier(topics.JOBS)
    await bus.send(
        topics.changelog_topic(app_id, "jobs"),
        BAD_ROWS[kind](bad),
        key=msgspec.json.encode(bad),
        partition=0,
    )
    skipped = unreadable_rows(worker)

    await restart(bus, worker)

    # The good job came back from its row; a batch of check-ins fills its round.
    batch = ev.CheckinBatch(
        event_id=f"batch-{tok}",
        time=time.time(),
        checkins=[checkin(f"d{i}-{tok}", {attr: 2}) for i in range(3)],
    )
    await bus.send(topics.CHECKINS, batch)
    await bus.published.wait_for(lambda: len(bus.assigned({good})) == 2)
    assert unreadable_rows(worker) >= skipped + 1
    assert not bus.assigned({bad})


async def test_changelogs_are_compacted_and_job_events_kept(
    stack: tuple[Bus, Worker, str], broker: str
) -> None:
    _, _, app_id = stack
    admin = AIOKafkaAdminClient(bootstrap_servers=broker)
    await admin.start()
    try:
        names = [*topics.scheduler_changelogs(app_id), topics.JOBS, topics.ROUNDS]
        described = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
        )
    finally:
        await admin.close()
    configs = {
        resource[3]: {entry[0]: entry[1] for entry in resource[4]}
        for response in described
        for resource in response.resources
    }
    for name in topics.scheduler_changelogs(app_id):
        assert configs[name]["cleanup.policy"] == "compact", name
    for name in (topics.JOBS, topics.ROUNDS):
        assert configs[name]["retention.ms"] == "-1", name


async def test_a_bad_record_keeps_one_dead_letter_across_a_restart(
    stack: tuple[Bus, Worker, str],
) -> None:
    """Killed right after the letter was written: the record's offset is not committed yet
    (Faust commits every few seconds), so the next worker reads it again."""
    bus, worker, _ = stack
    marker = uuid.uuid4().hex.encode()
    meta = await bus.send(topics.JOBS, b"not json " + marker, key=marker)
    await bus.published.dead_letter_of(topics.JOBS, meta)

    await restart(bus, worker, kill=True)
    # The barriers' letters are in; a second letter of the replayed record, if any, was sent
    # before them by the same producer but may sit on another partition: give it a moment.
    await asyncio.sleep(2.0)

    letters = bus.published.events(
        topics.DEAD_LETTERS,
        lambda e: isinstance(e, ev.DeadLetter) and marker in e.original_bytes(),
    )
    assert len(letters) == 1, letters


async def test_bad_replies_and_status_records_get_one_dead_letter(
    stack: tuple[Bus, Worker, str],
) -> None:
    """Issue 26, item 10: a bad record on venn.replies addressed to no live gateway, or on
    venn.status, got no dead letter. The scheduler owns both (topics.DEAD_LETTER_OWNER)."""
    bus, _, _ = stack
    marker = uuid.uuid4().hex.encode()
    metas = {
        topics.REPLIES: await bus.send(topics.REPLIES, b"\xff" + marker, key=b"gw-gone-" + marker),
        topics.STATUS: await bus.send(topics.STATUS, b'{"worker": "' + marker + b'"}', key=b"x"),
    }
    for topic, meta in metas.items():
        await bus.published.dead_letter_of(topic, meta)
