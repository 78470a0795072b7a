"""Locust, headless for a few seconds, in two processes, against the embedded stack secured
as under `venn up` (device tokens from enrolment; Kafka principals), with both user types."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from loadtest.run import LoadTestConfig, LoadTestResult, run_loadtest
from loadtest.stack import StackConfig
from tests.brokers import StackBroker

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
async def result(
    stack_broker: StackBroker, tmp_path_factory: pytest.TempPathFactory
) -> LoadTestResult:
    out = tmp_path_factory.mktemp("loadtest-out")
    cfg = LoadTestConfig(
        duration_s=8, users=10, kafka_users=1, spawn_rate=10, peak_rate=4,
        kafka_peak_rate=100, day_s=8, out=out, processes=2,
    )  # fmt: skip
    stack = StackConfig(
        run_dir=out / "run", demand=20, deadline_s=5, secure=True,
        broker=stack_broker.bootstrap or None, broker_kind=stack_broker.tuning or "auto",
        kafka_users=dict(stack_broker.users or {}) or None,
    )  # fmt: skip
    return await run_loadtest(cfg, stack)


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


def test_devices_enrolled_and_checked_in_with_their_own_tokens(result: LoadTestResult) -> None:
    enrolled = result.row("/v1/devices [enrol]")
    assert enrolled is not None and enrolled.requests > 0 and enrolled.failures == 0
    stats = result.gateway["stats"]
    assert isinstance(stats, dict)
    assert stats["enrolled"] >= enrolled.requests and stats["unauthorized"] == 0, stats


def test_the_report_gives_checkins_per_second_per_process_and_per_user(
    result: LoadTestResult,
) -> None:
    rates = result.rates
    http = sum(r.rps for r in result.rows if r.name.startswith("/v1/checkin ["))
    assert rates.http == http > 0 and rates.kafka > 0
    assert rates.processes == 2 and rates.per_process == rates.total / 2
    assert rates.per_http_user == rates.http / 10 and rates.per_kafka_user == rates.kafka
    assert "per Locust process" in rates.summary()


def test_reports_were_written(result: LoadTestResult) -> None:
    failures = result.stats_csv.with_name(result.stats_csv.name.replace("_stats", "_failures"))
    with failures.open(newline="") as fh:
        assert list(csv.DictReader(fh)) == []
    html = Path(result.html).read_text()
    assert "locust" in html.lower() and "/v1/checkin" in html
    stats = result.gateway["stats"]
    assert isinstance(stats, dict)
    assert stats["internal_errors"] == 0 and stats["assigned"] > 0
