"""The job API (services/gateway/jobs_api.py) and the `venn job ...`, `venn devices`,
`venn plan` commands against a real gateway on the session's Kafka: auth (401, 403, a job
token of job A on job B), a job's view as its coordinator's events come in, the plan and
supply from a snapshot on venn.status, and the CLI's errors (unknown job, stack down,
malformed job file)."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sys
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pytest
from aiokafka import AIOKafkaProducer

from services.gateway import GatewayServer
from tests.factories import UNJUDGED
from venn import events as ev
from venn.auth import Tokens
from venn.broker import topics
from venn.broker.topics import ensure_topics
from venn.core import make_scheduler
from venn.core.model import JobSpec, Requirement
from venn.core.status import encode_status, scheduler_status
from venn.settings import Settings

SECRET = secrets.token_urlsafe(32)
ROOT = Path(__file__).resolve().parents[2]


class Api:
    def __init__(self, server: GatewayServer, http: aiohttp.ClientSession, broker: str) -> None:
        self.server = server
        self.http = http
        self.broker = broker
        self.tokens = Tokens(SECRET)
        self.admin = self.tokens.issue("admin", "test-operator", ttl_s=600)

    async def call(
        self, method: str, path: str, token: str | None, body: Any = None
    ) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        data = json.dumps(body).encode() if body is not None else None
        async with self.http.request(
            method, self.server.url + path, data=data, headers=headers
        ) as r:
            return r.status, await r.json()

    async def until(self, path: str, check: Any, timeout: float = 15.0) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            status, body = await self.call("GET", path, self.admin)
            if status == 200 and check(body):
                return body
            assert time.monotonic() < deadline, (status, body)
            await asyncio.sleep(0.2)

    async def cli(self, *args: str, url: str | None = None) -> tuple[int, str, str]:
        env = {
            **os.environ,
            "VENN_API_URL": url or self.server.url,
            "VENN_API_TOKEN": self.admin,
            "VENN_RUN_DIR": "/nonexistent-venn-run-dir",
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "venn.cli", *args, cwd=ROOT, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode is not None
        return proc.returncode, out.decode(), err.decode()


@pytest.fixture
async def api(broker: str, partitions: int) -> AsyncIterator[Api]:
    settings = Settings(broker=broker, topic_partitions=partitions, auth_secret=SECRET)
    await ensure_topics(broker, partitions)
    server = GatewayServer(settings.with_gateway(port=0, wait_s=1.0).with_admission(**UNJUDGED))
    await server.start()
    deadline = time.monotonic() + 30
    while not server.gateway.view_ready and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
    try:
        yield Api(server, http, broker)
    finally:
        await http.close()
        await server.stop()


async def publish(broker: str, topic: str, *events: ev.Event) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=broker, acks="all")
    await producer.start()
    try:
        for event in events:
            await producer.send_and_wait(topic, ev.encode(event), key=ev.key_of(event))
    finally:
        await producer.stop()


def spec(job_id: str, **more: Any) -> dict[str, Any]:
    # An attribute no device has: other tests run schedulers and devices on the same Kafka,
    # and none of them may fill this job's rounds.
    return {"job_id": job_id, "requirement": {f"only-{job_id}": 1}, "demand": 2, "rounds": 2,
            "deadline_s": 30, **more}  # fmt: skip


async def test_auth_and_a_job_progressing(api: Api) -> None:
    tag = uuid.uuid4().hex[:8]
    a, b = f"a-{tag}", f"b-{tag}"
    assert (await api.call("POST", "/v1/jobs", None, spec(a)))[0] == 401
    device = api.tokens.issue("device", "d", ttl_s=60)
    assert (await api.call("POST", "/v1/jobs", device, spec(a)))[0] == 403
    status, sub_a = await api.call("POST", "/v1/jobs", api.admin, spec(a, submit_token=f"s{tag}"))
    assert status == 201 and sub_a["job_id"] == a
    # Retry-safe: the same submit token again is the same job, another submission is 409.
    await api.until(f"/v1/jobs/{a}", lambda j: j["state"] == "submitted")
    status, again = await api.call("POST", "/v1/jobs", api.admin, spec(a, submit_token=f"s{tag}"))
    assert (status, again["job_id"], again["created"]) == (200, a, False)
    assert (await api.call("POST", "/v1/jobs", api.admin, spec(a)))[0] == 409
    status, sub_b = await api.call("POST", "/v1/jobs", api.admin, spec(b))
    assert status == 201
    token_a, token_b = sub_a["token"], sub_b["token"]

    # A job's token: its own job only; never the operator's reads.
    assert (await api.call("GET", f"/v1/jobs/{a}", token_a))[0] == 200
    assert (await api.call("GET", f"/v1/jobs/{b}", token_a))[0] == 403
    assert (await api.call("DELETE", f"/v1/jobs/{b}", token_a))[0] == 403
    for path in ("/v1/jobs", "/v1/plan", "/v1/devices"):
        assert (await api.call("GET", path, token_a))[0] == 403
        assert (await api.call("GET", path, None))[0] == 401
    assert (await api.call("GET", "/v1/jobs/nope-" + tag, api.admin))[0] == 404
    status, body = await api.call("POST", "/v1/jobs", api.admin, {"demand": "many"})
    assert status == 422 and body["error"] == "invalid_request"

    # The job's coordinator (holding token_a) runs round 0: the view follows.
    now = time.time()
    request = ev.RoundRequested(
        event_id=f"rr-{tag}", time=now, job_id=a, round_index=0, demand=2, token=token_a
    )
    await publish(api.broker, topics.JOBS, request)
    job = await api.until(f"/v1/jobs/{a}", lambda j: j["state"] == "running")
    assert (job["round"], job["rounds"], job["open_round"]["demand"]) == (1, 2, 2)
    assert job["waiting"] in ("unknown", "no_eligible_supply", "group_starved", "outranked")
    close = ev.RoundClosed(
        event_id=f"rc-{tag}", time=now + 3, job_id=a, round_index=0, outcome="succeeded",
        demand=2, assigned=2, results=2, opened_at=now, closed_at=now + 3, reason="",
        sched_delay_s=1.0, response_time_s=2.0, token=token_a,
    )  # fmt: skip
    await publish(api.broker, topics.ROUNDS, close)
    job = await api.until(f"/v1/jobs/{a}", lambda j: j["rounds_done"] == 1)
    assert job["sched_delay_s"] == 1.0 and job["response_time_s"] == 2.0
    assert job["waiting"] == "waiting_for_coordinator"
    assert a in {j["job_id"] for j in (await api.call("GET", "/v1/jobs", api.admin))[1]["jobs"]}

    # Cancel with its own token; the view says cancelled; a second cancel is 409.
    assert (await api.call("DELETE", f"/v1/jobs/{a}", token_a))[0] == 202
    await api.until(f"/v1/jobs/{a}", lambda j: j["state"] == "cancelled")
    assert (await api.call("DELETE", f"/v1/jobs/{a}", token_a))[0] == 409
    assert (await api.call("GET", f"/v1/jobs/{b}", token_b))[0] == 200


async def test_plan_and_devices_come_from_the_status_topic(api: Api) -> None:
    tag = uuid.uuid4().hex[:8]
    core = make_scheduler("venn", seed=1)
    job = f"plan-{tag}"
    core.add_job(JobSpec(job, Requirement.of({f"r{tag}": 1}), 3, 2, 30), 0.0)
    core.request_round(job, 0, 0.0)
    slot = core.index.slot_for_attrs({f"r{tag}": 2})
    for t in range(5):
        core.observe_many(np.array([slot]), np.array([float(t)]))
    snapshot = scheduler_status(core, core.table(5.0), time.time(), "test", "venn")
    producer = AIOKafkaProducer(bootstrap_servers=api.broker, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(topics.STATUS, encode_status(snapshot), key=b"plan")
    finally:
        await producer.stop()
    plan = await api.until("/v1/plan", lambda p: p["available"] and p["policy"] == "venn"
                           and any(job in g["open_jobs"] for g in p["job_groups"]))  # fmt: skip
    (group,) = [g for g in plan["job_groups"] if job in g["open_jobs"]]
    assert group["fed_by"]
    _, supply = await api.call("GET", "/v1/devices", api.admin)
    assert supply["checkin_rate_per_s"] == 1.0

    code, out, _ = await api.cli("plan", "--json")
    assert code == 0 and any(job in g["open_jobs"] for g in json.loads(out)["job_groups"])
    code, out, _ = await api.cli("plan")
    assert code == 0 and job in out
    code, out, _ = await api.cli("devices", "--json")
    assert code == 0 and json.loads(out)["checkin_rate_per_s"] == 1.0
    code, out, _ = await api.cli("devices")
    assert code == 0 and "check-ins/s" in out


async def test_every_job_command_and_its_errors(api: Api, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:8]
    job = f"cli-{tag}"
    good = tmp_path / "job.yaml"
    good.write_text(
        f"job_id: {job}\nrequirement: {{only-{job}: 1}}\ndemand: 2\nrounds: 3\ndeadline_s: 30\n"
    )
    code, out, err = await api.cli("job", "submit", str(good), "--json")
    assert code == 0, err
    submitted = json.loads(out)
    assert submitted["job_id"] == job and submitted["token"]
    await api.until(f"/v1/jobs/{job}", lambda j: j["state"] == "submitted")

    code, out, _ = await api.cli("job", "list", "--json")
    assert code == 0 and job in {j["job_id"] for j in json.loads(out)}
    code, out, _ = await api.cli("job", "list")
    assert code == 0 and job[:8] in out
    code, out, _ = await api.cli("job", "status", job, "--json")
    assert code == 0 and json.loads(out)["state"] == "submitted"
    code, out, _ = await api.cli("job", "status", job)
    assert code == 0 and "submitted" in out
    code, out, _ = await api.cli("job", "submit", str(good))  # the same id again
    assert code == 2 and "job_exists" in _one_line(_)

    code, out, err = await api.cli("job", "cancel", job, "--json")
    assert code == 0 and json.loads(out)["state"] == "cancelled", err
    code, out, _ = await api.cli("job", "status", job, "--watch", "--json")  # ended: returns
    assert code == 0 and json.loads(out)["state"] == "cancelled"

    # Errors: one line, no traceback, exit 2 (refused) or 1 (stack down).
    code, _, err = await api.cli("job", "status", f"nope-{tag}")
    assert code == 2 and "unknown_job" in _one_line(err)
    code, _, err = await api.cli("job", "cancel", f"nope-{tag}")
    assert code == 2 and "unknown_job" in _one_line(err)
    bad = tmp_path / "bad.yaml"
    bad.write_text("requirement: [unclosed\n")
    code, _, err = await api.cli("job", "submit", str(bad))
    assert code == 2 and "malformed job file" in _one_line(err)
    bad.write_text("requirement: {ram: 4}\ndemand: lots\nrounds: 1\ndeadline_s: 1\n")
    code, _, err = await api.cli("job", "submit", str(bad))
    assert code == 2 and "demand" in _one_line(err)
    down = "http://127.0.0.1:9"  # nothing listens on the discard port
    for args in (("job", "list"), ("job", "status", job), ("job", "cancel", job),
                 ("job", "submit", str(good)), ("devices",), ("plan",)):  # fmt: skip
        code, _, err = await api.cli(*args, url=down)
        assert code == 1 and "the stack is not up" in _one_line(err), args


def _one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]
