"""A scheduler worker (a real Faust process) on the session's broker, and the bus a test
feeds it through and reads its outputs from.

Topics are shared with every other test of the run: each test uses its own scheduler app id
(`scheduler_env`), job and device ids and requirement attribute (`cpu_<token>`)."""

from __future__ import annotations

import signal
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import Popen
from typing import Any

from aiokafka import AIOKafkaProducer

from services.scheduler.process import start_worker, stop_worker
from tests import factories
from tests.event_recorder import EventRecorder
from venn import events as ev
from venn.broker import topics
from venn.broker.prepare import prepare_topics
from venn.net import free_port
from venn.settings import Settings

READY_TIMEOUT = 180.0  # a restart after SIGKILL waits for the dead member's session to expire;
# one CI run on a loaded machine needed more than 90 s


OUTPUTS = (topics.ASSIGNMENTS, topics.DEAD_LETTERS, topics.REPLIES)


@dataclass
class Bus:
    """A producer for the scheduler's inputs, and the event recorder of its outputs
    (`OUTPUTS`) from the moment the stack starts."""

    bootstrap: str
    partitions: int
    producer: AIOKafkaProducer = field(init=False)
    published: EventRecorder = field(init=False)

    async def start(self) -> None:
        self.producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap)
        await self.producer.start()
        self.published = await EventRecorder(self.bootstrap, OUTPUTS).start()

    async def stop(self) -> None:
        await self.published.stop()
        await self.producer.stop()

    async def send(
        self,
        topic: str,
        value: bytes | ev.Event,
        key: bytes | None = None,
        partition: int | None = None,
    ) -> Any:
        if isinstance(value, ev.Event):
            key = key if key is not None else ev.key_of(value)
            value = ev.encode(value)
        return await self.producer.send_and_wait(topic, value, key=key, partition=partition)

    async def barrier(self, topic: str, timeout: float = 20.0) -> None:
        """Returns once the worker has processed everything sent to `topic` before."""
        metas = [
            await self.send(topic, b"\x00barrier " + uuid.uuid4().bytes, partition=p)
            for p in range(self.partitions)
        ]
        for meta in metas:
            await self.published.dead_letter_of(topic, meta, timeout)

    def assigned(self, job_ids: set[str]) -> list[ev.Assignment]:
        return self.published.assignments(job_ids)


@dataclass
class Worker:
    env: dict[str, str]
    log_path: Path
    proc: Popen[bytes] | None = None

    def start(self) -> None:
        self.env["VENN_SCHEDULER_WEB_PORT"] = str(free_port())
        with open(self.log_path, "ab") as log:
            # Faust's rebalance and recovery logs, for a restart that does not come back.
            self.proc = start_worker(self.env, log, level="info")

    def diagnosis(self) -> str:
        """The worker's /healthz (which names stalled partitions) and its log's tail."""
        url = f"http://127.0.0.1:{self.env['VENN_SCHEDULER_WEB_PORT']}/healthz"
        try:
            health = urllib.request.urlopen(url, timeout=5).read().decode()
        except urllib.error.HTTPError as exc:
            health = f"{exc.code} {exc.read().decode()}"
        except OSError as exc:
            health = repr(exc)
        try:
            url = f"http://127.0.0.1:{self.env['VENN_SCHEDULER_WEB_PORT']}/metrics"
            text = urllib.request.urlopen(url, timeout=5).read().decode()
            counters = "\n".join(
                line
                for line in text.splitlines()
                if line.startswith(("venn_scheduler_events_total", "venn_scheduler_consumer_lag",
                                    "venn_scheduler_dead_letters_total", "venn_scheduler_output",
                                    "venn_scheduler_offsets_total"))
            )  # fmt: skip
        except OSError as exc:
            counters = repr(exc)
        if self.proc is not None and self.proc.poll() is None:
            # Its asyncio tasks' stacks, then its threads' (services/scheduler/__main__.py).
            for sig in (signal.SIGUSR1, signal.SIGQUIT):
                self.proc.send_signal(sig)
                time.sleep(1.0)
        lines = self.log_path.read_text(errors="replace").splitlines()
        wanted = [line for line in lines if "aiokafka" not in line or "ERROR" in line]
        return f"healthz: {health}\nmetrics:\n{counters}\nworker log (tail):\n" + "\n".join(
            wanted[-400:]
        )

    def metric_total(self, name: str) -> float:
        url = f"http://127.0.0.1:{self.env['VENN_SCHEDULER_WEB_PORT']}/metrics"
        text = urllib.request.urlopen(url, timeout=5).read().decode()
        for line in text.splitlines():
            if line.startswith(f"{name} "):
                return float(line.split()[1])
        return 0.0

    def metric(self, name: str, topic: str) -> float:
        url = f"http://127.0.0.1:{self.env['VENN_SCHEDULER_WEB_PORT']}/metrics"
        text = urllib.request.urlopen(url, timeout=5).read().decode()
        needle = f'{name}{{topic="{topic}"}} '
        for line in text.splitlines():
            if line.startswith(needle):
                return float(line[len(needle) :])
        return 0.0


async def scheduler_env(
    broker: str, run_dir: Path, partitions: int, name: str, **extra: str
) -> dict[str, str]:
    """The environment of a scheduler worker with an app id of its own
    (``venn-scheduler-<name>-<hex>``) on the session's broker, its topics and changelogs
    prepared; ``extra``: more VENN_ settings."""
    app_id = f"venn-scheduler-{name}-{uuid.uuid4().hex[:8]}"
    await prepare_topics(Settings(broker=broker, app_id=app_id, topic_partitions=partitions))
    return {
        "VENN_BROKER": broker,
        "VENN_APP_ID": app_id,
        "VENN_TOPIC_PARTITIONS": str(partitions),
        "VENN_RUN_DIR": str(run_dir),
        **extra,
    }


def job(job_id: str, attr: str, minimum: float, demand: int = 3) -> ev.JobRegistered:
    return factories.registered(
        job_id, requirement={attr: minimum}, demand=demand, rounds=5, event_id=f"reg-{job_id}"
    )


def round_request(job_id: str, round_index: int, demand: int) -> ev.RoundRequested:
    return factories.requested(job_id, round_index, demand, event_id=f"rr-{job_id}-{round_index}")


def checkin(device_id: str, attrs: dict[str, float]) -> ev.DeviceCheckin:
    return factories.checkin(device_id, attrs)


def result(job_id: str, round_index: int, device_id: str) -> ev.DeviceResult:
    return factories.result(job_id, round_index, device_id, response_time_s=3.0)


def finished(job_id: str) -> ev.JobFinished:
    now = time.time()
    return factories.finished(job_id, 0, arrival=now, finished_at=now, event_id=f"fin-{job_id}")


async def checkins(bus: Bus, devices: list[str], attrs: dict[str, float]) -> None:
    for device in devices:
        await bus.send(topics.CHECKINS, checkin(device, attrs))
    await bus.barrier(topics.CHECKINS)


@asynccontextmanager
async def scheduler_on_bus(
    broker: str, partitions: int, env: dict[str, str]
) -> AsyncIterator[tuple[Bus, Worker]]:
    """A scheduler worker with ``env`` (see `scheduler_env`, its log beside the run dir's
    others) and a bus, once a barrier has gone through it; stopped on exit."""
    worker = Worker(env, Path(env["VENN_RUN_DIR"]) / f"{env['VENN_APP_ID']}.log")
    bus = Bus(broker, partitions)
    await bus.start()
    worker.start()
    try:
        await bus.barrier(topics.CHECKINS, READY_TIMEOUT)
        yield bus, worker
    finally:
        if worker.proc is not None:
            stop_worker(worker.proc, timeout=10)
        await bus.stop()
