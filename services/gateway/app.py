"""The device gateway: an aiohttp server in front of Kafka, in three parts over one Kafka
side (`Gateway`, here): the device endpoints (`devices`), the job API (`jobs_api`) and the
dashboard (`dashboard`), each given only a `GatewayContext` (and the devices, the
`DeviceDesk` this class is).

- `POST /v1/checkin`: validates the body, queues a DeviceCheckin (fresh event id) into the
  next CheckinBatch (`services.gateway.batcher`: one message per few milliseconds) and
  waits at most `wait_s` for the scheduler's answer, which this process reads with its own
  group-less consumer (latest offsets): an Assignment (alone or in an AssignmentBatch on
  venn.assignments) that names the check-in (`checkin_id`, schema v2; a v1 assignment is
  matched by its device), or the check-in's id in a CheckinsDeclined addressed to this
  gateway on venn.replies. Answers `{assigned: true, job_id, round_index,
  task_url}` or `{assigned: false, retry_after}`; overload (more than `max_inflight`
  check-ins in progress, an event loop lagging more than `max_lag_s`, or batches piling
  up in front of the broker) is answered 429 + retry_after at once. Never a 5xx, never
  later than the bound.
- `POST /v1/results`: a device's result -> DeviceResult on venn.results (key job_id).
- `GET /healthz`, `GET /openapi.json`; the job API (`jobs_api`) and the live dashboard
  (`dashboard`: `GET /` and its event stream).

Stateless: every process has its own consumer and matches only its own check-ins, so any
number of gateways can run behind a load balancer (or share one port with SO_REUSEPORT).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import time
import uuid
from collections import Counter, OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import asdict
from typing import Any

import msgspec
from aiohttp import web
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from prometheus_client import CollectorRegistry, Histogram

from services.gateway import dashboard, devices, jobs_api, wanted
from services.gateway.batcher import BatcherBusy, CheckinBatcher
from services.gateway.context import BrokerUnavailable, GatewayContext, NoJobsPrincipal
from services.gateway.demand import DemandView
from services.gateway.forwarding import ForwardQuota, SupplyCounter, Verdict
from services.gateway.http import (
    SERVER_OPTIONS,
    Handler,
    Json,
    busy,
    errors,
    json_response,
    uncompressed,
)
from services.gateway.loop_watch import LoopWatch
from services.gateway.models import CheckinRequest, RequestError, ResultRequest
from services.gateway.openapi import openapi_document
from services.gateway.stats import GatewayStats
from services.gateway.status_feed import StatusFeed
from venn import events as ev
from venn.auth import Claims, Tokens
from venn.broker import topics
from venn.broker.follow import TopicFollower
from venn.broker.health import BrokerWatch
from venn.broker.publish import KafkaEvents
from venn.broker.security import JOBS, client_options
from venn.broker.stream import (
    EventStream,
    KafkaRecords,
    Record,
    StreamStats,
    authorized,
    owned_by,
)
from venn.broker.topics import ensure_topics
from venn.core.model import Requirement
from venn.core.pace import Want
from venn.core.status import SchedulerStatus
from venn.metrics import CONTENT_TYPE, StatsCollector, consumer_lag, exposition
from venn.settings import GatewaySettings, Settings

log = logging.getLogger("venn.gateway")


LATE_MEMORY = 200_000
"""Most answered-without-assignment check-in ids remembered to catch late assignments."""
LATE_SLACK_S = 30.0
"""How long past its bound (VENN_GATEWAY_WAIT_S) a check-in's late assignment may still
arrive: the scheduler decides a gateway's check-in only within that bound of its time, so
an id answered longer ago than both is forgotten (they were kept by count only, up to
LATE_MEMORY, and a flood left that high-water in the gateway's memory: issue 34, item 11)."""
START_RETRY_S = 120.0
LETTERS_WAIT_S = 30.0
"""How long a starting gateway waits to have read venn.dead-letters before its views."""
"""How long a starting gateway keeps trying a cluster that does not answer."""
MIN_WAIT_S = 0.05
"""Less time than this (or half the bound) left of a check-in's bound is not worth producing
it for: its answer would come too late."""
UNDELIVERED = "undelivered: the gateway answered the check-in before this assignment arrived"
DECLINED = "declined"
"""A pending check-in's answer when the scheduler declined it (CheckinsDeclined)."""

_ANSWERS = (topics.ASSIGNMENTS, topics.REPLIES)
_GATEWAY_OWNS = owned_by("gateway")
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 2.5, 5.0, 10.0)
_encode = msgspec.json.Encoder().encode


_WANT = {
    Verdict.FORWARD: Want.WAITED,
    Verdict.ENOUGH_IN_FLIGHT: Want.BASE,  # its rounds have enough devices coming
    Verdict.NO_OPEN_ROUND: Want.UNWANTED,
}
"""The pace of a check-in by the forward quota's verdict (venn/core/pace.py)."""


def _expire(fut: asyncio.Future[Any]) -> None:
    if not fut.done():
        fut.set_result(None)


class Gateway:
    """Kafka side of one gateway process: producer, assignments consumer, pending map."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.config: GatewaySettings = settings.gateway
        self.stats = GatewayStats()
        self.view = DemandView()
        self.view_ready = False
        self.inflight = 0
        self.id = f"gw-{os.getpid()}-{os.urandom(4).hex()}"
        self.quota = ForwardQuota(
            self.config.forward_quota, self.config.quota_patience_s, lump=self.config.quota_lump
        )
        self.supply = SupplyCounter(self.id, time.time())
        self.pace = self.config.pace
        """When a device without an assignment comes back (venn/core/pace.py)."""
        self._report_task: asyncio.Task[None] | None = None
        self.pending: dict[str, asyncio.Future[ev.Assignment | BaseException | str | None]] = {}
        self.pending_by_device: dict[str, str] = {}
        self.answered: OrderedDict[str, float] = OrderedDict()
        """Check-in id -> when it was answered without an assignment (monotonic)."""
        self.producer: AIOKafkaProducer | None = None
        self.jobs_producer: AIOKafkaProducer | None = None
        """The job API's writes to venn.jobs: as the ``jobs`` principal where Kafka has
        SASL (``jobs_credentials``; None without them), else the producer."""
        self.consumer: AIOKafkaConsumer | None = None
        self.stream: EventStream | None = None
        self.batcher: CheckinBatcher | None = None
        self._task: asyncio.Task[None] | None = None
        self._lag_task: asyncio.Task[None] | None = None
        self.loop_watch = LoopWatch()
        self._background: set[asyncio.Task[Any]] = set()
        self.started_at = 0.0
        self.broker = BrokerWatch(self.settings.broker, self.settings.kafka_credentials)
        self.tokens = Tokens(self.settings.auth_secret) if self.settings.auth_enabled else None
        self.jobs_credentials = self.settings.principal_credentials(JOBS)
        """The job API's own Kafka principal (`venn.broker.security.JOBS`), the only one
        that writes venn.jobs: from VENN_KAFKA_PASSWORD_JOBS or the run dir's users. None
        where Kafka has no SASL (the gateway's producer writes them), or where this gateway
        serves devices only (its job API then refuses submissions and cancels: 503)."""
        self.enrolments: dict[str, str] = {}
        """Device id -> the owner (enrol token subject) of its first enrolment, from
        venn.enrolments: another owner's enrol token may not take the id over."""
        self.enrolled_by: Counter[str] = Counter()
        """Enrol token id -> the device ids it enrolled first (venn.enrolments), with those
        this gateway is enrolling now: at most VENN_GATEWAY_MAX_ENROLMENTS_PER_TOKEN."""
        self.status = StatusFeed(settings)
        """The scheduler's snapshots (venn.status), for the job API and the dashboard, and
        the live gateway count the forward quota and the report interval are shared by."""
        self.status.on_update = self.on_status
        self.dead_letters = dashboard.DeadLetterFeed(settings)
        self.assigned: OrderedDict[tuple[str, int, str], float] = OrderedDict()
        """(job, round, device) of recent assignments: only those devices may upload a
        result for that round."""

    # -- lifecycle ---------------------------------------------------------------------
    async def start(self) -> None:
        s = self.settings
        self.broker.start()
        counts = await ensure_topics(
            s.broker,
            s.topic_partitions,
            options=s.kafka_options,
            names=(
                topics.CHECKINS,
                topics.ASSIGNMENTS,
                topics.RESULTS,
                topics.JOBS,
                topics.ROUNDS,
                topics.REPLIES,
                topics.REVOCATIONS,
                topics.ENROLMENTS,
            ),
        )
        client = f"venn-gateway-{os.getpid()}"
        self.producer = AIOKafkaProducer(
            bootstrap_servers=s.broker,
            client_id=client,
            acks=s.tuning.acks,
            linger_ms=0,  # the batcher lingers; a batch goes out when it is full or due
            **s.kafka_options,
        )
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=s.broker,
            client_id=client,
            group_id=None,  # every gateway reads every assignment; no group, no rebalances
            enable_auto_commit=False,
            auto_offset_reset="latest",
            fetch_max_wait_ms=s.gateway_fetch_wait,
            **s.kafka_options,
        )
        await self.producer.start()
        if self.jobs_credentials is not None:
            self.jobs_producer = AIOKafkaProducer(
                bootstrap_servers=s.broker,
                client_id=f"{client}-jobs",
                acks="all",
                **client_options(self.jobs_credentials),
            )
            await self.jobs_producer.start()
        elif not s.kafka_user:
            self.jobs_producer = self.producer
        self.stream = EventStream(
            KafkaRecords(self.consumer),
            KafkaEvents(self.producer),
            self._owns,
            max_bytes=s.max_event_bytes,
            # The views fold only job events their token allowed, as the scheduler does.
            check=authorized(self.tokens),
            stats=StreamStats(
                skipped=self.stats.skipped_records, dead_letters=self.stats.dead_letter_reasons
            ),
            # Every gateway reads venn.enrolments from its beginning at each start: a bad
            # record's letter was written at the first (issue 34, item 11).
            written=self.dead_letters.tally.__contains__,
        )
        self.batcher = CheckinBatcher(
            self.producer,
            counts[topics.CHECKINS],
            self.id,
            self.config.linger_ms / 1000,
            self.config.batch_max,
            s.max_event_bytes,
        )
        try:
            await self.consumer.start()
            follow = [
                TopicPartition(t, p)
                for t in (topics.JOBS, topics.ROUNDS, topics.REVOCATIONS, topics.ENROLMENTS)
                for p in range(counts[t])
            ]
            answers = [TopicPartition(t, p) for t in _ANSWERS for p in range(counts[t])]
            self.consumer.assign([*answers, *follow])
            await self._seek_recent(answers)
            await self.consumer.seek_to_beginning(*follow)
            for tp in answers:  # resolve now: nothing produced after start() is missed
                await self.consumer.position(tp)
            ends = await self.consumer.end_offsets(follow)
        except BaseException:
            await self.stop()
            raise
        self.started_at = time.time()
        self._task = asyncio.create_task(self._consume(set(follow), ends), name="gateway-consume")
        self._lag_task = asyncio.create_task(self._watch_lag(), name="gateway-lag")
        self.supply.since = time.time()
        self._report_task = asyncio.create_task(self.report_supply(), name="gateway-supply")

    async def start_when_reachable(self, within_s: float = START_RETRY_S) -> None:
        """`start`, again every second while the cluster does not answer (a node it asks
        may be down: a gateway restarted as one of three Kafka nodes died exited here and
        left its devices without an answer), for at most ``within_s``."""
        deadline = time.monotonic() + within_s
        while True:
            try:
                await self.start()
                return
            except (KafkaError, OSError) as exc:
                await self.stop()
                if time.monotonic() >= deadline:
                    raise
                log.warning("Kafka not reachable at start (%r); retrying", exc)
                await asyncio.sleep(1.0)

    async def stop(self) -> None:
        await self.broker.stop()
        if self._report_task is not None:
            self._report_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._report_task
            self._report_task = None
        if self._lag_task is not None:
            self._lag_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._lag_task
            self._lag_task = None
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self.batcher is not None:
            await self.batcher.close()
            self.batcher = None
        for task in list(self._background):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 2.0)
        for fut in self.pending.values():
            if not fut.done():
                fut.set_result(ConnectionError("gateway stopping"))
        if self.consumer is not None:
            await self.consumer.stop()
            self.consumer = None
        if self.jobs_producer is not None and self.jobs_producer is not self.producer:
            await self.jobs_producer.stop()
        self.jobs_producer = None
        if self.producer is not None:
            await self.producer.stop()
            self.producer = None

    def on_status(self, status: SchedulerStatus) -> None:
        """The scheduler's snapshot (venn.status): how many gateways share the quota."""
        self.quota.gateways = max(1, status.gateways)

    def report_interval_s(self) -> float:
        """Seconds between this gateway's supply reports: the configured interval, longer
        with many gateways so that the scheduler reads about VENN_SUPPLY_REPORTS_PER_S."""
        config = self.config
        return max(config.supply_report_s, self.quota.gateways / config.supply_reports_per_s)

    async def report_supply(self) -> None:
        """Every interval, the check-ins received per attribute set, as supply reports."""
        while True:
            interval = self.report_interval_s()
            await asyncio.sleep(interval)
            token = None
            if self.tokens is not None:  # what lets the scheduler count the report
                token = self.tokens.issue("gateway", self.id, ttl_s=max(300.0, 10 * interval))
            for report in self.supply.reports(time.time(), token):
                self.stats.supply_reports += 1
                self._spawn(self._send(topics.CHECKINS, report))

    async def _watch_lag(self) -> None:
        """Event-loop lag: how late a short sleep wakes up (see loop_watch.py)."""
        loop = asyncio.get_running_loop()
        watch = self.loop_watch
        while True:
            start = loop.time()
            await asyncio.sleep(watch.period)
            watch.tick(loop.time(), start)

    @property
    def lag_s(self) -> float:
        return self.loop_watch.lag(asyncio.get_running_loop().time())

    def overloaded(self) -> bool:
        return self.inflight >= self.config.max_inflight or self.lag_s > self.config.max_lag_s

    def deadline(self) -> float | None:
        """Loop time by which a check-in read now must be answered: `wait_s` after it may
        have arrived; None when too little of that is left to wait for anything."""
        now = asyncio.get_running_loop().time()
        deadline = self.loop_watch.arrived(now) + self.config.wait_s
        return deadline if deadline - now >= min(MIN_WAIT_S, self.config.wait_s / 2) else None

    # -- the assignments/jobs/rounds consumer ------------------------------------------
    def _owns(self, record: Record) -> bool:
        """Enrolments are every gateway's to dead-letter (a dead letter's id is its record's
        position, so the copies are one); the scheduler writes one letter per bad record of
        everything else read here (topics.DEAD_LETTER_OWNER)."""
        if record.topic == topics.ENROLMENTS:
            return True
        return _GATEWAY_OWNS(record)

    def _apply(self, event: ev.Event) -> None:
        if isinstance(event, ev.CheckinsDeclined):
            self.on_declined(event)
        elif isinstance(event, ev.DeviceEnrolled):
            if event.device_id not in self.enrolments:  # the first one holds
                self.enrolments[event.device_id] = event.owner
                self.enrolled_by[event.token_id] += 1
        elif isinstance(event, ev.TokenRevoked):
            if self.tokens is not None:
                self.tokens.revocations.revoke(event.token_id, event.time)
        else:
            for assignment in ev.assignments_of(event):
                self.on_assignment(assignment)
            self.view.apply(event)

    async def _consume(self, follow: set[TopicPartition], ends: dict[TopicPartition, int]) -> None:
        consumer, stream = self.consumer, self.stream
        assert consumer is not None and stream is not None
        with contextlib.suppress(TimeoutError):  # the letters written before: not again
            await asyncio.wait_for(self.dead_letters.caught_up.wait(), LETTERS_WAIT_S)
        lag_due = 0.0
        while True:
            batch = await stream.read(timeout_ms=200, max_records=5000)
            if time.monotonic() >= lag_due:
                lag_due = time.monotonic() + 1.0
                self.stats.consumer_lag = await consumer_lag(consumer)
            await stream.apply(batch, self._apply)
            self.stats.bad_records = stream.stats.bad_records
            self.stats.handler_errors = stream.stats.internal_errors
            self.stats.dead_letters_unsent = stream.stats.unsent
            followed = any(r.topic not in _ANSWERS for r in batch.records)
            if not self.view_ready and not followed:
                # Caught up once a fetch brings nothing new from venn.jobs/venn.rounds past
                # the end offsets seen at start (Tansu's end offsets can be short, hence
                # the empty fetch too). Until then every check-in waits for its answer.
                positions = [await consumer.position(tp) for tp in follow]
                if all(pos >= ends.get(tp, 0) for tp, pos in zip(follow, positions, strict=True)):
                    self.view_ready = True
                    log.info("demand view ready: %d jobs", len(self.view))

    def on_declined(self, event: ev.CheckinsDeclined) -> None:
        """A batch's check-ins the scheduler declined: this gateway's answer "no"."""
        if event.reply_to != self.id:
            return
        for cid in event.checkin_ids:
            fut = self.pending.pop(cid, None)
            if fut is not None and not fut.done():
                fut.set_result(DECLINED)

    async def _seek_recent(self, answers: list[TopicPartition]) -> None:
        """Answers from now on; assignments of the last `result_window_s` too, so that a
        restarted gateway still accepts the results of tasks handed out before."""
        consumer = self.consumer
        assert consumer is not None
        replies = [tp for tp in answers if tp.topic == topics.REPLIES]
        await consumer.seek_to_end(*replies)
        since = int((time.time() - self.config.result_window_s) * 1000)
        assignments = [tp for tp in answers if tp.topic == topics.ASSIGNMENTS]
        found = await consumer.offsets_for_times(dict.fromkeys(assignments, max(since, 0)))
        for tp in assignments:
            at = found.get(tp)
            if at is None:
                await consumer.seek_to_end(tp)
            else:
                consumer.seek(tp, at.offset)

    def _remember_assignment(self, a: ev.Assignment) -> None:
        self.assigned[(a.job_id, a.round_index, a.device_id)] = time.time()
        horizon = time.time() - self.config.result_window_s
        while self.assigned and (
            len(self.assigned) > self.config.max_remembered
            or next(iter(self.assigned.values())) < horizon
        ):
            self.assigned.popitem(last=False)

    def on_assignment(self, a: ev.Assignment) -> None:
        """An assignment read back: the answer to one of this gateway's check-ins, or a
        device that may upload a result."""
        self._remember_assignment(a)
        cid = a.checkin_id  # None in a v1 assignment: matched by its device below
        fut = self.pending.pop(cid, None) if cid is not None else None
        if fut is not None:
            if not fut.done():
                fut.set_result(a)
            return
        mine_late = cid is not None and cid in self.answered
        if not mine_late and cid is not None:
            return  # another gateway's check-in: it answers that device
        # Ours but late (or unattributable): the scheduler now counts the device as busy.
        # Hand it to the device's check-in waiting here, if any; else release it.
        waiting = self.pending_by_device.get(a.device_id)
        fut = self.pending.pop(waiting, None) if waiting is not None else None
        if fut is not None and not fut.done():
            fut.set_result(a)
            self.stats.late_delivered += 1
            return
        if mine_late:
            self.stats.late_released += 1
            release = ev.DeviceResult(
                event_id=f"undelivered:{a.event_id}",
                time=time.time(),
                job_id=a.job_id,
                round_index=a.round_index,
                device_id=a.device_id,
                ok=False,
                response_time_s=0.0,
                reason=UNDELIVERED,
            )
            self._spawn(self._send(topics.RESULTS, release))

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _send(self, topic: str, event: ev.Event) -> None:
        assert self.producer is not None
        try:
            await (await KafkaEvents(self.producer).enqueue(topic, event))
        except Exception as exc:
            self.stats.kafka_errors += 1
            log.warning("could not send %s to %s: %r", event.event_id, topic, exc)

    def _remember_answered(self, cid: str, now: float | None = None) -> None:
        at = time.monotonic() if now is None else now
        answered = self.answered
        answered[cid] = at
        horizon = at - self.config.wait_s - LATE_SLACK_S
        while answered and (len(answered) > LATE_MEMORY or next(iter(answered.values())) < horizon):
            answered.popitem(last=False)

    # -- requests ----------------------------------------------------------------------
    def busy(self, reason: str) -> tuple[int, Json]:
        return busy(self.config.busy_retry_after_s, reason)

    def want(self, attrs: Mapping[str, float]) -> Want:
        """What the open rounds want of a device with ``attrs``, by this gateway's view."""
        if not self.view_ready:
            return Want.BASE
        return Want.WAITED if self.view.may_assign(attrs) else Want.UNWANTED

    def _no(self, cid: str, reason: str, want: Want) -> tuple[int, Json]:
        return 200, {
            "assigned": False,
            "retry_after": self.pace.retry_after(want, random.random()),
            "reason": reason,
            "checkin_id": cid,
        }

    async def checkin(self, req: CheckinRequest, deadline: float) -> tuple[int, Json]:
        """Produce the check-in and wait (until `deadline`, loop time) for its answer."""
        answer = await self._checkin(req, deadline)
        if answer[0] == 200:
            self.stats.checkins += 1
        return answer

    async def _checkin(self, req: CheckinRequest, deadline: float) -> tuple[int, Json]:
        assert self.producer is not None
        loop = asyncio.get_running_loop()
        cid = "gw-" + os.urandom(12).hex()
        if not self.broker.available:
            # The demand view stopped moving with the broker: no answer from it now.
            self.stats.broker_down += 1
            return self.busy("broker_unavailable")
        charged: tuple[Requirement, ...] = ()
        verdict = Verdict.FORWARD
        if self.config.fast_no and self.view_ready:
            verdict, charged = self.quota.verdict(req.attrs, self.view.open_demand(), loop.time())
            want = _WANT[verdict]
        else:
            want = self.want(req.attrs)
        # Counted at the pace it is told now: the pace it was told last time, unless demand
        # changed since (the gateway keeps no per-device state).
        self.supply.add(req.attrs, req.device_id, self.pace.weight(want))
        if verdict is Verdict.NO_OPEN_ROUND:
            self.stats.fast_no += 1
            return self._no(cid, "no_open_round", want)
        if verdict is Verdict.ENOUGH_IN_FLIGHT:
            self.stats.enough_in_flight += 1
            return self._no(cid, "no_assignment", want)
        # Made only for a check-in that is forwarded (most are answered at once above).
        event = ev.DeviceCheckin(
            event_id=cid,
            time=time.time(),
            device_id=req.device_id,
            attrs=req.attrs,
            speed_ms_per_sample=req.speed_ms_per_sample,
            bandwidth_kbps=req.bandwidth_kbps,
            counted=True,  # in this gateway's supply reports
        )
        fut: asyncio.Future[ev.Assignment | BaseException | str | None] = loop.create_future()
        # Registered before producing: the answer may come back before the ack.
        self.pending[cid] = fut
        self.pending_by_device[req.device_id] = cid
        self.quota.charge(charged)
        answer: ev.Assignment | BaseException | str | None = None
        try:
            assert self.batcher is not None
            try:
                delivery = self.batcher.submit(event)
            except BatcherBusy as exc:
                # The broker is up but slower than the check-ins arrive: shed load, as for
                # too many in flight (issue 26, item 10: this was "broker_unavailable").
                self.stats.overloaded += 1
                log.debug("check-in %s not queued: %r", cid, exc)
                return self.busy("overloaded")
            delivery.add_done_callback(lambda d: self._fail_pending(cid, d))
            # A timer that resolves the future with None at the deadline: cheaper than
            # asyncio.wait/wait_for on the hot path.
            timer = loop.call_at(deadline, _expire, fut)
            try:
                answer = await fut
            finally:
                timer.cancel()
        finally:
            self.quota.release(charged)
            self.pending.pop(cid, None)
            if self.pending_by_device.get(req.device_id) == cid:
                del self.pending_by_device[req.device_id]
            if not isinstance(answer, ev.Assignment):
                self._remember_answered(cid)
        if isinstance(answer, ev.Assignment):
            self.stats.assigned += 1
            return 200, {
                "assigned": True,
                "job_id": answer.job_id,
                "round_index": answer.round_index,
                "task_url": answer.task_url,
                "checkin_id": cid,
            }
        if isinstance(answer, BaseException):
            self.stats.kafka_errors += 1
            return self.busy("broker_unavailable")
        if answer == DECLINED:
            self.stats.declined += 1
        else:
            self.stats.no_assignment += 1
        return self._no(cid, "no_assignment", self.want(req.attrs))

    def _fail_pending(self, cid: str, delivery: asyncio.Future[Any]) -> None:
        if delivery.cancelled() or delivery.exception() is None:
            return
        fut = self.pending.get(cid)
        if fut is not None and not fut.done():
            exc = delivery.exception()
            fut.set_result(exc if exc is not None else ConnectionError("cancelled"))

    async def result(self, req: ResultRequest, deadline: float) -> tuple[int, Json]:
        assert self.producer is not None
        if not self.broker.available:
            self.stats.broker_down += 1
            return self.busy("broker_unavailable")
        if (req.job_id, req.round, req.device_id) not in self.assigned:
            # Only the device the round assigned may report for it (a forged result made a
            # job finish its rounds with no device assigned: issue 12, defect 4).
            self.stats.refused_results += 1
            return 403, {
                "error": "not_assigned",
                "detail": f"device {req.device_id!r} holds no assignment of round "
                f"{req.round} of job {req.job_id!r}",
            }
        # One result per device and round: a retried upload keeps its id (consumers dedupe).
        event = ev.DeviceResult(
            event_id=f"res:{req.job_id}:{req.round}:{req.device_id}",
            time=time.time(),
            job_id=req.job_id,
            round_index=req.round,
            device_id=req.device_id,
            ok=req.ok,
            response_time_s=req.response_time_s,
            reason=req.reason,
        )
        try:
            async with asyncio.timeout_at(deadline):
                delivery = await self.producer.send(
                    topics.RESULTS, ev.encode(event), key=req.job_id.encode()
                )
                await delivery
        except Exception as exc:
            self.stats.kafka_errors += 1
            log.debug("result %s not produced: %r", event.event_id, exc)
            return self.busy("broker_unavailable")
        self.stats.results += 1
        return 202, {"accepted": True, "event_id": event.event_id}

    async def enrol(self, device_id: str, claims: Claims, deadline: float) -> str:
        """The owner holding ``device_id`` once this enrolment is recorded: the caller's
        (the enrol token's subject) when the id was free or is theirs already, else the
        owner of its first enrolment. RequestError 429 while venn.enrolments is not read
        to its end yet or the broker does not take the record. Two gateways enrolling one
        id at once both write; the first record in the log holds it, for every reader."""
        assert self.producer is not None
        loop = asyncio.get_running_loop()
        while not self.view_ready:
            if loop.time() >= deadline:
                raise RequestError(429, "view_not_ready", "enrolments are being read; retry")
            await asyncio.sleep(0.05)
        holder = self.enrolments.get(device_id)
        if holder is not None:
            return holder
        most = self.config.max_enrolments_per_token
        if claims.kind != "admin" and self.enrolled_by[claims.token_id] >= most:
            # One enrol token added device ids without bound, each kept by every gateway
            # for good (issue 34, item 11).
            self.stats.refused_enrolments += 1
            raise RequestError(
                403,
                "enrolment_limit",
                f"this enrol token has enrolled {most} devices, the most one may "
                "(VENN_GATEWAY_MAX_ENROLMENTS_PER_TOKEN); use another enrol token",
            )
        self.enrolled_by[claims.token_id] += 1  # counted while it is written, then read back
        event = ev.DeviceEnrolled(
            event_id=f"enrol:{uuid.uuid4().hex}",
            time=time.time(),
            device_id=device_id,
            owner=ev.clean_text(claims.subject),
            token_id=claims.token_id,
        )
        try:
            async with asyncio.timeout_at(deadline):
                await KafkaEvents(self.producer).publish(topics.ENROLMENTS, event)
                while device_id not in self.enrolments:
                    await asyncio.sleep(0.01)
        except Exception as exc:
            self.stats.kafka_errors += 1
            log.debug("enrolment of %s not recorded: %r", device_id, exc)
            raise RequestError(
                429, "broker_unavailable", "the enrolment was not recorded; retry"
            ) from None
        finally:
            self.enrolled_by[claims.token_id] -= 1  # read back (or not written): the log counts
        return self.enrolments[device_id]

    def context(self) -> GatewayContext:
        """What the HTTP parts may use of this gateway (`services.gateway.context`)."""
        return GatewayContext(
            settings=self.settings,
            gateway_id=self.id,
            tokens=self.tokens,
            view=self.view,
            stats=self.stats,
            view_ready=lambda: self.view_ready,
            status=lambda: self.status.latest,
            broker_available=lambda: self.broker.available,
            publish_job_event=self.publish_job_event,
        )

    async def publish_job_event(self, event: ev.Event) -> None:
        """Publish to venn.jobs as the jobs principal, acknowledged."""
        if self.producer is not None and self.jobs_producer is None:
            raise NoJobsPrincipal()
        if self.jobs_producer is None:
            raise BrokerUnavailable("not connected")
        try:
            await KafkaEvents(self.jobs_producer).publish(topics.JOBS, event)
        except Exception as exc:
            raise BrokerUnavailable(repr(exc)) from exc

    def gauges(self) -> dict[str, float]:
        return {
            "inflight": self.inflight,
            "pending": len(self.pending),
            "loop_lag_seconds": self.lag_s,
            "broker_available": float(self.broker.available),
            "demand_view_ready": float(self.view_ready),
        }

    def health(self) -> Json:
        return {
            "status": "ok" if self.broker.available else "broker_unavailable",
            "gateway_id": self.id,
            "broker": self.broker.status(),
            "demand_view_ready": self.view_ready,
            "open_requirements": len(self.view.open_requirements()),
            "inflight": self.inflight,
            "pending": len(self.pending),
            "loop_lag_ms": round(self.lag_s * 1000, 1),
            "uptime_s": round(time.time() - self.started_at, 3),
            "stats": {k: v for k, v in asdict(self.stats).items() if k != "consumer_lag"},
        }


# -- HTTP --------------------------------------------------------------------------------

GATEWAY = web.AppKey("gateway", Gateway)


def create_app(settings: Settings | None = None) -> web.Application:
    """The aiohttp application (settings: default from the environment, with the gateway's
    Kafka principal): the device endpoints, the job API and the dashboard over one
    gateway's Kafka side; its startup connects to Kafka, its cleanup disconnects. Serve it
    with `SERVER_OPTIONS`."""
    gw = Gateway((settings or Settings.from_env()).for_role("gateway"))
    ctx = gw.context()
    registry = CollectorRegistry()
    registry.register(StatsCollector("venn_gateway", lambda: gw.stats, gw.gauges))
    latency = Histogram(
        "venn_gateway_request_seconds",
        "Time from the request's arrival to its answer, by path and status (arrival: when its "
        "handler ran, or the start of the event-loop stall it was read after: loop_watch.py)",
        ["path", "status"],
        buckets=LATENCY_BUCKETS,
        registry=registry,
    )

    # Each (route, status)'s histogram child, looked up once: labels() costs a lock and
    # the label checks on every request.
    observers: dict[tuple[Any, int], Callable[[float], None]] = {}

    @web.middleware
    async def timed(request: web.Request, handler: Handler) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        arrived = gw.loop_watch.arrived(loop.time())
        response = await handler(request)
        route = request.match_info.route.resource
        key = (route, response.status)
        observe = observers.get(key)
        if observe is None:
            path = route.canonical if route is not None else "other"
            observe = observers[key] = latency.labels(path, str(response.status)).observe
        observe(loop.time() - arrived)
        return response

    app = web.Application(
        client_max_size=gw.config.max_body_bytes,
        middlewares=[timed, uncompressed, errors(gw.stats, gw.config.busy_retry_after_s)],
    )
    app[GATEWAY] = gw
    spec = _encode(openapi_document(gw.settings))

    async def kafka(_app: web.Application) -> AsyncIterator[None]:
        await gw.start_when_reachable()
        yield
        await gw.stop()

    def following(feed: TopicFollower) -> Callable[[web.Application], AsyncIterator[None]]:
        async def run(_app: web.Application) -> AsyncIterator[None]:
            await feed.start()
            yield
            await feed.stop()

        return run

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=exposition(registry), headers={"Content-Type": CONTENT_TYPE})

    async def healthz(request: web.Request) -> web.Response:
        health = gw.health()
        return json_response(health, 200 if health["status"] == "ok" else 503)

    async def openapi(request: web.Request) -> web.Response:
        return web.Response(body=spec, content_type="application/json")

    app.cleanup_ctx.extend([kafka, following(gw.status), following(gw.dead_letters)])
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/openapi.json", openapi)
    app.router.add_get("/metrics", metrics)
    devices.register(app, gw, ctx)
    wanted.register(app, ctx)
    jobs_api.register(app, ctx)
    dashboard.register(app, ctx, gw.dead_letters.tally)
    return app


class GatewayServer:
    """create_app + an aiohttp site; `await start()` returns the bound port."""

    def __init__(self, settings: Settings | None = None, reuse_port: bool = False) -> None:
        self.reuse_port = reuse_port
        self.app = create_app(settings)
        self.settings = self.gateway.settings
        self.config = self.gateway.config
        self.runner: web.AppRunner | None = None
        self.port = self.config.port

    @property
    def gateway(self) -> Gateway:
        return self.app[GATEWAY]

    @property
    def url(self) -> str:
        return f"http://{self.config.host}:{self.port}"

    async def start(self) -> int:
        self.runner = web.AppRunner(
            self.app,
            access_log=None,
            handle_signals=False,
            # aiohttp closes a connection still waiting for a request's headers when this
            # expires (it is armed at connect): the header timeout, and the keep-alive idle.
            keepalive_timeout=self.config.idle_timeout_s,
            **SERVER_OPTIONS,
        )
        await self.runner.setup()
        site = web.TCPSite(
            self.runner,
            self.config.host,
            self.config.port,
            backlog=2048,
            reuse_port=self.reuse_port or None,
        )
        try:
            await site.start()
        except BaseException:
            await self.runner.cleanup()
            raise
        address = self.runner.addresses[0]
        self.port = int(address[1])
        return self.port

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None


async def run_gateway(
    settings: Settings | None,
    stop_event: asyncio.Event,
    *,
    reuse_port: bool = False,
    on_ready: Callable[[GatewayServer], None] | None = None,
) -> GatewayStats:
    """Serve until `stop_event` is set. Returns the counters."""
    server = GatewayServer(settings, reuse_port=reuse_port)
    await server.start()
    log.info("gateway listening on %s", server.url)
    if on_ready is not None:
        on_ready(server)
    try:
        await stop_event.wait()
    finally:
        stats = server.gateway.stats
        await server.stop()
    return stats
