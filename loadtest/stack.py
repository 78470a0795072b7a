"""An embedded stack to load-test: broker, scheduler, gateway(s) and coordinators.

`LoadStack` starts a `devtools.stack.Stack` (a broker of its own, or the one of `broker=`;
the topics; scheduler workers and the gateway, `python -m services.gateway`, optionally
several processes sharing the port) and runs coordinators in-process for one job per paper
requirement tier, each asking for round after round (demand `demand`, deadline
`deadline_s`), so check-ins keep finding open rounds. Ready once a probe device has been
assigned through the whole HTTP path.

With ``secure`` the stack is secured as under `venn up`: API tokens (a device enrols with
an enrol token and checks in with its device token), and on Apache Kafka one SASL/SCRAM
principal per service with its ACLs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from aiokafka import AIOKafkaProducer

from devtools.stack.local import Stack
from services.coordinator.runner import JobOutcome, run_coordinator
from venn import events as ev
from venn.auth import Tokens
from venn.broker import security, topics
from venn.broker.publish import KafkaEvents, send_events
from venn.core.model import JobSpec, Requirement
from venn.fields import ROUNDS_MAX
from venn.net import free_port
from venn.settings import GatewaySettings, SchedulerSettings, Settings
from venn.traces.devices import load_device_profiles
from venn.workloads.loader import tier_requirements

ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class StackConfig:
    run_dir: Path
    broker: str | None = None
    """Use this broker instead of starting one (its Venn topics must not exist yet, or
    have `partitions` partitions)."""
    broker_kind: str = "auto"
    """The kind of broker to start (kafka, tansu, auto), or the kind of `broker`."""
    kafka_users: dict[str, str] | None = None
    """The principals' passwords of a secured `broker` (admin included)."""
    broker_tuning: str = ""
    """Force a client profile (venn/broker/tuning.py); empty: the broker kind's."""
    partitions: int = 4
    demand: int = 50
    deadline_s: float = 10.0
    wait_s: float = 2.0
    gateway_workers: int = 1
    gateway_env: dict[str, str] = field(default_factory=dict)
    policy: str = "venn"
    ready_timeout_s: float = 90.0
    scheduler_fetch_wait_ms: int | None = None
    """Run the scheduler with this consumer fetch wait (VENN_SCHEDULER_FETCH_WAIT_MS);
    None = the broker profile's. 1500 is Faust's own value."""
    coordinators: bool = True
    """Run coordinators for one job per requirement tier; without them only a probe job
    is registered (benchmarks register their own jobs)."""
    profile_dir: Path | None = None
    """Run the scheduler and the gateway under pyinstrument, saving sessions here."""
    workers: int = 1
    """Scheduler worker processes (one decides, the others are hot standbys); the stack is
    ready once the scheduler's consumer group is stable with all of them."""
    secure: bool = False
    """Secure it as `venn up` does: an auth secret (devices need a token from enrolment) and,
    on an Apache Kafka it starts, a SASL/SCRAM principal per service with its ACLs."""


def http_json(
    url: str, body: dict[str, Any] | None = None, timeout: float = 10.0, token: str | None = None
) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"} if data else {}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(url, data=data, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return json.loads(exc.read() or b"{}")


def probe_job(job_id: str, attr: str, demand: int) -> JobSpec:
    return JobSpec(job_id, Requirement.of({attr: 1.0}), demand, ROUNDS_MAX, 600.0)


class LoadStack:
    """The load test's stack: a `devtools.stack.Stack` (scheduler workers and a gateway,
    attached, no recorder) and, in this process, coordinators or a probe job."""

    def __init__(self, config: StackConfig) -> None:
        self.config = config
        self.run_dir = config.run_dir
        self.stack: Stack | None = None
        self._stop = asyncio.Event()
        self._coordinator: asyncio.Task[dict[str, JobOutcome]] | None = None
        self.jobs: list[JobSpec] = []

    @property
    def settings(self) -> Settings:
        assert self.stack is not None, "not started"
        return self.stack.settings

    @property
    def url(self) -> str:
        assert self.stack is not None, "not started"
        return self.stack.url

    @property
    def bootstrap(self) -> str:
        return self.settings.broker

    @property
    def schedulers(self) -> list[subprocess.Popen[bytes]]:
        assert self.stack is not None, "not started"
        procs = self.stack.processes
        return [procs[n] for n in sorted(self.stack.worker_ports, key=_worker_order)]

    @property
    def scheduler(self) -> subprocess.Popen[bytes]:
        """The first scheduler worker (the only one unless `workers` > 1)."""
        return self.schedulers[0]

    @property
    def gateway(self) -> subprocess.Popen[bytes]:
        assert self.stack is not None, "not started"
        return self.stack.processes["gateway"]

    @property
    def scheduler_web_ports(self) -> list[int]:
        assert self.stack is not None, "not started"
        ports = self.stack.worker_ports
        return [ports[n] for n in sorted(ports, key=_worker_order)]

    @property
    def scheduler_web_port(self) -> int:
        return self.scheduler_web_ports[0]

    @property
    def broker_pids(self) -> list[int]:
        """The processes of the stack's own broker (none on a broker given)."""
        assert self.stack is not None, "not started"
        return self.stack.broker_pids()

    @property
    def admin_options(self) -> dict[str, Any]:
        """Kafka client options of the admin principal (none on an unsecured broker)."""
        return self.settings.for_role(security.ADMIN).kafka_options

    def enroll_token(self, ttl_s: float = 86400.0) -> str:
        """An enrol token of the secured stack ("" when it has no auth secret)."""
        if not self.settings.auth_enabled:
            return ""
        return Tokens(self.settings.auth_secret).issue("enroll", "loadtest", ttl_s=ttl_s)

    async def start(self) -> Self:
        cfg = self.config
        tuning = cfg.broker_tuning
        if cfg.broker is not None and cfg.broker_kind in ("kafka", "tansu"):
            tuning = tuning or cfg.broker_kind  # the profile of the broker given
        settings = Settings(
            broker=cfg.broker or Settings().broker,
            broker_kind="external" if cfg.broker is not None else cfg.broker_kind,
            broker_tuning=tuning,
            run_dir=str(self.run_dir),
            topic_partitions=cfg.partitions,
            app_id="venn-scheduler-lt",
            gateway=GatewaySettings(port=free_port(), wait_s=cfg.wait_s),
            scheduler=SchedulerSettings(
                policy=cfg.policy,
                fetch_wait_ms=cfg.scheduler_fetch_wait_ms or 0,
            ),
        )
        self.stack = Stack(
            settings,
            workers=cfg.workers,
            policy=cfg.policy,
            recorder=False,
            gateway_workers=cfg.gateway_workers,
            secure=cfg.secure,
            unique=True,
            kafka_users=cfg.kafka_users,
            extra_env=cfg.gateway_env,
            profile_dir=cfg.profile_dir,
            ready_timeout=cfg.ready_timeout_s,
        )
        try:
            # Ready once the scheduler's group is stable with every worker and the gateway
            # listens; then through the whole HTTP path (_wait_ready).
            await asyncio.to_thread(self.stack.up)
            jobs = [
                JobSpec(
                    f"lt-tier{tier}-{uuid.uuid4().hex[:4]}",
                    requirement,
                    demand=cfg.demand,
                    rounds=ROUNDS_MAX,
                    deadline=cfg.deadline_s,
                    workload_s=1.0,
                    tier=tier,
                )
                for tier, requirement in sorted(tier_requirements().items())
            ]
            if cfg.coordinators:
                self.jobs = jobs
                self._coordinator = asyncio.create_task(
                    run_coordinator(self.settings.for_role("coordinator"), jobs, 1.0, self._stop)
                )
            await self._wait_ready()
        except BaseException:
            await self.stop()
            raise
        return self

    async def _wait_ready(self) -> None:
        """Until a probe device (eligible everywhere) is assigned through the gateway."""
        profiles = load_device_profiles()
        best = max(range(len(profiles)), key=lambda i: len(profiles.tiers_met[i]))
        attrs = {k: v for k, v in profiles.attrs[best].items() if k != "speed_ms_per_sample"}
        if not self.config.coordinators:
            attrs = {"probe": 1.0}
            await self._seed_supply(attrs)
            await self.publish_jobs([probe_job(f"probe-{uuid.uuid4().hex[:6]}", "probe", 1000)])
        deadline = time.monotonic() + self.config.ready_timeout_s
        enroll = self.enroll_token()
        n = 0
        while True:
            self._check_alive()
            if self._coordinator is not None and self._coordinator.done():
                self._coordinator.result()  # raises what stopped it
                raise RuntimeError("the coordinators stopped")
            n += 1
            body = {
                "device_id": f"probe-{n}",
                "attrs": attrs,
                "speed_ms_per_sample": 60.0,
                "bandwidth_kbps": 12000.0,
            }
            try:
                token = None
                if enroll:
                    enrolled = await asyncio.to_thread(
                        http_json, f"{self.url}/v1/devices", {"device_id": body["device_id"]},
                        token=enroll,
                    )  # fmt: skip
                    token = enrolled.get("token") if isinstance(enrolled, dict) else None
                answer = await asyncio.to_thread(
                    http_json, f"{self.url}/v1/checkin", body, token=token
                )
            except OSError:
                answer = None  # not listening yet
            if isinstance(answer, dict) and answer.get("assigned"):
                result = {
                    "device_id": body["device_id"],
                    "job_id": answer["job_id"],
                    "round_index": answer["round_index"],
                    "ok": True,
                    "response_time_s": 0.1,
                }
                await asyncio.to_thread(http_json, f"{self.url}/v1/results", result, token=token)
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"the stack was not ready in {self.config.ready_timeout_s} s "
                    f"(last answer {answer}); see the logs in {self.run_dir}"
                )
            await asyncio.sleep(0.2)

    async def _seed_supply(self, attrs: dict[str, float]) -> None:
        """Until the scheduler has read a fresh check-in with `attrs` (produced straight to
        venn.checkins): a job registered before any of its devices was seen may get a
        plan with no supply for them, which is not recomputed until the next plan event
        (seen in the single mode with 12 partitions: every probe declined)."""
        deadline = time.monotonic() + self.config.ready_timeout_s
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks=1, **self.admin_options)
        await producer.start()
        try:
            n = 0
            while time.monotonic() < deadline:
                self._check_alive()
                n += 1
                checkin = ev.DeviceCheckin(
                    event_id=f"seed-{uuid.uuid4().hex[:12]}", time=time.time(),
                    device_id=f"seed-{n}", attrs=attrs, speed_ms_per_sample=60.0,
                    bandwidth_kbps=12000.0,
                )  # fmt: skip
                await KafkaEvents(producer).enqueue(topics.CHECKINS, checkin)
                await producer.flush()
                await asyncio.sleep(0.3)
                try:
                    fresh = await asyncio.to_thread(
                        lambda: (
                            self.scheduler_metric("venn_scheduler_checkins_total")
                            - self.scheduler_metric("venn_scheduler_stale_checkins_total")
                        )
                    )
                except OSError:
                    continue  # its web server is not up yet
                if fresh >= 1:
                    return
        finally:
            await producer.stop()

    def _check_alive(self) -> None:
        assert self.stack is not None, "not started"
        self.stack.check_alive()

    async def publish_jobs(self, jobs: list[JobSpec], finish: bool = False) -> None:
        """Register `jobs` and open their round 0 (or, with `finish`, finish them) directly
        on venn.jobs / venn.rounds, without coordinators."""
        now = time.time()
        events: list[tuple[str, ev.Event]] = []
        for j in jobs:
            if finish:
                events.append(
                    (
                        topics.ROUNDS,
                        ev.JobFinished(
                            event_id=f"fin-{j.job_id}", time=now, job_id=j.job_id,
                            rounds_completed=0, arrival=now, finished_at=now, jct_s=0.0,
                        ),
                    )
                )  # fmt: skip
                continue
            events.append(
                (
                    topics.JOBS,
                    ev.JobRegistered(
                        event_id=f"reg-{j.job_id}", time=now, job_id=j.job_id,
                        requirement=j.requirement.as_dict(), demand=j.demand, rounds=j.rounds,
                        deadline_s=j.deadline, workload_s=j.workload_s,
                    ),
                )
            )  # fmt: skip
            events.append(
                (
                    topics.JOBS,
                    ev.RoundRequested(
                        event_id=f"rr-{j.job_id}-0", time=now, job_id=j.job_id, round_index=0,
                        demand=j.demand,
                    ),
                )
            )  # fmt: skip
        await send_events(self.bootstrap, events, **self.admin_options)

    @property
    def scheduler_pids(self) -> list[int]:
        return [p.pid for p in self.schedulers]

    def scheduler_metric(self, name: str, topic: str | None = None) -> float:
        """A counter of the scheduler's /metrics page (0 if absent), summed over the
        workers."""
        return sum(self.worker_metric(port, name, topic) for port in self.scheduler_web_ports)

    @staticmethod
    def worker_metric(port: int, name: str, topic: str | None = None) -> float:
        """A counter of one worker's /metrics page (0 if absent)."""
        url = f"http://127.0.0.1:{port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
        needle = f'{name}{{topic="{topic}"}} ' if topic else f"{name} "
        for line in text.splitlines():
            if line.startswith(needle):
                return float(line[len(needle) :])
        return 0.0

    def gateway_health(self) -> dict[str, Any]:
        health: dict[str, Any] = http_json(f"{self.url}/healthz")
        return health

    async def stop(self) -> None:
        self._stop.set()
        if self._coordinator is not None:
            try:
                await asyncio.wait_for(self._coordinator, 15)
            except Exception:  # a coordinator that fails to stop must not block teardown
                self._coordinator.cancel()
                with contextlib.suppress(BaseException):
                    await self._coordinator
            self._coordinator = None
        if self.stack is not None:
            await asyncio.to_thread(self.stack.down)

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()


def _worker_order(name: str) -> int:
    """ "scheduler" first, then "scheduler-2", "scheduler-3", ..."""
    return int(name.rpartition("-")[2]) if "-" in name else 1
