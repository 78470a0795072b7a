"""Venn schedules Flower: real flwr 1.42 processes (a SuperLink, four SuperNodes started by
Venn's launcher, two ServerApps) on loopback beside the session's Kafka, a scheduler worker
and a gateway. Two runs with overlapping requirements train at once; Venn decides which
node serves which run.

Stated accuracy: both runs' models reach at least 80% on their held-out test sets (a
logistic regression on a linear task, an MLP on a nonlinear three-class task; the initial
models score 49% and 41%).
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from services.scheduler.process import start_worker, stop_worker
from tests.event_recorder import EventRecorder
from venn.auth import Tokens
from venn.broker import topics
from venn.broker.process import free_port, wait_listening
from venn.broker.topics import prepare_topics
from venn.events import Assignment, RoundClosed
from venn.integrations.flower.testbed.cluster import EXAMPLE_APPS, FlowerTestbed, NodeSpec
from venn.integrations.flower.testbed.node import parse_requirement
from venn.integrations.flower.testbed.report import RunReport, overlaps, unassigned_work
from venn.settings import Settings
from venn.stack.local import wait_scheduler_ready

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

ACCURACY = 0.8
NODES = [
    NodeSpec("d1", {"cpu_f": 2, "ram": 2}, speed_ms=2.0, seed=1),
    NodeSpec("d2", {"cpu_f": 4, "ram": 4}, speed_ms=2.0, seed=2),
    NodeSpec("d3", {"cpu_f": 6, "ram": 8}, speed_ms=1.0, seed=3),
    NodeSpec("d4", {"cpu_f": 8, "ram": 16}, speed_ms=1.0, seed=4),
]
RUNS = {
    # (app, requirement): every node may serve "a"; only d3 and d4 may serve "b".
    "a": ("logreg", "cpu_f=2"),
    "b": ("mlp", "ram=8"),
}
COMMON = {"num-rounds": 2, "demand": 2, "samples": 100, "wait-s": 60.0}


@dataclass
class Outcome:
    reports: dict[str, RunReport]
    job_ids: dict[str, str]
    assignments: list[Assignment]
    closes: list[RoundClosed]
    wall_s: float


@pytest.fixture(scope="module")
async def venn_services(
    broker: str, run_dir: Path, partitions: int
) -> AsyncIterator[tuple[str, str]]:
    """A scheduler worker and a gateway (with authentication) on the session's broker:
    (gateway URL, auth secret)."""
    app_id = f"venn-flower-{uuid.uuid4().hex[:8]}"
    secret = secrets.token_hex(32)
    settings = Settings(
        broker=broker, app_id=app_id, topic_partitions=partitions, auth_secret=secret
    )
    await prepare_topics(settings)
    port = free_port()
    env = {
        "VENN_BROKER": broker,
        "VENN_APP_ID": app_id,
        "VENN_TOPIC_PARTITIONS": str(partitions),
        "VENN_RUN_DIR": str(run_dir),
        "VENN_AUTH_SECRET": secret,
        "VENN_POLICY": "venn",
        "VENN_SCHEDULER_WEB_PORT": str(free_port()),
        "VENN_GATEWAY_PORT": str(port),
        "VENN_GATEWAY_RETRY_AFTER_S": "1",
    }
    with open(run_dir / f"{app_id}.log", "ab") as log:
        worker = start_worker(env, log)
        gateway = subprocess.Popen(
            [sys.executable, "-m", "services.gateway", "--log-level", "WARNING"],
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        assert wait_listening("127.0.0.1", port, 60), "the gateway does not listen"
        assert await wait_scheduler_ready(settings), "the scheduler is not ready"
        yield f"http://127.0.0.1:{port}", secret
    finally:
        stop_worker(gateway)
        stop_worker(worker)


@pytest.fixture(scope="module")
async def outcome(
    venn_services: tuple[str, str], broker: str, tmp_path_factory: pytest.TempPathFactory
) -> Outcome:
    gateway, secret = venn_services
    tokens = Tokens(secret)
    tok = uuid.uuid4().hex[:6]
    job_ids = {name: f"flwr-e2e-{tok}-{name}" for name in RUNS}
    bed = FlowerTestbed(
        Path(tmp_path_factory.mktemp("flower")),
        NODES,
        gateway=gateway,
        enroll_token=tokens.issue("enroll", "test", ttl_s=3600),
        # The ServerApps' SDK: the session's broker, and one job token for both runs.
        server_env={
            "VENN_BROKER": broker,
            "VENN_JOB_TOKEN": tokens.issue("job", "test", jobs=[f"flwr-e2e-{tok}-*"], ttl_s=3600),
        },
    )
    recorder = await EventRecorder(broker, [topics.ASSIGNMENTS, topics.ROUNDS]).start()

    wall = 0.0

    def train() -> list[RunReport]:
        nonlocal wall
        started = time.monotonic()
        with bed:
            submitted = [
                bed.submit(
                    EXAMPLE_APPS / app,
                    name,
                    {**COMMON, "requirement": req, "venn-job-id": job_ids[name]},
                )
                for name, (app, req) in RUNS.items()
            ]
            reports = bed.wait(submitted, timeout=240)
        wall = time.monotonic() - started
        return reports

    try:
        reports = await asyncio.to_thread(train)
        jobs = set(job_ids.values())
        await recorder.wait_for(
            lambda: (
                sum(
                    1
                    for e in recorder.events(topics.ROUNDS)
                    if isinstance(e, RoundClosed) and e.job_id in jobs
                )
                >= 2 * COMMON["num-rounds"]
            )
        )
    finally:
        await recorder.stop()
    closes = [
        e for e in recorder.events(topics.ROUNDS) if isinstance(e, RoundClosed) and e.job_id in jobs
    ]
    return Outcome({r.name: r for r in reports}, job_ids, recorder.assignments(jobs), closes, wall)


async def test_both_runs_finish_and_reach_the_stated_accuracy(outcome: Outcome) -> None:
    assert set(outcome.reports) == set(RUNS)
    for name, report in outcome.reports.items():
        assert report.scheduler == "venn"
        assert len(report.accuracy) == COMMON["num-rounds"] + 1, name
        assert report.final_accuracy >= ACCURACY, (name, report.accuracy)
        succeeded = [c for c in outcome.closes if c.job_id == report.job_id]
        assert sum(c.outcome == "succeeded" for c in succeeded) == COMMON["num-rounds"], name
    # The two runs trained at the same time.
    a, b = outcome.reports["a"], outcome.reports["b"]
    assert min(a.finished, b.finished) > max(a.started, b.started)


async def test_every_node_a_round_used_was_assigned_to_that_run_by_venn(outcome: Outcome) -> None:
    assigned = {(a.job_id, a.round_index, a.device_id) for a in outcome.assignments}
    for name, report in outcome.reports.items():
        assert report.tasks, name
        assert report.failed_replies == 0, name
        # Per the run's own record of its Venn rounds...
        assert unassigned_work(report) == [], name
        # ...and per what the scheduler published on venn.assignments.
        round_of = {r.server_round: r.round_index for r in report.venn_rounds if r.replied}
        for task in report.tasks:
            key = (report.job_id, round_of[task.server_round], task.device)
            assert key in assigned, (name, task)
            requirement = parse_requirement(RUNS[name][1])
            node = next(n for n in NODES if n.device_id == task.device)
            assert requirement.admits({k: float(v) for k, v in node.attrs.items()}), task
    # Run "b" may use only d3 and d4; the scheduler really chose between the runs there.
    assert {t.device for t in outcome.reports["b"].tasks} <= {"d3", "d4"}


async def test_no_node_served_two_runs_at_once(outcome: Outcome) -> None:
    reports = list(outcome.reports.values())
    assert sum(len(r.tasks) for r in reports) >= 2 * COMMON["num-rounds"]
    assert overlaps(reports) == []
