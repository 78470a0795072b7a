"""Running `venn report` as a user does (a subprocess) and checking what it wrote against
the audit rows, queried here independently of the report's own code."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from venn.audit import JobAudit, RoundAudit, make_engine, record_jobs, record_rounds
from venn.report import PLOTS, SUMMARY_JSON, SUMMARY_MD

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def venn_report(
    args: list[str], env: dict[str, str], cwd: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "venn.cli", "report", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def write_rows(url: str, jobs: list[dict[str, Any]], rounds: list[dict[str, Any]]) -> None:
    """Write audit rows with the recorder's own idempotent writes."""
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            record_jobs(conn, jobs)
            record_rounds(conn, rounds)
    finally:
        engine.dispose()


def audit_figures(url: str) -> dict[str, Any]:
    """The figures a report of `url` must give, straight from the tables."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            finished = JobAudit.finished_at.is_not(None)
            mean_jct = conn.execute(select(func.avg(JobAudit.jct_s)).where(finished)).scalar_one()
            jct = dict(conn.execute(select(JobAudit.job_id, JobAudit.jct_s)).all())
            attempts = dict(
                conn.execute(
                    select(RoundAudit.job_id, func.count()).group_by(RoundAudit.job_id)
                ).all()
            )
            reasons = conn.execute(
                select(RoundAudit.reason).where(RoundAudit.outcome == "failed")
            ).scalars()
            failed = Counter((r.split(":")[0].strip() or "unspecified") for r in reasons)
            delay, response = conn.execute(
                select(func.avg(RoundAudit.sched_delay_s), func.avg(RoundAudit.response_time_s))
            ).one()
    finally:
        engine.dispose()
    return {
        "jobs": len(jct),
        "jct": jct,
        "mean_jct": mean_jct,
        "attempts": attempts,
        "failed_by_reason": dict(failed),
        "mean_sched_delay": delay,
        "mean_response_time": response,
    }


def check_report(out: Path, url: str) -> dict[str, Any]:
    """The summary in `out` against the rows at `url`; every plot is a PNG. Returns the
    summary."""
    summary = json.loads((out / SUMMARY_JSON).read_text())
    truth = audit_figures(url)
    assert summary["jobs_total"] == truth["jobs"]
    assert summary["jct"]["mean"] == pytest.approx(truth["mean_jct"])
    assert {j["job_id"]: j["jct_s"] for j in summary["jobs"] if j["job_id"] in truth["jct"]} == (
        pytest.approx(truth["jct"])
    )
    assert summary["failed_by_reason"] == truth["failed_by_reason"]
    assert summary["rounds_failed"] == sum(truth["failed_by_reason"].values())
    assert {j["job_id"]: j["attempts"] for j in summary["jobs"] if j["attempts"]} == (
        truth["attempts"]
    )
    assert summary["delay"]["sched_delay"]["mean"] == pytest.approx(truth["mean_sched_delay"])
    assert summary["delay"]["response_time"]["mean"] == pytest.approx(truth["mean_response_time"])
    assert (out / SUMMARY_MD).read_text().startswith("# Venn audit report")
    for name in PLOTS:
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) > 1000, name
    return summary
