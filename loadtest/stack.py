"""An embedded stack to load-test: broker, scheduler, gateway(s) and coordinators.

`LoadStack` starts a private Tansu broker (or uses `broker=`), creates the topics, starts
one scheduler worker and the gateway (`python -m services.gateway`, optionally several
processes sharing the port), and runs coordinators in-process for one job per paper
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
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

from aiokafka import AIOKafkaProducer

from services.coordinator.runner import JobOutcome, run_coordinator
from services.scheduler.process import stop_worker
from venn import events as ev
from venn.auth import Tokens
from venn.broker import security, topics
from venn.broker.local import LocalBroker, local_broker, resolve_kind
from venn.broker.process import free_port
from venn.broker.publish import KafkaEvents, send_events
from venn.broker.topics import prepare_topics
from venn.core.model import JobSpec, Requirement
from venn.fields import ROUNDS_MAX
from venn.settings import (
    GatewaySettings,
    SchedulerSettings,
    Settings,
    run_dir_kafka_users,
    run_dir_secret,
)
from venn.stack.local import wait_scheduler_ready
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
    def __init__(self, config: StackConfig) -> None:
        self.config = config
        self.run_dir = config.run_dir
        self.broker: LocalBroker | None = None
        self.scheduler: subprocess.Popen[bytes] | None = None
        """The first scheduler worker (the only one unless `workers` > 1)."""
        self.schedulers: list[subprocess.Popen[bytes]] = []
        self.gateway: subprocess.Popen[bytes] | None = None
        self.gateway_port = free_port()
        self.settings: Settings | None = None
        self._stop = asyncio.Event()
        self._coordinator: asyncio.Task[dict[str, JobOutcome]] | None = None
        self._logs: list[IO[bytes]] = []
        self.scheduler_web_ports = [free_port() for _ in range(config.workers)]
        self.scheduler_web_port = self.scheduler_web_ports[0]
        self.jobs: list[JobSpec] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.gateway_port}"

    @property
    def bootstrap(self) -> str:
        assert self.settings is not None
        return self.settings.broker

    def env(self, role: str, web_port: int = 0) -> dict[str, str]:
        """The environment of a service of ``role`` (a scheduler worker: on ``web_port``)."""
        assert self.settings is not None
        settings = self.settings.for_role(role)
        if web_port:
            settings = settings.with_scheduler(web_port=web_port)
        return {**settings.as_env(), **self.config.gateway_env}

    @property
    def admin_options(self) -> dict[str, Any]:
        """Kafka client options of the admin principal (none on an unsecured broker)."""
        assert self.settings is not None
        return self.settings.for_role(security.ADMIN).kafka_options

    def enroll_token(self, ttl_s: float = 86400.0) -> str:
        """An enrol token of the secured stack ("" when it has no auth secret)."""
        assert self.settings is not None
        if not self.settings.auth_enabled:
            return ""
        return Tokens(self.settings.auth_secret).issue("enroll", "loadtest", ttl_s=ttl_s)

    def _log(self, name: str) -> IO[bytes]:
        log = open(self.run_dir / f"{name}.log", "ab")  # noqa: SIM115 - closed in stop()
        self._logs.append(log)
        return log

    async def start(self) -> Self:
        cfg = self.config
        self.run_dir.mkdir(parents=True, exist_ok=True)
        bootstrap = cfg.broker
        kind = resolve_kind(cfg.broker_kind)
        users: dict[str, str] = {}
        if cfg.secure and bootstrap is None and kind == "kafka":
            users = run_dir_kafka_users(self.run_dir, security.PRINCIPALS, create=True)
        if bootstrap is None:
            self.broker = local_broker(kind, self.run_dir, users=users or None).start()
            bootstrap = self.broker.bootstrap
        self.settings = Settings(
            broker=bootstrap,
            broker_kind=kind,
            broker_tuning=cfg.broker_tuning,
            run_dir=str(self.run_dir),
            topic_partitions=cfg.partitions,
            app_id=f"venn-scheduler-lt-{uuid.uuid4().hex[:6]}",
            auth_secret=run_dir_secret(self.run_dir, create=True) if cfg.secure else "",
            gateway=GatewaySettings(port=self.gateway_port, wait_s=cfg.wait_s),
            scheduler=SchedulerSettings(
                policy=cfg.policy,
                fetch_wait_ms=cfg.scheduler_fetch_wait_ms or 0,
            ),
        )
        if users:
            admin = security.Credentials(security.ADMIN, users[security.ADMIN])
            await asyncio.to_thread(
                security.apply_acls, bootstrap, admin, self.settings.app_id,
                self.settings.recorder_group,
            )  # fmt: skip
        await prepare_topics(self.settings)
        for i, port in enumerate(self.scheduler_web_ports):
            self.schedulers.append(
                self._spawn(
                    "scheduler" if i == 0 else f"scheduler-{i + 1}",
                    ["-m", "services.scheduler", "worker", "-l", "warn"],
                    self.env("scheduler", port),
                    new_session=False,
                )
            )
        self.scheduler = self.schedulers[0]
        self.gateway = self._spawn(
            "gateway",
            ["-m", "services.gateway", "--workers", str(cfg.gateway_workers)],
            self.env("gateway"),
            new_session=True,  # its worker children get the stop signal with it
        )
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
        try:
            if cfg.workers > 1 and not await wait_scheduler_ready(
                self.settings, cfg.ready_timeout_s, members=cfg.workers
            ):
                raise TimeoutError(f"no stable group of {cfg.workers} scheduler workers")
            await self._wait_ready()
        except BaseException:
            await self.stop()
            raise
        return self

    def _spawn(
        self, name: str, args: list[str], env: dict[str, str], new_session: bool
    ) -> subprocess.Popen[bytes]:
        command = [sys.executable, *args]
        if self.config.profile_dir is not None:
            self.config.profile_dir.mkdir(parents=True, exist_ok=True)
            out = self.config.profile_dir / f"{name}.pyisession"
            command = [sys.executable, "-m", "pyinstrument", "-r", "session", "-o", str(out)]
            command += args
        return subprocess.Popen(
            command,
            cwd=ROOT,
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=self._log(name),
            stderr=subprocess.STDOUT,
            start_new_session=new_session,
        )

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
        named = [(f"scheduler {i + 1}", p) for i, p in enumerate(self.schedulers)]
        for name, proc in [*named, ("gateway", self.gateway)]:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(
                    f"the {name} exited with {proc.returncode}; see {self.run_dir}/{name}.log"
                )

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
        if self.gateway is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.gateway.pid, signal.SIGTERM)
            try:
                self.gateway.wait(15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.gateway.pid, signal.SIGKILL)
                self.gateway.wait()
            self.gateway = None
        for proc in self.schedulers:
            stop_worker(proc, timeout=10)
        self.schedulers.clear()
        self.scheduler = None
        if self.broker is not None:
            self.broker.stop()
            self.broker = None
        for log in self._logs:
            log.close()
        self._logs.clear()

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
