"""VennClient against the real broker: per-job fan-out of assignments and results."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence

import pytest
from aiokafka import AIOKafkaProducer

from tests.event_recorder import Published
from venn import events
from venn.auth.checks import check_job_event
from venn.auth.tokens import MIN_SECRET_BYTES, Tokens
from venn.broker import topics
from venn.broker.topics import ensure_topics
from venn.events import Assignment, DeviceResult, Event, JobRegistered
from venn.sdk import VennClient, new_event_id


@pytest.fixture
async def producer(broker: str) -> AsyncIterator[AIOKafkaProducer]:
    await ensure_topics(broker, 4)
    p = AIOKafkaProducer(bootstrap_servers=broker)
    await p.start()
    yield p
    await p.stop()


def assignment(job_id: str, device: str, round_index: int = 0) -> Assignment:
    return Assignment(
        event_id=new_event_id(),
        time=time.time(),
        job_id=job_id,
        round_index=round_index,
        device_id=device,
        task_url=f"http://example/{job_id}",
        speed_ms_per_sample=78.0,
        bandwidth_kbps=13736.0,
    )


def result(job_id: str, device: str) -> DeviceResult:
    return DeviceResult(
        event_id=new_event_id(),
        time=time.time(),
        job_id=job_id,
        round_index=0,
        device_id=device,
        ok=True,
        response_time_s=12.0,
    )


async def publish(p: AIOKafkaProducer, topic: str, items: Sequence[Event]) -> None:
    for e in items:
        await p.send_and_wait(topic, events.encode(e), key=events.key_of(e))


async def take(it: AsyncIterator[Event], n: int, timeout: float = 10.0) -> list[Event]:
    out: list[Event] = []

    async def run() -> None:
        async for e in it:
            out.append(e)
            if len(out) == n:
                return

    await asyncio.wait_for(run(), timeout)
    return out


async def test_each_job_sees_only_its_own_assignments_and_results(
    broker: str, producer: AIOKafkaProducer, unique: str
) -> None:
    a1, a2, b1 = f"a1-{unique}", f"a2-{unique}", f"b1-{unique}"
    async with VennClient(broker) as owner_a, VennClient(broker) as owner_b:
        for job in (a1, a2):
            owner_a.subscribe(job)
        owner_b.subscribe(b1)
        sent = [assignment(job, f"dev-{job}-{i}") for i in range(5) for job in (a1, a2, b1)]
        sent.append(assignment(f"nobody-{unique}", "dev-x"))
        await publish(producer, topics.ASSIGNMENTS, sent)
        # Results of devices the jobs' rounds assigned (any other is held: issue 26, item 8).
        await publish(
            producer, topics.RESULTS, [result(a2, f"dev-{a2}-1"), result(b1, f"dev-{b1}-2")]
        )

        got_a1 = await take(owner_a.assignments(a1), 5)
        got_a2 = await take(owner_a.assignments(a2), 5)
        got_b1 = await take(owner_b.assignments(b1), 5)
        res_a2 = await take(owner_a.results(a2), 1)
        res_b1 = await take(owner_b.results(b1), 1)

        def ids(job: str) -> list[str]:
            return [e.event_id for e in sent if isinstance(e, Assignment) and e.job_id == job]

        # Per-job order is the partition order (same key -> same partition).
        assert [e.event_id for e in got_a1] == ids(a1)
        assert [e.event_id for e in got_a2] == ids(a2)
        assert [e.event_id for e in got_b1] == ids(b1)
        assert [r.device_id for r in res_a2] == [f"dev-{a2}-1"]  # type: ignore[attr-defined]
        assert [r.device_id for r in res_b1] == [f"dev-{b1}-2"]  # type: ignore[attr-defined]
        # Nothing else is queued for a job: B never saw A's traffic and vice versa.
        await asyncio.sleep(0.5)
        assert owner_a._subs[a1].assignments.empty()
        assert owner_b._subs[b1].results.empty()
        assert owner_b.stats.ignored >= 11  # a1's, a2's and the unknown job's assignments


async def test_events_from_before_the_client_started_are_not_delivered(
    broker: str, producer: AIOKafkaProducer, unique: str
) -> None:
    job = f"old-{unique}"
    await publish(producer, topics.ASSIGNMENTS, [assignment(job, "dev-before")])
    async with VennClient(broker) as owner:
        owner.subscribe(job)
        await publish(producer, topics.ASSIGNMENTS, [assignment(job, "dev-after")])
        got = await take(owner.assignments(job), 1)
        assert [e.device_id for e in got] == ["dev-after"]  # type: ignore[attr-defined]


async def test_malformed_assignment_is_skipped_and_dispatch_continues(
    broker: str, producer: AIOKafkaProducer, unique: str, published: Published
) -> None:
    job = f"bad-{unique}"
    letters = await published(topics.DEAD_LETTERS)
    async with VennClient(broker) as owner:
        owner.subscribe(job)
        bad = b'{"type": "assignment", "job_id": "' + job.encode() + b'"}'
        await producer.send_and_wait(topics.ASSIGNMENTS, bad, key=job.encode())
        await publish(producer, topics.ASSIGNMENTS, [assignment(job, "dev-good")])
        got = await take(owner.assignments(job), 1)
        assert [e.device_id for e in got] == ["dev-good"]  # type: ignore[attr-defined]
        assert owner.stats.invalid == 1
    # Issue 12, defect 8: every running client dead-lettered it once more. The SDK skips
    # and counts; the record's owner (topics.DEAD_LETTER_OWNER) dead-letters it.
    assert topics.DEAD_LETTER_OWNER[topics.ASSIGNMENTS] == "scheduler"
    await asyncio.sleep(3.0)
    assert letters.events(where=lambda e: e.original_bytes() == bad) == []


async def test_register_and_round_requests_are_keyed_by_job(
    broker: str, unique: str, published: Published
) -> None:
    await ensure_topics(broker, 4)
    job = f"reg-{unique}"
    jobs = await published(topics.JOBS)
    async with VennClient(broker) as owner:
        reg = await owner.register_job(job, {"cpu": 7}, demand=3, rounds=2, deadline_s=300)
        req = await owner.request_round(job, 0, 3)
    # These two, in this order, keyed by the job.
    await jobs.expect(topics.JOBS, [reg, req], lambda e: e.job_id == job)
    assert reg.requirement == {"cpu_f": 7.0}  # the paper's alias, normalised


async def test_a_registration_carries_the_tenant_of_the_clients_token(
    broker: str, unique: str, published: Published
) -> None:
    await ensure_topics(broker, 4)
    tokens = Tokens("s" * MIN_SECRET_BYTES)
    job = f"team-{unique}-1"
    token = tokens.issue("job", f"team-{unique}", jobs=[f"team-{unique}-*"], ttl_s=60)
    jobs = await published(topics.JOBS)
    async with VennClient(broker, token=token) as owner:
        reg = await owner.register_job(job, {"cpu": 1}, demand=3, rounds=2, deadline_s=300)
        later = await owner.register_job(
            f"{job}-b", {"cpu": 1}, demand=3, rounds=2, deadline_s=300, priority=2
        )
    await jobs.expect(topics.JOBS, [reg, later], lambda e: e.job_id.startswith(job))
    assert isinstance(reg, JobRegistered) and isinstance(later, JobRegistered)
    assert (reg.tenant, reg.priority) == (f"team-{unique}", None)
    assert (later.tenant, later.priority) == (f"team-{unique}", 2)
    # What the scheduler's check of venn.jobs admits: a job token for its own tenant.
    claims = check_job_event(tokens, reg)
    assert claims is not None and claims.subject == f"team-{unique}"
    async with VennClient(broker) as anonymous:  # no token: the default tenant
        plain = await anonymous.register_job(f"plain-{unique}", {"cpu": 1}, 3, 2, 300)
    assert plain.tenant is None
