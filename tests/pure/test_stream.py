import asyncio

import pytest

from tests import factories
from venn import events as ev
from venn.broker import topics
from venn.broker.publish import MemoryEvents
from venn.broker.stream import (
    UNAUTHORIZED,
    DeadLetterUnsent,
    EventStream,
    MemoryRecords,
    Record,
    Refused,
    StreamStats,
    Unusable,
    Verdict,
    judge,
    owned_by,
)

NOW = 1000.0


def request(job: str, index: int = 0) -> ev.RoundRequested:
    return factories.requested(job, index, event_id=f"rr-{job}-{index}", time=NOW)


def stream(service: str) -> tuple[MemoryRecords, MemoryEvents, EventStream]:
    records, letters = MemoryRecords(), MemoryEvents()
    return records, letters, EventStream(records, letters, owned_by(service))


def letters_of(letters: MemoryEvents) -> list[tuple[bytes, ev.DeadLetter]]:
    out = []
    for topic, key, event in letters.published:
        assert topic == topics.DEAD_LETTERS and isinstance(event, ev.DeadLetter)
        out.append((key, event))
    return out


def test_the_owner_dead_letters_a_bad_record_and_reads_on() -> None:
    records, letters, jobs = stream("scheduler")  # the owner of venn.jobs
    records.add(topics.JOBS, request("a"))
    bad = records.add(topics.JOBS, b"\xff not json")
    records.add(topics.JOBS, ev.DeviceCheckin(
        event_id="c", time=NOW, device_id="d", attrs={}, speed_ms_per_sample=1, bandwidth_kbps=1,
    ))  # fmt: skip
    records.add(topics.JOBS, request("b"))

    batch = asyncio.run(jobs.read())
    assert [d.event for d in batch.events] == [request("a"), request("b")]
    assert batch.next_offsets() == {(topics.JOBS, 0): 4}  # bad records are read past too
    (key, first), (_, second) = letters_of(letters)
    assert key == b"dead:venn.jobs:0:1" == first.event_id.encode()
    assert (first.source_topic, first.partition, first.offset) == (topics.JOBS, 0, bad.offset)
    assert first.reason.startswith("not_json: ") and first.original_bytes() == bad.value
    assert second.reason.startswith("not_allowed: ")
    assert jobs.stats.dead_letters == {"not_json": 1, "not_allowed": 1}
    assert jobs.stats.bad_records == 2 and jobs.stats.skipped == {}


def test_every_other_reader_skips_and_counts() -> None:
    records, letters, jobs = stream("recorder")
    records.add(topics.JOBS, b"")
    records.add(topics.JOBS, b"[1]")
    records.add(topics.JOBS, request("a"))
    batch = asyncio.run(jobs.read())
    assert [d.event for d in batch.events] == [request("a")]
    assert letters.published == []
    assert jobs.stats.skipped == {"empty": 1, "not_an_object": 1}
    assert jobs.stats.bad_records == 2


def test_a_check_every_reader_makes_follows_the_owner_rule() -> None:
    def no_job_b(event: ev.Event, record: Record) -> None:
        if getattr(event, "job_id", "") == "b":
            raise Unusable("unauthorized", "unauthorized: no token for job b")

    for service, letters_expected in (("scheduler", 1), ("recorder", 0)):
        records, letters, jobs = stream(service)
        jobs.check = no_job_b
        records.add(topics.JOBS, request("a"))
        records.add(topics.JOBS, request("b"))
        batch = asyncio.run(jobs.read())
        assert [d.event for d in batch.events] == [request("a")]
        assert len(letters.published) == letters_expected
        counted = jobs.stats.dead_letters if letters_expected else jobs.stats.skipped
        assert counted == {"unauthorized": 1}


def test_a_refusal_is_dead_lettered_by_the_reader_that_refuses() -> None:
    records, letters, rounds = stream("recorder")  # venn.rounds is not its own
    records.add(topics.JOBS, request("a"))
    records.add(topics.JOBS, request("b"))
    records.add(topics.JOBS, request("c"))
    handled: list[str] = []

    def handle(event: ev.Event) -> None:
        assert isinstance(event, ev.RoundRequested)
        if event.job_id == "b":
            raise Refused("audit write refused by the database: too long", "refused_by_database")
        handled.append(event.job_id)

    async def run() -> None:
        await rounds.apply(await rounds.read(), handle)
        await rounds.flush()

    asyncio.run(run())
    assert handled == ["a", "c"]
    ((key, letter),) = letters_of(letters)
    assert key == b"dead:venn.jobs:0:1"
    assert letter.reason == "audit write refused by the database: too long"
    assert rounds.stats.dead_letters == {"refused_by_database": 1}


def test_a_failing_handler_never_stops_the_stream() -> None:
    records, letters, replies = stream("scheduler")
    declined = ev.CheckinsDeclined(event_id="d1", time=NOW, reply_to="gw-1", checkin_ids=["c"])
    for _ in range(3):
        records.add(topics.REPLIES, declined, key=b"gw-1")
    calls = 0

    async def handle(event: ev.Event) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise KeyError("a bug")

    async def run() -> None:
        await replies.apply(await replies.read(), handle)

    asyncio.run(run())
    assert calls == 3
    ((_, letter),) = letters_of(letters)  # the scheduler owns venn.replies
    assert letter.reason == "internal error: KeyError('a bug')"
    assert replies.stats.internal_errors == 1 and replies.stats.dead_letters == {"internal": 1}


def test_an_owner_rule_of_its_own() -> None:
    """A reader may bring an owner rule of its own (here: by key)."""
    records, letters = MemoryRecords(), MemoryEvents()
    mine = EventStream(records, letters, lambda r: r.key == b"gw-1")
    records.add(topics.REPLIES, b"{}", key=b"gw-1")
    records.add(topics.REPLIES, b"{}", key=b"gw-2")
    asyncio.run(mine.read())
    assert [e.event_id for e in letters.on(topics.DEAD_LETTERS)] == ["dead:venn.replies:0:0"]
    assert mine.stats.skipped == {"missing_type": 1}


class Unreachable(MemoryEvents):
    """A broker that takes nothing: every letter fails once queued."""

    async def enqueue(self, topic: str, event: ev.Event) -> asyncio.Future[object]:
        failed: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        failed.set_exception(ConnectionError("broker away"))
        return failed


def test_a_letter_the_broker_does_not_take_is_counted_and_flush_says_so() -> None:
    records = MemoryRecords()
    jobs = EventStream(records, Unreachable(), owned_by("scheduler"))
    records.add(topics.JOBS, b"nope")
    records.add(topics.JOBS, request("a"))

    async def run() -> list[ev.Event]:
        batch = await jobs.read()
        with pytest.raises(DeadLetterUnsent) as failed:
            await jobs.flush()
        assert isinstance(failed.value.__cause__, ConnectionError)
        await jobs.flush()  # reported once
        return [d.event for d in batch.events]

    assert asyncio.run(run()) == [request("a")]
    assert jobs.stats.unsent == 1


@pytest.mark.parametrize(
    ("exc", "reason", "kind", "owners_only"),
    [
        (ev.InvalidEvent("not_json", "nope"), "not_json: nope", "not_json", True),
        (Unusable(UNAUTHORIZED, "unauthorized: x"), "unauthorized: x", UNAUTHORIZED, True),
        (KeyError("a bug"), "internal error: KeyError('a bug')", "internal", True),
        (Refused("unknown job 'j'"), "unknown job 'j'", "rejected", False),
        (Refused("too long", "refused_by_database"), "too long", "refused_by_database", False),
    ],
)  # fmt: skip
def test_judge_sends_to_the_owner_unless_only_this_reader_refuses(
    exc: Exception, reason: str, kind: str, owners_only: bool
) -> None:
    """The one decision EventStream and the scheduler's agents both take."""
    record = Record(topics.JOBS, 2, 7, b"j", b"x")
    for service, owner in (("scheduler", True), ("recorder", False), ("gateway", False)):
        stats = StreamStats()
        send = owner or not owners_only
        assert judge(record, exc, owned_by(service), stats) == Verdict(reason, kind, send)
        assert stats.dead_letters == ({kind: 1} if send else {})
        assert stats.skipped == ({} if send else {kind: 1})
        assert stats.bad_records == int(owners_only)
        assert stats.internal_errors == int(kind == "internal")


def test_judge_asks_the_owner_rule_about_the_record() -> None:
    bad = ev.InvalidEvent("empty", "no bytes")
    reply = Record(topics.REPLIES, 0, 0, b"gw-1", b"")
    assert judge(reply, bad, owned_by("scheduler"), StreamStats()).send
    assert not judge(reply, bad, owned_by("gateway"), StreamStats()).send
    assert not judge(reply, bad, lambda r: r.key == b"gw-2", StreamStats()).send


def test_memory_records_number_each_partition() -> None:
    records = MemoryRecords()
    assert records.add("t", b"a", partition=1) == Record("t", 1, 0, None, b"a")
    assert records.add("t", b"b", partition=1).offset == 1
    assert records.add("t", request("j")).key == b"j"


class Flaky(MemoryRecords):
    """A source whose first fetch fails (a broker gone for a moment)."""

    failed = False

    async def fetch(self, timeout_ms: int, max_records: int) -> list[Record]:
        if not self.failed:
            self.failed = True
            raise ConnectionError("broker away")
        return await super().fetch(timeout_ms, max_records)


def test_a_read_that_fails_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("venn.broker.stream.RETRY_S", 0.0)
    records = Flaky()
    jobs = EventStream(records, MemoryEvents(), owned_by("scheduler"))
    records.add(topics.JOBS, request("a"))

    async def run() -> tuple[int, list[ev.Event]]:
        first = await jobs.read()
        second = await jobs.read()
        return len(first.records), [d.event for d in second.events]

    assert asyncio.run(run()) == (0, [request("a")])
    assert jobs.stats.read_errors == 1
