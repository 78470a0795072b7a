"""The fault suite: one workload on the `venn up` stack (a three-node Apache Kafka cluster,
embedded Postgres, scheduler, recorder, gateway), a device fleet checking in over HTTP and a
coordinator as separate processes, and during it each of the coordinator, the scheduler
worker, the recorder, the gateway and one Kafka node killed with SIGKILL and started
again. At the end every job finishes, every invariant of design.md holds, and round_audit
has exactly one row per closed round.

Then the replay: the scheduler's and the recorder's input topics are consumed again from
offset 0 (their groups' offsets reset while they are stopped). Nothing changes: no table
row is written (the changelogs do not grow), no device is assigned (venn.assignments does
not grow), no audit row is written twice.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from sqlalchemy import func, select

from devtools.brokers import KAFKA_DIR, read_detached, write_record
from devtools.kafka import KafkaBroker
from devtools.process import pid_alive
from devtools.stack.capture import read_topics
from devtools.stack.local import gateway_spec, kafka_users, service_env
from devtools.stack.processes import (
    recorder_spec,
    running_services,
    scheduler_spec,
    start_service,
    stop_pid,
)
from services.scheduler.inputs import inputs_group
from tests import invariants
from tests.e2e.harness import venn_up
from tests.environment import clean_env
from tests.polling import wait_until
from venn.audit.db import make_engine
from venn.audit.models import JobAudit, RoundAudit
from venn.broker import topics
from venn.settings import Settings
from venn.workloads import load_workload, resolve_workload

pytestmark = [pytest.mark.e2e, pytest.mark.own_broker]  # three Kafka nodes, one killed

JOBS = 5
KAFKA: dict[str, Any] = {}
"""The operator's (admin) Kafka options of the stack under test: it signs in with SASL."""
KILL_AT = (2, 5, 8, 11, 14, 17)
"""Succeeded rounds before each kill and before the Kafka node's restart (the workload has
22: every round of every job must succeed once)."""
SPEEDUP = 20.0
WORKLOAD = ("--workload", "demo", "--jobs", str(JOBS), "--seed", "3")


@dataclasses.dataclass
class Run:
    settings: Settings
    env: dict[str, str]
    epoch: float
    logs: Path

    def spawn(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        with open(self.logs / f"{name}.log", "ab") as log:
            return subprocess.Popen(
                [sys.executable, "-m", *args],
                env=self.env,
                cwd=self.settings.run_dir,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def coordinator(self) -> subprocess.Popen[bytes]:
        return self.spawn(
            "coordinator", "services.coordinator", *WORKLOAD, "--speedup", str(SPEEDUP),
            "--arrival-scale", "0.02", "--epoch", str(self.epoch), "--log-level", "WARNING",
        )  # fmt: skip

    def fleet(self) -> subprocess.Popen[bytes]:
        gateway = f"http://127.0.0.1:{self.settings.gateway.port}"
        return self.spawn(
            "devices", "services.devices", "--speedup", str(SPEEDUP), "--rate", "1.5",
            "--epoch", str(self.epoch), "--gateway", gateway, "--log-level", "WARNING",
        )  # fmt: skip

    def rounds_audited(self, succeeded_only: bool = False) -> int:
        query = select(func.count()).select_from(RoundAudit)
        if succeeded_only:
            query = query.where(RoundAudit.outcome == "succeeded")
        engine = make_engine(self.settings.database_url)
        try:
            with engine.connect() as conn:
                return int(conn.execute(query).scalar_one())
        finally:
            engine.dispose()

    def kill_service(self, name: str) -> None:
        pid = running_services(self.settings.run_dir)[name]
        os.kill(pid, signal.SIGKILL)
        while pid_alive(pid):
            time.sleep(0.05)

    def restart_service(self, name: str) -> None:
        spec = {
            "scheduler": scheduler_spec(),
            "recorder": recorder_spec(),
            "gateway": gateway_spec(),
        }[name]
        env = service_env(self.settings.for_role(name), "venn", 0)
        start_service(self.settings.run_dir, spec, env)

    def kill_kafka_node(self, node_id: int) -> None:
        record = read_detached(self.settings.run_dir)
        assert record is not None and len(record.pids) == 3
        os.kill(record.pids[node_id - 1], signal.SIGKILL)

    def restart_kafka_node(self, node_id: int) -> None:
        record = read_detached(self.settings.run_dir)
        assert record is not None
        users = kafka_users(self.settings)
        cluster = KafkaBroker(Path(self.settings.run_dir) / KAFKA_DIR, nodes=3, users=users)
        pids = list(record.pids)
        pids[node_id - 1] = cluster.start_node(node_id, detached=True)
        cluster.detach()
        write_record(self.settings.run_dir, dataclasses.replace(record, pids=pids))


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Run]:
    with venn_up(tmp_path / "run", VENN_KAFKA_NODES="3") as (info, settings):
        KAFKA.update(settings.for_role("admin").kafka_options)
        yield Run(settings, clean_env(info.run_dir), time.time() + 2.0, tmp_path)


def test_every_job_finishes_through_kills_of_each_service(stack: Run) -> None:
    fleet = stack.fleet()
    coordinator = stack.coordinator()
    killed: list[str] = []
    jobs = load_workload(resolve_workload("demo"), JOBS, 3).jobs
    # Each kill waits for progress, not for time, so every kill lands while jobs still run.
    assert KILL_AT[-1] < sum(job.rounds for job in jobs) - 2
    kill_at = iter(KILL_AT)

    def during_the_workload(what: str) -> None:
        rounds = next(kill_at)
        # Succeeded rounds only: failed attempts pile up fast while a service is down, and a
        # kill gated on them landed on the gateway's restart (which then found a dead node).
        wait_until(
            lambda: stack.rounds_audited(succeeded_only=True) >= rounds,
            240,
            f"{rounds} succeeded rounds",
        )
        assert coordinator.poll() is None, f"the workload ended before {what} was killed"
        killed.append(what)

    try:
        during_the_workload("coordinator")
        coordinator.send_signal(signal.SIGKILL)
        coordinator.wait()
        coordinator = stack.coordinator()
        for name in ("scheduler", "recorder", "gateway"):
            during_the_workload(name)
            stack.kill_service(name)
            stack.restart_service(name)
        during_the_workload("kafka node 2")
        stack.kill_kafka_node(2)
        during_the_workload("kafka node 2's restart")  # the cluster serves on two nodes meanwhile
        stack.restart_kafka_node(2)
        assert coordinator.wait(timeout=900) == 0, (stack.logs / "coordinator.log").read_text()
    finally:
        for proc in (coordinator, fleet):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
    assert killed == [
        "coordinator", "scheduler", "recorder", "gateway", "kafka node 2", "kafka node 2's restart"
    ]  # fmt: skip

    job_ids = [j.job_id for j in jobs]
    captured = asyncio.run(
        read_topics(
            stack.settings.broker,
            (topics.CHECKINS, topics.JOBS, topics.ASSIGNMENTS, topics.RESULTS, topics.ROUNDS),
            options=KAFKA,
        )
    )
    closes = invariants.closes(captured, job_ids)
    assert closes and max(closes.values()) == 1, "an attempt was closed twice"
    assert invariants.ineligible(captured) == []
    assert invariants.overlapping(captured) == []
    assert invariants.over_demand(captured) == {}

    def audited() -> dict[tuple[str, int], tuple[int, int]]:
        return invariants.audit_mismatch(captured, stack.settings.database_url, job_ids)

    wait_until(lambda: not audited(), 60, "the recorder to catch up")
    engine = make_engine(stack.settings.database_url)
    try:
        with engine.connect() as conn:
            finished = conn.execute(
                select(JobAudit.job_id).where(JobAudit.finished_at.is_not(None))
            ).all()
    finally:
        engine.dispose()
    assert {r.job_id for r in finished} == set(job_ids)

    replay_from_zero(stack)


SCHEDULER_INPUTS = (topics.CHECKINS, topics.JOBS, topics.ROUNDS, topics.RESULTS, topics.ASSIGNMENTS)
RECORDER_INPUTS = (topics.JOBS, topics.ROUNDS)


async def end_offsets(bootstrap: str, names: Iterable[str]) -> dict[TopicPartition, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, **KAFKA)
    await consumer.start()
    try:
        parts = await topics.partitions_of(bootstrap, names, KAFKA)
        return dict(await consumer.end_offsets(parts))
    finally:
        await consumer.stop()


async def committed(
    bootstrap: str, group: str, parts: Iterable[TopicPartition]
) -> dict[TopicPartition, int]:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False, **KAFKA
    )
    await consumer.start()
    try:
        return {tp: (await consumer.committed(tp)) or 0 for tp in parts}
    finally:
        await consumer.stop()


async def reset_to_zero(bootstrap: str, group: str, names: Iterable[str]) -> None:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False, **KAFKA
    )
    await consumer.start()
    try:
        parts = list(await end_offsets(bootstrap, names))
        consumer.assign(parts)
        await consumer.commit({tp: 0 for tp in parts})
    finally:
        await consumer.stop()


def replay_from_zero(stack: Run) -> None:
    settings = stack.settings
    changelogs = [topics.changelog_topic(settings.app_id, t) for t in ("jobs", "round")]
    for name in ("scheduler", "recorder"):
        stop_pid(running_services(settings.run_dir)[name], 30)
    before = asyncio.run(end_offsets(settings.broker, [*changelogs, topics.ASSIGNMENTS]))
    rows_before = stack.rounds_audited()
    inputs = asyncio.run(end_offsets(settings.broker, SCHEDULER_INPUTS))
    decider = inputs_group(settings.app_id)  # the group the decider commits to
    asyncio.run(reset_to_zero(settings.broker, decider, SCHEDULER_INPUTS))
    asyncio.run(reset_to_zero(settings.broker, settings.recorder_group, RECORDER_INPUTS))
    assert set(asyncio.run(committed(settings.broker, decider, inputs)).values()) == {0}
    stack.restart_service("scheduler")
    stack.restart_service("recorder")

    def caught_up(group: str, names: tuple[str, ...]) -> bool:
        """Committed at least to the ends before the restart (the gateway's supply reports
        go on arriving on venn.checkins meanwhile)."""
        ends = {tp: n for tp, n in inputs.items() if tp.topic in names}
        at = asyncio.run(committed(settings.broker, group, ends))
        return all(at[tp] >= end for tp, end in ends.items())

    wait_until(lambda: caught_up(decider, SCHEDULER_INPUTS), 300, "the scheduler's replay")
    wait_until(
        lambda: caught_up(settings.recorder_group, RECORDER_INPUTS), 120, "the recorder's replay"
    )
    time.sleep(3.0)  # anything the replay would publish or write lands by now
    after = asyncio.run(end_offsets(settings.broker, [*changelogs, topics.ASSIGNMENTS]))
    assert after == before, "the replay wrote table rows or published assignments"
    assert stack.rounds_audited() == rows_before
