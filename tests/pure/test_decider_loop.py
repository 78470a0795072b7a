"""The decider's cycle (`services.scheduler.inputs`) without a broker: a fetch's records
handed on topic by topic and accounted in the ledger, offsets the log no longer holds
skipped, the ticks run when due, and the outputs sent only after the rows are durable,
again while the broker refuses them. On Apache Kafka the loop is checked by
tests/broker/test_scheduler_pipeline.py, test_failover.py and tests/e2e/test_ledger_chaos.py."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import pytest
from aiokafka import TopicPartition
from aiokafka.errors import KafkaTimeoutError, MessageSizeTooLargeError
from aiokafka.structs import ConsumerRecord

from services.scheduler.inputs import (
    CATCH_UP,
    ORDER,
    DeciderLoop,
    Outbox,
    Tick,
    decided_offsets,
)
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


def record(topic: str, offset: int, partition: int = 0) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord(topic, partition, offset, 0, 0, b"k", b"v", None, 1, 1, [])


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


class Logs:
    """The consumer calls `catch_up` makes, over logs in memory; a fetch brings at most one
    record of each partition it is asked for (every partition when asked for none), so the
    catch-up takes several cycles."""

    def __init__(self, logs: dict[TopicPartition, int]) -> None:
        self.logs = {
            tp: [record(tp.topic, i, tp.partition) for i in range(n)] for tp, n in logs.items()
        }
        self.at = dict.fromkeys(logs, 0)

    async def end_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {tp: len(self.logs[tp]) for tp in tps}

    async def position(self, tp: TopicPartition) -> int:
        return self.at[tp]

    async def getmany(
        self, *tps: TopicPartition, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord[bytes, bytes]]]:
        fetched = {}
        for tp in tps or tuple(self.logs):
            if self.at[tp] < len(self.logs[tp]):
                fetched[tp] = [self.logs[tp][self.at[tp]]]
                self.at[tp] += 1
        return fetched

    def assignment(self) -> set[TopicPartition]:
        return set(self.logs)


async def test_a_new_decider_reads_jobs_rounds_and_results_to_their_ends_before_a_checkin() -> None:
    """Ledger chaos beside two busy loops (CI of 18b8dbd): a successor decided check-ins
    before it read the close of a round its predecessor had filled, published that round's
    assignments again, and filled it anew: 12 assignments for a demand of 8."""
    order: list[str] = []
    d = loop(order, [])
    logs = {
        TopicPartition(topics.JOBS, 1): 2,
        TopicPartition(topics.ROUNDS, 0): 3,
        TopicPartition(topics.RESULTS, 2): 1,
        TopicPartition(topics.CHECKINS, 0): 4,
        TopicPartition(topics.STATUS, 0): 1,
    }
    for tp in logs:
        d.ledger.begin(tp.topic, tp.partition, 0)
    consumer: Any = Logs(logs)
    assert await d.catch_up(consumer, list(logs)) == 6
    assert sorted(order) == sorted(
        [f"{tp.topic}:{i}" for tp, n in logs.items() if tp.topic in CATCH_UP for i in range(n)]
    )
    # Check-ins (and what follows them in a cycle) wait, unread, for the decider's loop.
    assert consumer.at[TopicPartition(topics.CHECKINS, 0)] == 0
    assert consumer.at[TopicPartition(topics.STATUS, 0)] == 0
    # What it read is settled: the committer may commit it.
    assert d.offsets.settled[TopicPartition(topics.ROUNDS, 0)] == 3
    assert d.offsets.settled.get(TopicPartition(topics.CHECKINS, 0), 0) == 0


async def test_a_catch_up_with_nothing_to_read_fetches_nothing() -> None:
    d = loop([], [])
    consumer: Any = Logs({TopicPartition(topics.JOBS, 0): 0, TopicPartition(topics.CHECKINS, 0): 2})
    assert await d.catch_up(consumer, list(consumer.logs)) == 0
    assert consumer.at[TopicPartition(topics.CHECKINS, 0)] == 0


async def test_a_loop_ended_by_a_cancellation_it_did_not_ask_for_starts_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A future cancelled under the loop (not the loop's task) must not end it: the worker
    would stay the decider and decide nothing; and `stop` must not hand that cancellation
    to the rebalance callback that awaits it (see faust_adapter.contain_cancellation)."""
    d = loop([], [])
    runs: list[int] = []

    async def _loop() -> None:
        runs.append(1)
        if len(runs) == 1:
            cancelled: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            cancelled.cancel()
            await cancelled
        await d.stopping.wait()

    d._loop = _loop  # type: ignore[method-assign]
    with caplog.at_level(logging.WARNING, logger="services.scheduler.inputs"):
        d.start()
        deadline = time.monotonic() + 10
        while len(runs) < 2:
            assert time.monotonic() < deadline, "the loop did not start again"
            await asyncio.sleep(0.05)
        assert d.running
        await d.stop()
    assert "did not ask for" in caplog.text
    assert not d.running

    # A loop task that ended cancelled before the stop: the stop returns.
    d2 = loop([], [])
    cancelled_task = asyncio.ensure_future(asyncio.sleep(60))
    await asyncio.sleep(0)
    cancelled_task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await cancelled_task
    d2.task = cancelled_task
    await d2.stop()  # returns: the cancellation was the task's, not this caller's
