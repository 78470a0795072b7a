"""The decider's stream edge. While this worker decides, one aiokafka consumer reads every
partition of every input topic (manual assignment, public API, in the worker's own event
loop), and one loop turns each fetch into a cycle:

1. the fetch's records, topic by topic (jobs, rounds, results, check-ins, then the topics
   read only to dead-letter a bad record), each to its topic's `Intake`; every record
   ends with an outcome in the offset ledger;
2. the ticks that are due: the expiry of silent jobs, the status snapshot;
3. the cycle's table rows made durable (`SchedulerStore.durable`);
4. only then the cycle's outputs sent (decisions, expiries, dead letters, status), and
   their acknowledgements awaited;
5. the offsets the ledger accounted for, now settled, handed to the committer, which
   commits what changed to the group ``<app_id>-inputs`` every
   VENN_SCHEDULER_COMMIT_INTERVAL_S (off the cycle's path) and when the loop stops.

A decision's effects are so in the state before the next decision and in the changelog
before anyone can see the decision, and a commit passes only records whose effects and
outputs the broker holds. A successor restores the tables to their end, which holds at
least the effects of every committed record, and reads again the records after the last
commit, with two exceptions that make a check-in decided at most once:

- the ``decided`` rows, written with each cycle's rows, say per check-in partition where
  the check-ins whose decisions the tables hold end; the successor starts its check-ins
  there, not at the commit. (Read again, a check-in whose assignment a later decision
  undid, its job expired, would be decided afresh: its device assigned twice.) A
  check-in of a cycle whose rows did not all land may so be skipped: its gateway answers
  it when its wait ends, as for any check-in not decided in time;
- unless the predecessor stopped cleanly (`STOP_KEY`), every assignment the restored
  rows say a device holds is published again, with its id: the predecessor may have died
  after the rows were durable and before they went out. A reader that had it takes it
  once; a gateway that answered that check-in without it releases the device
  (DeviceResult ``undelivered``).

Before either, the successor reads the jobs, rounds and results to the ends their logs
have when it takes over (`DeciderLoop.catch_up`): what it publishes again and the check-ins
it decides then see every round its predecessor's inputs closed. A successor that decided
check-ins first kept a round its predecessor had seen close open, published that round's
assignments again, and filled it anew when the devices that had run them answered with
failures (ledger chaos beside two busy loops, CI of 18b8dbd: 12 assignments for a demand
of 8).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError, MessageSizeTooLargeError
from aiokafka.structs import ConsumerRecord, OffsetAndMetadata

from services.scheduler import metrics
from services.scheduler.intake import Intake
from services.scheduler.state import SchedulerState
from services.scheduler.store import SchedulerStore
from venn.aio import being_cancelled
from venn.broker import publish, topics
from venn.broker.ledger import OffsetLedger
from venn.broker.stream import Record, record_of
from venn.diagnostics import task_stacks
from venn.settings import Settings

log = logging.getLogger(__name__)

ORDER = (
    topics.JOBS,
    topics.ROUNDS,
    topics.RESULTS,
    topics.CHECKINS,
    topics.ASSIGNMENTS,
    topics.REVOCATIONS,
    topics.REPLIES,
    topics.STATUS,
)
"""The topics the decider reads, in the order a cycle hands them on: a round opened or a
device released in a fetch can take that fetch's check-ins."""

CATCH_UP = ORDER[: ORDER.index(topics.CHECKINS)]
"""What a new decider reads to the logs' ends before it decides a check-in or publishes
again what devices hold: the jobs, rounds and results its predecessor may not have read."""

SEND_RETRY_S = 1.0
ACK_WAIT_S = 15.0
STOP_TIMEOUT_S = 15.0


def decided_key(partition: int) -> bytes:
    return f"{topics.CHECKINS}:{partition}".encode()


def decided_offsets(store: SchedulerStore) -> dict[int, int]:
    """Check-in partition -> the offset after the last check-in the tables decided."""
    found: dict[int, int] = {}
    for key, row in store.decided_rows():
        if not isinstance(key, bytes) or not isinstance(row, bytes):
            continue  # not a row of this table: the commit says where to start
        topic, _, partition = key.decode(errors="replace").rpartition(":")
        if topic == topics.CHECKINS and partition.isdigit() and row.isdigit():
            found[int(partition)] = int(row)
    return found


STOP_KEY, CLEAN, RUNNING = b"stop", b"clean", b"running"
"""A row of the ``decided`` table: ``clean`` once a decider stopped with every output
acknowledged (a rebalance, a SIGTERM); ``running`` while one decides. A successor that
finds ``running`` (its predecessor died) publishes again what the rows say devices hold."""


def stopped_cleanly(store: SchedulerStore) -> bool:
    return dict(store.decided_rows()).get(STOP_KEY) == CLEAN


def inputs_group(app_id: str) -> str:
    """The group the decider commits its input offsets to (it joins no group: the workers'
    Faust group says which one decides)."""
    return f"{app_id}-inputs"


@dataclass
class Tick:
    """Work due every ``interval_s`` between cycles; what it returns is published."""

    interval_s: float
    run: Callable[[float], object]
    last: float = 0.0
    caught_up_on: str | None = None
    """Run only while the decider has read every record of this topic that it knows of. A
    job's silence is not established while its heartbeats may wait unread: a decider
    catching up on a backlog expired live jobs (failover bench at 47639fb, run 20)."""


Send = Callable[[str, bytes | None, bytes], Awaitable[Any]]
"""(topic, key, value) -> the send's delivery (awaited for its acknowledgement)."""


class Outbox:
    """The outputs of one cycle, sent after its table rows are durable."""

    def __init__(self) -> None:
        self.pending: list[tuple[str, bytes | None, bytes]] = []

    def put(self, topic: str, key: bytes | None, value: bytes) -> None:
        self.pending.append((topic, key, value))

    async def send(self, send: Send) -> None:
        """Send every pending output, in order, and await the broker's acknowledgements;
        an output the broker refused is sent again (readers dedupe by event id)."""
        while self.pending:
            todo, self.pending = self.pending, []
            sent = []
            for topic, key, value in todo:
                try:
                    sent.append(((topic, key, value), await send(topic, key, value)))
                except MessageSizeTooLargeError:
                    # Outputs are bounded (venn.fields); one that is not must not stop every
                    # later one: count it, say which, go on.
                    metrics.OUTPUT_ERRORS.labels(topic, "too_large").inc()
                    log.error("dropped an output of %d bytes to %s", len(value), topic)
            for message, delivery in sent:
                try:
                    # Not acknowledged in this long (its leader died under it): sent again;
                    # readers dedupe by event id.
                    await asyncio.wait_for(asyncio.shield(delivery), ACK_WAIT_S)
                except (KafkaError, TimeoutError) as exc:
                    metrics.OUTPUT_ERRORS.labels(message[0], type(exc).__name__).inc()
                    log.warning("output to %s refused (%r): sending it again", message[0], exc)
                    self.pending.append(message)
            if self.pending:
                await asyncio.sleep(SEND_RETRY_S)


class InputOffsets:
    """What the decider may commit of its inputs, and its commits to `inputs_group`."""

    def __init__(self, ledger: OffsetLedger) -> None:
        self.ledger = ledger
        self.settled: dict[TopicPartition, int] = {}
        """Partition -> the offset after the last record whose effects and outputs the
        broker holds: what may be committed."""
        self.committed: dict[TopicPartition, int] = {}

    def settle(self, consumer: AIOKafkaConsumer) -> None:
        """Every record accounted so far has its effects and outputs at the broker."""
        for tp in consumer.assignment():
            offset = self.ledger.next_offset(tp.topic, tp.partition)
            if offset is not None:
                self.settled[tp] = offset

    async def commit_every(self, consumer: AIOKafkaConsumer, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            await self.commit(consumer)

    async def commit(self, consumer: AIOKafkaConsumer) -> None:
        """Commit the settled offsets that moved since the last commit."""
        offsets = {
            tp: OffsetAndMetadata(offset, "")
            for tp, offset in self.settled.items()
            if self.committed.get(tp) != offset
        }
        if not offsets:
            return
        try:
            await consumer.commit(offsets)
        except KafkaError as exc:  # the next commit carries these offsets too
            log.warning("input offsets not committed: %r", exc)
            return
        self.committed.update({tp: meta.offset for tp, meta in offsets.items()})


class DeciderLoop:
    def __init__(
        self,
        settings: Settings,
        state: SchedulerState,
        intakes: dict[str, Intake],
        outbox: Outbox,
        send: Send,
        ledger: OffsetLedger,
        ticks: Sequence[Tick],
        ready: Callable[[], Awaitable[object]],
        crash: Callable[[BaseException], Awaitable[object]] | None = None,
    ) -> None:
        self.settings = settings
        self.state = state
        self.intakes = intakes
        self.outbox = outbox
        self.send = send
        self.ledger = ledger
        self.ticks = ticks
        self.ready = ready
        self.crash = crash
        """Stops the worker on a failure that is not the broker's (a bug): a standby, or this
        worker restarted, takes over from the committed offsets."""
        self.task: asyncio.Task[None] | None = None
        self.stopping = asyncio.Event()
        self.last_cycle = time.monotonic()
        """When the loop last finished a cycle (monotonic), for /healthz."""
        self.offsets = InputOffsets(ledger)
        self.behind: set[str] = set()
        """Topics with records the last fetch knew of and the loop has not read yet."""
        self.failed: BaseException | None = None
        self.reported_stall = 0.0
        """The `last_cycle` of the stall last reported."""

    # -- lifecycle ---------------------------------------------------------------------
    def start(self) -> None:
        """Run the loop (the worker became the decider, its tables restored)."""
        if self.task is not None and not self.task.done():
            return
        log.info("deciding")
        self.stopping = asyncio.Event()
        self.last_cycle = time.monotonic()
        self.task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        """Finish the cycle under way (its rows, outputs and commit) and stop."""
        task, self.task = self.task, None
        if task is None:
            return
        self.stopping.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), STOP_TIMEOUT_S)
        except TimeoutError:
            log.warning("the decider's loop did not stop in %.0f s; cancelled", STOP_TIMEOUT_S)
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        except asyncio.CancelledError:
            if being_cancelled():
                raise
            # Raised out of a rebalance callback, a CancelledError ends aiokafka's group
            # coordination for good (it catches only Exception): no rejoin, no decisions.
            log.warning("the decider's loop had ended cancelled")
        except Exception:
            pass  # logged by the task
        self.state.invalidate()

    @property
    def running(self) -> bool:
        return self.task is not None and not self.task.done()

    async def _run(self) -> None:
        while not self.stopping.is_set():
            try:
                await self._loop()
                return
            except asyncio.CancelledError:
                if being_cancelled() or self.stopping.is_set():
                    raise
                # A future the loop awaited was cancelled under it (not the loop): a loop
                # ended by it would leave this worker the decider, deciding nothing.
                log.warning("the decider's loop met a cancellation it did not ask for; again")
                self.state.invalidate()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), SEND_RETRY_S)
            except KafkaError as exc:  # the broker away or moving: read again from the commit
                log.warning("the decider's loop lost the broker (%r); starting it again", exc)
                self.state.invalidate()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), SEND_RETRY_S)
            except Exception as exc:
                self.failed = exc
                log.exception("the decider's loop failed; stopping the worker")
                if self.crash is not None:
                    await self.crash(exc)
                raise

    # -- the loop ----------------------------------------------------------------------
    def _consumer(self) -> AIOKafkaConsumer:
        settings = self.settings
        return AIOKafkaConsumer(
            bootstrap_servers=settings.broker,
            client_id=f"{settings.app_id}-decider",
            group_id=inputs_group(settings.app_id),
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=settings.scheduler_fetch_wait,
            **settings.kafka_options,
        )

    async def _loop(self) -> None:
        await self.ready()
        settings = self.settings
        consumer = self._consumer()
        await consumer.start()
        try:
            parts = [
                TopicPartition(topic, p)
                for topic in ORDER
                for p in range(settings.topic_partitions)
            ]
            consumer.assign(parts)
            upto = decided_offsets(self.state.store)
            ends = await consumer.end_offsets([tp for tp in parts if tp.topic == topics.CHECKINS])
            for tp in parts:
                at = await consumer.position(tp)
                if tp in ends and tp.partition in upto:
                    past = min(upto[tp.partition], ends[tp])
                    if past > at:
                        consumer.seek(tp, past)
                        metrics.SKIPPED_DECIDED.inc(past - at)
                        at = past
                self.ledger.forget(tp.topic, tp.partition)
                self.ledger.begin(tp.topic, tp.partition, at)
            self.offsets = InputOffsets(self.ledger)
            now = time.time()
            self.state.rebuild(now)
            stopped_clean = stopped_cleanly(self.state.store)
            self.state.store.put_decided(STOP_KEY, RUNNING)
            await self.state.store.durable()  # a death from here on is not a clean stop
            self.behind = set(ORDER)  # until the first fetch says how far the logs go
            await self.catch_up(consumer, parts)
            if not stopped_clean:
                for batch in self.state.held_assignments(time.time()):
                    self.outbox.put(topics.ASSIGNMENTS, *publish.message(topics.ASSIGNMENTS, batch))
                    metrics.ANNOUNCED_AGAIN.inc(len(batch.assignments))
                await self.outbox.send(self.send)
            committer = asyncio.ensure_future(
                self.offsets.commit_every(consumer, settings.scheduler.commit_interval_s)
            )
            metrics.DECIDING.set(1)
            gather_s = settings.scheduler.gather_ms / 1000
            most = settings.scheduler.decide_together
            while not self.stopping.is_set():
                fetched = await consumer.getmany(timeout_ms=self._wait_ms(), max_records=most)
                brought = time.monotonic()
                gathering = bool(fetched) and gather_s > 0
                if gathering:
                    # No fetch until the gathering ends: one fetch then brings what came
                    # meanwhile, from every partition. (aiokafka sends no fetch to a broker
                    # while some of its partitions hold records not read yet, and builds the
                    # next one without those: a record behind them waited for that fetch's
                    # full wait, 500 ms on Kafka.) Records it fetched for a paused partition
                    # are dropped, not returned, and fetched again.
                    consumer.pause(*parts)
                self.cycle(fetched, time.time())
                decided = time.monotonic()
                await self.state.store.durable()
                durable = time.monotonic()
                await self.outbox.send(self.send)
                sent = time.monotonic()
                if fetched:
                    metrics.CYCLE.labels("decide").observe(decided - brought)
                    metrics.CYCLE.labels("rows_durable").observe(durable - decided)
                    metrics.CYCLE.labels("outputs_acked").observe(sent - durable)
                self.offsets.settle(consumer)
                self._observe_lag(consumer)
                self.last_cycle = time.monotonic()
                if gathering:
                    # What arrives meanwhile comes in the next fetch: a wake-up costs about
                    # 2 ms of CPU whatever it carries (docs/results/fleet.md).
                    left = brought + gather_s - time.monotonic()
                    if left > 0:
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(self.stopping.wait(), left)
                    consumer.resume(*parts)
            await self.settle()
            self.offsets.settle(consumer)
            committer.cancel()
            await asyncio.gather(committer, return_exceptions=True)
            await self.offsets.commit(consumer)
            # Every output acknowledged: the next decider has nothing to publish again.
            self.state.store.put_decided(STOP_KEY, CLEAN)
            await self.state.store.durable()
        finally:
            metrics.DECIDING.set(0)
            await consumer.stop()

    async def catch_up(self, consumer: AIOKafkaConsumer, parts: list[TopicPartition]) -> int:
        """Read the `CATCH_UP` topics to the ends they have now, in cycles of their own, while
        check-ins wait in their partitions (see the module's docstring); the records read."""
        control = [tp for tp in parts if tp.topic in CATCH_UP]
        ends = await consumer.end_offsets(control)
        started, read = time.monotonic(), 0
        while not self.stopping.is_set():
            todo = [tp for tp in control if await consumer.position(tp) < ends[tp]]
            if not todo:
                break
            most = self.settings.scheduler.decide_together
            fetched = await consumer.getmany(*todo, timeout_ms=1000, max_records=most)
            read += sum(len(records) for records in fetched.values())
            self.cycle(fetched, time.time())
            await self.settle()
            self.offsets.settle(consumer)
        log.info("caught up: %d records in %.2f s", read, time.monotonic() - started)
        return read

    def _wait_ms(self) -> int:
        now = time.monotonic()
        due = min((t.last + t.interval_s for t in self.ticks), default=now + 1.0)
        return max(0, min(int((due - now) * 1000), 1000))

    def cycle(
        self, fetched: dict[TopicPartition, list[ConsumerRecord[Any, Any]]], now: float
    ) -> None:
        """Hand the fetch's records on, topic by topic, and run the ticks that are due."""
        ledger = self.ledger
        for topic in ORDER:
            parts = sorted((tp for tp in fetched if tp.topic == topic), key=lambda tp: tp.partition)
            if not parts:
                continue
            records: list[Record] = []
            for tp in parts:
                got = fetched[tp]
                start = ledger.next_offset(tp.topic, tp.partition)
                if start is not None and got and got[0].offset > start:
                    # Offsets the log no longer holds (compaction, transaction markers).
                    ledger.absent(tp.topic, tp.partition, got[0].offset)
                records.extend(record_of(r) for r in got)
            outcomes = self.intakes[topic].many(records)
            for record, outcome in zip(records, outcomes, strict=True):
                ledger.account(record.topic, record.partition, record.offset, outcome)
            if topic == topics.CHECKINS:
                for tp in parts:
                    upto = ledger.next_offset(tp.topic, tp.partition)
                    if upto is not None:
                        self.state.store.put_decided(decided_key(tp.partition), b"%d" % upto)
        clock = time.monotonic()
        for tick in self.ticks:
            if tick.caught_up_on in self.behind:
                continue
            if clock - tick.last >= tick.interval_s:
                tick.last = clock
                # The clock now, not the fetch's: the intakes stamp what they decide with
                # theirs, and an expiry decided after a check-in must not say it came first.
                tick.run(max(now, time.time()))
        self.state.settle()

    async def settle(self) -> None:
        """The cycle's rows durable, then its outputs sent and acknowledged."""
        await self.state.store.durable()
        await self.outbox.send(self.send)

    def _observe_lag(self, consumer: AIOKafkaConsumer) -> None:
        behind = set()
        for tp in consumer.assignment():
            high = consumer.highwater(tp)
            at = self.ledger.next_offset(tp.topic, tp.partition)
            if high is not None and at is not None:
                metrics.LAG.labels(tp.topic, str(tp.partition)).set(max(0, high - at))
                if high > at:
                    behind.add(tp.topic)
        self.behind = behind

    def stalled_s(self) -> float:
        """Seconds since the running loop last finished a cycle (0 when not running)."""
        return time.monotonic() - self.last_cycle if self.running else 0.0

    def report_if_stuck(self, after_s: float) -> bool:
        """Log once per stall, past ``after_s``, what every task awaits (the CI of f39b3bf:
        a worker decided nothing for 4 minutes after a Kafka node's SIGKILL, and its log
        did not say where it waited)."""
        stalled = self.stalled_s()
        if stalled <= after_s or self.reported_stall == self.last_cycle:
            return False
        self.reported_stall = self.last_cycle
        log.warning(
            "the decider's loop has not finished a cycle for %.0f s; the tasks:\n%s",
            stalled,
            task_stacks(),
        )
        return True
