"""Admission on the pipeline (issue 24, item 2): a scheduler worker, a gateway and the
recorder on the session's Kafka and Postgres. Submissions refused through the job API and
the CLI (no eligible supply; the estimate misses finish_by), one admitted late with a
warning, and a queued job admitted when the running job ends; every decision in
job_history."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import json
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import sqlalchemy as sa

from services.gateway import GatewayServer
from services.gateway.admission_gate import load_of
from services.recorder import RecorderStats, run_recorder
from services.scheduler.process import start_worker, stop_worker
from tests.broker.scheduler_bus import checkin
from tests.broker.test_scheduler_pipeline import READY_TIMEOUT, Bus, checkins
from tests.polling import until
from venn.audit import make_engine
from venn.broker import topics
from venn.broker.prepare import prepare_topics
from venn.net import free_port
from venn.sdk import VennClient
from venn.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
MIN_CHECKINS = 20


@dataclasses.dataclass
class Stack:
    bus: Bus
    settings: Settings
    http: aiohttp.ClientSession
    pg_url: str
    gateway: GatewayServer | None = None
    trickles: list[asyncio.Task[None]] = dataclasses.field(default_factory=list)

    @contextlib.asynccontextmanager
    async def serving(self, **admission: Any) -> AsyncIterator[GatewayServer]:
        """A gateway with these admission settings (every gateway admits queued jobs by its
        own limits, so one at a time)."""
        server = GatewayServer(self.settings.with_admission(**admission))
        await server.start()
        deadline = time.monotonic() + 30
        while not server.gateway.view_ready and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        self.gateway = server
        try:
            yield server
        finally:
            self.gateway = None
            await server.stop()

    @property
    def url(self) -> str:
        assert self.gateway is not None
        return self.gateway.url

    async def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        async with self.http.request(method, self.url + path, data=data) as r:
            return r.status, await r.json()

    async def until(self, path: str, check: Any, timeout: float = 30.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            status, body = await self.call("GET", path)
            if status == 200 and check(body):
                return body
            assert time.monotonic() < deadline, (status, body)
            await asyncio.sleep(0.2)

    async def cli(self, *args: str) -> tuple[int, str, str]:
        env = {**os.environ, "VENN_API_URL": self.url,
               "VENN_RUN_DIR": "/nonexistent-venn-run-dir"}  # fmt: skip
        env.pop("VENN_API_TOKEN", None)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "venn.cli", *args, cwd=ROOT, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()

    async def supply(self, attr: str, devices: int = 30) -> None:
        """Devices with ``attr`` 2 check in, until the scheduler's snapshot holds them (in
        its supply mix: the window's total stays at its size once other modules' check-ins
        on the shared broker filled it, so a count of it cannot tell). They go on checking
        in, 10 a second, to the module's end: admission judges a rate, and a burst's rate is
        no longer counted once its source goes quiet."""
        tok = uuid.uuid4().hex[:6]
        ids = [f"d{i}-{tok}" for i in range(devices)]
        await checkins(self.bus, ids, {attr: 2.0})
        self.trickles.append(asyncio.create_task(self._trickle(ids, attr)))
        assert self.gateway is not None
        status = self.gateway.gateway.status

        def held() -> int:
            latest = status.latest
            mix = latest.supply_mix if latest is not None else []
            return sum(s.checkins for s in mix if s.attrs == {attr: 2.0})

        await until(lambda: held() >= devices, 30, f"{devices} check-ins of {attr} in the mix")
        _, body = await self.call("GET", "/v1/devices")
        assert body["available"] and body["admission_window"] >= MIN_CHECKINS, body

    async def _trickle(self, ids: list[str], attr: str) -> None:
        for i in itertools.count():
            await asyncio.sleep(0.1)
            await self.bus.send(topics.CHECKINS, checkin(ids[i % len(ids)], {attr: 2.0}))

    def history(self, job_id: str) -> list[tuple[str, str]]:
        engine = make_engine(self.pg_url)
        try:
            with engine.connect() as conn:
                rows = conn.execute(
                    sa.text("SELECT kind, detail FROM job_history WHERE job_id = :j ORDER BY id"),
                    {"j": job_id},
                )
                return [(r.kind, r.detail) for r in rows]
        finally:
            engine.dispose()

    async def history_until(self, job_id: str, kinds: list[str]) -> list[tuple[str, str]]:
        deadline = time.monotonic() + 30
        while True:
            rows = self.history(job_id)
            if [k for k, _ in rows] == kinds:
                return rows
            assert time.monotonic() < deadline, rows
            await asyncio.sleep(0.5)


@pytest.fixture(scope="module")
async def stack(broker: str, run_dir: Path, partitions: int, pg_url: str) -> AsyncIterator[Stack]:
    app_id = f"venn-scheduler-admit-{uuid.uuid4().hex[:8]}"
    settings = Settings(broker=broker, app_id=app_id, topic_partitions=partitions)
    await prepare_topics(settings)
    env = {
        "VENN_BROKER": broker,
        "VENN_APP_ID": app_id,
        "VENN_TOPIC_PARTITIONS": str(partitions),
        "VENN_RUN_DIR": str(run_dir),
        "VENN_JOB_TIMEOUT_S": "0",
        "VENN_SCHEDULER_WEB_PORT": str(free_port()),
    }
    bus = Bus(broker, partitions)
    await bus.start()
    with open(run_dir / f"{app_id}.log", "ab") as log:
        worker = start_worker(env, log)
    stop = asyncio.Event()
    recorder = asyncio.create_task(
        run_recorder(
            dataclasses.replace(settings, database_url=pg_url),
            stop,
            group_id=f"rec-{app_id}",
            stats=RecorderStats(),
        )
    )
    gateway_settings = settings.with_gateway(port=0, wait_s=2.0).with_admission(
        min_checkins=MIN_CHECKINS, queue_check_s=0.3
    )
    http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
    trickles: list[asyncio.Task[None]] = []
    try:
        await bus.barrier(topics.CHECKINS, READY_TIMEOUT)
        yield Stack(bus, gateway_settings, http, pg_url, trickles=trickles)
    finally:
        for task in trickles:
            task.cancel()
        await asyncio.gather(*trickles, return_exceptions=True)
        await http.close()
        stop.set()
        await asyncio.wait_for(recorder, 30)
        stop_worker(worker, timeout=10)
        await bus.stop()


def spec(job_id: str, requirement: dict[str, float], rounds: int = 2) -> dict[str, Any]:
    return {"job_id": job_id, "requirement": requirement, "demand": 2, "rounds": rounds,
            "deadline_s": 600}  # fmt: skip


def spec_file(tmp_path: Path, body: dict[str, Any]) -> str:
    path = tmp_path / f"{body['job_id']}.json"
    path.write_text(json.dumps(body))
    return str(path)


async def test_refused_submissions_with_the_reason_and_the_counts(
    stack: Stack, tmp_path: Path
) -> None:
    async with stack.serving():
        await refusals(stack, tmp_path)


async def refusals(stack: Stack, tmp_path: Path) -> None:
    tok = uuid.uuid4().hex[:8]
    attr = f"ram_{tok}"
    await stack.supply(attr)

    # No device of the window meets it: the API's 409 with the counts, the CLI's exit 2.
    status, body = await stack.call("POST", "/v1/jobs", spec(f"none-{tok}", {attr: 5}))
    assert status == 409 and body["error"] == "no_eligible_supply", body
    assert body["counts"]["eligible_checkins"] == 0
    assert body["counts"]["window_checkins"] >= MIN_CHECKINS
    none_file = spec_file(tmp_path, spec(f"cli-none-{tok}", {attr: 5}))
    code, _, err = await stack.cli("job", "submit", none_file)
    assert code == 2 and "no_eligible_supply" in err, err

    # finish_by one second away: the estimate (50 rounds) misses it.
    late = spec(f"late-{tok}", {attr: 1}, rounds=50)
    finish_by = time.time() + 1
    status, body = await stack.call("POST", f"/v1/jobs?finish_by={finish_by}", late)
    assert status == 409 and body["error"] == "finish_by_missed", body
    assert body["estimated_finish"] > finish_by
    code, _, err = await stack.cli(
        "job", "submit", spec_file(tmp_path, spec(f"cli-late-{tok}", {attr: 1}, rounds=50)),
        "--finish-within", "1",
    )  # fmt: skip
    assert code == 2 and "finish_by_missed" in err, err
    # The owner accepts a late finish: admitted, with a warning and the estimate.
    code, out, err = await stack.cli(
        "job", "submit", spec_file(tmp_path, spec(f"ok-late-{tok}", {attr: 1}, rounds=50)),
        "--finish-within", "1", "--accept-late",
    )  # fmt: skip
    assert code == 0 and "warning: finish_by" in out and "estimated to finish" in out, (out, err)

    for job_id, reason in ((f"none-{tok}", "no_eligible_supply"),
                           (f"cli-none-{tok}", "no_eligible_supply"),
                           (f"late-{tok}", "finish_by_missed"),
                           (f"cli-late-{tok}", "finish_by_missed")):  # fmt: skip
        rows = await stack.history_until(job_id, ["refused"])
        assert rows[0][1].startswith(reason), rows
    rows = await stack.history_until(f"ok-late-{tok}", ["admitted", "registered"])
    assert "finish_by" in rows[0][1] and "estimated completion" in rows[0][1], rows


async def test_a_queued_job_is_admitted_when_the_running_job_ends(
    stack: Stack, tmp_path: Path
) -> None:
    tok = uuid.uuid4().hex[:8]
    attr = f"cpu_{tok}"
    async with stack.serving() as probe:
        await stack.supply(attr)
        running = load_of(probe.gateway.view).running  # other tests' jobs on this broker
    first, queued, refused = f"first-{tok}", f"queued-{tok}", f"refused-{tok}"
    async with stack.serving(max_running_jobs=running + 1):
        status, body = await stack.call("POST", "/v1/jobs", spec(first, {attr: 1}))
        assert status == 201, body
        code, out, err = await stack.cli(
            "job", "submit", spec_file(tmp_path, spec(queued, {attr: 1})), "--queue"
        )
        assert code == 0 and f"job {queued} queued: running_jobs_limit" in out, (out, err)
        status, body = await stack.call("POST", "/v1/jobs", spec(refused, {attr: 1}))
        assert status == 409 and body["error"] == "running_jobs_limit", body
        await asyncio.sleep(1.0)  # a few passes of the queue: the limit holds it
        assert (await stack.call("GET", f"/v1/jobs/{queued}"))[1]["state"] == "queued"
        code, out, _ = await stack.cli("job", "status", queued)
        assert code == 0 and "queued: running_jobs_limit" in out, out

        # The running job ends: the queued one is admitted and the scheduler estimates it.
        async with VennClient(stack.bus.bootstrap, heartbeat_s=0) as owner:
            now = time.time()
            await owner.finish_job(first, rounds_completed=0, arrival=now - 1, finished_at=now)
        job = await stack.until(
            f"/v1/jobs/{queued}", lambda j: j["state"] == "submitted" and j["estimate_state"]
        )
        assert job["admission"]["decision"] == "admitted"

    await stack.history_until(first, ["registered", "finished"])
    rows = await stack.history_until(queued, ["queued", "admitted", "registered"])
    assert rows[0][1].startswith("running_jobs_limit"), rows
    await stack.history_until(refused, ["refused"])
