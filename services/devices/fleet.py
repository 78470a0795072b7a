"""The device fleet emulator: replays a check-in trace on the wall clock and plays the
devices' side of every assignment (train, upload, or drop out when the window ends).

Check-ins due at the same tick are packed into CheckinBatch events, which is what keeps a
dense trace at broker and scheduler speed.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
import math
import time
import uuid
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import msgspec
import numpy as np
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.partitioner import DefaultPartitioner

from venn import events
from venn.auth.local import issuer
from venn.broker import topics
from venn.broker.publish import KafkaEvents
from venn.broker.stream import EventStream, KafkaRecords, owned_by
from venn.core.capacity import measures_of
from venn.events import Assignment, DeviceCheckin, DeviceResult
from venn.sdk.clock import TraceClock
from venn.settings import Settings
from venn.traces.checkins import (
    CheckinBatch,
    CheckinSource,
    SyntheticTrace,
    task_duration,
)
from venn.traces.devices import DeviceProfiles, load_device_profiles

log = logging.getLogger(__name__)

WINDOW_SLACK_S = 80.0
"""A task may overrun its device's availability window by this much (paper §1)."""
TICK_S = 0.02
FLEET_BATCH = 128
"""Most check-ins in one CheckinBatch (about 32 KB, under the event size limit)."""
"""Longest wall-clock sleep of the replay loop: bounds how late a due event is sent."""


@dataclass
class FleetStats:
    """What the fleet did so far (read by progress displays and tests)."""

    checkins: int = 0
    assignments: int = 0
    results_ok: int = 0
    results_failed: int = 0
    refused: int = 0  # assignments to a device already serving its check-in's task
    unknown: int = 0  # assignments to devices this fleet has no open check-in for
    repeated: int = 0  # an assignment this device already took, published again
    http_errors: int = 0  # check-ins or uploads the gateway did not answer (HTTP mode)
    invalid: int = 0  # assignment records it could not use, skipped (their owner dead-letters)
    trace_time: float = 0.0


@dataclass
class _Window:
    end: float
    duration: float
    served: str | None = None
    """The id of the assignment it took for this check-in."""


@dataclass(order=True)
class _Due:
    at: float
    seq: int
    result: DeviceResult = field(compare=False)


def synthetic_source(
    rate_per_s: float = 3.0, num_devices: int | None = None, seed: int = 0
) -> SyntheticTrace:
    """The synthetic trace at ``rate_per_s`` check-ins per trace second.

    Without ``num_devices`` the fleet is made just large enough (at least the paper's
    136k) that a device's availability windows never overlap at that rate.
    """
    if num_devices is None:
        # SyntheticTrace needs 0.9 * devices / peak_rate above its 4 h window cap.
        peak = rate_per_s * 1.5
        num_devices = max(136_000, math.ceil(1.1 * 4 * 3600 * peak / 0.9))
    return SyntheticTrace(seed=seed, num_devices=num_devices, rate_per_s=rate_per_s)


class DeviceFleet:
    """Emulated devices behind one producer and one assignments consumer."""

    def __init__(
        self,
        settings: Settings,
        source: CheckinSource,
        clock: TraceClock,
        *,
        profiles: DeviceProfiles | None = None,
        workload_s: float = 30.0,
        slack_s: float = WINDOW_SLACK_S,
        stats: FleetStats | None = None,
    ) -> None:
        self.settings = settings
        self.source = source
        self.clock = clock
        self.profiles = profiles or load_device_profiles()
        self.workload_s = workload_s
        self.slack_s = slack_s
        self.stats = stats or FleetStats()
        self._run = uuid.uuid4().hex[:8]
        self._windows: dict[str, _Window] = {}
        self._due: list[_Due] = []
        self._seq = 0
        self._batches = 0
        self._partitions: list[int] = []
        self._partitioner = DefaultPartitioner()
        self._wake = asyncio.Event()
        self._producer: AIOKafkaProducer | None = None
        self._send_errors = 0

    # -- check-ins -------------------------------------------------------------------

    def _checkin_events(self, batch: CheckinBatch) -> Iterator[DeviceCheckin]:
        now = time.time()
        speed_arr, bandwidth_arr = measures_of(batch.comp, batch.comm)
        speeds, bandwidths = speed_arr.tolist(), bandwidth_arr.tolist()
        for i in range(len(batch)):
            device = str(int(batch.device_id[i]))
            self.stats.checkins += 1
            yield DeviceCheckin(
                event_id=f"{self._run}-{self.stats.checkins}",
                time=now,
                device_id=device,
                attrs=self.profiles.attrs[int(batch.profile[i])],
                speed_ms_per_sample=speeds[i],
                bandwidth_kbps=bandwidths[i],
            )

    def _open_windows(self, batch: CheckinBatch) -> None:
        durations = task_duration(batch, self.workload_s)
        for i in range(len(batch)):
            self._windows[str(int(batch.device_id[i]))] = _Window(
                end=float(batch.end[i]), duration=float(durations[i])
            )

    async def _publish_checkins(self, batch: CheckinBatch) -> None:
        assert self._producer is not None
        self._open_windows(batch)
        # Each tick's check-ins go out as CheckinBatch events (one Kafka message per
        # partition and FLEET_BATCH check-ins): the scheduler's cost is per message. A batch
        # holds devices of one partition, the one their device_id key maps to.
        by_partition: dict[int, list[bytes]] = {}
        for event in self._checkin_events(batch):
            key = event.device_id.encode()
            partition = self._partitioner(key, self._partitions, self._partitions)
            by_partition.setdefault(partition, []).append(events.encode(event))
        for partition, encoded in by_partition.items():
            for start in range(0, len(encoded), FLEET_BATCH):
                self._batches += 1
                batch_id = f"{self._run}-b{self._batches}"
                value = events.encode_checkin_batch(
                    batch_id, time.time(), encoded[start : start + FLEET_BATCH]
                )
                fut = await self._producer.send(
                    topics.CHECKINS, value, key=batch_id.encode(), partition=partition
                )
                fut.add_done_callback(self._on_sent)

    def _on_sent(self, fut: asyncio.Future[object]) -> None:
        if not fut.cancelled() and fut.exception() is not None:
            self._send_errors += 1
            log.error("send failed: %s", fut.exception())

    # -- assignments -> results ------------------------------------------------------

    def on_assignment(self, a: Assignment, now: float) -> None:
        """Start this device's task (or refuse it), scheduling its result."""
        window = self._windows.get(a.device_id)
        if window is None:
            self.stats.unknown += 1
            return
        if window.served == a.event_id:
            # Published again by a new decider (it cannot know what got out before its
            # predecessor died): the device runs it once, as a device of the SDK does.
            self.stats.repeated += 1
            return
        self.stats.assignments += 1
        if window.served is not None:
            # One task per check-in: a second assignment for the same check-in is refused.
            self.stats.refused += 1
            self._schedule(a, now, ok=False, elapsed=0.0, reason="device busy")
            return
        window.served = a.event_id
        limit = window.end + self.slack_s
        if now + window.duration <= limit:
            self._schedule(a, now + window.duration, ok=True, elapsed=window.duration)
        else:
            at = max(now, limit)
            self._schedule(a, at, ok=False, elapsed=at - now, reason="window ended")

    def _schedule(
        self, a: Assignment, at: float, *, ok: bool, elapsed: float, reason: str | None = None
    ) -> None:
        self._seq += 1
        result = DeviceResult(
            event_id=f"{self._run}-r{self._seq}",
            time=0.0,  # stamped when sent
            job_id=a.job_id,
            round_index=a.round_index,
            device_id=a.device_id,
            ok=ok,
            response_time_s=max(0.0, elapsed),
            reason=reason,
        )
        heapq.heappush(self._due, _Due(at, self._seq, result))
        self._wake.set()

    def _due_results(self, now: float) -> Iterator[DeviceResult]:
        while self._due and self._due[0].at <= now:
            item = heapq.heappop(self._due)
            result = msgspec.structs.replace(item.result, time=time.time())
            if result.ok:
                self.stats.results_ok += 1
            else:
                self.stats.results_failed += 1
            yield result

    async def _publish_due_results(self, now: float) -> None:
        assert self._producer is not None
        for result in self._due_results(now):
            fut = await KafkaEvents(self._producer).enqueue(topics.RESULTS, result)
            fut.add_done_callback(self._on_sent)

    async def _consume_assignments(self, consumer: AIOKafkaConsumer) -> None:
        assert self._producer is not None
        # The scheduler owns venn.assignments' dead letters: a bad record is skipped and
        # counted here.
        stream = EventStream(
            KafkaRecords(consumer), KafkaEvents(self._producer), owned_by("devices")
        )
        while True:
            batch = await stream.read(timeout_ms=200, max_records=5000)
            now = self.clock.now()

            def assign(event: events.Event, now: float = now) -> None:
                for assignment in events.assignments_of(event):
                    self.on_assignment(assignment, now)

            await stream.apply(batch, assign)
            self.stats.invalid = stream.stats.bad_records

    # -- main loop -------------------------------------------------------------------

    def _evict(self, now: float) -> None:
        gone = [d for d, w in self._windows.items() if w.end + self.slack_s < now]
        for device in gone:
            del self._windows[device]

    async def run(
        self, stop: asyncio.Event, start: float = 0.0, end: float = math.inf
    ) -> FleetStats:
        """Replay check-ins with ``start <= t < end`` until ``stop`` is set."""
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self.settings.broker,
            client_id="venn-devices",
            acks=1,
            linger_ms=2,
            **self.settings.kafka_options,
        )
        await self._producer.start()
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.settings.broker,
            client_id="venn-devices",
            group_id=None,
            enable_auto_commit=False,
            **self.settings.kafka_options,
        )
        await consumer.start()
        pump: asyncio.Task[None] | None = None
        try:
            self._partitions = sorted(await self._producer.partitions_for(topics.CHECKINS))
            parts = [
                TopicPartition(topics.ASSIGNMENTS, p)
                for p in sorted(await self._producer.partitions_for(topics.ASSIGNMENTS))
            ]
            consumer.assign(parts)
            await consumer.seek_to_end(*parts)
            for tp in parts:
                await consumer.position(tp)
            pump = asyncio.create_task(self._consume_assignments(consumer))
            await self._replay(stop, start, end)
        finally:
            if pump is not None:
                pump.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pump
            await consumer.stop()
            await self._producer.flush()
            await self._producer.stop()
        return self.stats

    async def _replay(self, stop: asyncio.Event, start: float, end: float) -> None:
        chunks = self.source.chunks(start, end)
        batch: CheckinBatch | None = next(chunks, None)
        pos = 0
        last_evict = -math.inf
        while not stop.is_set():
            now = self.clock.now()
            self.stats.trace_time = now
            while batch is not None:
                hi = int(np.searchsorted(batch.time, now, side="right"))
                if hi > pos:
                    await self._publish_checkins(batch.slice(pos, hi))
                    pos = hi
                if pos < len(batch):
                    break
                batch, pos = next(chunks, None), 0
            await self._publish_due_results(now)
            if now - last_evict > 60.0:
                self._evict(now)
                last_evict = now
            wake_at = now + TICK_S * self.clock.speedup
            if batch is not None:
                wake_at = min(wake_at, float(batch.time[pos]))
            if self._due:
                wake_at = min(wake_at, self._due[0].at)
            self._wake.clear()
            delay = max(0.0, self.clock.wall_at(wake_at) - time.time())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), delay)


class HttpDeviceFleet(DeviceFleet):
    """The same devices, speaking HTTP to a gateway as real devices do: a check-in is a
    POST answered with an assignment or retry_after, a result is a POST. A gateway that
    does not answer (restarting, overloaded) costs the device its check-in; a result upload
    is retried a few times."""

    RESULT_TRIES = 5

    def __init__(self, gateway_url: str, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.gateway_url = gateway_url.rstrip("/")
        self._tokens = issuer(self.settings)
        self._http: aiohttp.ClientSession | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _publish_checkins(self, batch: CheckinBatch) -> None:
        self._open_windows(batch)
        for event in self._checkin_events(batch):
            self._spawn(self._checkin(event))

    def _auth(self, device_id: str) -> dict[str, str]:
        """The device's token (minted here: the emulator holds the deployment's secret)."""
        if self._tokens is None:
            return {}
        token = self._tokens.issue("device", device_id, ttl_s=3600)
        return {"Authorization": f"Bearer {token}"}

    async def _checkin(self, event: DeviceCheckin) -> None:
        assert self._http is not None
        body = {
            "device_id": event.device_id,
            "attrs": event.attrs,
            "speed_ms_per_sample": event.speed_ms_per_sample,
            "bandwidth_kbps": event.bandwidth_kbps,
        }
        try:
            url = f"{self.gateway_url}/v1/checkin"
            async with self._http.post(url, json=body, headers=self._auth(event.device_id)) as r:
                answer = await r.json() if r.status == 200 else None
        except (aiohttp.ClientError, TimeoutError, ValueError):
            answer = None
        if answer is None:
            self.stats.http_errors += 1
            return
        if answer.get("assigned"):
            assignment = Assignment(
                event_id=f"http:{answer['checkin_id']}",
                time=time.time(),
                job_id=answer["job_id"],
                round_index=answer["round_index"],
                device_id=event.device_id,
                task_url=answer["task_url"],
                speed_ms_per_sample=event.speed_ms_per_sample,
                bandwidth_kbps=event.bandwidth_kbps,
            )
            self.on_assignment(assignment, self.clock.now())

    async def _publish_due_results(self, now: float) -> None:
        for result in self._due_results(now):
            self._spawn(self._upload(result))

    async def _upload(self, result: DeviceResult) -> None:
        assert self._http is not None
        body = {
            "device_id": result.device_id,
            "job_id": result.job_id,
            "round_index": result.round_index,
            "ok": result.ok,
            "response_time_s": result.response_time_s,
            "reason": result.reason,
        }
        for attempt in range(self.RESULT_TRIES):
            try:
                url = f"{self.gateway_url}/v1/results"
                headers = self._auth(result.device_id)
                async with self._http.post(url, json=body, headers=headers) as r:
                    if r.status == 202:
                        return
            except (aiohttp.ClientError, TimeoutError):
                pass
            await asyncio.sleep(0.5 * 2**attempt)
        self.stats.http_errors += 1

    async def run(
        self, stop: asyncio.Event, start: float = 0.0, end: float = math.inf
    ) -> FleetStats:
        timeout = aiohttp.ClientTimeout(total=10)
        connector = aiohttp.TCPConnector(limit=256)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as http:
            self._http = http
            try:
                await self._replay(stop, start, end)
            finally:
                if self._tasks:
                    await asyncio.wait(list(self._tasks), timeout=15)
                self._http = None
        return self.stats


async def run_devices(
    settings: Settings,
    source: CheckinSource,
    speedup: float,
    stop_event: asyncio.Event,
    *,
    clock: TraceClock | None = None,
    start: float = 0.0,
    end: float = math.inf,
    stats: FleetStats | None = None,
    workload_s: float = 30.0,
    gateway_url: str | None = None,
) -> FleetStats:
    """Replay ``source`` at ``speedup`` x wall clock until ``stop_event`` is set, straight
    to Kafka, or through the gateway at ``gateway_url`` (HTTP, as real devices do).

    ``clock`` (default: trace time ``start`` now) lets coordinators share the fleet's
    trace time. Returns the fleet's counters.
    """
    clock = clock or TraceClock(speedup=speedup, origin=start)
    fleet = (
        HttpDeviceFleet(gateway_url, settings, source, clock, workload_s=workload_s, stats=stats)
        if gateway_url
        else DeviceFleet(settings, source, clock, workload_s=workload_s, stats=stats)
    )
    return await fleet.run(stop_event, start, end)
