"""`venn report` on the audit database of a finished `venn demo`: a small workload with a
tight-deadline job (rounds fail and are retried), then the report checked against the
audit rows and against what the demo's coordinators saw."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from devtools.stack.demo import DemoConfig, DemoResult
from tests.brokers import StackBroker
from tests.e2e.harness import demo_run
from tests.environment import clean_env
from tests.report_checks import audit_figures, check_report, venn_report
from venn.workloads import TIER_NAMES

pytestmark = pytest.mark.e2e

# Two small templates on the paper's four tiers; with seed 0 the workload draws job-000 from
# the second (a deadline about as long as a round's response time: most attempts fail on
# it) and job-001, job-002 from the first.
JOB_CONFIG = """
jobs:
    - config: {participants: 4, rounds: 2, deadline: 300, workload: 30}
    - config: {participants: 6, rounds: 2, deadline: 60, workload: 30}
job_requirement:
    - eligibility: {memory: 10, cpu: 1, os: 6}
    - eligibility: {memory: 10, cpu: 7, os: 6}
    - eligibility: {memory: 1000, cpu: 1, os: 6}
    - eligibility: {memory: 1000, cpu: 7, os: 6}
"""
WORKLOAD = """
RANDOMSEED: 0
NUM_DAY: 1
NUM_WEEK: 1
job_config_file: 'report_job_config.yml'
job_id_prob: [1, 1]
"""


@pytest.fixture(scope="module")
async def demo(
    stack_broker: StackBroker, pg_admin_url: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[DemoResult]:
    """A finished demo whose audit rows stay in a database of its own."""
    here = tmp_path_factory.mktemp("report-demo")
    (here / "report_job_config.yml").write_text(JOB_CONFIG)
    (here / "report_workload.yml").write_text(WORKLOAD)
    config = DemoConfig(
        workload=str(here / "report_workload.yml"),
        jobs=3,
        seed=0,
        speedup=40.0,
        rate_per_s=1.5,
        arrival_scale=0.01,
        first_arrival_s=10.0,
        timeout_s=120.0,
    )
    async with demo_run(config, pg_admin_url, here / "run", stack_broker) as result:
        yield result


async def test_report_of_a_finished_demo(demo: DemoResult, tmp_path: Path) -> None:
    assert demo.jobs_finished >= 1  # a JCT to report
    assert demo.audit_rounds == demo.rounds_closed  # the recorder caught up
    done = venn_report(
        ["--database-url", demo.database_url, "--out", "out"], clean_env(tmp_path), tmp_path
    )
    assert done.returncode == 0, done.stderr
    summary = check_report(tmp_path / "out", demo.database_url)

    # What the coordinators saw, independently of the database.
    jobs = {j["job_id"]: j for j in summary["jobs"]}
    assert set(jobs) == {j.job_id for j in demo.jobs}
    assert {k: j["attempts"] for k, j in jobs.items()} == demo.attempts
    assert {k: j["jct_s"] for k, j in jobs.items()} == pytest.approx(demo.jct_s)
    assert summary["rounds_total"] == demo.rounds_closed
    assert summary["rounds_failed"] == demo.rounds_failed
    assert summary["jobs_finished"] == demo.jobs_finished
    # The tight deadline made rounds fail, on the deadline.
    assert demo.rounds_failed > 0
    assert set(summary["failed_by_reason"]) == {"deadline"}
    # Each job under the tier the workload gave it (job i: tier i mod 4 + 1).
    assert {k: j["tier"] for k, j in jobs.items()} == {
        j.job_id: f"tier {j.tier} ({TIER_NAMES[j.tier]})" for j in demo.jobs
    }
    tiers = {t["tier"]: t for t in summary["tiers"]}
    assert sum(t["attempts"] for t in tiers.values()) == demo.rounds_closed
    assert all(t["jobs"] == 1 for t in tiers.values())
    truth = audit_figures(demo.database_url)
    assert summary["delay"]["sched_delay"]["count"] == sum(truth["attempts"].values())
