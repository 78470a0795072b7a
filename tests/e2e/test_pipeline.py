"""The whole pipeline on a small workload: fleet -> broker -> scheduler -> coordinators ->
recorder -> Postgres, then every invariant of design.md checked against what was
published on the topics and what was recorded in the audit DB."""

from __future__ import annotations

import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from itertools import pairwise
from pathlib import Path

import pytest
from sqlalchemy import select

from venn.audit.db import create_database, drop_database, make_engine
from venn.audit.migrate import upgrade_database
from venn.audit.models import JobAudit, RoundAudit
from venn.broker import topics
from venn.core.model import Requirement
from venn.events import (
    Assignment,
    DeviceCheckin,
    DeviceResult,
    JobFinished,
    JobRegistered,
    RoundClosed,
)
from venn.stack.demo import DemoConfig, DemoResult, run_demo

pytestmark = pytest.mark.e2e

CONFIG = DemoConfig(
    workload="demo",
    policy="venn",
    jobs=4,  # tiers 1-4: nested requirements, so every pair of jobs competes
    seed=3,
    speedup=20.0,
    rate_per_s=1.5,
    arrival_scale=0.02,
    timeout_s=240.0,
    capture_topics=(
        topics.CHECKINS,
        topics.JOBS,
        topics.ASSIGNMENTS,
        topics.RESULTS,
        topics.ROUNDS,
    ),
)


@pytest.fixture(
    scope="module",
    # The session's broker kind (Apache Kafka), and the smoke run of the Tansu fallback.
    params=["session", pytest.param("tansu", marks=pytest.mark.tansu)],
)
async def run(
    request: pytest.FixtureRequest,
    broker_kind: str,
    pg_admin_url: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[DemoResult]:
    kind = broker_kind if request.param == "session" else request.param
    run_dir = Path(tmp_path_factory.mktemp(f"e2e-run-{kind}"))
    url = create_database(pg_admin_url, f"venn_e2e_{uuid.uuid4().hex[:10]}")
    try:
        upgrade_database(url)
        config = DemoConfig(
            **{
                **CONFIG.__dict__,
                "database_url": url,
                "run_dir": str(run_dir),
                "broker_kind": kind,
            }
        )
        result = await run_demo(config)
        assert result.broker.startswith("Apache Kafka" if kind == "kafka" else "Tansu")
        yield result
    finally:
        drop_database(url)


def of(result: DemoResult, topic: str, kind: type) -> list:
    return [e for e in result.events[topic] if isinstance(e, kind)]


async def test_every_job_finishes_with_its_rounds(run: DemoResult) -> None:
    assert run.jobs_finished == run.jobs_total == 4
    finished = {e.job_id: e for e in of(run, topics.ROUNDS, JobFinished)}
    assert set(finished) == {j.job_id for j in run.jobs}
    for job in run.jobs:
        succeeded = [
            e
            for e in of(run, topics.ROUNDS, RoundClosed)
            if e.job_id == job.job_id and e.outcome == "succeeded"
        ]
        assert len(succeeded) == job.rounds == finished[job.job_id].rounds_completed
        assert all(e.results >= job.results_needed for e in succeeded)


async def test_devices_get_only_jobs_they_are_eligible_for(run: DemoResult) -> None:
    requirement = {
        e.job_id: Requirement.of(e.requirement) for e in of(run, topics.JOBS, JobRegistered)
    }
    attrs = {e.device_id: e.attrs for e in of(run, topics.CHECKINS, DeviceCheckin)}
    assignments = of(run, topics.ASSIGNMENTS, Assignment)
    assert assignments
    bad = [a for a in assignments if not requirement[a.job_id].admits(attrs[a.device_id])]
    assert bad == []
    # The tiers really overlap: some device profile served two different tiers' jobs.
    tiers_by_job = {j.job_id: j.tier for j in run.jobs}
    assert len({tiers_by_job[a.job_id] for a in assignments}) == 4


async def test_a_device_holds_at_most_one_assignment_at_a_time(run: DemoResult) -> None:
    result_at = {
        (r.job_id, r.round_index, r.device_id): r.time
        for r in of(run, topics.RESULTS, DeviceResult)
    }
    closed_at = {(c.job_id, c.round_index): c.time for c in of(run, topics.ROUNDS, RoundClosed)}
    by_device: dict[str, list[Assignment]] = defaultdict(list)
    for a in of(run, topics.ASSIGNMENTS, Assignment):
        by_device[a.device_id].append(a)
    overlaps = []
    for device, items in by_device.items():
        items.sort(key=lambda a: a.time)
        for prev, nxt in pairwise(items):
            ends = [
                t
                for t in (
                    result_at.get((prev.job_id, prev.round_index, device)),
                    closed_at.get((prev.job_id, prev.round_index)),
                )
                if t is not None
            ]
            if not ends or nxt.time < min(ends):
                overlaps.append((device, prev.job_id, nxt.job_id))
    assert overlaps == []


async def test_no_round_gets_more_than_its_demand(run: DemoResult) -> None:
    demand = {e.job_id: e.demand for e in of(run, topics.JOBS, JobRegistered)}
    per_round = Counter((a.job_id, a.round_index) for a in of(run, topics.ASSIGNMENTS, Assignment))
    assert per_round
    assert {k: n for k, n in per_round.items() if n > demand[k[0]]} == {}
    assert run.extra_assignments == 0


async def test_each_closed_round_closes_once_and_has_one_audit_row(run: DemoResult) -> None:
    closes = Counter((c.job_id, c.round_index) for c in of(run, topics.ROUNDS, RoundClosed))
    assert closes and max(closes.values()) == 1
    engine = make_engine(run.database_url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(
                select(RoundAudit.job_id, RoundAudit.round_index, RoundAudit.outcome)
            ).all()
            jobs = conn.execute(select(JobAudit.job_id, JobAudit.jct_s)).all()
    finally:
        engine.dispose()
    # The session database is shared with other tests: look only at this run's jobs.
    mine = {j.job_id for j in run.jobs}
    rows = [r for r in rows if r.job_id in mine]
    jobs = [j for j in jobs if j.job_id in mine]
    assert Counter((r.job_id, r.round_index) for r in rows) == closes
    outcome = {(c.job_id, c.round_index): c.outcome for c in of(run, topics.ROUNDS, RoundClosed)}
    assert {(r.job_id, r.round_index): r.outcome for r in rows} == outcome
    assert {j.job_id: j.jct_s for j in jobs} == pytest.approx(run.jct_s)
