"""The decider's cycle (`services.scheduler.inputs`) without a broker: a fetch's records
handed on topic by topic and accounted in the ledger, offsets the log no longer holds
skipped, the ticks run when due, and the outputs sent only after the rows are durable,
again while the broker refuses them. On Apache Kafka the loop is checked by
tests/broker/test_scheduler_pipeline.py, test_failover.py and tests/e2e/test_ledger_chaos.py."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaTimeoutError, MessageSizeTooLargeError
from aiokafka.structs import ConsumerRecord

from services.scheduler.inputs import ORDER, DeciderLoop, Outbox, Tick, decided_offsets
from services.scheduler.state import SchedulerState
from services.scheduler.store import MemoryStore
from venn.broker import topics
from venn.broker.ledger import OffsetLedger
from venn.broker.stream import Record
from venn.settings import SchedulerSettings, Settings


class Seen:
    """An intake that notes what it was handed."""

    def __init__(self, order: list[str]) -> None:
        self.order = order

    def many(self, records: list[Record]) -> list[str]:
        self.order.extend(f"{r.topic}:{r.offset}" for r in records)
        return ["handled"] * len(records)


def record(topic: str, offset: int) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(topic, 0, offset, 0, 0, b"k", b"v", None, 1, 1, [])


def loop(order: list[str], ticks: list[Tick], store: Any = None) -> DeciderLoop:
    state = SchedulerState(SchedulerSettings(), store or MemoryStore())
    state.ensure_loaded(0.0)
    intakes: Any = {topic: Seen(order) for topic in ORDER}

    async def ready() -> None:
        return None

    async def send(topic: str, key: bytes | None, value: bytes) -> Any:
        raise AssertionError("nothing to send")

    return DeciderLoop(Settings(), state, intakes, Outbox(), send, OffsetLedger(), ticks, ready)


def test_a_fetch_is_handed_on_topic_by_topic_and_accounted() -> None:
    order: list[str] = []
    ticked: list[float] = []
    d = loop(order, [Tick(0.0, ticked.append)])
    for topic in ORDER:
        d.ledger.begin(topic, 0, 0)
    d.ledger.begin(topics.STATUS, 0, 5)
    fetched = {
        TopicPartition(topics.CHECKINS, 0): [
            record(topics.CHECKINS, 0),
            record(topics.CHECKINS, 1),
        ],
        TopicPartition(topics.JOBS, 0): [record(topics.JOBS, 0)],
        # A compacted topic: offsets 5-8 are gone from the log.
        TopicPartition(topics.STATUS, 0): [record(topics.STATUS, 9)],
    }
    d.cycle(fetched, 100.0)
    assert order == ["venn.jobs:0", "venn.checkins:0", "venn.checkins:1", "venn.status:9"]
    assert d.ledger.next_offset(topics.CHECKINS, 0) == 2
    assert d.ledger.next_offset(topics.JOBS, 0) == 1
    assert d.ledger.next_offset(topics.STATUS, 0) == 10
    assert len(ticked) == 1 and ticked[0] >= time.time() - 60  # the clock as the tick runs
    # Where the check-ins the tables decided end is a row of the cycle, as its decisions.
    assert decided_offsets(d.state.store) == {0: 2}


def test_decided_offsets_read_only_rows_of_check_in_partitions() -> None:
    store = MemoryStore()
    store.put_decided(b"venn.checkins:3", b"41")
    store.put_decided(b"venn.checkins:x", b"1")
    store.put_decided(b"venn.jobs:0", b"7")
    store.put_decided(b"venn.checkins:2", b"not an offset")
    assert decided_offsets(store) == {3: 41}


def test_outputs_wait_for_durable_rows_and_a_refused_one_is_sent_again() -> None:
    events: list[str] = []

    class SlowStore(MemoryStore):
        async def durable(self) -> None:
            await asyncio.sleep(0.01)
            events.append("durable")

    refused = [1]

    async def send(topic: str, key: bytes | None, value: bytes) -> Any:
        if value == b"huge":
            raise MessageSizeTooLargeError()
        events.append(f"send {value.decode()}")
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if value == b"b" and refused:
            refused.pop()
            done.set_exception(KafkaTimeoutError())
        else:
            done.set_result(None)
        return done

    async def main() -> None:
        d = loop([], [], SlowStore())
        d.send = send
        for value in (b"a", b"huge", b"b"):
            d.outbox.put("venn.assignments", None, value)
        await d.settle()

    asyncio.run(main())
    assert events == ["durable", "send a", "send b", "send b"]


def test_a_tick_waiting_for_a_topic_runs_only_once_the_decider_has_read_it_all() -> None:
    """The expiry of silent jobs: a decider catching up on a backlog of venn.jobs expired
    live jobs whose heartbeats it had not read yet (failover bench at 47639fb, run 20)."""
    ran: list[float] = []
    d = loop([], [Tick(0.0, ran.append, caught_up_on=topics.JOBS)])
    d.behind = {topics.JOBS}
    d.cycle({}, 100.0)
    assert ran == []
    d.behind = {topics.CHECKINS}
    d.cycle({}, 101.0)
    assert len(ran) == 1


async def test_a_loop_stuck_past_the_bound_is_reported_once_with_what_it_awaits(
    caplog: pytest.LogCaptureFixture,
) -> None:
    decider = loop([], [])
    never = asyncio.Event()

    async def waiting_on_the_broker() -> None:
        await never.wait()

    decider.task = asyncio.ensure_future(waiting_on_the_broker())
    try:
        decider.last_cycle = time.monotonic() - 5
        assert not decider.report_if_stuck(30.0)  # within the bound
        decider.last_cycle = time.monotonic() - 31
        with caplog.at_level(logging.WARNING, logger="services.scheduler.inputs"):
            assert decider.report_if_stuck(30.0)
            assert not decider.report_if_stuck(30.0)  # once per stall
        (report,) = caplog.records
        assert "waiting_on_the_broker" in report.getMessage()
        decider.last_cycle = time.monotonic() - 40  # a cycle ended, then a new stall
        assert decider.report_if_stuck(30.0)
    finally:
        decider.task.cancel()
