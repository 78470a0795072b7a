"""The scheduler's per-record intake (`services.scheduler.intake`) without Faust: records
of the stream port (`venn.broker.stream.Record`, from `MemoryRecords`) through the real
handlers, state (on a `MemoryStore`) and publisher, whose messages land in a list."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from services.scheduler.handlers import TopicHandlers
from services.scheduler.intake import Intake
from services.scheduler.letters import WrittenLetters
from services.scheduler.publisher import Publisher
from services.scheduler.state import SchedulerState
from services.scheduler.store import MemoryStore
from venn import events as ev
from venn.broker import topics
from venn.broker.stream import MemoryRecords, StreamStats, authorized
from venn.checkin_columns import AttrsCache
from venn.settings import SchedulerSettings

ATTRS = {"ram": 8.0}


@dataclass
class Worker:
    sent: list[tuple[str, bytes, bytes]] = field(default_factory=list)
    records: MemoryRecords = field(default_factory=MemoryRecords)
    max_bytes: int = ev.DEFAULT_MAX_BYTES

    def __post_init__(self) -> None:
        self.store = MemoryStore()
        self.state = SchedulerState(
            SchedulerSettings(policy="fifo"), self.store, max_bytes=self.max_bytes
        )
        publisher = Publisher(lambda t, k, v: self.sent.append((t, k, v)), WrittenLetters(1))
        stats, cache = StreamStats(), AttrsCache()
        handlers = TopicHandlers(self.state)
        self.intakes = {
            name: Intake(
                name,
                h,
                self.state,
                publisher,
                authorized(None),
                stats,
                1 << 20,
                cache,
                together=handlers.decide_batches if name == topics.CHECKINS else None,
            )
            for name, h in handlers.by_topic().items()
        }

    def feed(self, topic: str, value: bytes | ev.Event, partition: int = 0) -> str:
        record = self.records.add(topic, value, partition=partition)
        return self.intakes[topic](record)

    def on(self, topic: str) -> list[dict[str, object]]:
        return [json.loads(v) for t, _, v in self.sent if t == topic]


def open_round(w: Worker, demand: int = 3) -> None:
    now = time.time()
    registered = ev.JobRegistered(
        event_id="reg", time=now, job_id="j", requirement={"ram": 4.0}, demand=demand,
        rounds=1, deadline_s=60, workload_s=5,
    )  # fmt: skip
    assert w.feed(topics.JOBS, registered) == "handled"
    request = ev.RoundRequested(event_id="rr", time=now, job_id="j", round_index=0, demand=demand)
    assert w.feed(topics.JOBS, request) == "handled"


def checkin(device: str) -> ev.DeviceCheckin:
    return ev.DeviceCheckin(
        event_id=f"c-{device}", time=time.time(), device_id=device, attrs=ATTRS,
        speed_ms_per_sample=60.0, bandwidth_kbps=12000.0,
    )  # fmt: skip


def test_a_checkin_is_decided_and_its_replay_deduplicated() -> None:
    w = Worker()
    open_round(w)
    assert w.feed(topics.CHECKINS, checkin("d1")) == "handled"
    assert list(w.store.rounds), "the decision's row is in the store with it"
    (assigned,) = w.on(topics.ASSIGNMENTS)
    assert (assigned["job_id"], assigned["device_id"]) == ("j", "d1")
    assert w.feed(topics.CHECKINS, checkin("d1")) == "deduplicated"
    assert len(w.on(topics.ASSIGNMENTS)) == 1
    # Its own outputs are read only to dead-letter a bad one: nothing changes.
    value = next(v for t, _, v in w.sent if t == topics.ASSIGNMENTS)
    rows = dict(w.store.rounds)
    assert w.feed(topics.ASSIGNMENTS, value) == "handled"
    assert dict(w.store.rounds) == rows


def test_a_bad_record_gets_one_letter_even_when_read_again() -> None:
    w = Worker()
    record = w.records.add(topics.JOBS, b"not json")
    assert w.intakes[topics.JOBS](record) == "dead_lettered"
    assert w.intakes[topics.JOBS](record) == "dead_lettered"  # replayed after a restart
    (letter,) = w.on(topics.DEAD_LETTERS)
    assert "source topic venn.jobs" in str(letter["reason"])


def test_an_event_for_an_unknown_job_is_refused_with_its_name() -> None:
    w = Worker()
    late = ev.RoundRequested(event_id="rr", time=time.time(), job_id="x", round_index=0, demand=1)
    assert w.feed(topics.JOBS, late) == "dead_lettered"
    (letter,) = w.on(topics.DEAD_LETTERS)
    assert "unknown job 'x'" in str(letter["reason"]) and "round_requested rr" in str(
        letter["reason"]
    )


def test_a_bad_checkin_in_a_batch_loses_none_of_the_others() -> None:
    w = Worker()
    open_round(w)
    good = [json.loads(ev.encode(checkin(d))) for d in ("d1", "d2")]
    batch = {
        "type": "checkin_batch", "event_id": "b1", "time": time.time(),
        "checkins": [good[0], {**good[1], "device_id": ""}, good[1]], "reply_to": "gw",
    }  # fmt: skip
    assert w.feed(topics.CHECKINS, json.dumps(batch).encode()) == "handled"
    (letter,) = w.on(topics.DEAD_LETTERS)
    assert str(letter["event_id"]).endswith(":0") and "checkin_batch" in str(letter["reason"])
    (assigned,) = w.on(topics.ASSIGNMENTS)
    devices = [a["device_id"] for a in assigned["assignments"]]  # type: ignore[attr-defined]
    assert devices == ["d1", "d2"]


def test_stale_checkins_are_accounted_as_dropped() -> None:
    w = Worker()
    open_round(w)
    old = ev.DeviceCheckin(
        event_id="c-old", time=time.time() - 3600, device_id="d9", attrs=ATTRS,
        speed_ms_per_sample=60.0, bandwidth_kbps=12000.0,
    )  # fmt: skip
    assert w.feed(topics.CHECKINS, old) == "dropped_stale"
    assert w.on(topics.ASSIGNMENTS) == []


def batch(event_id: str, devices: list[str], reply_to: str) -> bytes:
    return ev.encode(
        ev.CheckinBatch(
            event_id=event_id, time=time.time(), reply_to=reply_to,
            checkins=[checkin(d) for d in devices],
        )
    )  # fmt: skip


def test_batches_read_together_are_decided_as_one() -> None:
    """Three gateways' batches of one fetch: one AssignmentBatch for the job, each batch's
    declined check-ins to its own gateway; a replay in the same fetch and a bad record are
    accounted on their own, and nothing after them is lost."""
    w = Worker()
    open_round(w, demand=3)
    add = w.records.add
    records = [
        add(topics.CHECKINS, batch("b1", ["d1", "d2"], "gw-1")),
        add(topics.CHECKINS, batch("b2", ["d3"], "gw-2")),
        add(topics.CHECKINS, batch("b1", ["d1", "d2"], "gw-1")),  # delivered twice
        add(topics.CHECKINS, b"not json"),
        add(topics.CHECKINS, batch("b3", ["d4", "d5"], "gw-3")),
    ]
    outcomes = w.intakes[topics.CHECKINS].many(records)
    assert outcomes == ["handled", "handled", "deduplicated", "dead_lettered", "handled"]
    (assigned,) = w.on(topics.ASSIGNMENTS)  # b1, b2 and b3 decided as one
    items: list[dict[str, str]] = assigned["assignments"]  # type: ignore[assignment]
    assert [i["device_id"] for i in items] == ["d1", "d2", "d3"]  # the demand of 3
    replies = w.on(topics.REPLIES)
    assert [(r["reply_to"], r["checkin_ids"]) for r in replies] == [("gw-3", ["c-d4", "c-d5"])]
    assert len(w.on(topics.DEAD_LETTERS)) == 1


def test_batches_together_answer_each_gateway_its_declined_check_ins() -> None:
    w = Worker()
    open_round(w, demand=2)
    add = w.records.add
    records = [
        add(topics.CHECKINS, batch("b1", ["d1"], "gw-1")),
        add(topics.CHECKINS, batch("b2", ["d2", "d3"], "gw-2")),
        add(topics.CHECKINS, batch("b3", ["d4"], "gw-3")),
    ]
    assert w.intakes[topics.CHECKINS].many(records) == ["handled"] * 3
    (assigned,) = w.on(topics.ASSIGNMENTS)
    items: list[dict[str, str]] = assigned["assignments"]  # type: ignore[assignment]
    assert [i["device_id"] for i in items] == ["d1", "d2"]
    replies = w.on(topics.REPLIES)
    assert [(r["reply_to"], r["checkin_ids"]) for r in replies] == [
        ("gw-2", ["c-d3"]),
        ("gw-3", ["c-d4"]),
    ]
    # Replayed alone after a restart: deduplicated, nothing decided twice.
    assert w.intakes[topics.CHECKINS].many(records[:2]) == ["deduplicated"] * 2
    assert len(w.on(topics.ASSIGNMENTS)) == 1


def test_assignments_of_batches_together_stay_within_the_event_size_limit() -> None:
    """Many gateways' batches decided as one give more assignments than one event of
    VENN_MAX_EVENT_BYTES holds: several AssignmentBatches, each within the limit (what
    every reader decodes with), every assignment in exactly one, each read back."""
    w = Worker(max_bytes=4096)
    open_round(w, demand=60)
    records = [
        w.records.add(topics.CHECKINS, batch(f"b{g}", [f"d{g}-{i}" for i in range(6)], f"gw-{g}"))
        for g in range(10)
    ]
    assert w.intakes[topics.CHECKINS].many(records) == ["handled"] * 10
    sent = [v for t, _, v in w.sent if t == topics.ASSIGNMENTS]
    assert len(sent) > 1 and all(len(v) <= 4096 for v in sent)
    batches = [ev.decode(v, (ev.AssignmentBatch,), 4096) for v in sent]
    devices = [a.device_id for b in batches for a in ev.assignments_of(b)]
    assert sorted(devices) == sorted(f"d{g}-{i}" for g in range(10) for i in range(6))
    assert len({b.event_id for b in batches}) == len(batches)
    for value in sent:  # read back on the job's partition: each accounted once
        assert w.feed(topics.ASSIGNMENTS, value) == "handled"
