"""The scheduler worker (a real Faust process) against the session's broker.

Topics are shared with every other test of the run, so each test uses its own job and
device ids and its own requirement attribute (`cpu_<token>`): jobs of other tests can
never take these devices, nor these jobs theirs.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from services.scheduler.process import kill_worker
from tests.broker.scheduler_bus import (
    READY_TIMEOUT,
    Bus,
    Worker,
    checkin,
    checkins,
    finished,
    job,
    result,
    round_request,
    scheduler_env,
    scheduler_on_bus,
)
from venn import events as ev
from venn import fields
from venn.broker import topics

MAX_EVENT_BYTES = 4096


@pytest.fixture(scope="module")
async def stack(broker: str, run_dir: Path, partitions: int) -> AsyncIterator[tuple[Bus, Worker]]:
    env = await scheduler_env(
        broker, run_dir, partitions, "test",
        VENN_MAX_EVENT_BYTES=str(MAX_EVENT_BYTES), VENN_POLICY="venn",
    )  # fmt: skip
    async with scheduler_on_bus(broker, partitions, env) as stack:
        yield stack


async def test_happy_path(stack: tuple[Bus, Worker]) -> None:
    bus, _ = stack
    tok = uuid.uuid4().hex[:8]
    attr = f"cpu_{tok}"
    low, high = f"low-{tok}", f"high-{tok}"  # low: attr >= 1, high: attr >= 7
    for event in (job(low, attr, 1), job(high, attr, 7)):
        await bus.send(topics.JOBS, event)
    for job_id in (low, high):
        await bus.send(topics.JOBS, round_request(job_id, 0, 3))
    await bus.send(topics.JOBS, round_request(high, 0, 3))  # a replay: ignored
    await bus.barrier(topics.JOBS)
    mine = {low, high}

    # Devices eligible only for `low`: the first one twice while it is active.
    await checkins(bus, [f"mid0-{tok}"], {attr: 3})
    await bus.published.wait_for(lambda: len(bus.assigned(mine)) == 1)
    await checkins(bus, [f"mid0-{tok}"], {attr: 3})
    # Ineligible devices: too weak, or not reporting the attribute at all.
    await checkins(bus, [f"weak{i}-{tok}" for i in range(3)], {attr: 0.5})
    await checkins(bus, [f"none{i}-{tok}" for i in range(2)], {"cpu_f": 9})
    assert len(bus.assigned(mine)) == 1, "an active or ineligible device got an assignment"

    # Its result releases it: the same device may be assigned again.
    await bus.send(topics.RESULTS, result(low, 0, f"mid0-{tok}"))
    await bus.barrier(topics.RESULTS)
    await checkins(bus, [f"mid0-{tok}"], {attr: 3})
    await bus.published.wait_for(lambda: len(bus.assigned(mine)) == 2)
    await checkins(bus, [f"mid{i}-{tok}" for i in (1, 2, 3)], {attr: 3})
    await bus.published.wait_for(lambda: len(bus.assigned(mine)) == 3)
    await checkins(bus, [f"top{i}-{tok}" for i in range(5)], {attr: 8})
    await bus.published.wait_for(lambda: len(bus.assigned(mine)) == 6)
    await asyncio.sleep(0.5)  # anything beyond the demand would show up now

    got = bus.assigned(mine)
    by_job = {j: [a for a in got if a.job_id == j] for j in mine}
    assert {j: len(a) for j, a in by_job.items()} == {low: 3, high: 3}
    assert all(a.device_id.startswith(("mid", "top")) for a in by_job[low])
    assert all(a.device_id.startswith("top") for a in by_job[high])
    assert sorted(a.device_id for a in by_job[low])[:2] == [f"mid0-{tok}", f"mid0-{tok}"]
    assert len({a.device_id for a in by_job[high]}) == 3
    for r in bus.published.on(topics.ASSIGNMENTS, lambda e: e.job_id in mine):
        assert r.key == r.event.job_id.encode()  # type: ignore[union-attr]
        for a in ev.assignments_of(r.event):  # type: ignore[arg-type]
            assert a.task_url.endswith(f"/jobs/{a.job_id}/rounds/0/task")
            assert a.speed_ms_per_sample == 60.0
    for job_id in mine:
        await bus.send(topics.ROUNDS, finished(job_id))


def _raw(event: ev.Event, **changes: Any) -> bytes:
    data = msgspec.json.decode(ev.encode(event))
    for name, value in changes.items():
        if value is ...:
            del data[name]
        else:
            data[name] = value
    return msgspec.json.encode(data)


def _oversized(event: ev.Event) -> bytes:
    raw = ev.encode(event)
    return raw[:-1] + b', "pad": "' + b"x" * MAX_EVENT_BYTES + b'"}'


def bad_inputs(tok: str) -> dict[str, list[tuple[bytes, str]]]:
    """topic -> [(message value, expected fragment of the dead letter's reason)]."""
    ghost = f"ghost-{tok}"
    rc = ev.RoundClosed(
        event_id=f"rc-{tok}",
        time=1.0,
        job_id=ghost,
        round_index=0,
        outcome="succeeded",
        demand=3,
        assigned=3,
        results=3,
        opened_at=0.0,
        closed_at=1.0,
        reason="enough results",
        sched_delay_s=0.5,
        response_time_s=0.5,
    )
    rr, res = round_request(ghost, 0, 3), result(ghost, 0, f"dev-{tok}")
    ci = checkin(f"dev-{tok}", {"cpu_f": 1})
    garbage = b"\xff\xfe not json " + tok.encode()
    return {
        topics.JOBS: [
            (garbage, "not_json"),
            (_raw(rr, demand="three"), "wrong_type"),
            (_raw(rr, job_id=...), "missing_field"),
            (ev.encode(rr), "unknown job"),
            (_oversized(rr), "oversized"),
            # issue 12, defect 2: schema-valid once, and every check-in batch then failed
            (_raw(job(f"huge-{tok}", "cpu_f", 1), demand=2**63), "invalid_value"),
            (_raw(job(f"nul-{tok}", "cpu_f", 1), job_id=f"nul\x00{tok}"), "invalid_value"),
        ],
        topics.ROUNDS: [
            (garbage, "not_json"),
            (_raw(rc, round_index="x"), "wrong_type"),
            (_raw(rc, outcome=...), "missing_field"),
            (ev.encode(rc), "unknown job"),
            (_oversized(rc), "oversized"),
            (_raw(rc, round_index=2**31), "invalid_value"),
        ],
        topics.RESULTS: [
            (garbage, "not_json"),
            (_raw(res, ok="yes"), "wrong_type"),
            (_raw(res, device_id=...), "missing_field"),
            (ev.encode(res), "unknown job"),
            (_oversized(res), "oversized"),
        ],
        topics.CHECKINS: [
            (garbage, "not_json"),
            (_raw(ci, attrs="fast"), "wrong_type"),
            (_raw(ci, device_id=...), "missing_field"),
            (ev.encode(job(ghost, "cpu_f", 1)), "not_allowed"),  # no job on this topic
            (_raw(ci, type="device_reboot"), "unknown_type"),
            (_oversized(ci), "oversized"),
        ],
    }


async def test_bad_input_goes_to_dead_letters(stack: tuple[Bus, Worker]) -> None:
    bus, _ = stack
    tok = uuid.uuid4().hex[:8]
    sent = []
    for topic, cases in bad_inputs(tok).items():
        for value, fragment in cases:
            meta = await bus.send(topic, value, key=f"k-{tok}".encode())
            sent.append((topic, meta, value, fragment))
    for topic, meta, value, fragment in sent:
        letter = await bus.published.dead_letter_of(topic, meta)
        assert fragment in letter.reason, (topic, letter.reason)
        assert topic in letter.reason
        assert letter.source_topic == topic
        assert letter.original_bytes() == value[: fields.ORIGINAL_PREFIX_MAX]
        assert letter.original_size == len(value)

    # The worker is still alive and processing valid input.
    attr, job_id = f"cpu_{tok}", f"after-{tok}"
    await bus.send(topics.JOBS, job(job_id, attr, 1, demand=1))
    await bus.send(topics.JOBS, round_request(job_id, 0, 1))
    await bus.barrier(topics.JOBS)
    await checkins(bus, [f"ok-{tok}"], {attr: 2})
    await bus.published.wait_for(lambda: len(bus.assigned({job_id})) == 1)
    await bus.send(topics.ROUNDS, finished(job_id))


async def test_a_record_of_any_size_leaves_scheduling_running(stack: tuple[Bus, Worker]) -> None:
    """Issue 12, defect 1: a record of about 790 KB or more on a scheduler input was
    dead-lettered whole (over 1 MiB in base64), the output producer's sender died, and the
    worker emitted nothing more, for good. Now its dead letter keeps a bounded prefix."""
    bus, _ = stack
    tok = uuid.uuid4().hex[:8]
    huge = b"{" + tok.encode() + b"x" * 900_000
    metas = [
        (t, await bus.send(t, huge, key=f"k-{tok}".encode()))
        for t in (topics.CHECKINS, topics.JOBS)
    ]
    for topic, meta in metas:
        letter = await bus.published.dead_letter_of(topic, meta)
        assert "oversized" in letter.reason
        assert letter.original_size == len(huge)
        assert letter.original_bytes() == huge[: fields.ORIGINAL_PREFIX_MAX]
        assert len(ev.encode(letter)) < 8192

    attr, job_id = f"cpu_{tok}", f"big-after-{tok}"
    await bus.send(topics.JOBS, job(job_id, attr, 1, demand=2))
    await bus.send(topics.JOBS, round_request(job_id, 0, 2))
    await bus.barrier(topics.JOBS)
    await checkins(bus, [f"ok{i}-{tok}" for i in range(2)], {attr: 2})
    await bus.published.wait_for(lambda: len(bus.assigned({job_id})) == 2)
    await bus.send(topics.ROUNDS, finished(job_id))


async def test_a_stale_checkin_takes_no_slot(stack: tuple[Bus, Worker]) -> None:
    """Issue 12, defect 8: after an offset reset, a check-in declined minutes earlier took a
    later round's only slot. A check-in older than VENN_CHECKIN_MAX_AGE_S is dropped."""
    bus, worker = stack
    tok = uuid.uuid4().hex[:8]
    attr, job_id = f"cpu_{tok}", f"stale-{tok}"
    await bus.send(topics.JOBS, job(job_id, attr, 1, demand=1))
    await bus.send(topics.JOBS, round_request(job_id, 0, 1))
    await bus.barrier(topics.JOBS)
    dropped = worker.metric_total("venn_scheduler_stale_checkins_total")
    old = msgspec.structs.replace(checkin(f"old-{tok}", {attr: 2}), time=time.time() - 120)
    await bus.send(topics.CHECKINS, old)
    await bus.barrier(topics.CHECKINS)
    await asyncio.sleep(0.5)
    assert bus.assigned({job_id}) == []
    assert worker.metric_total("venn_scheduler_stale_checkins_total") == dropped + 1
    await checkins(bus, [f"fresh-{tok}"], {attr: 2})
    await bus.published.wait_for(lambda: len(bus.assigned({job_id})) == 1)
    assert bus.assigned({job_id})[0].device_id == f"fresh-{tok}"
    await bus.send(topics.ROUNDS, finished(job_id))


async def test_checkin_batch(stack: tuple[Bus, Worker]) -> None:
    """One message of check-ins: one AssignmentBatch per job, the rest declined to the
    batch's reply_to, a bad item dead-lettered alone; a replay of the batch changes nothing."""
    bus, _ = stack
    tok = uuid.uuid4().hex[:8]
    attr, job_id, gateway = f"cpu_{tok}", f"batch-{tok}", f"gw-{tok}"
    await bus.send(topics.JOBS, job(job_id, attr, 1, demand=2))
    await bus.send(topics.JOBS, round_request(job_id, 0, 2))
    await bus.barrier(topics.JOBS)
    eligible = [checkin(f"e{i}-{tok}", {attr: 2}) for i in range(3)]
    weak = checkin(f"weak-{tok}", {attr: 0.5})
    bad = {**msgspec.json.decode(ev.encode(checkin(f"bad-{tok}", {attr: 2}))), "device_id": ""}
    items = [ev.encode(c) for c in [*eligible, weak]] + [msgspec.json.encode(bad)]
    raw = ev.encode_checkin_batch(f"cb-{tok}", time.time(), items, reply_to=gateway)

    def declined() -> list[ev.CheckinsDeclined]:
        return bus.published.events(topics.REPLIES, lambda e: e.reply_to == gateway)  # type: ignore[return-value]

    meta = await bus.send(topics.CHECKINS, raw, key=b"cb")
    letter_id = f"dead:{topics.CHECKINS}:{meta.partition}:{meta.offset}:0"
    await bus.published.wait_for(lambda: letter_id in bus.published.dead_letters() and declined())
    letter = bus.published.dead_letters()[letter_id]
    assert "device_id" in letter.reason
    assert "checkin_batch" in letter.reason
    assert msgspec.json.decode(letter.original_bytes()) == bad
    await bus.published.wait_for(lambda: len(bus.assigned({job_id})) == 2)
    (batch,) = bus.published.events(topics.ASSIGNMENTS, lambda e: e.job_id == job_id)
    assert isinstance(batch, ev.AssignmentBatch) and len(batch.assignments) == 2
    assigned = {a.device_id for a in batch.assignments}
    assert assigned < {c.device_id for c in eligible}
    (answer,) = declined()
    expected = {c.event_id for c in [*eligible, weak] if c.device_id not in assigned}
    assert set(answer.checkin_ids) == expected and len(expected) == 2

    await bus.send(topics.CHECKINS, raw, key=b"cb")  # a replay: deduped on the batch id
    await bus.barrier(topics.CHECKINS)
    await asyncio.sleep(0.5)
    assert len(bus.assigned({job_id})) == 2 and len(declined()) == 1
    await bus.send(topics.ROUNDS, finished(job_id))


async def test_batches_of_one_fetch_are_decided_together(stack: tuple[Bus, Worker]) -> None:
    """Gateways' batches that land in one fetch: decided as one (the worker's
    batches-per-decision histogram says so), the job gets exactly its demand in
    AssignmentBatches, and each gateway hears of its own declined check-ins, once."""
    bus, worker = stack
    tok = uuid.uuid4().hex[:8]
    attr, job_id = f"cpu_{tok}", f"together-{tok}"
    await bus.send(topics.JOBS, job(job_id, attr, 1, demand=5))
    await bus.send(topics.JOBS, round_request(job_id, 0, 5))
    await bus.barrier(topics.JOBS)
    histogram = "venn_scheduler_batches_per_decision"
    decisions0 = worker.metric_total(histogram + "_count")
    batches0 = worker.metric_total(histogram + "_sum")
    gateways = [f"gw{i}-{tok}" for i in range(8)]
    sent = {
        gw: [checkin(f"d{i}-{j}-{tok}", {attr: 2}) for j in range(2)]
        for i, gw in enumerate(gateways)
    }
    # Sent without waiting for each: one produce request, one partition, one fetch.
    acks = [
        await bus.producer.send(
            topics.CHECKINS,
            ev.encode_checkin_batch(
                f"tb{i}-{tok}", time.time(), [ev.encode(c) for c in items], reply_to=gw
            ),
            key=b"together",
        )
        for i, (gw, items) in enumerate(sent.items())
    ]
    await asyncio.gather(*acks)

    def declined() -> list[ev.CheckinsDeclined]:
        return bus.published.events(topics.REPLIES, lambda e: e.reply_to in sent)  # type: ignore[return-value]

    def answered() -> set[str]:
        ids = {i for reply in declined() for i in reply.checkin_ids}
        return ids | {a.checkin_id or "" for a in bus.assigned({job_id})}

    every = {c.event_id for items in sent.values() for c in items}
    await bus.published.wait_for(lambda: answered() >= every)
    assigned = bus.assigned({job_id})
    assert len(assigned) == 5 == len({a.device_id for a in assigned})
    for reply in declined():  # each gateway only its own check-ins, each once
        assert set(reply.checkin_ids) <= {c.event_id for c in sent[reply.reply_to]}
    ids = [i for reply in declined() for i in reply.checkin_ids]
    assert len(ids) == len(set(ids)) == len(every) - 5
    decisions = worker.metric_total(histogram + "_count") - decisions0
    batches = worker.metric_total(histogram + "_sum") - batches0
    assert batches == len(gateways) and decisions < batches, (decisions, batches)
    await bus.send(topics.ROUNDS, finished(job_id))


async def test_replays_are_idempotent(stack: tuple[Bus, Worker]) -> None:
    bus, _ = stack
    tok = uuid.uuid4().hex[:8]
    attr, job_id = f"cpu_{tok}", f"replay-{tok}"
    for _ in range(2):  # a replayed registration and round request change nothing
        await bus.send(topics.JOBS, job(job_id, attr, 1, demand=2))
        await bus.send(topics.JOBS, round_request(job_id, 0, 2))
    await bus.barrier(topics.JOBS)
    first = checkin(f"d0-{tok}", {attr: 2})
    await bus.send(topics.CHECKINS, first)
    await bus.send(topics.CHECKINS, first)  # same event id
    await bus.barrier(topics.CHECKINS)
    await bus.published.wait_for(lambda: len(bus.assigned({job_id})) == 1)
    # Duplicate results release the device once; the replayed request does not reopen.
    res = result(job_id, 0, f"d0-{tok}")
    await bus.send(topics.RESULTS, res)
    await bus.send(topics.RESULTS, res)
    await bus.barrier(topics.RESULTS)
    await checkins(bus, [f"d{i}-{tok}" for i in (1, 2, 3)], {attr: 2})
    await bus.published.wait_for(lambda: len(bus.assigned({job_id})) == 2)
    await asyncio.sleep(0.5)
    got = [a.device_id for a in bus.assigned({job_id})]
    assert len(got) == 2, got  # the duplicate check-in did not take the second slot
    assert got[0] == f"d0-{tok}"
    assert got[1] in {f"d{i}-{tok}" for i in (1, 2, 3)}
    await bus.send(topics.ROUNDS, finished(job_id))


async def test_restart_recovers_demand(stack: tuple[Bus, Worker]) -> None:
    bus, worker = stack
    assert worker.proc is not None
    tok = uuid.uuid4().hex[:8]
    attr = f"cpu_{tok}"
    full, partial = f"full-{tok}", f"partial-{tok}"
    await bus.send(topics.JOBS, job(full, attr, 1, demand=3))
    await bus.send(topics.JOBS, job(partial, attr, 5, demand=4))
    await bus.send(topics.JOBS, round_request(full, 0, 3))
    await bus.send(topics.JOBS, round_request(partial, 0, 4))
    await bus.barrier(topics.JOBS)
    mine = {full, partial}
    read_back = worker.metric("venn_scheduler_events_total", topics.ASSIGNMENTS)

    await checkins(bus, [f"a{i}-{tok}" for i in range(3)], {attr: 2})  # only `full`
    await checkins(bus, [f"b{i}-{tok}" for i in range(2)], {attr: 6})
    await bus.published.wait_for(lambda: len(bus.assigned(mine)) == 5)
    assert len(bus.assigned({full})) == 3
    # The tables are written when the worker reads its assignments back.
    await bus.published.wait_for(
        lambda: worker.metric("venn_scheduler_events_total", topics.ASSIGNMENTS) >= read_back + 5
    )
    await asyncio.sleep(1.0)  # let the producer flush the changelog records

    kill_worker(worker.proc)
    started = time.monotonic()
    worker.start()
    for topic in (topics.CHECKINS, topics.JOBS):
        try:
            await bus.barrier(topic, READY_TIMEOUT)
        except AssertionError as exc:
            raise AssertionError(f"{topic} not served: {exc}\n{worker.diagnosis()}") from exc
    recovery_s = time.monotonic() - started

    # Old devices are still active; fresh ones fill exactly the remainder of `partial`.
    await checkins(bus, [f"a{i}-{tok}" for i in range(3)], {attr: 2})
    await checkins(bus, [f"b{i}-{tok}" for i in range(2)], {attr: 6})
    await checkins(bus, [f"c{i}-{tok}" for i in range(5)], {attr: 9})
    await bus.published.wait_for(lambda: len(bus.assigned(mine)) >= 7)
    await asyncio.sleep(1.0)
    # Each id once, as first published: a successor of a killed decider publishes again
    # what its rows say devices hold (same ids), and a reader keeps the first.
    first: dict[str, ev.Assignment] = {}
    for a in bus.assigned(mine):
        first.setdefault(a.event_id, a)
    got = list(first.values())
    counts = {j: len({a.event_id for a in got if a.job_id == j}) for j in mine}
    assert counts == {full: 3, partial: 4}, counts
    late = [a.device_id for a in got if a.job_id == partial][2:]
    assert all(d.startswith("c") for d in late), late
    print(f"recovery after SIGKILL: {recovery_s:.1f}s")
    for job_id in mine:
        await bus.send(topics.ROUNDS, finished(job_id))
