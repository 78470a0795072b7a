"""Locust users that emulate a fleet of millions of devices against Venn.

    venn up                                   # or any deployment; then, beside it:
    locust -f loadtest/locustfile.py --host http://127.0.0.1:8080 --processes 2

Settings come from the environment (the load test section of `venn.settings`,
VENN_LOADTEST_*; docs/configuration.md), and beside `venn up` from its run dir (the broker,
the Kafka credentials of the `devices` principal, and the secret an enrol token is minted
with). Elsewhere give an enrol token: `VENN_LOADTEST_ENROLL_TOKEN=$(venn token enroll)`.

- `DeviceUser` (HTTP, Locust's FastHttpUser): one Locust user stands for many devices. A
  device enrols (`POST /v1/devices` with the enrol token) before its first check-in, and
  checks in and uploads results with its own device token. Each check-in draws a
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
`[no_assignment]`, `[overloaded]`; enrolments as `/v1/devices [enrol]`); a request fails if
it gets anything but a valid answer, or gets it later than the gateway's bound
(`VENN_GATEWAY_WAIT_S`) plus 1 s.

`loadtest/run.py` starts a secured embedded stack first and runs Locust against it.
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
from locust import User, events, task
from locust.contrib.fasthttp import FastHttpUser
from locust.env import Environment

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from confluent_kafka import KafkaException, Producer  # noqa: E402

from venn import events as ev  # noqa: E402
from venn.auth import Tokens  # noqa: E402
from venn.broker import topics  # noqa: E402
from venn.broker.security import librdkafka_options  # noqa: E402
from venn.core.capacity import measures_of  # noqa: E402
from venn.settings import Settings  # noqa: E402
from venn.traces.checkins import (  # noqa: E402
    DAY_S,
    DIURNAL_AMPLITUDE,
    PEAK_S,
    synthetic_capacity,
)
from venn.traces.devices import load_device_profiles  # noqa: E402

SETTINGS = Settings.from_env()
LOAD = SETTINGS.loadtest
POPULATION = LOAD.population
DAY_WALL_S = LOAD.day_s
START_HOUR = LOAD.start_hour
PEAK_RATE = LOAD.peak_rate
KAFKA_PEAK_RATE = LOAD.kafka_peak_rate
KAFKA_USERS = LOAD.kafka_users
KAFKA_ELIGIBLE = LOAD.kafka_eligible
TASK_S = (0.2, 1.5)
"""Wall-clock task time of an assigned device (compressed), uniform in this range."""
FAILURE_RATE = 0.05
WAIT_BOUND_S = SETTINGS.gateway.wait_s
SEED = SETTINGS.scheduler.seed
ENROLL_TOKEN_TTL_S = 7 * 86400.0
MAX_TOKENS = 200_000
"""Device tokens a Locust process keeps (the oldest enrolments are forgotten first)."""


def enroll_token(settings: Settings = SETTINGS) -> str:
    """The enrol token devices enrol with: VENN_LOADTEST_ENROLL_TOKEN, else one minted with
    the auth secret this process has (beside `venn up`, its run dir's), else "" (a gateway
    without authentication)."""
    if settings.loadtest.enroll_token:
        return settings.loadtest.enroll_token
    if settings.auth_enabled:
        return Tokens(settings.auth_secret).issue("enroll", "locust", ttl_s=ENROLL_TOKEN_TTL_S)
    return ""


ENROLL_TOKEN = enroll_token()

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


class DeviceUser(FastHttpUser):
    """Many devices behind one user: enrolment, check-ins over HTTP, results for
    assignments."""

    weight = 10
    network_timeout = WAIT_BOUND_S + 5.0
    connection_timeout = WAIT_BOUND_S + 5.0
    tokens: ClassVar[dict[str, str]] = {}
    """Device id -> its device token, shared by the users of this process."""

    def wait_time(self) -> float:
        return paced(PEAK_RATE)

    def on_start(self) -> None:
        self.due: list[tuple[float, int, dict[str, Any]]] = []
        self.seq = 0

    def headers(self, device_id: str) -> dict[str, str] | None:
        """The device's Authorization header, enrolling it first if it has no token yet;
        {} without authentication; None when its enrolment failed (reported)."""
        if not ENROLL_TOKEN:
            return {}
        token = self.tokens.get(device_id)
        if token is None:
            token = self.enroll(device_id)
            if token is None:
                return None
            if len(self.tokens) >= MAX_TOKENS:
                del self.tokens[next(iter(self.tokens))]
            self.tokens[device_id] = token
        return {"Authorization": f"Bearer {token}"}

    def enroll(self, device_id: str) -> str | None:
        with self.client.post(
            "/v1/devices",
            json={"device_id": device_id},
            headers={"Authorization": f"Bearer {ENROLL_TOKEN}"},
            name="/v1/devices [enrol]",
            catch_response=True,
        ) as response:
            if response.status_code == 201:
                try:
                    token = response.json()["token"]
                except (ValueError, KeyError, TypeError):
                    response.failure(f"no token in {_text(response)[:200]!r}")
                    return None
                response.success()
                return str(token)
            if response.status_code == 429:
                response.success()  # a valid answer: the device enrols later
                response.request_meta["name"] = "/v1/devices [overloaded]"
                return None
            response.failure(f"{response.status_code}: {_text(response)[:200]}")
            return None

    @task
    def checkin(self) -> None:
        self.upload_due_results()
        number = random.randrange(POPULATION)
        device_id, attrs, speed, bandwidth = device(number)
        headers = self.headers(device_id)
        if headers is None:
            return
        body = {
            "device_id": device_id,
            "attrs": attrs,
            "speed_ms_per_sample": speed,
            "bandwidth_kbps": bandwidth,
        }
        with self.client.post(
            "/v1/checkin",
            json=body,
            headers=headers,
            name="/v1/checkin",
            catch_response=True,
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
            return f"http {response.status_code}", f"not JSON: {_text(response)[:100]!r}", {}
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
        return f"http {status}", f"unexpected answer {status}: {_text(response)[:200]}", payload

    def upload_due_results(self) -> None:
        now = time.monotonic()
        while self.due and self.due[0][0] <= now:
            _, _, result = heapq.heappop(self.due)
            with self.client.post(
                "/v1/results",
                json=result,
                headers=self.headers(result["device_id"]) or {},
                name="/v1/results",
                catch_response=True,
            ) as response:
                if response.status_code == 202:
                    response.success()
                elif response.status_code == 429:
                    response.success()  # a valid answer: the device retries later
                    response.request_meta["name"] = "/v1/results [overloaded]"
                else:
                    response.failure(f"{response.status_code}: {_text(response)[:200]}")


def _text(response: Any) -> str:
    return str(response.text or "")


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
            devices = SETTINGS.for_role("devices")
            cls._producer = Producer(
                {
                    **librdkafka_options(devices.kafka_credentials),
                    "bootstrap.servers": devices.broker,
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
