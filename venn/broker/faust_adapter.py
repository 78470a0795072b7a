"""Venn's seat on Faust (faust-streaming 0.15.3): the one module that names Faust's or
aiokafka's private API (tests/pure/test_layering.py holds it).

What Faust does for the scheduler: it runs the worker (process, web server, signals); it
holds the scheduler's state in tables with changelog topics, restores them when a worker
is given their partitions and keeps a standby's copies hot; and its consumer group elects
the one worker that decides (`OneDeciderAssignor`).

What it does not do is read the scheduler's inputs. Faust's stream path (the consumer
thread, stream buffers, flow control, acks) delivered records its agents never handled
and committed past them (docs/notes/faust-record-loss.md); keeping it sound took a
patch-set of about 1,340 lines around its internals. The decider reads its inputs with its
own aiokafka consumer instead (`services.scheduler.inputs`, public API only), and writes
its tables from there: a `DecisionTable` writes each row to the changelog partition of its
key, needs no current event, and says when the broker has every row written so far
(`DecisionTable.durable`), so that the decider publishes a decision only once its effects
would survive it (docs/architecture.md, "The decider's stream edge").
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

import faust
from aiokafka import AIOKafkaConsumer
from aiokafka.cluster import ClusterMetadata
from faust import stores
from faust.assignor import PartitionAssignor
from faust.assignor.client_assignment import ClientAssignment
from faust.assignor.partition_assignor import MemberAssignmentMapping, MemberMetadataMapping
from faust.stores import memory
from faust.transport import drivers
from faust.transport.drivers import aiokafka as faust_kafka
from faust.types import TP

from venn.aio import being_cancelled
from venn.diagnostics import task_stacks

log = logging.getLogger(__name__)

WRITE_ACK_S = 15.0
WRITE_RETRY_S = 1.0
"""Pause before a changelog write the broker refused is sent again."""


class DecisionTable(faust.Table):  # type: ignore[misc]
    """A table of bytes that one decider writes from its own loop.

    Each row goes to the changelog partition of its key (Faust's ``use_partitioner``), as
    Kafka Streams does: one key's writes stay in order in one partition, whatever event
    caused them, and no current Faust event is needed. Each write is kept until `durable`
    has seen the broker acknowledge it; one the broker refused is sent again."""

    def __init__(self, app: faust.App, *, name: str, partitions: int) -> None:
        super().__init__(
            app,
            name=name,
            key_type=bytes,
            value_type=bytes,
            partitions=partitions,
            use_partitioner=True,
            beacon=app.tables.beacon,
        )
        self.unacked: list[tuple[bytes, bytes | None, asyncio.Future[Any]]] = []

    def on_key_set(self, key: bytes, value: bytes) -> None:
        self.unacked.append((key, value, self.send_changelog(None, key, value)))

    def on_key_del(self, key: bytes) -> None:
        self.unacked.append(
            (key, None, self.send_changelog(None, key, None, value_serializer="raw"))
        )

    async def durable(self) -> None:
        """Return once the broker has acknowledged every write made so far."""
        while self.unacked:
            writes, self.unacked = self.unacked, []
            failed = []
            for key, value, sent in writes:
                try:
                    # Not acknowledged in this long (a leader died under it, seen stuck in
                    # test_faults' broker kill): sent again; a changelog read twice is the same.
                    await asyncio.wait_for(asyncio.shield(sent), WRITE_ACK_S)
                except Exception as exc:
                    log.warning("changelog write of %s refused (%r); sending it again", key, exc)
                    failed.append((key, value))
            if failed:
                await asyncio.sleep(WRITE_RETRY_S)
                for key, value in failed:
                    if value is None:
                        self.on_key_del(key)
                    else:
                        self.on_key_set(key, value)


def choose_decider(members: Iterable[str], deciding: Iterable[str]) -> str:
    """The member that decides: the one deciding now if it is still a member (of several
    that say so after a split, the lowest id), else the lowest member id."""
    present = sorted(members)
    if not present:
        raise ValueError("no members to choose a decider from")
    current = sorted(set(deciding) & set(present))
    return current[0] if current else present[0]


class OneDeciderAssignor(PartitionAssignor):  # type: ignore[misc]
    """Every partition the group reads (the tables' changelogs) to one member, the decider
    (`choose_decider`: it stays the decider for as long as it is a member); every other
    member is a standby of every changelog partition, so Faust keeps its tables filled
    and a rebalance after the decider died makes it the decider. Faust's own assignor
    spreads partitions over the members instead. Faust's assignor has no public hook for
    this: `_perform_assignment` is its extension point in practice."""

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
        # Faust numbers co-partitioned topic groups by partition count; the same here.
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


def follow_decider(
    app: faust.App,
    start: Callable[[], None],
    stop: Callable[[], Awaitable[None]],
    restart: Callable[[], bool] | None = None,
) -> None:
    """Call ``start`` each time ``app`` becomes (or stays) the decider with its tables
    restored, and await ``stop`` before its partitions are taken away (a rebalance) and
    before the worker stops its producer: the decider's loop runs only while it holds the
    tables, and ends its last cycle while it can still write. ``restart``: see
    `RejoinWatch`.

    Faust sends ``on_rebalance_complete`` once the active partitions' changelogs are read
    to their end (recovery), before it lets its own streams run; the decider's loop needs
    no more."""
    watch = RejoinWatch(restart)

    @app.on_partitions_revoked.connect  # type: ignore[arg-type,misc]
    async def _revoked(sender: object, revoked: object, **kwargs: object) -> None:
        watch.revoked()
        await contain_cancellation(stop(), "on_partitions_revoked")

    @app.on_partitions_assigned.connect  # type: ignore[arg-type,misc]
    async def _assigned(sender: object, assigned: object, **kwargs: object) -> None:
        watch.assigned()

    @app.on_before_shutdown.connect  # type: ignore[arg-type,misc]
    async def _shutdown(sender: object, **kwargs: object) -> None:
        watch.completed()
        await contain_cancellation(stop(), "on_before_shutdown")

    @app.on_rebalance_complete.connect  # type: ignore[arg-type,misc]
    async def _complete(sender: object, **kwargs: object) -> None:
        watch.completed()
        if deciding(app):
            start()
        else:
            log.info("standby")


async def contain_cancellation(work: Awaitable[None], callback: str) -> None:
    """Await ``work`` for a rebalance callback, letting no `CancelledError` out unless the
    callback itself was cancelled. Faust runs the callback for aiokafka's consumer thread
    and hands any exception back to it; aiokafka catches only `Exception` around its
    listener, so a `CancelledError` there ends its group coordination without a word: the
    worker never joins the group again (test_faults' stall, docs/architecture.md)."""
    try:
        await work
    except asyncio.CancelledError:
        if being_cancelled():
            raise
        log.exception("%s: a cancellation not asked for, contained", callback)


REBALANCE_HANG_S = 60.0
"""How long after a revoke a rebalance that has not completed is reported (and acted on,
see `RejoinWatch`)."""


class RejoinWatch:
    """A rebalance not complete ``after_s`` after the revoke is logged with what every task
    of the worker awaits; if the worker was not even given its partitions again,
    ``restart`` is called (again every ``after_s`` while it says it did not restart).

    Why: after a Kafka node's SIGKILL the only worker lost its group membership, Faust
    revoked its partitions (its producer's flush waited out the leaders' move), and the
    consumer thread never joined the group again: no "(Re-)joining group" line and no
    decision for 4 minutes, in 3 of 5 clean-clone runs of test_faults (CI of f39b3bf,
    18b8dbd, e4d482b). A worker process started afresh joins and restores its tables from
    the changelogs, as after a crash."""

    def __init__(self, restart: Callable[[], bool] | None, after_s: float = REBALANCE_HANG_S):
        self.restart = restart
        self.after_s = after_s
        self.given = False
        """Partitions assigned since the last revoke."""
        self.task: asyncio.Task[None] | None = None
        self.reports = 0

    def revoked(self) -> None:
        self.given = False
        if self.task is None or self.task.done():
            self.task = asyncio.ensure_future(self._watch())

    def assigned(self) -> None:
        self.given = True

    def completed(self) -> None:
        if self.task is not None:
            self.task.cancel()
            self.task = None

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.after_s)
            log.warning(
                "no rebalance completed %.0f s after the partitions were revoked (%s); the "
                "tasks:\n%s",
                self.after_s,
                "partitions given again" if self.given else "not given again",
                task_stacks(),
            )
            self.reports += 1
            if not self.given and self.restart is not None and self.restart():
                return


def deciding(app: faust.App) -> bool:
    """Whether ``app`` (with `OneDeciderAssignor`) decides since its last assignment."""
    assignor = app.assignor
    return isinstance(assignor, OneDeciderAssignor) and assignor.deciding()


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
        self.offsets: dict[TP, int] = {}
        self.partition_of: dict[Any, int] = {}
        """Key -> the changelog partition its row was restored from."""

    def apply_changelog_batch(
        self,
        batch: Iterable[faust.EventT],
        to_key: Callable[[Any], Any],
        to_value: Callable[[Any], Any],
    ) -> None:
        events = list(batch)
        super().apply_changelog_batch(events, to_key, to_value)
        for event in events:
            message = event.message
            self.partition_of[to_key(message.key)] = message.partition
            self.set_persisted_offset(message.tp, message.offset)

    def persisted_offset(self, tp: TP) -> int | None:
        return self.offsets.get(tp)

    def set_persisted_offset(self, tp: TP, offset: int) -> None:
        self.offsets[tp] = max(offset, self.offsets.get(tp, offset))

    async def on_recovery_completed(self, active_tps: set[TP], standby_tps: set[TP]) -> None:
        kept = {tp.partition for tp in (*active_tps, *standby_tps)}
        for key, partition in list(self.partition_of.items()):
            if partition not in kept:
                self.data.pop(key, None)
                del self.partition_of[key]
        for tp in [tp for tp in self.offsets if tp.partition not in kept]:
            del self.offsets[tp]


FAUST_FETCH_WAIT_MS = 200
"""Longest the broker holds a fetch of Faust's consumer (the changelogs) open for records
(Faust sets 1,500 ms)."""


class _ConsumerThread(faust_kafka.AIOKafkaConsumerThread):
    """Faust's consumer thread, its fetches held at most `FAUST_FETCH_WAIT_MS`.

    aiokafka sends a consumer's fetches and its end-offset reads on one connection per
    broker, and a broker answers a connection's requests in order, so an end-offset read
    waits for the fetch ahead of it to be answered. Recovery begins with such a read: with
    Faust's 1,500 ms, a promoted standby waited 0-1.5 s (spread evenly) between its
    assignment and its first decision (the failover bench's two runs past 5 s of 20;
    `DEVLOG=1` shows the wait between recovery's "Build highwaters" and "Highwater" lines,
    every thread of the worker idle in its selector meanwhile)."""

    def _create_worker_consumer(self, transport: faust_kafka.Transport) -> AIOKafkaConsumer:
        consumer = super()._create_worker_consumer(transport)
        consumer._fetch_max_wait_ms = FAUST_FETCH_WAIT_MS  # read by its fetcher at start
        return consumer


class _Consumer(faust_kafka.Consumer):
    def _new_consumer_thread(self) -> faust_kafka.AIOKafkaConsumerThread:
        return _ConsumerThread(self, loop=self.loop, beacon=self.beacon)


class KafkaTransport(faust_kafka.Transport):
    """Faust's aiokafka transport with `_ConsumerThread`: the app's ``broker_consumer``
    URL selects it by `CONSUMER_SCHEME`."""

    Consumer = _Consumer


CONSUMER_SCHEME = "venn-kafka"
drivers.TRANSPORTS.aliases[CONSUMER_SCHEME] = f"{__name__}:KafkaTransport"


STANDBY_MEMORY_STORE = "venn-memory://"
"""The store URL of `StandbyMemoryStore` (Faust finds stores by the URL's scheme)."""
stores.STORES.aliases["venn-memory"] = f"{__name__}:StandbyMemoryStore"
