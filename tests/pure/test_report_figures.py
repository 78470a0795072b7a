"""`venn report`'s figures from hand-made audit rows, and the files it renders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import report_rows as rows
from venn.data import DATA_DIR
from venn.report import PLOTS, SUMMARY_JSON, SUMMARY_MD, build_report, write_report
from venn.report.figures import reason_kind, tier_of
from venn.report.render import report_json
from venn.workloads import load_workload

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC), path
    assert len(data) > 1000, path


@pytest.mark.parametrize(
    ("reason", "kind"),
    [
        ("deadline: 3/8 results", "deadline"),
        ("devices lost: 5 of 8", "devices lost"),
        ("deadline", "deadline"),
        ("", "unspecified"),
        ("  : odd", "unspecified"),
    ],
)
def test_a_failure_reason_is_grouped_by_the_text_before_its_colon(reason: str, kind: str) -> None:
    assert reason_kind(reason) == kind


def test_every_demo_job_lands_in_its_workload_tier() -> None:
    # The coordinator registers `spec.requirement.as_dict()`: the recorded requirement.
    for job in load_workload(str(DATA_DIR / "workloads" / "demo_workload.yml"), jobs=8).jobs:
        tier = tier_of(job.requirement.as_dict())
        assert tier.rank == job.tier
        assert tier.label.startswith(f"tier {job.tier} (")
    # The paper's attribute aliases name the same tier.
    assert tier_of({"memory": 1000, "cpu": 1, "os": 6}).label == "tier 3 (memory-rich)"


def test_a_requirement_of_no_tier_is_labelled_by_its_thresholds() -> None:
    assert tier_of({"ram": 4, "cpu_f": 2}).label == "cpu_f>=2,ram>=4"
    assert tier_of({}).label == "any"
    assert tier_of(None).label == "unknown"
    # Sorted: the paper's tiers, then other requirements, then unknown.
    tiers = [tier_of(None), tier_of({"ram": 4}), tier_of(rows.HIGH), tier_of(rows.GENERAL)]
    labels = [t.label for t in sorted(tiers)]
    assert labels == ["tier 1 (general)", "tier 4 (high-performance)", "ram>=4", "unknown"]


def test_jobs_and_jct_count_finished_cancelled_and_unfinished_jobs() -> None:
    report = build_report(*rows.audit_objects())
    assert (report.jobs_total, report.jobs_finished) == (4, 2)
    assert (report.jobs_cancelled, report.jobs_unfinished) == (1, 1)
    assert report.jct.count == 2
    assert report.jct.mean == pytest.approx(rows.EXPECTED_MEAN_JCT)
    assert report.jct.max == 50.0


def test_per_job_figures() -> None:
    report = build_report(*rows.audit_objects())
    jobs = {j.job_id: j for j in report.jobs}
    assert {k: j.attempts for k, j in jobs.items()} == rows.EXPECTED_ATTEMPTS
    assert {k: j.failed_rounds for k, j in jobs.items()} == rows.EXPECTED_FAILED
    assert {k: j.status for k, j in jobs.items()} == rows.EXPECTED_STATUS
    assert {k: j.tier for k, j in jobs.items()} == rows.EXPECTED_TIERS
    a = jobs["job-a"]
    assert (a.jct_s, a.rounds, a.rounds_completed) == (50.0, 2, 2)
    assert a.sched_delay_s == pytest.approx((2 + 4 + 1) / 3)
    assert a.response_time_s == pytest.approx((8 + 30 + 9) / 3)
    assert jobs["job-c"].jct_s is None and jobs["job-x"].demand is None


def test_failed_rounds_by_reason_kind_most_frequent_first() -> None:
    report = build_report(*rows.audit_objects())
    assert report.failed_by_reason == rows.EXPECTED_FAILED_BY_REASON
    assert list(report.failed_by_reason) == ["deadline", "devices lost", "unspecified"]
    assert (report.rounds_total, report.rounds_succeeded, report.rounds_failed) == (9, 5, 4)


def test_scheduling_delay_against_response_time() -> None:
    report = build_report(*rows.audit_objects())
    d = report.delay
    assert d.sched_delay.mean == pytest.approx(39 / 9)
    assert d.response_time.mean == pytest.approx(80 / 9)
    assert d.sched_delay.median == 4.0 and d.response_time.median == 5.0
    # Response time > scheduling delay in job-a's three rounds and job-c's first.
    assert (d.response_dominated, d.rounds) == (4, 9)
    assert d.response_dominated_share == pytest.approx(4 / 9)


def test_per_tier_figures() -> None:
    report = build_report(*rows.audit_objects())
    tiers = {t.tier: t for t in report.tiers}
    assert list(tiers) == ["tier 1 (general)", "tier 4 (high-performance)", "ram>=4", "unknown"]
    general = tiers["tier 1 (general)"]
    assert (general.jobs, general.finished, general.attempts, general.failed_rounds) == (2, 1, 4, 2)
    assert general.jct.mean == 50.0
    assert general.sched_delay.mean == pytest.approx(3.0)
    assert general.response_time.mean == pytest.approx(12.25)
    high = tiers["tier 4 (high-performance)"]
    assert (high.jobs, high.finished, high.jct.mean, high.failed_rounds) == (1, 1, 30.0, 0)
    custom = tiers["ram>=4"]
    assert (custom.jobs, custom.finished, custom.jct.mean, custom.failed_rounds) == (1, 0, None, 2)
    unknown = tiers["unknown"]
    assert (unknown.jobs, unknown.attempts, unknown.sched_delay.mean) == (0, 1, 1.0)


def test_the_summary_and_plots_are_written(tmp_path: Path) -> None:
    jobs, closes = rows.audit_objects()
    report = build_report(jobs, closes)
    written = write_report(report, closes, tmp_path / "out", "sqlite:///audit.db")
    names = {p.name for p in written}
    assert names == {SUMMARY_MD, SUMMARY_JSON, *PLOTS}
    for name in PLOTS:
        assert_png(tmp_path / "out" / name)
    summary = json.loads((tmp_path / "out" / SUMMARY_JSON).read_text())
    assert summary == json.loads(json.dumps(report_json(report, "sqlite:///audit.db")))
    assert summary["failed_by_reason"] == rows.EXPECTED_FAILED_BY_REASON
    assert summary["jct"]["mean"] == rows.EXPECTED_MEAN_JCT
    md = (tmp_path / "out" / SUMMARY_MD).read_text()
    assert "| job-a | tier 1 (general) | finished | 50.0 | 2 / 2 | 3 | 1 |" in md
    assert "| deadline | 2 |" in md
    assert "Response time exceeds scheduling delay in 4 of 9 rounds (44%)" in md


def test_an_empty_audit_database_gives_an_empty_report(tmp_path: Path) -> None:
    report = build_report([], [])
    assert (report.jobs_total, report.rounds_total, report.jct.mean) == (0, 0, None)
    assert report.failed_by_reason == {} and report.tiers == []
    write_report(report, [], tmp_path, "sqlite:///empty.db")
    for name in PLOTS:
        assert_png(tmp_path / name)
    assert "No failed rounds." in (tmp_path / SUMMARY_MD).read_text()
