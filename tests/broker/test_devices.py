"""The device fleet emulator against the real broker: check-ins on the scaled clock,
results after the device's task time, failures at the window's end, one task per check-in."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import random
import time
from collections.abc import Iterator

import numpy as np
from aiokafka import AIOKafkaProducer

from services.devices import FleetStats, run_devices
from tests.event_recorder import Published
from venn import events
from venn.broker import topics
from venn.broker.topics import ensure_topics
from venn.events import Assignment, DeviceCheckin, DeviceResult
from venn.sdk import TraceClock, new_event_id
from venn.settings import Settings
from venn.traces.checkins import CheckinBatch

SPEEDUP = 50.0


@dataclasses.dataclass
class HandMadeTrace:
    """Three check-ins with known windows and capacities."""

    base: int
    name: str = "hand-made"

    def chunks(self, start: float = 0.0, end: float = math.inf) -> Iterator[CheckinBatch]:
        b = self.base
        yield CheckinBatch(
            time=np.array([0.0, 0.0, 0.0, 60.0]),
            # fast device, long window | slow device, window ends 10 s in | busy test | late
            end=np.array([3600.0, 10.0, 3600.0, 3600.0]),
            device_id=np.array([b, b + 1, b + 2, b + 3]),
            profile=np.array([0, 1, 2, 3]),
            comp=np.array([1.0, 3.0, 1.0, 1.0]),  # task = 30*comp + 20/comm
            comm=np.array([1.0, 1.0, 1.0, 1.0]),
            noise=np.zeros(4),
            u=np.zeros(4),
        )


def assignment(job: str, device: int) -> Assignment:
    return Assignment(
        event_id=new_event_id(),
        time=time.time(),
        job_id=job,
        round_index=0,
        device_id=str(device),
        task_url="http://example/task",
        speed_ms_per_sample=78.0,
        bandwidth_kbps=13736.0,
    )


async def test_checkins_results_and_failures_follow_the_trace_clock(
    broker: str, unique: str, published: Published
) -> None:
    await ensure_topics(broker, 4)
    base = random.randrange(10**8, 10**9)
    job = f"fleet-{unique}"
    settings = dataclasses.replace(Settings.from_env({}), broker=broker)

    watcher = await published(topics.CHECKINS, topics.RESULTS)
    stop = asyncio.Event()
    stats = FleetStats()
    clock = TraceClock(speedup=SPEEDUP)
    fleet = asyncio.create_task(
        run_devices(settings, HandMadeTrace(base), SPEEDUP, stop, clock=clock, stats=stats)
    )
    producer = AIOKafkaProducer(bootstrap_servers=broker)
    await producer.start()
    checkins: dict[str, tuple[float, DeviceCheckin]] = {}
    results: list[tuple[float, DeviceResult]] = []
    sent_at: dict[str, float] = {}
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (len(checkins) < 4 or len(results) < 5):
            await asyncio.sleep(0.1)
            # When each was read, on the trace clock.
            checkins = {
                c.device_id: (clock.trace_at(r.seen_at), c)
                for r in watcher.on(topics.CHECKINS)
                for c in events.checkins_of(r.event)  # type: ignore[arg-type]
                if c.device_id.isdigit() and int(c.device_id) >= base
            }
            results = [
                (clock.trace_at(r.seen_at), r.event)
                for r in watcher.on(topics.RESULTS, lambda e: e.job_id == job)
                if isinstance(r.event, DeviceResult)
            ]
            ready = [d for d in map(str, range(base, base + 3)) if d in checkins]
            if len(ready) == 3 and not sent_at:
                sent_at["first"] = clock.now()
                # Device base+2 is assigned twice for one check-in: the second is refused.
                # Device base's assignment is published again (as a new decider does): it
                # runs it once.
                first = assignment(job, base)
                for a in (
                    first,
                    assignment(job, base + 1),
                    assignment(job, base + 2),
                    assignment(job, base + 2),
                    first,
                ):
                    await producer.send_and_wait(
                        topics.ASSIGNMENTS, events.encode(a), key=job.encode()
                    )
            if str(base + 3) in checkins and "late" not in sent_at:
                a = assignment(job, base + 3)
                await producer.send_and_wait(topics.ASSIGNMENTS, events.encode(a), key=job.encode())
                sent_at["late"] = clock.now()
    finally:
        stop.set()
        await fleet
        await producer.stop()

    # Check-ins come out at trace time t (wall t / speedup), with the profile's attributes.
    assert set(checkins) == {str(base + i) for i in range(4)}
    assert checkins[str(base + 3)][0] >= 60.0
    assert checkins[str(base)][0] < 30.0
    assert checkins[str(base)][1].speed_ms_per_sample == 78.0
    assert checkins[str(base)][1].attrs  # the profile's public attributes

    by_device = defaultdict_list(results)
    fast = by_device[str(base)]
    assert [(r.ok, r.response_time_s) for _, r in fast] == [(True, 50.0)]
    # Its result came after its 50 s task (trace time), not before and not much later.
    assert 50.0 <= fast[0][0] - sent_at["first"] <= 50.0 + 0.5 * SPEEDUP

    slow = by_device[str(base + 1)]
    # 110 s task, but the window ends at 10 s (+80 s slack): the device drops out at 90 s.
    assert [(r.ok, r.reason) for _, r in slow] == [(False, "window ended")]
    assert slow[0][0] <= 90.0 + 0.5 * SPEEDUP

    busy = by_device[str(base + 2)]
    assert sorted((r.ok, r.reason) for _, r in busy) == [(False, "device busy"), (True, None)]
    assert [r.ok for _, r in by_device[str(base + 3)]] == [True]
    assert stats.refused == 1 and stats.results_ok == 3 and stats.results_failed == 2
    assert stats.repeated == 1


def defaultdict_list(
    results: list[tuple[float, DeviceResult]],
) -> dict[str, list[tuple[float, DeviceResult]]]:
    out: dict[str, list[tuple[float, DeviceResult]]] = {}
    for at, r in results:
        out.setdefault(r.device_id, []).append((at, r))
    return out
