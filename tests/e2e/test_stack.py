"""The "venn up" steps of docs/operations.md on Apache Kafka, and what survives `venn down`.

`venn up` (detached Kafka + embedded Postgres + services), the SDK example and the device
fleet with no broker address given (they find the stack in the run dir), then `venn down`
and `venn up` again: topics, data, committed offsets, audit rows and the scheduler's tables
(restored from their changelogs) are all still there.
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from sqlalchemy import select

from services.scheduler.inputs import inputs_group
from tests.brokers import SessionBroker, StackBroker
from tests.e2e.harness import venn_up
from tests.environment import clean_env
from venn import events as ev
from venn.audit.db import make_engine
from venn.audit.models import JobAudit, RoundAudit
from venn.auth.local import job_token
from venn.broker import topics
from venn.net import free_port
from venn.sdk import VennClient
from venn.settings import Settings

pytestmark = [pytest.mark.e2e, pytest.mark.own_broker]  # venn up's own broker, down and up

KAFKA: dict[str, Any] = {}
"""The operator's (admin) Kafka options of the stack under test: it signs in with SASL."""

DEVICE = {"cpu_f": 9.0, "ram": 8.0, "fp16_mem": 8.0, "android_os": 12.0}


def venn(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 240) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "venn.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0, f"venn {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


async def committed(bootstrap: str, group: str, tp: TopicPartition) -> int | None:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=group, **KAFKA)
    await consumer.start()
    try:
        return await consumer.committed(tp)
    finally:
        await consumer.stop()


async def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, **KAFKA)
    await consumer.start()
    try:
        parts = await topics.partitions_of(bootstrap, (topic,), KAFKA)
        ends = await consumer.end_offsets(parts)
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        await consumer.stop()


async def read_markers(bootstrap: str, topic: str, prefix: bytes, want: int) -> list[bytes]:
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=None, auto_offset_reset="earliest", **KAFKA
    )
    await consumer.start()
    found: list[bytes] = []
    try:
        deadline = time.monotonic() + 30
        while len(found) < want and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            found += [
                r.value
                for records in batch.values()
                for r in records
                if r.value and r.value.startswith(prefix)
            ]
    finally:
        await consumer.stop()
    return found


async def commit_marker_offsets(bootstrap: str, topic: str, group: str) -> dict[int, int]:
    """Consume `topic` in `group` to its end and commit: what `venn up` must give back."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        **KAFKA,
    )
    await consumer.start()
    try:
        ends = await end_offsets(bootstrap, topic)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            await consumer.getmany(timeout_ms=300)
            positions = {tp.partition: await consumer.position(tp) for tp in consumer.assignment()}
            if positions and all(positions.get(p, 0) >= end for p, end in ends.items()):
                break
        await consumer.commit()
        return {tp.partition: await consumer.position(tp) for tp in consumer.assignment()}
    finally:
        await consumer.stop()


async def open_round_without_devices(bootstrap: str, job_id: str, token: str | None) -> None:
    async with VennClient(bootstrap, token=token, kafka_options=KAFKA) as client:
        await client.register_job(job_id, {"cpu_f": 1}, 1, 1, deadline_s=600)
        await client.request_round(job_id, 0, 1)


async def first_assignment(bootstrap: str, job_id: str, timeout: float) -> ev.Assignment:
    async with VennClient(bootstrap, kafka_options=KAFKA) as client:
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **KAFKA)
        await producer.start()
        try:

            async def keep_checking_in() -> None:
                while True:
                    checkin = ev.DeviceCheckin(
                        event_id=f"ci-{uuid.uuid4().hex}",
                        time=time.time(),
                        device_id=f"durable-{uuid.uuid4().hex[:6]}",
                        attrs=DEVICE,
                        speed_ms_per_sample=50.0,
                        bandwidth_kbps=5000.0,
                    )
                    await producer.send_and_wait(
                        topics.CHECKINS, ev.encode(checkin), key=ev.key_of(checkin)
                    )
                    await asyncio.sleep(1.0)

            sender = asyncio.create_task(keep_checking_in())
            try:
                async with asyncio.timeout(timeout):
                    async for assignment in client.assignments(job_id):
                        return assignment
            finally:
                sender.cancel()
        finally:
            await producer.stop()
    raise AssertionError("the assignment stream ended")


def audit(url: str) -> tuple[list[Any], list[Any]]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            rounds = list(conn.execute(select(RoundAudit.job_id, RoundAudit.round_index)))
            jobs = list(conn.execute(select(JobAudit.job_id, JobAudit.finished_at)))
    finally:
        engine.dispose()
    return rounds, jobs


def test_readme_steps_then_down_and_up_keeps_everything(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    address = f"127.0.0.1:{free_port()}"
    env = clean_env(
        run_dir,
        VENN_BROKER=address,
        VENN_BROKER_KIND="kafka",
        VENN_GATEWAY_PORT=str(free_port()),
    )
    out = venn(["up"], env, tmp_path)
    assert "Apache Kafka 4." in out and address in out and "PostgreSQL 18" in out
    stack = json.loads((run_dir / "stack.json").read_text())
    assert stack["broker"] == address and stack["broker_kind"] == "kafka"
    database_url = stack["database_url"]
    assert database_url.startswith("postgresql+psycopg://")
    try:
        # The clients of docs/operations.md, with only the run dir: they find the stack's address.
        found = clean_env(run_dir)
        assert Settings.from_env(found).broker == address
        KAFKA.update(Settings.from_env(found).for_role("admin").kafka_options)
        assert KAFKA["security_protocol"] == "SASL_PLAINTEXT"  # every principal signs in
        fleet = subprocess.Popen(
            [sys.executable, "-m", "services.devices", "--speedup", "12", "--rate", "1.5"],
            env=found,
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        try:
            example = subprocess.run(
                [sys.executable, "-m", "venn.sdk.example"],
                env=found,
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=240,
                check=False,
            )
        finally:
            fleet.send_signal(signal.SIGTERM)
            fleet.wait(30)
        assert example.returncode == 0, example.stderr
        assert "ok=True" in example.stdout

        # Before `venn down`: marker records with committed offsets, and a job whose open
        # round the scheduler holds only in its tables (its events are behind its offsets).
        marker = f"durable-{uuid.uuid4().hex[:8]}-".encode()
        probe_job = f"durable-job-{uuid.uuid4().hex[:6]}"

        async def before() -> dict[int, int]:
            producer = AIOKafkaProducer(bootstrap_servers=address, acks="all", **KAFKA)
            await producer.start()
            try:
                for i in range(20):
                    await producer.send(topics.DEAD_LETTERS, marker + str(i).encode())
                await producer.flush()
            finally:
                await producer.stop()
            # The stack authenticates: a job token minted with its run dir's secret.
            token = job_token(Settings.from_env(found), [probe_job])
            assert token is not None
            await open_round_without_devices(address, probe_job, token)
            return await commit_marker_offsets(address, topics.DEAD_LETTERS, "durability")

        positions = asyncio.run(before())
        assert sum(positions.values()) >= 20
        rounds_before, jobs_before = audit(database_url)
        assert ("example-job", 0) in rounds_before
        time.sleep(3)  # the scheduler commits its offsets (and changelogs) within a second
    finally:
        stopped = venn(["down"], env, tmp_path)
    assert "broker" in stopped and "postgres" in stopped
    assert not (run_dir / "stack.json").exists()

    env_again = clean_env(run_dir, VENN_BROKER=address, VENN_BROKER_KIND="kafka")
    env_again["VENN_GATEWAY_PORT"] = env["VENN_GATEWAY_PORT"]
    venn(["up"], env_again, tmp_path)
    try:

        async def after() -> tuple[list[bytes], dict[int, int | None], dict[int, int | None]]:
            markers = await read_markers(address, topics.DEAD_LETTERS, marker, 20)
            offsets = {
                p: await committed(address, "durability", TopicPartition(topics.DEAD_LETTERS, p))
                for p in positions
            }
            jobs_end = await end_offsets(address, topics.JOBS)
            scheduler = {
                p: await committed(
                    address, inputs_group("venn-scheduler"), TopicPartition(topics.JOBS, p)
                )
                for p in jobs_end
            }
            return markers, offsets, {p: jobs_end[p] - (c or 0) for p, c in scheduler.items()}

        markers, offsets, jobs_behind = asyncio.run(after())
        assert sorted(markers) == sorted(marker + str(i).encode() for i in range(20))
        assert offsets == positions
        assert set(jobs_behind.values()) == {0}, jobs_behind  # nothing left to re-read
        assert audit(database_url) == (rounds_before, jobs_before)
        # The scheduler came back with its tables: the probe job's open round gets a device
        # although its registration lies behind the scheduler's committed offsets.
        assignment = asyncio.run(first_assignment(address, probe_job, timeout=120))
        assert assignment.job_id == probe_job and assignment.round_index == 0
    finally:
        venn(["down"], env_again, tmp_path)


def test_a_worker_that_cannot_start_fails_venn_up_with_its_log(
    session_broker: SessionBroker, pg_url: str, tmp_path: Path
) -> None:
    """A scheduler worker whose web port is taken exits at start: `venn up` says so, with
    the end of its log, instead of waiting out its readiness timeout. (On the session's
    broker and database: what fails is the worker.)"""
    shared = StackBroker.of(session_broker)
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = str(holder.getsockname()[1])
        with (
            pytest.raises(RuntimeError) as failure,
            venn_up(
                tmp_path / "run", shared, VENN_SCHEDULER_WEB_PORT=port, VENN_DATABASE_URL=pg_url
            ),
        ):
            pass
    message = str(failure.value)
    assert "scheduler exited" in message and "address already in use" in message
