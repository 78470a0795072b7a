"""Prometheus /metrics of every service (issue 15, item 4): on a `venn up` stack, the
counters of the gateway, the scheduler and the recorder equal the events the test sent."""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiokafka import AIOKafkaProducer

from tests.brokers import StackBroker
from tests.e2e.harness import own_database, venn_up
from tests.environment import clean_env
from venn.auth.local import issuer, job_token
from venn.broker import topics
from venn.sdk import VennClient
from venn.settings import Settings, stack_ports

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "ops" / "grafana" / "dashboards" / "venn.json"
PROMETHEUS = ROOT / "ops" / "prometheus" / "prometheus.yml"
METRICS_PORT = {
    "gateway": "VENN_GATEWAY_PORT",
    "scheduler": "VENN_SCHEDULER_WEB_PORT",
    "recorder": "VENN_RECORDER_PORT",
}
"""Each service with a /metrics page, and the variable that sets its port."""
SAMPLE_SUFFIXES = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_count", "_sum"),
    "gauge": ("",),
}
ELIGIBLE = {"cpu_f": 9.0, "ram": 8.0}
INELIGIBLE = {"battery": 1.0}


def scrape(port: int) -> dict[str, float]:
    """{'name{labels}': value} of a /metrics page."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    found = {}
    for line in text.splitlines():
        match = re.match(r"^([a-z_:]+(?:\{[^}]*\})?) ([0-9.e+-]+)$", line)
        if match:
            found[match.group(1)] = float(match.group(2))
    return found


def exposed(port: int) -> set[str]:
    """Every sample name a /metrics page can show, from its `# TYPE` lines (so that a
    labelled family without samples yet counts too)."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    names: set[str] = set()
    for line in text.splitlines():
        match = re.match(r"^# TYPE (\S+) (\w+)$", line)
        if match:  # a counter's family is named with or without _total, by version
            family = match[1].removesuffix("_total") if match[2] == "counter" else match[1]
            names.update(family + suffix for suffix in SAMPLE_SUFFIXES.get(match[2], ("",)))
    return names


def dashboard_metrics() -> set[str]:
    """The venn_* names the Grafana dashboard's queries read."""
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    assert len(exprs) >= 10
    return {name for expr in exprs for name in re.findall(r"\bvenn_\w+", expr)}


def post(port: int, path: str, body: bytes, token: str) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=body,
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


@pytest.fixture
def stack(stack_broker: StackBroker, pg_admin_url: str, tmp_path: Path) -> Iterator[Settings]:
    with (
        own_database(pg_admin_url) as url,
        venn_up(tmp_path / "run", stack_broker, VENN_DATABASE_URL=url) as (info, settings),
    ):
        # A client in the run dir finds the stack's secret.
        assert Settings.from_env(clean_env(info.run_dir)).auth_secret == settings.auth_secret
        yield settings


def test_every_service_counts_what_it_was_sent(stack: Settings) -> None:
    settings = stack
    ports = stack_ports(settings.run_dir)
    assert set(ports) == {"gateway", "scheduler", "recorder"}
    tokens = issuer(settings)
    assert tokens is not None
    job = "metrics-job"
    health = json.loads(
        urllib.request.urlopen(f"http://127.0.0.1:{ports['gateway']}/healthz", timeout=10).read()
    )
    gateway_id = health["gateway_id"]
    sent = {"checkins": 0, "invalid": 0, "shed": 0}

    def checkin(device: str, attrs: dict[str, float]) -> dict[str, Any]:
        """As a device does: told 429 (a gateway just started may shed while its loop
        catches up: CI of d19a321), it comes back after `retry_after`."""
        body = json.dumps(
            {"device_id": device, "attrs": attrs, "speed_ms_per_sample": 50, "bandwidth_kbps": 5e3}
        ).encode()
        for _ in range(10):
            status, answer = post(
                ports["gateway"], "/v1/checkin", body, tokens.issue("device", device, ttl_s=600)
            )
            if status != 429:
                break
            sent["shed"] += 1
            time.sleep(answer["retry_after"])
        assert status == 200, answer
        sent["checkins"] += 1
        return answer

    for i in range(5):
        assert checkin(f"idle-{i}", INELIGIBLE)["assigned"] is False
    for _ in range(2):
        device = "broken"
        status, _ = post(
            ports["gateway"], "/v1/checkin", b"{oops", tokens.issue("device", device, ttl_s=60)
        )
        assert status == 400
        sent["invalid"] += 1

    async def run_job() -> None:
        coordinator = settings.for_role("coordinator")
        async with VennClient(
            settings.broker,
            token=job_token(settings, [job]),
            kafka_options=coordinator.kafka_options,
        ) as client:
            await client.register_job(job, {"cpu_f": 1}, 2, 1, deadline_s=600)
            await client.request_round(job, 0, 2)
            assigned: set[str] = set()
            deadline = time.monotonic() + 60
            i = 0
            answer: dict[str, Any] = {}
            while len(assigned) < 2:
                assert time.monotonic() < deadline, f"never assigned: {answer}"
                device = f"worker-{i % 3}"
                i += 1
                answer = await asyncio.to_thread(checkin, device, ELIGIBLE)
                if answer["assigned"]:
                    assigned.add(device)
                else:
                    await asyncio.sleep(0.3)
            now = time.time()
            await client.close_round(
                job,
                0,
                "succeeded",
                demand=2,
                assigned=2,
                results=2,
                opened_at=now - 5,
                closed_at=now,
            )
            # A second, different close of the same attempt: the recorder keeps the first
            # and dead-letters this one.
            await client.close_round(
                job,
                0,
                "failed",
                demand=2,
                assigned=2,
                results=0,
                opened_at=now - 5,
                closed_at=now + 1,
                reason="deadline: 0/2 results",
            )
            await client.finish_job(job, rounds_completed=1, arrival=now - 10, finished_at=now)
        admin = settings.for_role("admin")
        producer = AIOKafkaProducer(bootstrap_servers=settings.broker, **admin.kafka_options)
        await producer.start()
        try:
            await producer.send_and_wait(topics.JOBS, b"not json", key=b"metrics-bad")
            # A malformed reply addressed to the gateway: the scheduler's to dead-letter
            # (topics.DEAD_LETTER_OWNER: one letter whether that gateway is alive or not).
            await producer.send_and_wait(topics.REPLIES, b"[1, 2]", key=gateway_id.encode())
        finally:
            await producer.stop()

    asyncio.run(run_job())

    def settled() -> bool:
        recorder = scrape(ports["recorder"])
        # The bad record is on a partition of its own: the recorder may read it last.
        return (
            recorder.get("venn_recorder_rounds_added_total") == 1
            and recorder.get("venn_recorder_jobs_touched_total", 0) >= 1
            and recorder.get("venn_recorder_invalid_total") == 1
            and scrape(ports["scheduler"]).get(
                'venn_scheduler_dead_letter_reasons_total{reason="not_json",topic="venn.jobs"}'
            )
            == 1
            and scrape(ports["scheduler"]).get(
                'venn_scheduler_dead_letter_reasons_total{reason="not_an_object",'
                'topic="venn.replies"}'
            )
            == 1
        )

    deadline = time.monotonic() + 60
    while not settled():
        assert time.monotonic() < deadline, (scrape(ports["recorder"]), scrape(ports["scheduler"]))
        time.sleep(0.5)

    gateway = scrape(ports["gateway"])
    assert gateway["venn_gateway_checkins_total"] == sent["checkins"]
    shed = ("overloaded", "late", "broker_down")
    assert sum(gateway.get(f"venn_gateway_{s}_total", 0) for s in shed) == sent["shed"]
    assert gateway["venn_gateway_assigned_total"] == 2
    assert gateway["venn_gateway_invalid_total"] == sent["invalid"]
    assert (
        gateway['venn_gateway_request_seconds_count{path="/v1/checkin",status="200"}']
        == sent["checkins"]
    )
    # What the gateway answered itself (no open round admitted the device, once its demand
    # view was ready) it only counted in its supply reports; the scheduler saw the rest.
    answered_at_once = gateway["venn_gateway_fast_no_total"] + gateway.get(
        "venn_gateway_enough_in_flight_total", 0
    )
    forwarded = sent["checkins"] - answered_at_once
    scheduler = scrape(ports["scheduler"])
    assert scheduler["venn_scheduler_checkins_total"] == forwarded
    assert scheduler["venn_scheduler_assignments_total"] == 2
    assert scheduler["venn_scheduler_declined_total"] == forwarded - 2
    assert scheduler['venn_scheduler_round_outcomes_total{outcome="succeeded"}'] == 1
    assert scheduler["venn_scheduler_round_fill_seconds_count"] == 1
    # The plan was compiled at least once to decide the eligible check-ins.
    assert scheduler["venn_scheduler_plan_recompute_seconds_count"] >= 1
    deadline = time.monotonic() + 30  # the lag gauges are refreshed every 5 s
    while not any(k.startswith("venn_scheduler_consumer_lag{") for k in scrape(ports["scheduler"])):
        assert time.monotonic() < deadline, "no consumer lag gauge"
        time.sleep(1.0)
    recorder = scrape(ports["recorder"])
    assert recorder["venn_recorder_rounds_added_total"] == 1
    assert recorder["venn_recorder_invalid_total"] == 1  # the bad record: skipped, not audited
    assert recorder["venn_recorder_broker_available"] == 1
    assert recorder['venn_recorder_dead_letter_reasons_total{reason="conflicting_close"}'] == 1
    lags = {k: v for k, v in recorder.items() if k.startswith("venn_recorder_consumer_lag{")}
    assert lags and all(v == 0 for v in lags.values()), lags  # everything read
    assert any(k.startswith("venn_gateway_consumer_lag{") for k in scrape(ports["gateway"]))
    # Every metric the Grafana dashboard reads is one these services expose.
    names = set().union(*(exposed(port) for port in ports.values()))
    wanted = dashboard_metrics()
    assert wanted <= names, sorted(wanted - names)


def test_prometheus_scrapes_every_service_at_its_compose_port() -> None:
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    shared = compose["x-venn-env"]
    services = compose["services"]
    config = yaml.safe_load(PROMETHEUS.read_text())
    targets: dict[str, set[str]] = {}
    for job in config["scrape_configs"]:
        found = targets.setdefault(job["job_name"], set())
        for static in job.get("static_configs", []):
            found.update(static["targets"])
        for dns in job.get("dns_sd_configs", []):
            found.update(f"{name}:{dns['port']}" for name in dns["names"])
    assert targets == {
        name: {f"{name}:{shared[variable]}"} for name, variable in METRICS_PORT.items()
    }
    for name, variable in METRICS_PORT.items():
        assert name in services and variable in shared, name
        host = variable.replace("_PORT", "_HOST")
        assert shared[host] == "0.0.0.0", f"{name} binds {shared[host]}: Prometheus cannot reach it"
    # The services of the metrics profile read these files, and Grafana this Prometheus.
    prometheus, grafana = services["prometheus"], services["grafana"]
    assert prometheus["profiles"] == grafana["profiles"] == ["metrics"]
    assert any(v.startswith("./ops/prometheus/prometheus.yml:") for v in prometheus["volumes"])
    assert "./ops/grafana/provisioning:/etc/grafana/provisioning:ro" in grafana["volumes"]
    assert "./ops/grafana/dashboards:/var/lib/grafana/dashboards:ro" in grafana["volumes"]
    source = yaml.safe_load(
        (ROOT / "ops/grafana/provisioning/datasources/prometheus.yml").read_text()
    )["datasources"][0]
    assert source["url"] == "http://prometheus:9090"
    assert any(str(p).endswith(":9090") for p in prometheus["ports"])
    uids = {
        t["datasource"]["uid"]
        for panel in json.loads(DASHBOARD.read_text())["panels"]
        for t in panel["targets"]
    }
    assert uids == {source["uid"]}
