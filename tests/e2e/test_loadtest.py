"""Locust, headless for a few seconds, against the embedded stack with both user types."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from loadtest.run import LoadTestConfig, LoadTestResult, run_loadtest
from loadtest.stack import StackConfig

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
async def result(tmp_path_factory: pytest.TempPathFactory) -> LoadTestResult:
    out = tmp_path_factory.mktemp("loadtest-out")
    cfg = LoadTestConfig(
        duration_s=8, users=10, kafka_users=1, spawn_rate=10, peak_rate=4,
        kafka_peak_rate=100, day_s=8, out=out,
    )  # fmt: skip
    return await run_loadtest(cfg, StackConfig(run_dir=out / "run", demand=20, deadline_s=5))


def test_checkins_were_answered_and_nothing_failed(result: LoadTestResult) -> None:
    assert result.locust_exit == 0
    checkins = [r for r in result.rows if r.name.startswith("/v1/checkin [")]
    answers = {r.name: r.requests for r in checkins}
    assert sum(answers.values()) > 0, result.rows
    assert answers.get("/v1/checkin [assigned]", 0) > 0, answers
    kafka = result.row("produce venn.checkins")
    assert kafka is not None and kafka.type == "KAFKA" and kafka.requests > 0
    assert all(r.failures == 0 for r in result.rows), [r for r in result.rows if r.failures]
    assert result.total.requests == sum(r.requests for r in result.rows if r.name != "Aggregated")


def test_reports_were_written(result: LoadTestResult) -> None:
    failures = result.stats_csv.with_name(result.stats_csv.name.replace("_stats", "_failures"))
    with failures.open(newline="") as fh:
        assert list(csv.DictReader(fh)) == []
    html = Path(result.html).read_text()
    assert "locust" in html.lower() and "/v1/checkin" in html
    stats = result.gateway["stats"]
    assert isinstance(stats, dict)
    assert stats["internal_errors"] == 0 and stats["assigned"] > 0
