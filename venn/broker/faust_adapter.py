"""The one place where Venn touches Faust's and aiokafka's private state (faust-streaming
0.15.3, aiokafka 0.14): commits that follow what was handled, a batching producer for
outputs, the partition assignment of one decider with hot standbys (`OneDeciderAssignor`)
and the memory store that keeps them hot (`STANDBY_MEMORY_STORE`), and a consumer's
metadata refresh (`refresh_metadata`).

Faust made to commit only what was handled. docs/notes/faust-record-loss.md tells
the failures and the reproduction (tests/broker/test_faust_record_loss.py).

Faust commits the offsets its streams *acked*, and four of its paths ack, pass or drop
records that no agent handled:
1. `Recovery.on_recovery_completed` (and `_resume_streams`) seek the input partitions to
   their committed offsets while the fetcher runs, then call `flow_control.resume()`, which
   clears every stream buffer (`clear_on_resume`). Records fetched after the seek and
   delivered before the resume are dropped, yet `Consumer._read_offset` and the client's
   position have passed them: nothing fetches them again.
2. `Consumer._new_offset` commits past a hole at the head of the acked offsets when the
   hole is one record wide (`min(acked) - committed > 1`, off by one) or when the committed
   offset is 0 or unknown (`if committed_offset:`): the record dropped by 1 is committed
   once the record after it is acked.
3. `Stream._py_aiter` acks the records it skips (of an older consumer generation, or read
   while flow control is suspended), and `Consumer._drain_messages` sets the read offset of
   a delivery that a flow suspension cancelled.
4. `Consumer._drain_messages` drops a fetched record below the partition's read offset. A
   seek back resets the read offset, but a delivery still going through a fetch made
   before the seek can move it on again, and the records the seek brings are then
   dropped. CI showed what fits this: a `venn.checkins` partition whose ledger stayed at
   offset 38 while Faust's read offset went from 105 to 152, through the stall guard's
   refetch.

What this module does instead, for any Faust app built on `OffsetsApp`:
- The agents account for every record in the app's `OffsetLedger` (`records` and
  `account`); the commit of a partition is the ledger's lowest offset not accounted for,
  never what Faust's acks say (`LedgerConsumer._filter_committable_offsets`). Whatever
  Faust acks or skips, an unhandled record is never committed (2, 3).
- Each time the flow resumes (the buffers were just cleared), every input partition being
  fetched is sought to that lowest offset, so a cleared record comes again (1); a record
  delivered twice is recognised by the ledger and skipped by `records`.
- The ledger starts each assigned partition at its committed offset (the log's start when
  none is committed, or 0, which aiokafka's `seek_to_committed` does not seek to).
- An input's fetched record is never dropped for being below Faust's read offset
  (`ReadOffsets`, 4); one that comes twice is recognised by the ledger.

Also here: the consumer's fetch wait and gathering (`OffsetsApp(fetch_wait_ms=...,
fetch_gather_ms=...)`: Faust hard-codes
``fetch_max_wait_ms=1500``; Apache Kafka answers a parked fetch as soon as data arrives,
but Tansu keeps it parked for the whole wait, which put up to 1.5 s between a check-in and
its assignment), and, for the scheduler's stall watch: `fetch_state` and `resume_fetching` (a
partition Faust leaves out of its fetch set), and `restore_progress` (changelog partitions
a table recovery waits for).

Outputs (`OffsetsApp(output_errors=...)`, `send_output`).
On Tansu, Faust's own producer runs with ``producer_max_batch_size=1`` (its ListOffsets bug
makes table recovery drop the tail of a multi-record changelog batch). With one record per
batch, aiokafka holds one batch per partition until the next produce round trip and
Faust's buffer sends in order, so every output waited for a round trip: the scheduler
could not emit more than a few hundred messages a second, and check-in -> assignment
latency grew past 100 ms at 200 check-ins/s. Outputs (assignments, replies, dead letters)
are never recovered by Faust, so they go through a second producer with normal batching.
Faust flushes its producer before it commits offsets; ``flush()`` flushes both, so the
outputs stay at-least-once.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import aiokafka
import faust
from aiokafka.cluster import ClusterMetadata
from aiokafka.errors import MessageSizeTooLargeError
from faust import stores
from faust.assignor import PartitionAssignor
from faust.assignor.client_assignment import ClientAssignment
from faust.assignor.partition_assignor import MemberAssignmentMapping, MemberMetadataMapping
from faust.stores import memory
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP, TransportT

from venn.broker.ledger import OffsetLedger, Outcome
from venn.broker.stream import Record

log = logging.getLogger(__name__)


class _ConsumerThread(faust_aiokafka.AIOKafkaConsumerThread):
    def _create_worker_consumer(
        self, transport: faust_aiokafka.Transport
    ) -> aiokafka.AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        wait = getattr(self.app, "fetch_wait_ms", None)
        if wait is not None:
            # Read by AIOKafkaConsumer.start() when it builds its fetcher, i.e. after this.
            consumer._fetch_max_wait_ms = wait
        return consumer

    async def on_start(self) -> None:
        await super().on_start()
        gather_ms = getattr(self.app, "fetch_gather_ms", None)
        if gather_ms:
            gather_fetches(self._consumer, gather_ms / 1000)


def gather_fetches(consumer: aiokafka.AIOKafkaConsumer, gather_s: float) -> None:
    """After a fetch from a node brought records, send the next one to that node no sooner
    than ``gather_s`` after it: what arrives meanwhile comes in one response. Each fetch
    response wakes the consumer thread and the app's loop (about 2 ms of CPU, whatever it
    carries); records that trickle in one by one would each pay it. An idle consumer's fetch
    still parks at the broker and returns as soon as a record arrives, so the first record
    after a quiet spell waits for nothing, the next ones at most ``gather_s``."""
    fetcher = consumer._fetcher
    fetch = fetcher._proc_fetch_request
    brought: dict[int, float] = {}

    async def gathered(assignment: Any, node_id: int, request: Any) -> bool:
        wait = brought.get(node_id, -math.inf) + gather_s - time.monotonic()
        if wait > 0:
            try:
                await asyncio.sleep(wait)
            except asyncio.CancelledError:
                return False  # as aiokafka's own fetch does when cancelled
        got: bool = await fetch(assignment, node_id, request)
        if got:
            brought[node_id] = time.monotonic()
        return got

    # The fetcher's routine looks the method up on every fetch it sends.
    fetcher._proc_fetch_request = gathered


class ReadOffsets(dict[TP, int | None]):
    """Faust's read offsets (`Consumer._read_offset`), which its delivery loop reads to
    drop a fetched record below the last one delivered: never an input's record (failure
    4 of the module doc). Kept as Faust sets them, for the stall watch's log (`.get`)."""

    def __init__(self, is_input: Callable[[TP], bool]) -> None:
        super().__init__()
        self.is_input = is_input

    def __getitem__(self, tp: TP) -> int | None:
        return None if self.is_input(tp) else self.get(tp)


class LedgerConsumer(faust_aiokafka.Consumer):
    """Faust's aiokafka consumer, committing what the app's ledger accounted for."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_offset = ReadOffsets(self.is_input)
        self.undelivered: dict[str, int] = {}
        """Topic -> records of the fetch being delivered that no stream got yet."""

    def _new_consumer_thread(self) -> faust_aiokafka.AIOKafkaConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    @property
    def ledger(self) -> OffsetLedger:
        ledger: OffsetLedger = self.app.ledger  # type: ignore[attr-defined]
        return ledger

    def is_input(self, tp: TP) -> bool:
        """A partition of a topic an agent reads (not a table's changelog)."""
        return not self._is_changelog_tp(tp)

    # What a fetch still holds for the streams (`serve` hands them to a handler together).

    async def _wait_next_records(self, timeout: float) -> Any:
        got = await super()._wait_next_records(timeout)
        records = got[0]
        undelivered = self.undelivered
        undelivered.clear()
        for tp, found in (records or {}).items():
            undelivered[tp.topic] = undelivered.get(tp.topic, 0) + len(found)
        return got

    async def getmany(self, timeout: float) -> AsyncIterator[tuple[TP, Any]]:
        undelivered = self.undelivered
        try:
            async for tp, message in super().getmany(timeout):
                undelivered[tp.topic] = undelivered.get(tp.topic, 0) - 1
                yield tp, message
        finally:
            undelivered.clear()

    # Commits: the ledger's offsets (failures 2 and 3 of the module doc).

    def _filter_tps_with_pending_acks(self, topics: Any = None) -> Iterator[TP]:
        ledger = self.ledger
        return (
            tp
            for tp in self.assignment()
            if self.is_input(tp)
            and ledger.begun(tp.topic, tp.partition)
            and (topics is None or tp in topics or tp.topic in topics)
        )

    def _filter_committable_offsets(self, tps: Iterable[TP]) -> dict[TP, int]:
        # Faust's own bookkeeping is drained (its lists would grow) and its answer ignored.
        super()._filter_committable_offsets(list(self._acked))
        offsets: dict[TP, int] = {}
        for tp in tps:
            offset = self.ledger.next_offset(tp.topic, tp.partition)
            if offset is not None and self._should_commit(tp, offset):
                offsets[tp] = offset
        return offsets

    # Seeks run in the consumer's thread.

    async def _seek(self, partition: TP, offset: int) -> None:
        """Faust seeks from the app's thread, and aiokafka's seek drops the partition's
        fetched records, which the consumer thread's `Fetcher.fetched_records` may be
        reading: CI saw `KeyError` there on a restarted worker, Faust's Fetcher crashed and
        the worker read nothing more (tests/e2e/test_faults.py). In the consumer thread the
        two cannot interleave."""
        thread = self._thread

        async def seek() -> None:
            thread.seek(partition, offset)

        await thread.call_thread(seek)

    # Where accounting starts: the committed offsets, each time Faust seeks to them.

    async def seek_to_committed(self) -> Mapping[TP, int]:
        committed = await super().seek_to_committed()
        await self._begin(committed)
        return committed

    async def _begin(self, committed: Mapping[TP, int | None]) -> None:
        ledger = self.ledger
        todo = {
            tp: offset
            for tp, offset in committed.items()
            if self.is_input(tp) and not ledger.begun(tp.topic, tp.partition)
        }
        unknown = [tp for tp, offset in todo.items() if not offset]
        starts = dict(await self.earliest_offsets(*unknown)) if unknown else {}
        for tp, offset in todo.items():
            start = offset if offset else starts.get(tp, 0)
            ledger.begin(tp.topic, tp.partition, int(start))

    async def on_partitions_revoked(self, revoked: set[TP]) -> None:
        await super().on_partitions_revoked(revoked)  # commits what was handled first
        for tp in revoked:
            self.ledger.forget(tp.topic, tp.partition)

    # After every flow resume: fetch again from the lowest offset not handled (failure 1).

    def resume_flow(self) -> None:
        super().resume_flow()
        self.add_future(self._realign())

    async def _realign(self) -> None:
        ledger = self.ledger
        fetching = [
            tp
            for tp in self.assignment()
            if self.is_input(tp) and tp not in self._paused_partitions
        ]
        if not fetching:
            return
        try:
            if not all(ledger.begun(tp.topic, tp.partition) for tp in fetching):
                await self.perform_seek()  # the committed offsets (see seek_to_committed)
            for tp in fetching:
                offset = ledger.next_offset(tp.topic, tp.partition)
                if offset is not None and tp in self.assignment():
                    await self.seek(tp, offset)
        except Exception as exc:  # a rebalance meanwhile: its own resume realigns again
            log.warning("could not seek back to the lowest offsets not handled: %r", exc)

    # For the stall watch.

    def fetch_state(self, tp: TP) -> FetchState:
        """Is Faust fetching ``tp``? A partition whose stream buffer filled up is taken out
        of the fetch set (`on_buffer_full`) and put back when the buffer drains
        (`on_buffer_drop`); a buffer cleared by a flow resume never drains, so the
        partition can stay out for good."""
        return FetchState(
            fetched=tp in self._get_active_partitions(),
            paused=tp in self._paused_partitions,
            buffered=tp in self._buffered_partitions,
            read_offset=self._read_offset.get(tp),
        )

    def resume_fetching(self, tp: TP) -> None:
        """Put ``tp`` back into Faust's fetch set (see `fetch_state`)."""
        self._buffered_partitions.discard(tp)
        self.resume_partitions([tp])


@dataclass(frozen=True, slots=True)
class FetchState:
    fetched: bool
    paused: bool
    buffered: bool
    read_offset: int | None = None
    """Faust's, for the log (only a changelog's record below it is dropped: `ReadOffsets`)."""


def restore_progress(app: faust.App) -> dict[TP, tuple[int | None, int]]:
    """While ``app`` restores its tables: changelog partition -> (offset restored so far,
    records still to read). A changelog partition recovery waits for and reads nothing of
    holds every stream (faust-streaming issues 597, 651)."""
    recovery = app.tables.recovery  # type: ignore[attr-defined]
    return {
        tp: (recovery.active_offsets.get(tp), behind)
        for tp, behind in recovery.active_remaining().items()
    }


Part = tuple[str, int]
"""(topic, partition)."""


class FaustPartitions:
    """What the scheduler's stall guard (`services.scheduler.stall`) reads of, and does to,
    a running `OffsetsApp`: its assigned partitions, their high watermarks and ledger
    positions, Faust's fetch set, seeks, table recovery's progress, and a crash."""

    def __init__(self, app: OffsetsApp) -> None:
        self.app = app

    @property
    def consumer(self) -> LedgerConsumer:
        consumer = self.app.consumer
        assert isinstance(consumer, LedgerConsumer)
        return consumer

    def assigned(self, topics: Collection[str] | None = None) -> list[Part]:
        return [
            (tp.topic, tp.partition)
            for tp in self.consumer.assignment()
            if topics is None or tp.topic in topics
        ]

    def highwater(self, part: Part) -> int | None:
        """The partition's high watermark as last fetched; None before any fetch."""
        high: int | None = self.consumer.highwater(TP(*part))
        return high

    async def end_offsets(self, parts: Iterable[Part]) -> dict[Part, int]:
        """The broker's end offsets (for partitions not fetched yet)."""
        ends = await self.consumer.highwaters(*(TP(*part) for part in parts))
        return {(tp.topic, tp.partition): offset for tp, offset in ends.items()}

    def next_offset(self, part: Part) -> int | None:
        """The lowest offset the agents have not accounted for (`OffsetLedger`)."""
        ledger: OffsetLedger = self.app.ledger
        return ledger.next_offset(*part)

    def fetch_state(self, part: Part) -> FetchState:
        return self.consumer.fetch_state(TP(*part))

    def resume_fetching(self, part: Part) -> None:
        self.consumer.resume_fetching(TP(*part))

    async def seek(self, part: Part, offset: int) -> None:
        await self.consumer.seek(TP(*part), offset)

    @property
    def in_recovery(self) -> bool:
        return bool(self.app.in_recovery)

    def restoring(self) -> dict[Part, tuple[int | None, int]]:
        """`restore_progress` by (topic, partition)."""
        return {(tp.topic, tp.partition): v for tp, v in restore_progress(self.app).items()}

    async def crash(self, exc: BaseException) -> None:
        await self.app.crash(exc)


def recovered(app: faust.App) -> bool:
    """Has ``app`` restored its tables since its last assignment?"""
    recovery = app.tables.recovery  # type: ignore[attr-defined]
    return bool(recovery.completed.is_set())


def owned_partitions(app: faust.App, topic: str) -> set[int]:
    """The partitions of ``topic`` assigned to ``app``'s consumer now."""
    return {tp.partition for tp in app.consumer.assignment() if tp.topic == topic}


OUTPUT_MAX_BATCH_BYTES = 1 << 20
OUTPUT_LINGER_MS = 1


class OutputProducer(faust_aiokafka.Producer):
    """Faust's producer, plus ``send_output``: in-order sends through a second, batching
    producer (see "Outputs" in the module doc); errors go to the app's ``output_errors``."""

    _outputs: aiokafka.AIOKafkaProducer | None = None
    _sender: asyncio.Task[None] | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        self._pending: deque[tuple[str, bytes, bytes]] = deque()
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    def send_output(self, topic: str, key: bytes, value: bytes) -> None:
        """Queue one output message (to the key's partition); sent in call order, flushed
        before each commit."""
        self._pending.append((topic, key, value))
        self._idle.clear()
        self._wakeup.set()

    async def _send_outputs(self) -> None:
        outputs = self._outputs
        assert outputs is not None
        try:
            while True:
                await self._wakeup.wait()
                self._wakeup.clear()
                while self._pending:
                    topic, key, value = self._pending.popleft()
                    try:
                        # Appends to a batch.
                        await outputs.send(topic, value, key=key)
                    except MessageSizeTooLargeError:
                        # Outputs are bounded (venn.fields); one that is not must not stop
                        # every later one: count it, say which, go on.
                        self._output_error(topic, "too_large")
                        log.error("dropped an output of %d bytes to %s", len(value), topic)
                self._idle.set()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            # A sender that died quietly left flush() waiting forever and the worker silent
            # (issue 12, defect 1). Crash the worker instead: it exits, and a restarted one
            # resumes from the last committed offsets.
            self._output_error("any", type(exc).__name__)
            log.exception("the output sender failed; stopping the worker")
            self._idle.set()
            await self.crash(exc)

    def _output_error(self, topic: str, kind: str) -> None:
        report = getattr(self.app, "output_errors", None)
        if report is not None:
            report(topic, kind)

    async def flush(self) -> None:
        await super().flush()
        if self._outputs is None:
            return
        await self._idle.wait()
        await self._outputs.flush()

    async def on_start(self) -> None:
        await super().on_start()
        settings = {
            **self._settings_default(),
            **self._settings_auth(),
            "max_batch_size": OUTPUT_MAX_BATCH_BYTES,
            "linger_ms": OUTPUT_LINGER_MS,
        }
        settings["client_id"] = f"{settings['client_id']}-outputs"
        self._outputs = aiokafka.AIOKafkaProducer(**settings)
        await self._outputs.start()
        self._sender = asyncio.ensure_future(self._send_outputs())

    async def on_stop(self) -> None:
        if self._outputs is not None:
            await self.flush()
        if self._sender is not None:
            self._sender.cancel()
            await asyncio.gather(self._sender, return_exceptions=True)
            self._sender = None
        outputs, self._outputs = self._outputs, None
        if outputs is not None:
            await outputs.stop()
        await super().on_stop()


class _Transport(faust_aiokafka.Transport):
    Consumer = LedgerConsumer


class _OutputsTransport(faust_aiokafka.Transport):
    Consumer: ClassVar[Any] = LedgerConsumer
    Producer: ClassVar[Any] = OutputProducer


OutputErrors = Callable[[str, str], None]
"""(topic or "any", kind) of an output that could not be sent."""


class OffsetsApp(faust.App):  # type: ignore[misc]
    """A faust.App whose commits follow ``ledger`` (its agents read with `records` and
    `account` every record); its consumer waits at most ``fetch_wait_ms`` per fetch, and
    with ``fetch_gather_ms`` lets records gather that long between fetches that bring some
    (`gather_fetches`). With
    ``output_errors``, its producer is an `OutputProducer` (`send_output`), which reports
    there what it could not send."""

    def __init__(
        self,
        *args: Any,
        ledger: OffsetLedger | None = None,
        fetch_wait_ms: int | None = None,
        fetch_gather_ms: int | None = None,
        output_errors: OutputErrors | None = None,
        **kwargs: Any,
    ) -> None:
        self.ledger = ledger if ledger is not None else OffsetLedger()
        self.fetch_wait_ms = fetch_wait_ms
        self.fetch_gather_ms = fetch_gather_ms
        self.output_errors = output_errors
        super().__init__(*args, **kwargs)

    def _new_transport(self) -> TransportT:
        transport = _Transport if self.output_errors is None else _OutputsTransport
        return transport(self.conf.broker_consumer, self)


def send_output(app: faust.App, topic: str, key: bytes, value: bytes) -> None:
    """Queue an output of ``app`` (an `OffsetsApp` with ``output_errors``): not awaited;
    Faust flushes the producer before it commits offsets, so outputs stay at-least-once
    without a round trip per event."""
    producer = app.producer
    assert isinstance(producer, OutputProducer)
    producer.send_output(topic, key, value)


async def refresh_metadata(consumer: aiokafka.AIOKafkaConsumer) -> None:
    """Fetch the cluster's metadata into ``consumer`` now (its `partitions_for_topic`
    knows only the topics it has fetched metadata for)."""
    await consumer._client.force_metadata_update()


async def records(stream: faust.StreamT, ledger: OffsetLedger) -> AsyncIterator[faust.EventT]:
    """The stream's events, less the records ``ledger`` accounted for already (delivered
    again after a seek back)."""
    async for event in stream.events():
        message = event.message
        if not ledger.accounted(message.topic, message.partition, message.offset):
            yield event


SERVE_MOST = 64
"""Most records handed to an agent's handler at once."""


async def serve(
    stream: faust.StreamT,
    ledger: OffsetLedger,
    handle: Callable[[list[Record]], list[Outcome]],
    most: int = SERVE_MOST,
) -> None:
    """An agent's loop: the records of ``stream`` not accounted for yet, as the stream
    port's `Record`s, to ``handle``, together with those already fetched behind them (at
    most ``most``); each outcome it returns accounted in ``ledger``, in order.

    A record is accounted only once handled, so a commit (the ledger's next offset) never
    passes one still waiting for the rest of its group; Faust's own ack, which comes as
    the stream moves on, commits nothing here (`LedgerConsumer`). An agent whose handler
    writes table rows needs ``most=1``: Faust writes a row to the changelog partition of
    the event the stream yielded last."""
    waiting: list[Any] = []
    loop = asyncio.get_running_loop()
    timer: asyncio.TimerHandle | None = None

    def flush() -> None:
        nonlocal timer
        timer = None
        group = list(waiting)
        waiting.clear()
        if not group:
            return
        outcomes = handle([record_of(e.message, e.value) for e in group])
        for e, outcome in zip(group, outcomes, strict=True):
            account(ledger, e.message, outcome)

    def flush_late() -> None:
        # Unhandled, the group stays unaccounted: the stall guard fetches it again.
        try:
            flush()
        except Exception:
            log.exception("a group of %s records could not be handled", stream)

    async for event in records(stream, ledger):
        if timer is not None:
            timer.cancel()
            timer = None
        waiting.append(event)
        if len(waiting) < most and await fetched_behind(stream, event.message.topic):
            # The next record may never come: Faust skips a queued record of an older
            # generation or of a suspended flow (seen in CI: a restarted worker's only
            # check-in batch waited for the record after it until the test gave up).
            timer = loop.call_later(GROUP_WAIT_S, flush_late)
            continue
        flush()


GROUP_WAIT_S = 0.1
"""Longest a group waits for a record `fetched_behind` promised."""


BEHIND_WAIT_S = 0.005
"""Longest `fetched_behind` waits for the consumer to deliver a fetched record."""


async def fetched_behind(stream: faust.StreamT, topic: str) -> bool:
    """Whether more records of ``topic`` already fetched are on their way to ``stream``: in
    its queue, or still in the fetch the consumer delivers (it hands each record to the
    streams in a few turns of the loop, so the queue is most often empty between two)."""
    queue = getattr(stream.channel, "queue", None)
    consumer = stream.app.consumer
    if queue is None or not isinstance(consumer, LedgerConsumer):
        return False
    deadline = None
    while queue.empty():
        if consumer.undelivered.get(topic, 0) <= 0:
            return False
        now = time.monotonic()
        if deadline is None:
            deadline = now + BEHIND_WAIT_S
        elif now > deadline:
            return False
        await asyncio.sleep(0)
    return True


def record_of(message: Any, value: Any) -> Record:
    """The `Record` of a Faust message and its raw value."""
    return Record(
        message.topic,
        message.partition,
        message.offset,
        message.key,
        value if isinstance(value, bytes) else None,
        message.timestamp,
        message.timestamp_type or 0,
    )


def account(ledger: OffsetLedger, message: Any, outcome: Outcome) -> None:
    """What became of the record ``message`` (a Faust message)."""
    ledger.account(message.topic, message.partition, message.offset, outcome)


def choose_decider(members: Iterable[str], deciding: Iterable[str]) -> str:
    """The member that decides: the one deciding now if it is still a member (of several
    that say so after a split, the lowest id), else the lowest member id."""
    present = sorted(members)
    if not present:
        raise ValueError("no members to choose a decider from")
    current = sorted(set(deciding) & set(present))
    return current[0] if current else present[0]


class OneDeciderAssignor(PartitionAssignor):  # type: ignore[misc]
    """Every partition of every topic the group reads, tables' changelogs included, to one
    member, the decider (`choose_decider`: it stays the decider for as long as it is a
    member); every other member is a standby of every changelog partition, so Faust keeps
    its tables filled from the changelogs and a rebalance after the decider died makes it
    the decider. Faust's own assignor spreads partitions over the members instead, so that
    two workers would each decide for part of the check-ins and part of the jobs."""

    def _perform_assignment(
        self, cluster: ClusterMetadata, member_metadata: MemberMetadataMapping
    ) -> MemberAssignmentMapping:
        clients = {
            member: self._get_client_metadata(metadata)
            for member, metadata in member_metadata.items()
        }
        self._update_member_urls(clients)
        subscribed = {t for metadata in member_metadata.values() for t in metadata.subscription}
        partitions = {
            topic: sorted(cluster.partitions_for_topic(topic) or ()) for topic in subscribed
        }
        partitions = {topic: found for topic, found in partitions.items() if found}
        deciding = [m for m, c in clients.items() if _is_decider(c.assignment, partitions)]
        decider = choose_decider(member_metadata, deciding)
        changelogs = self._table_manager.changelog_topics
        assignments = {
            member: ClientAssignment(
                actives=dict(partitions) if member == decider else {},
                standbys={}
                if member == decider
                else {t: p for t, p in partitions.items() if t in changelogs},
            )
            for member in member_metadata
        }
        # Faust numbers co-partitioned topic groups by partition count (the transactional
        # ids of exactly-once use them); the same numbering here.
        counts = sorted({len(p) for p in partitions.values()})
        groups = {topic: counts.index(len(p)) for topic, p in partitions.items()}
        return self._protocol_assignments(  # type: ignore[no-any-return]
            assignments,
            self._get_changelog_distribution(assignments),
            self._get_external_topic_distribution(assignments),
            groups,
        )

    def deciding(self) -> bool:
        """Does this member hold the active partitions (after the last assignment)?"""
        return bool(self._assignment.actives)


def _is_decider(assignment: ClientAssignment, partitions: Mapping[str, list[int]]) -> bool:
    return any(assignment.actives.get(topic) for topic in partitions)


class StandbyMemoryStore(memory.Store):  # type: ignore[misc]
    """Faust's memory store, kept hot on a standby. Faust's own reports no offset it has
    read a changelog partition to, so a standby promoted to active reads the whole
    changelog again, and it drops the rows of every partition that is not active once a
    recovery completes, standbys' included. This one remembers the last changelog offset
    it applied or its table wrote per partition and keeps the rows of standby partitions
    too, so a promoted standby reads only the changelog's tail (as Faust's RocksDB store
    does). Rows and offsets of a partition that is neither active nor standby are dropped
    together: a partition assigned again later is read from its start."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self._offsets: dict[TP, int] = {}

    def apply_changelog_batch(
        self,
        batch: Iterable[faust.EventT],
        to_key: Callable[[Any], Any],
        to_value: Callable[[Any], Any],
    ) -> None:
        events = list(batch)
        super().apply_changelog_batch(events, to_key, to_value)
        for event in events:
            self.set_persisted_offset(event.message.tp, event.message.offset)

    def persisted_offset(self, tp: TP) -> int | None:
        return self._offsets.get(tp)

    def set_persisted_offset(self, tp: TP, offset: int) -> None:
        self._offsets[tp] = max(offset, self._offsets.get(tp, offset))

    async def on_recovery_completed(self, active_tps: set[TP], standby_tps: set[TP]) -> None:
        kept = {tp.partition for tp in (*active_tps, *standby_tps)}
        for key, partition in list(self._key_partition.items()):
            if partition not in kept:
                self.data.pop(key, None)
                self._key_partition.pop(key, None)
        for tp in [tp for tp in self._offsets if tp.partition not in kept]:
            del self._offsets[tp]


STANDBY_MEMORY_STORE = "venn-memory://"
"""The store URL of `StandbyMemoryStore` (Faust finds stores by the URL's scheme)."""
stores.STORES.aliases["venn-memory"] = f"{__name__}:StandbyMemoryStore"
