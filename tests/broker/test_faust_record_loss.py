"""Issue 25: a Faust worker commits an offset it never handled (docs/notes/faust-record-loss.md).

A real Faust worker (tests/broker/faust_probe.py, a subprocess) on Apache Kafka. Its
restart's table recovery resumes the input partition and seeks it to the committed offset
while the fetcher is live; the probe holds that seek until its records are in the agent's
buffer (an interleaving Faust allows: a fetch landing before the seek's answer), and the
`flow_control.resume()` that follows clears the buffer. The agent is busy with the record
before (b"slow"), so the next record is cleared unhandled while Faust's read offset has
passed it. The record after that is handled and acked, and a commit passes the cleared one;
after a SIGKILL no restart ever handles it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from venn.broker.process import free_port
from venn.broker.topics import changelog_topic, ensure_topics

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 120.0
Check = Callable[["Observer"], Awaitable[bool]]


class Probe:
    def __init__(self, broker: str, run_dir: Path) -> None:
        tok = uuid.uuid4().hex[:8]
        self.broker = broker
        self.app_id = f"probe-{tok}"
        self.topic = f"probe-in-{tok}"
        self.handled_topic = f"probe-handled-{tok}"
        self.log_path = run_dir / f"{self.app_id}.log"
        self.datadir = run_dir / f"{self.app_id}-data"
        self.proc: subprocess.Popen[bytes] | None = None

    async def prepare(self) -> None:
        names = (self.topic, self.handled_topic, changelog_topic(self.app_id, "seen"))
        await ensure_topics(self.broker, 1, names=names)

    def start(self, hold: bool = False) -> None:
        env = {
            **os.environ,
            "PROBE_BROKER": self.broker,
            "PROBE_APP_ID": self.app_id,
            "PROBE_TOPIC": self.topic,
            "PROBE_HANDLED": self.handled_topic,
            "PROBE_WEB_PORT": str(free_port()),
            "PROBE_DATADIR": str(self.datadir),
            "PROBE_HOLD": "1" if hold else "0",
        }
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.broker.faust_probe", "worker", "-l", "info"],
                cwd=ROOT,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()

    def log_tail(self, lines: int = 60) -> str:
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(line for line in text if "probe" in line or "ERROR" in line)[-6000:] + (
            "\n" + "\n".join(text[-lines:])
        )


class Observer:
    """The offsets the probe handled (from its handled topic) and its group's commits."""

    def __init__(self, probe: Probe) -> None:
        self.probe = probe
        self.handled: set[int] = set()
        self.producer = AIOKafkaProducer(bootstrap_servers=probe.broker)
        self.reader = AIOKafkaConsumer(
            probe.handled_topic, bootstrap_servers=probe.broker, auto_offset_reset="earliest"
        )
        self.group = AIOKafkaConsumer(
            bootstrap_servers=probe.broker, group_id=probe.app_id, enable_auto_commit=False
        )
        self.tp = TopicPartition(probe.topic, 0)

    async def start(self) -> None:
        await self.producer.start()
        await self.reader.start()
        await self.group.start()

    async def stop(self) -> None:
        await self.producer.stop()
        await self.reader.stop()
        await self.group.stop()

    async def produce(self, value: bytes) -> int:
        meta = await self.producer.send_and_wait(self.probe.topic, value, partition=0)
        return int(meta.offset)

    async def committed(self) -> int:
        return (await self.group.committed(self.tp)) or 0

    async def wait(self, what: str, done: Check) -> None:
        deadline = time.monotonic() + WAIT_S
        while not await done(self):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{what}: not within {WAIT_S:.0f} s (handled {sorted(self.handled)}, "
                    f"committed {await self.committed()})\n{self.probe.log_tail()}"
                )
            records = await self.reader.getmany(timeout_ms=200)
            for batch in records.values():
                self.handled.update(int(r.key) for r in batch)


def handled(*offsets: int) -> Check:
    async def check(o: Observer) -> bool:
        return set(offsets) <= o.handled

    return check


def committed_at_least(offset: int) -> Check:
    async def check(o: Observer) -> bool:
        return await o.committed() >= offset

    return check


@pytest.fixture
async def probe(broker: str, run_dir: Path) -> AsyncIterator[tuple[Probe, Observer]]:
    probe = Probe(broker, run_dir)
    await probe.prepare()
    observer = Observer(probe)
    await observer.start()
    try:
        yield probe, observer
    finally:
        probe.kill()
        await observer.stop()


async def test_no_offset_is_committed_unhandled(probe: tuple[Probe, Observer]) -> None:
    worker, bus = probe
    first = await bus.produce(b"first")
    worker.start()
    await bus.wait("the first record handled and committed", handled(first))
    await bus.wait("the first commit", committed_at_least(first + 1))
    worker.kill()

    slow = await bus.produce(b"slow")
    victim = await bus.produce(b"victim")
    worker.start(hold=True)
    await bus.wait("the slow record handled", handled(slow))
    after = await bus.produce(b"after")
    await bus.wait("the record after the victim handled", handled(after))
    await bus.wait("a commit past the record after", committed_at_least(after + 1))
    worker.kill()

    worker.start()
    last = await bus.produce(b"last")
    await bus.wait("a restarted worker handles new records", handled(last))
    await bus.wait("and commits them", committed_at_least(last + 1))
    committed = await bus.committed()
    never = sorted(set(range(committed)) - bus.handled)
    assert not never, (
        f"committed offset {committed} of {worker.topic}[0], but offsets {never} were never "
        f"handled (victim {victim}; handled {sorted(bus.handled)})\n{worker.log_tail()}"
    )
