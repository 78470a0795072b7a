"""`VennClient`: the job owner's side of Venn, spoken over Kafka.

One client serves any number of jobs. It owns one producer and one consumer; the consumer
reads every partition of venn.assignments and venn.results and hands each event to the
queue of its job (the message key), so a coordinator sees only its own jobs' traffic.

A result is handed on only for a device the job's round was assigned (an assignment this
client read, or one a resuming coordinator adopted): the devices' and the gateway's
principals may write venn.results, and a result for a device the round never had must not
count. A result read before its assignment (the two topics are read in either order) is
held until the assignment comes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, Self, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from venn import events
from venn.auth.tokens import subject_of
from venn.broker import topics
from venn.broker.publish import KafkaEvents
from venn.broker.stream import EventStream, KafkaRecords, owned_by
from venn.core.model import Requirement
from venn.events import (
    Assignment,
    AssignmentBatch,
    DeviceResult,
    Event,
    JobCancelled,
    JobFinished,
    JobHeartbeat,
    JobRegistered,
    RoundClosed,
    RoundRequested,
)

log = logging.getLogger(__name__)

E = TypeVar("E", bound=Event)

# Events stamped this long before a job was subscribed are from an earlier use of the same
# job id on a long-lived broker (the consumer starts near the end of each partition, but
# Tansu's ListOffsets may point a little before it).
STALE_GRACE_S = 2.0

_CLOSED = object()
HELD_MAX = 10_000
"""Results a job may have waiting for an assignment not read yet; more are dropped and
counted (`ClientStats.unassigned_results`)."""


def new_event_id() -> str:
    return uuid.uuid4().hex


@dataclass
class _Subscription:
    since: float
    assignments: asyncio.Queue[Assignment | object] = field(default_factory=asyncio.Queue)
    results: asyncio.Queue[DeviceResult | object] = field(default_factory=asyncio.Queue)
    assigned: dict[int, set[str]] = field(default_factory=dict)
    """Round index -> the devices assigned to it (the latest two rounds kept)."""
    held: dict[tuple[int, str], list[DeviceResult]] = field(default_factory=dict)
    """(round, device) -> results read before that assignment."""

    def is_new(self, a: Assignment) -> bool:
        """False for a device this round has already (an assignment published again by a
        new decider carries the id it had)."""
        return a.device_id not in self.assigned.get(a.round_index, ())

    def assign(self, a: Assignment) -> list[DeviceResult]:
        """Note an assignment; the results it releases."""
        if a.round_index not in self.assigned:
            self.assigned[a.round_index] = set()
            keep = sorted(self.assigned)[-2:]
            for old in [r for r in self.assigned if r not in keep]:
                del self.assigned[old]
            for key in [k for k in self.held if k[0] < keep[0]]:
                del self.held[key]
        self.assigned[a.round_index].add(a.device_id)
        return self.held.pop((a.round_index, a.device_id), [])

    def was_assigned(self, r: DeviceResult) -> bool:
        return r.device_id in self.assigned.get(r.round_index, ())

    def hold(self, r: DeviceResult) -> bool:
        """Keep a result until its assignment comes; False when too many wait already."""
        key = (r.round_index, r.device_id)
        if key not in self.held and len(self.held) >= HELD_MAX:
            return False
        self.held.setdefault(key, []).append(r)
        return True


@dataclass
class ClientStats:
    """Counters a coordinator may show or test."""

    dispatched: int = 0
    ignored: int = 0  # valid events for jobs this client does not serve (or stale ones)
    invalid: int = 0  # records it could not use, skipped (the scheduler dead-letters them)
    unassigned_results: int = 0  # results dropped: too many waited for an assignment


class VennClient:
    """Async client for job owners: register jobs, request rounds, follow assignments and
    results, report round closes and job completion.

    Use as ``async with VennClient("127.0.0.1:9092") as venn: ...``.
    """

    def __init__(
        self,
        bootstrap: str,
        *,
        client_id: str = "venn-sdk",
        max_event_bytes: int = events.DEFAULT_MAX_BYTES,
        token: str | None = None,
        kafka_options: Mapping[str, Any] | None = None,
        heartbeat_s: float = 30.0,
    ) -> None:
        """``token``: the owner's API token, sent with every job and round event (needed
        when the deployment authenticates: `venn token job --jobs ID`). Its owner is the
        tenant of the jobs registered here, as through the job API."""
        self.bootstrap = bootstrap
        self.token = token
        self.tenant = subject_of(token) if token else None
        self.kafka_options = dict(kafka_options or {})
        self.heartbeat_s = heartbeat_s
        self._alive: set[str] = set()
        """Jobs this client keeps alive with heartbeats (registered or resumed here)."""
        self._heartbeat: asyncio.Task[None] | None = None
        self.client_id = client_id
        self.max_event_bytes = max_event_bytes
        self.stats = ClientStats()
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._pump: asyncio.Task[None] | None = None
        self._subs: dict[str, _Subscription] = {}

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> Self:
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            client_id=self.client_id,
            acks="all",
            linger_ms=2,
            **self.kafka_options,
        )
        await producer.start()
        self._producer = producer
        # No consumer group: every client sees every partition and filters by key itself.
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            client_id=self.client_id,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            **self.kafka_options,
        )
        await consumer.start()
        self._consumer = consumer
        partitions = []
        for topic in (topics.ASSIGNMENTS, topics.RESULTS):
            for p in sorted(await producer.partitions_for(topic)):
                partitions.append(TopicPartition(topic, p))
        consumer.assign(partitions)
        await consumer.seek_to_end(*partitions)
        # Resolve positions now, so nothing produced after start() can be skipped.
        for tp in partitions:
            await consumer.position(tp)
        self._pump = asyncio.create_task(self._dispatch(), name="venn-sdk-dispatch")
        if self.heartbeat_s > 0:
            self._heartbeat = asyncio.create_task(self._beat(), name="venn-sdk-heartbeat")
        return self

    async def close(self) -> None:
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heartbeat
            self._heartbeat = None
        if self._pump is not None:
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump
            self._pump = None
        for sub in self._subs.values():
            sub.assignments.put_nowait(_CLOSED)
            sub.results.put_nowait(_CLOSED)
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # -- job owner's requests --------------------------------------------------------

    def subscribe(self, job_id: str) -> None:
        """Start buffering this job's assignments and results (register_job does it)."""
        if job_id not in self._subs:
            self._subs[job_id] = _Subscription(since=time.time())

    def adopt_assignments(self, job_id: str, assignments: Iterable[Assignment]) -> None:
        """Assignments of ``job_id`` this client did not read (a resuming coordinator read
        them from the log): their devices' results are handed on too."""
        self.subscribe(job_id)
        sub = self._subs[job_id]
        for a in assignments:
            for r in sub.assign(a):
                sub.results.put_nowait(r)

    def keep_alive(self, job_id: str) -> None:
        """Send this job's heartbeats from now on (register_job does it; a coordinator that
        resumes a job after a restart calls it), so that Venn does not expire it."""
        self._alive.add(job_id)

    async def heartbeat(self, job_id: str) -> JobHeartbeat:
        event = JobHeartbeat(
            event_id=new_event_id(), time=time.time(), job_id=job_id, token=self.token
        )
        await self._send(topics.JOBS, event)
        return event

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_s)
            for job_id in list(self._alive):
                try:
                    await self.heartbeat(job_id)
                except Exception:  # a missed beat is retried at the next one
                    log.warning("heartbeat of %s failed", job_id, exc_info=True)

    def unsubscribe(self, job_id: str) -> None:
        """Stop following a job (and sending its heartbeats); its open iterators end."""
        self._alive.discard(job_id)
        sub = self._subs.pop(job_id, None)
        if sub is not None:
            sub.assignments.put_nowait(_CLOSED)
            sub.results.put_nowait(_CLOSED)

    async def register_job(
        self,
        job_id: str,
        requirement: Mapping[str, float],
        demand: int,
        rounds: int,
        deadline_s: float,
        workload_s: float = 30.0,
        submit_token: str | None = None,
        priority: int = 0,
    ) -> JobRegistered:
        """Register a job. ``submit_token`` (default: a fresh one) makes a retry of this
        very call a no-op, while a second job with the same id is refused. The job's
        tenant is the token's owner (none without a token: the default tenant);
        ``priority`` is its class inside the tenant (higher first)."""
        self.subscribe(job_id)
        self.keep_alive(job_id)
        event = JobRegistered(
            event_id=new_event_id(),
            token=self.token,
            time=time.time(),
            job_id=job_id,
            # Paper aliases ("cpu", "memory", "os") become the attribute names devices report.
            requirement=Requirement.of(requirement).as_dict(),
            demand=demand,
            rounds=rounds,
            deadline_s=deadline_s,
            workload_s=workload_s,
            submit_token=submit_token or new_event_id(),
            tenant=self.tenant,
            priority=priority or None,
        )
        await self._send(topics.JOBS, event)
        return event

    async def request_round(self, job_id: str, round_index: int, demand: int) -> RoundRequested:
        event = RoundRequested(
            event_id=new_event_id(),
            token=self.token,
            time=time.time(),
            job_id=job_id,
            round_index=round_index,
            demand=demand,
        )
        await self._send(topics.JOBS, event)
        return event

    async def close_round(
        self,
        job_id: str,
        round_index: int,
        outcome: Literal["succeeded", "failed"],
        *,
        demand: int,
        assigned: int,
        results: int,
        opened_at: float,
        closed_at: float,
        reason: str = "",
        sched_delay_s: float = 0.0,
        response_time_s: float = 0.0,
    ) -> RoundClosed:
        event = RoundClosed(
            event_id=new_event_id(),
            token=self.token,
            time=time.time(),
            job_id=job_id,
            round_index=round_index,
            outcome=outcome,
            demand=demand,
            assigned=assigned,
            results=results,
            opened_at=opened_at,
            closed_at=closed_at,
            reason=reason,
            sched_delay_s=sched_delay_s,
            response_time_s=response_time_s,
        )
        await self._send(topics.ROUNDS, event)
        return event

    async def finish_job(
        self,
        job_id: str,
        *,
        rounds_completed: int,
        arrival: float,
        finished_at: float,
        jct_s: float | None = None,
    ) -> JobFinished:
        event = JobFinished(
            event_id=new_event_id(),
            token=self.token,
            time=time.time(),
            job_id=job_id,
            rounds_completed=rounds_completed,
            arrival=arrival,
            finished_at=finished_at,
            jct_s=max(0.0, finished_at - arrival) if jct_s is None else jct_s,
        )
        await self._send(topics.ROUNDS, event)
        self.unsubscribe(job_id)
        return event

    async def cancel_job(self, job_id: str, reason: str = "cancelled by owner") -> JobCancelled:
        event = JobCancelled(
            event_id=new_event_id(),
            time=time.time(),
            job_id=job_id,
            reason=reason,
            token=self.token,
        )
        await self._send(topics.JOBS, event)
        self.unsubscribe(job_id)
        return event

    # -- what Venn sends back --------------------------------------------------------

    def assignments(self, job_id: str) -> AsyncIterator[Assignment]:
        """This job's assignments, as they arrive (ends when the job is unsubscribed)."""
        self.subscribe(job_id)
        return _drain(self._subs[job_id].assignments, Assignment)

    def results(self, job_id: str) -> AsyncIterator[DeviceResult]:
        """This job's device results and failures, as they arrive."""
        self.subscribe(job_id)
        return _drain(self._subs[job_id].results, DeviceResult)

    # -- internals -------------------------------------------------------------------

    async def _send(self, topic: str, event: Event) -> None:
        if self._producer is None:
            raise RuntimeError("VennClient is not started (use `async with`)")
        await KafkaEvents(self._producer).publish(topic, event)

    async def _dispatch(self) -> None:
        assert self._consumer is not None and self._producer is not None
        # A coordinator owns no topic's dead letters (topics.DEAD_LETTER_OWNER): a bad
        # record is skipped and counted here, and dead-lettered once, by its owner.
        stream = EventStream(
            KafkaRecords(self._consumer),
            KafkaEvents(self._producer),
            owned_by("coordinator"),
            max_bytes=self.max_event_bytes,
        )
        while True:
            batch = await stream.read(timeout_ms=200, max_records=5000)
            await stream.apply(batch, self._route)
            self.stats.invalid = stream.stats.bad_records

    def _route(self, event: Event) -> None:
        sub = self._subs.get(getattr(event, "job_id", ""))
        if sub is None or event.time < sub.since - STALE_GRACE_S:
            self.stats.ignored += 1
            return
        if isinstance(event, Assignment | AssignmentBatch):
            for assignment in events.assignments_of(event):
                if not sub.is_new(assignment):
                    continue
                sub.assignments.put_nowait(assignment)
                for result in sub.assign(assignment):
                    sub.results.put_nowait(result)
        elif isinstance(event, DeviceResult):
            if sub.was_assigned(event):
                sub.results.put_nowait(event)
            elif not sub.hold(event):
                self.stats.unassigned_results += 1
                return
        self.stats.dispatched += 1


async def _drain(queue: asyncio.Queue[E | object], kind: type[E]) -> AsyncIterator[E]:
    while True:
        item = await queue.get()
        if item is _CLOSED:
            return
        assert isinstance(item, kind)
        yield item
