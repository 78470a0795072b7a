"""The scheduler worker (a real Faust process) against the session's broker.

Topics are shared with every other test of the run, so each test uses its own job and
device ids and its own requirement attribute (`cpu_<token>`): jobs of other tests can
never take these devices, nor these jobs theirs.
"""

from __future__ import annotations

import asyncio
import signal
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import Popen
from typing import Any

import msgspec
import pytest
from aiokafka import AIOKafkaProducer

from services.scheduler.process import kill_worker, start_worker, stop_worker
from tests import factories
from tests.event_recorder import EventRecorder
from venn import events as ev
from venn import fields
from venn.broker import topics
from venn.broker.process import free_port
from venn.broker.topics import prepare_topics
from venn.settings import Settings

MAX_EVENT_BYTES = 4096
READY_TIMEOUT = 180.0  # a restart after SIGKILL waits for the dead member's session to expire;
# one CI run on a loaded machine needed more than 90 s


OUTPUTS = (topics.ASSIGNMENTS, topics.DEAD_LETTERS, topics.REPLIES)


@dataclass
class Bus:
    """A producer for the scheduler's inputs, and the event recorder of its outputs
    (`OUTPUTS`) from the moment the stack starts."""

    bootstrap: str
    partitions: int
    producer: AIOKafkaProducer = field(init=False)
    published: EventRecorder = field(init=False)

    async def start(self) -> None:
        self.producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap)
        await self.producer.start()
        self.published = await EventRecorder(self.bootstrap, OUTPUTS).start()

    async def stop(self) -> None:
        await self.published.stop()
        await self.producer.stop()

    async def send(
        self,
        topic: str,
        value: bytes | ev.Event,
        key: bytes | None = None,
        partition: int | None = None,
    ) -> Any:
        if isinstance(value, ev.Event):
            key = key if key is not None else ev.key_of(value)
            value = ev.encode(value)
        return await self.producer.send_and_wait(topic, value, key=key, partition=partition)

    async def barrier(self, topic: str, timeout: float = 20.0) -> None:
        """Returns once the worker has processed everything sent to `topic` before."""
        metas = [
            await self.send(topic, b"\x00barrier " + uuid.uuid4().bytes, partition=p)
            for p in range(self.partitions)
        ]
        for meta in metas:
            await self.published.dead_letter_of(topic, meta, timeout)

    def assigned(self, job_ids: set[str]) -> list[ev.Assignment]:
        return self.published.assignments(job_ids)


@dataclass
class Worker:
    env: dict[str, str]
    log_path: Path
    proc: Popen[bytes] | None = None

    def start(self) -> None:
        self.env["VENN_SCHEDULER_WEB_PORT"] = str(free_port())
        with open(self.log_path, "ab") as log:
            # Faust's rebalance and recovery logs, for a restart that does not come back.
            self.proc = start_worker(self.env, log, level="info")

    def diagnosis(self) -> str:
        """The worker's /healthz (which names stalled partitions) and its log's tail."""
        url = f"http://127.0.0.1:{self.env['VENN_SCHEDULER_WEB_PORT']}/healthz"
        try:
            health = urllib.request.urlopen(url, timeout=5).read().decode()
        except urllib.error.HTTPError as exc:
            health = f"{exc.code} {exc.read().decode()}"
        except OSError as exc:
            health = repr(exc)
        try:
            url = f"http://127.0.0.1:{self.env['VENN_SCHEDULER_WEB_PORT']}/metrics"
            text = urllib.request.urlopen(url, timeout=5).read().decode()
            counters = "\n".join(
                line
                for line in text.splitlines()
                if line.startswith(("venn_scheduler_events_total", "venn_scheduler_consumer_lag",
                                    "venn_scheduler_dead_letters_total", "venn_scheduler_output",
                                    "venn_scheduler_offsets_total"))
            )  # fmt: skip
        except OSError as exc:
            counters = repr(exc)
        if self.proc is not None and self.proc.poll() is None:
            # Its asyncio tasks' stacks, then its threads' (services/scheduler/__main__.py).
            for sig in (signal.SIGUSR1, signal.SIGQUIT):
                self.proc.send_signal(sig)
                time.sleep(1.0)
        lines = self.log_path.read_text(errors="replace").splitlines()
        wanted = [line for line in lines if "aiokafka" not in line or "ERROR" in line]
        return f"healthz: {health}\nmetrics:\n{counters}\nworker log (tail):\n" + "\n".join(
            wanted[-400:]
        )

    def metric_total(self, name: str) -> float:
        url = f"http://127.0.0.1:{self.env['VENN_SCHEDULER_WEB_PORT']}/metrics"
        text = urllib.request.urlopen(url, timeout=5).read().decode()
        for line in text.splitlines():
            if line.startswith(f"{name} "):
                return float(line.split()[1])
        return 0.0

    def metric(self, name: str, topic: str) -> float:
        url = f"http://127.0.0.1:{self.env['VENN_SCHEDULER_WEB_PORT']}/metrics"
        text = urllib.request.urlopen(url, timeout=5).read().decode()
        needle = f'{name}{{topic="{topic}"}} '
        for line in text.splitlines():
            if line.startswith(needle):
                return float(line[len(needle) :])
        return 0.0


@pytest.fixture(scope="module")
async def stack(broker: str, run_dir: Path, partitions: int) -> AsyncIterator[tuple[Bus, Worker]]:
    app_id = f"venn-scheduler-test-{uuid.uuid4().hex[:8]}"
    settings = Settings(broker=broker, app_id=app_id, topic_partitions=partitions)
    await prepare_topics(settings)
    env = {
        "VENN_BROKER": broker,
        "VENN_APP_ID": app_id,
        "VENN_TOPIC_PARTITIONS": str(partitions),
        "VENN_RUN_DIR": str(run_dir),
        "VENN_MAX_EVENT_BYTES": str(MAX_EVENT_BYTES),
        "VENN_POLICY": "venn",
    }
    worker = Worker(env, run_dir / f"{app_id}.log")
    bus = Bus(broker, partitions)
    await bus.start()
    worker.start()
    try:
        await bus.barrier(topics.CHECKINS, READY_TIMEOUT)
        yield bus, worker
    finally:
        if worker.proc is not None:
            stop_worker(worker.proc, timeout=10)
        await bus.stop()


def job(job_id: str, attr: str, minimum: float, demand: int = 3) -> ev.JobRegistered:
    return factories.registered(
        job_id, requirement={attr: minimum}, demand=demand, rounds=5, event_id=f"reg-{job_id}"
    )


def round_request(job_id: str, round_index: int, demand: int) -> ev.RoundRequested:
    return factories.requested(job_id, round_index, demand, event_id=f"rr-{job_id}-{round_index}")


def checkin(device_id: str, attrs: dict[str, float]) -> ev.DeviceCheckin:
    return factories.checkin(device_id, attrs)


def result(job_id: str, round_index: int, device_id: str) -> ev.DeviceResult:
    return factories.result(job_id, round_index, device_id, response_time_s=3.0)


def finished(job_id: str) -> ev.JobFinished:
    now = time.time()
    return factories.finished(job_id, 0, arrival=now, finished_at=now, event_id=f"fin-{job_id}")


async def checkins(bus: Bus, devices: list[str], attrs: dict[str, float]) -> None:
    for device in devices:
        await bus.send(topics.CHECKINS, checkin(device, attrs))
    await bus.barrier(topics.CHECKINS)


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
    got = bus.assigned(mine)
    counts = {j: len({a.event_id for a in got if a.job_id == j}) for j in mine}
    assert counts == {full: 3, partial: 4}, counts
    late = [a.device_id for a in got if a.job_id == partial][2:]
    assert all(d.startswith("c") for d in late), late
    print(f"recovery after SIGKILL: {recovery_s:.1f}s")
    for job_id in mine:
        await bus.send(topics.ROUNDS, finished(job_id))
