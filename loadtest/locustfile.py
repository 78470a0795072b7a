"""Locust users that emulate a fleet of millions of devices against Venn.

- `DeviceUser` (HTTP): one Locust user stands for many devices. Each check-in draws a
  device id uniformly from a population of `VENN_LOADTEST_POPULATION` (default 5 million);
  the device's attributes are those of its paper profile (`venn.traces.devices`, profile
  = id % 959) and its speed/bandwidth come from the synthetic trace's per-device capacity
  (`venn.traces.checkins.synthetic_capacity`). Check-ins follow the synthetic trace's
  diurnal curve (peak at 22:00, amplitude 0.5) compressed so that one day lasts
  `VENN_LOADTEST_DAY_S` wall seconds, as Poisson arrivals. An assigned device uploads its
  result after a short, compressed task time.
- `KafkaCheckinUser`: produces DeviceCheckin events straight to venn.checkins with
  confluent-kafka (`Producer.produce()`, a greenlet calling `poll(0)` every 10 ms), firing
  Locust's request event per delivery report: broker-level load without HTTP. Its devices
  are ineligible for every tier unless `VENN_LOADTEST_KAFKA_ELIGIBLE=1` (see below).

Answers are reported under distinct names (`/v1/checkin [assigned]`, `[no_open_round]`,
`[no_assignment]`, `[overloaded]`); a request fails if it gets anything but a valid
answer, or gets it later than the gateway's bound (`VENN_GATEWAY_WAIT_S`) plus 1 s.

Run it through `loadtest/run.py`, which starts the embedded stack first.
"""

from __future__ import annotations

import heapq
import math
import os
import random
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import gevent
from locust import HttpUser, User, events, task
from locust.env import Environment

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from confluent_kafka import KafkaException, Producer  # noqa: E402

from venn import events as ev  # noqa: E402
from venn.broker import topics  # noqa: E402
from venn.core.capacity import measures_of  # noqa: E402
from venn.traces.checkins import (  # noqa: E402
    DAY_S,
    DIURNAL_AMPLITUDE,
    PEAK_S,
    synthetic_capacity,
)
from venn.traces.devices import load_device_profiles  # noqa: E402

POPULATION = int(os.environ.get("VENN_LOADTEST_POPULATION", "5000000"))
DAY_WALL_S = float(os.environ.get("VENN_LOADTEST_DAY_S", "120"))
START_HOUR = float(os.environ.get("VENN_LOADTEST_START_HOUR", "18"))
PEAK_RATE = float(os.environ.get("VENN_LOADTEST_PEAK_RATE", "4"))
"""Check-ins per second of one HTTP user at the diurnal peak."""
KAFKA_PEAK_RATE = float(os.environ.get("VENN_LOADTEST_KAFKA_PEAK_RATE", "200"))
"""Check-ins per second of one Kafka user at the diurnal peak."""
KAFKA_USERS = int(os.environ.get("VENN_LOADTEST_KAFKA_USERS", "1"))
KAFKA_ELIGIBLE = os.environ.get("VENN_LOADTEST_KAFKA_ELIGIBLE", "0") == "1"
"""By default the Kafka user's devices have the profiles no requirement tier admits: they
load the broker and the scheduler's decision path but take no demand from the HTTP
devices (they never upload results, so they would hold every round until its deadline)."""
TASK_S = (0.2, 1.5)
"""Wall-clock task time of an assigned device (compressed), uniform in this range."""
FAILURE_RATE = 0.05
WAIT_BOUND_S = float(os.environ.get("VENN_GATEWAY_WAIT_S", "2.0"))
BROKER = os.environ.get("VENN_BROKER", "127.0.0.1:9092")
SEED = int(os.environ.get("VENN_SEED", "0"))

PROFILES = load_device_profiles()
_started = time.monotonic()


def diurnal_factor(now: float | None = None) -> float:
    """Check-in rate relative to the peak, in [(1-A)/(1+A), 1], on compressed time."""
    wall = (time.monotonic() if now is None else now) - _started
    trace_t = START_HOUR * 3600.0 + wall * DAY_S / DAY_WALL_S
    phase = 2.0 * math.pi * (trace_t - PEAK_S) / DAY_S
    return (1.0 + DIURNAL_AMPLITUDE * math.cos(phase)) / (1.0 + DIURNAL_AMPLITUDE)


def paced(peak_rate: float) -> float:
    """A Poisson inter-arrival time at the current point of the compressed day."""
    return random.expovariate(max(peak_rate * diurnal_factor(), 1e-6))


UNTIERED = [i for i, met in enumerate(PROFILES.tiers_met) if not met]


def device(number: int, untiered: bool = False) -> tuple[str, dict[str, float], float, float]:
    """Device `number` of the population: id, attributes, ms/sample, kbps (deterministic).

    With `untiered`, the device gets one of the profiles that meet no requirement tier."""
    profile = UNTIERED[number % len(UNTIERED)] if untiered else number % len(PROFILES)
    attrs = PROFILES.attrs[profile]
    comp, comm = synthetic_capacity(np.array([number]), SEED)
    speeds, bandwidths = measures_of(comp, comm)
    speed, bandwidth = round(float(speeds[0]), 3), round(float(bandwidths[0]), 3)
    reported = {k: v for k, v in attrs.items() if k != "speed_ms_per_sample"}
    return f"dev-{number:09d}", reported, speed, bandwidth


class DeviceUser(HttpUser):
    """Many devices behind one user: check-ins over HTTP, results for assignments."""

    weight = 10

    def wait_time(self) -> float:
        return paced(PEAK_RATE)

    def on_start(self) -> None:
        self.due: list[tuple[float, int, dict[str, Any]]] = []
        self.seq = 0

    @task
    def checkin(self) -> None:
        self.upload_due_results()
        number = random.randrange(POPULATION)
        device_id, attrs, speed, bandwidth = device(number)
        body = {
            "device_id": device_id,
            "attrs": attrs,
            "speed_ms_per_sample": speed,
            "bandwidth_kbps": bandwidth,
        }
        with self.client.post(
            "/v1/checkin",
            json=body,
            name="/v1/checkin",
            catch_response=True,
            timeout=WAIT_BOUND_S + 5.0,
        ) as response:
            outcome = self._judge(response)
            response.request_meta["name"] = f"/v1/checkin [{outcome[0]}]"
            if outcome[1] is not None:
                response.failure(outcome[1])
                return
            response.success()
            payload = outcome[2]
            if payload.get("assigned"):
                task_s = random.uniform(*TASK_S)
                ok = random.random() >= FAILURE_RATE
                result = {
                    "device_id": device_id,
                    "job_id": payload["job_id"],
                    "round_index": payload["round_index"],
                    "ok": ok,
                    "response_time_s": round(task_s, 3),
                    "reason": None if ok else "device dropped out",
                }
                self.seq += 1
                heapq.heappush(self.due, (time.monotonic() + task_s, self.seq, result))

    def _judge(self, response: Any) -> tuple[str, str | None, dict[str, Any]]:
        """(answer name, failure reason or None, payload) of a check-in response."""
        elapsed = response.request_meta.get("response_time", 0.0) / 1000.0
        try:
            payload = response.json()
        except Exception:
            return f"http {response.status_code}", f"not JSON: {response.text[:100]!r}", {}
        if not isinstance(payload, dict):
            return "bad", "answer is not an object", {}
        if elapsed > WAIT_BOUND_S + 1.0:
            return "late", f"answered after {elapsed:.2f} s (bound {WAIT_BOUND_S} s)", payload
        status = response.status_code
        if status == 200 and payload.get("assigned") is True:
            missing = {"job_id", "round_index", "task_url"} - set(payload)
            return "assigned", f"assignment lacks {missing}" if missing else None, payload
        if status in (200, 429) and payload.get("assigned") is False:
            reason = str(payload.get("reason", "?"))
            retry = payload.get("retry_after")
            if not isinstance(retry, int) or retry < 0:
                return reason, "no retry_after", payload
            return reason, None, payload
        return f"http {status}", f"unexpected answer {status}: {response.text[:200]}", payload

    def upload_due_results(self) -> None:
        now = time.monotonic()
        while self.due and self.due[0][0] <= now:
            _, _, result = heapq.heappop(self.due)
            with self.client.post(
                "/v1/results",
                json=result,
                name="/v1/results",
                catch_response=True,
                timeout=WAIT_BOUND_S + 5.0,
            ) as response:
                if response.status_code == 202:
                    response.success()
                elif response.status_code == 429:
                    response.success()  # a valid answer: the device retries later
                    response.request_meta["name"] = "/v1/results [overloaded]"
                else:
                    response.failure(f"{response.status_code}: {response.text[:200]}")


class KafkaCheckinUser(User):
    """Broker-level load: check-ins produced straight to venn.checkins."""

    fixed_count = KAFKA_USERS
    batch = 10
    _producer: ClassVar[Producer | None] = None

    def wait_time(self) -> float:
        return paced(KAFKA_PEAK_RATE / self.batch)

    @classmethod
    def producer(cls) -> Producer:
        if cls._producer is None:
            cls._producer = Producer(
                {
                    "bootstrap.servers": BROKER,
                    "client.id": f"venn-locust-{os.getpid()}",
                    "acks": 1,
                    "linger.ms": 5,
                    "enable.idempotence": False,  # Tansu has no InitProducerId
                    "partitioner": "murmur2_random",  # the Java/aiokafka key -> partition map
                }
            )
            gevent.spawn(_poll_forever, cls._producer)
        return cls._producer

    def on_start(self) -> None:
        self.producer()

    @task
    def produce_checkins(self) -> None:
        producer = self.producer()
        fire = self.environment.events.request.fire
        for _ in range(self.batch):
            number = random.randrange(POPULATION)
            device_id, attrs, speed, bandwidth = device(number, untiered=not KAFKA_ELIGIBLE)
            value = ev.encode(
                ev.DeviceCheckin(
                    event_id=f"lt-{os.urandom(12).hex()}",
                    time=time.time(),
                    device_id=device_id,
                    attrs=attrs,
                    speed_ms_per_sample=speed,
                    bandwidth_kbps=bandwidth,
                )
            )
            sent = time.perf_counter()

            def delivered(err: Any, msg: Any, sent: float = sent, size: int = len(value)) -> None:
                fire(
                    request_type="KAFKA",
                    name=f"produce {topics.CHECKINS}",
                    response_time=(time.perf_counter() - sent) * 1000.0,
                    response_length=size,
                    exception=KafkaException(err) if err is not None else None,
                    context={},
                )

            for _attempt in range(3):
                try:
                    producer.produce(
                        topics.CHECKINS, value=value, key=device_id, on_delivery=delivered
                    )
                    break
                except BufferError:
                    producer.poll(0.05)  # local queue full: let deliveries drain
            else:
                fire(
                    request_type="KAFKA",
                    name=f"produce {topics.CHECKINS}",
                    response_time=0.0,
                    response_length=0,
                    exception=BufferError("producer queue full"),
                    context={},
                )


def _poll_forever(producer: Producer) -> None:
    while True:
        producer.poll(0)
        gevent.sleep(0.01)


@events.test_stopping.add_listener
def _flush(environment: Environment, **_: Any) -> None:
    if KafkaCheckinUser._producer is not None:
        KafkaCheckinUser._producer.flush(5.0)
