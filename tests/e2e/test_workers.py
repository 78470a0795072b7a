"""Several scheduler workers in the leased mode, on Apache Kafka: a workload runs while a
worker joins, one leaves (SIGTERM) and one is killed (SIGKILL), from two workers to
three, to two, to one; every job finishes and every invariant of design.md holds."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests import invariants
from venn.audit.db import create_database, drop_database
from venn.audit.migrate import upgrade_database
from venn.broker import topics
from venn.broker.process import free_port
from venn.stack.demo import DemoConfig, DemoHandles, DemoResult, run_demo
from venn.stack.local import service_env
from venn.stack.processes import running_services, scheduler_spec, start_service, stop_pid

pytestmark = pytest.mark.e2e

CONFIG = DemoConfig(
    workload="demo",
    policy="venn",
    jobs=6,
    seed=3,
    speedup=20.0,
    rate_per_s=1.5,
    arrival_scale=0.02,
    timeout_s=300.0,
    workers=2,
    capture_topics=(
        topics.CHECKINS,
        topics.JOBS,
        topics.ASSIGNMENTS,
        topics.RESULTS,
        topics.ROUNDS,
    ),
)
JOIN_S, LEAVE_S, KILL_S = 8.0, 22.0, 36.0
"""Wall seconds after the workload starts: worker 3 joins, worker 2 leaves, worker 3 is
killed; worker 1 runs throughout."""


async def membership(handles: DemoHandles, log: list[str]) -> None:
    while handles.phase != "running":
        await asyncio.sleep(0.2)
    assert handles.settings is not None and handles.run_dir is not None
    run, settings = handles.run_dir, handles.settings
    start = asyncio.get_running_loop().time()

    async def at(seconds: float) -> None:
        await asyncio.sleep(max(0.0, start + seconds - asyncio.get_running_loop().time()))

    await at(JOIN_S)
    spec = scheduler_spec(3)
    env = service_env(settings.for_role("scheduler"), CONFIG.policy, CONFIG.trace_seed)
    port = handles.worker_ports[spec.name] = free_port()
    env["VENN_SCHEDULER_WEB_PORT"] = str(port)
    start_service(run, spec, env, detached=False)
    log.append("scheduler-3 joined")
    await at(LEAVE_S)
    assert await asyncio.to_thread(stop_pid, running_services(run)["scheduler-2"], 20.0)
    log.append("scheduler-2 left")
    await at(KILL_S)
    os.kill(running_services(run)["scheduler-3"], signal.SIGKILL)
    log.append("scheduler-3 killed")


@pytest.fixture(scope="module")
async def run(
    broker_kind: str, pg_admin_url: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[DemoResult, list[str]]]:
    run_dir = Path(tmp_path_factory.mktemp("workers-run"))
    url = create_database(pg_admin_url, f"venn_workers_{uuid.uuid4().hex[:10]}")
    try:
        upgrade_database(url)
        config = DemoConfig(
            **{
                **CONFIG.__dict__,
                "database_url": url,
                "run_dir": str(run_dir),
                "broker_kind": broker_kind,
            }
        )
        handles, log = DemoHandles(), list[str]()
        changes = asyncio.create_task(membership(handles, log))
        result = await run_demo(config, handles)
        await changes  # raises if a change could not be made
        # A worker that could not restore a row would lease blind: none may have.
        for path in run_dir.glob("scheduler*.log"):
            assert "cannot restore" not in path.read_text(errors="replace"), path.name
        yield result, log
    finally:
        drop_database(url)


async def test_membership_changed_mid_run(run: tuple[DemoResult, list[str]]) -> None:
    result, log = run
    assert log == ["scheduler-3 joined", "scheduler-2 left", "scheduler-3 killed"]
    assert result.scheduler_mode == "leased"
    # The worker that ran throughout decided check-ins; the two that are gone answer no more.
    assert result.workers["scheduler"] > 0
    assert result.workers["scheduler-2"] == result.workers["scheduler-3"] == -1


async def test_every_job_finishes(run: tuple[DemoResult, list[str]]) -> None:
    result, _ = run
    assert result.jobs_finished == result.jobs_total == CONFIG.jobs


async def test_invariants_hold(run: tuple[DemoResult, list[str]]) -> None:
    result, _ = run
    events = result.events
    assert invariants.assignments(events)
    assert invariants.ineligible(events) == []
    assert invariants.overlapping(events) == []
    assert invariants.over_demand(events) == {}
    assert result.extra_assignments == 0
    mine = {j.job_id for j in result.jobs}
    closes = invariants.closes(events, mine)
    assert closes and max(closes.values()) == 1
    assert invariants.audit_mismatch(events, result.database_url, mine) == {}
