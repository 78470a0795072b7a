"""The whole pipeline on a small workload: fleet -> broker -> scheduler -> coordinators ->
recorder -> Postgres, then every invariant of design.md checked against what was
published on the topics and what was recorded in the audit DB."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import select

from devtools.stack.demo import DemoResult
from tests import invariants
from tests.brokers import StackBroker, fresh_topics
from tests.e2e.harness import DEMO, demo_run
from venn.audit.db import make_engine
from venn.audit.models import JobAudit, RoundAudit
from venn.broker import topics
from venn.events import (
    JobFinished,
    RoundClosed,
)

pytestmark = pytest.mark.e2e

# tiers 1-4: nested requirements, so every pair of jobs competes
CONFIG = dataclasses.replace(DEMO, jobs=4, timeout_s=240.0)


@pytest.fixture(
    scope="module",
    # The session's broker kind (Apache Kafka), and the smoke run of the Tansu fallback.
    params=["session", pytest.param("tansu", marks=pytest.mark.tansu)],
)
async def run(
    request: pytest.FixtureRequest,
    stack_broker: StackBroker,
    broker_kind: str,
    pg_admin_url: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[DemoResult]:
    where, kind = stack_broker, broker_kind
    if request.param == "tansu":  # the session's Tansu, its topics emptied for this run
        tansu: str = request.getfixturevalue("tansu_broker")
        await fresh_topics(tansu)
        where, kind = StackBroker("external", tansu, tuning="tansu"), "tansu"
    run_dir = Path(tmp_path_factory.mktemp(f"e2e-run-{kind}"))
    async with demo_run(CONFIG, pg_admin_url, run_dir, where) as result:
        assert result.broker == f"external at {where.bootstrap}"  # the broker meant
        yield result


def of(result: DemoResult, topic: str, kind: type) -> list:
    """The run's own events of ``kind`` on ``topic``: the session broker is shared with other
    modules (test_flower's jobs finish on it too)."""
    mine = {j.job_id for j in result.jobs}
    events = [e for e in result.events[topic] if isinstance(e, kind)]
    return [e for e in events if getattr(e, "job_id", None) in mine]


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
    assert invariants.assignments(run.events)
    assert invariants.ineligible(run.events) == []
    # The tiers really overlap: some device profile served two different tiers' jobs.
    tiers_by_job = {j.job_id: j.tier for j in run.jobs}
    assert len({tiers_by_job[a.job_id] for a in invariants.assignments(run.events)}) == 4


async def test_a_device_holds_at_most_one_assignment_at_a_time(run: DemoResult) -> None:
    assert invariants.overlapping(run.events) == []


async def test_no_round_gets_more_than_its_demand(run: DemoResult) -> None:
    assert invariants.assignments(run.events)
    assert invariants.over_demand(run.events) == {}
    assert run.extra_assignments == 0


async def test_each_closed_round_closes_once_and_has_one_audit_row(run: DemoResult) -> None:
    mine = {j.job_id for j in run.jobs}
    closes = invariants.closes(run.events, mine)
    assert closes and max(closes.values()) == 1
    assert invariants.audit_mismatch(run.events, run.database_url, mine) == {}
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
    rows = [r for r in rows if r.job_id in mine]
    jobs = [j for j in jobs if j.job_id in mine]
    assert Counter((r.job_id, r.round_index) for r in rows) == closes
    outcome = {(c.job_id, c.round_index): c.outcome for c in of(run, topics.ROUNDS, RoundClosed)}
    assert {(r.job_id, r.round_index): r.outcome for r in rows} == outcome
    assert {j.job_id: j.jct_s for j in jobs} == pytest.approx(run.jct_s)
