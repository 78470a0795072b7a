"""The job API part of the gateway (services/gateway/jobs_api.py) served alone on an
in-memory context: what it publishes, what it refuses and how it counts refusals."""

from __future__ import annotations

import asyncio
import time

import msgspec
import numpy as np
import pytest

from services.gateway import jobs_api
from tests.gateway_parts import bearer, memory_gateway, serve
from venn import events as ev
from venn.auth import AuthError
from venn.auth.checks import check_job_event
from venn.core.registry import make_scheduler
from venn.core.status import SchedulerStatus, scheduler_status
from venn.core.supply import AttributeMix

SPEC = {"requirement": {"ram": 2}, "demand": 3, "rounds": 2, "deadline_s": 60, "workload_s": 5}


async def test_a_submission_is_published_once_with_a_token_for_that_job_alone() -> None:
    memory = memory_gateway()
    assert memory.tokens is not None
    owner = memory.tokens.issue("job", "team-a", jobs=["team-a-*"], ttl_s=60)
    async with serve(memory, jobs_api.register) as (http, url):
        body = msgspec.json.encode({**SPEC, "job_id": "team-a-1", "submit_token": "s1"})
        async with http.post(f"{url}/v1/jobs", data=body, headers=bearer(owner)) as r:
            assert r.status == 201, await r.text()
            first = await r.json()
        async with http.post(f"{url}/v1/jobs", data=body, headers=bearer(owner)) as r:
            assert (r.status, (await r.json())["created"]) == (200, False)
        other = msgspec.json.encode({**SPEC, "job_id": "team-a-1", "submit_token": "s2"})
        async with http.post(f"{url}/v1/jobs", data=other, headers=bearer(owner)) as r:
            assert (r.status, (await r.json())["error"]) == (409, "job_exists")
        outside = msgspec.json.encode({**SPEC, "job_id": "team-b-1"})
        async with http.post(f"{url}/v1/jobs", data=outside, headers=bearer(owner)) as r:
            assert r.status == 403
    (registered,) = memory.published
    assert isinstance(registered, ev.JobRegistered) and registered.job_id == "team-a-1"
    assert registered.token is not None
    assert memory.tokens.check(registered.token, "job").jobs == ("team-a-1",)
    assert memory.tokens.check(first["token"], "job").jobs == ("team-a-1",)
    assert memory.stats.unauthorized == 1


async def test_another_jobs_token_may_neither_read_nor_cancel() -> None:
    memory = memory_gateway()
    assert memory.tokens is not None
    admin = memory.tokens.issue("admin", "ops", ttl_s=60)
    b_owner = memory.tokens.issue("job", "b", jobs=["job-b"], ttl_s=60)
    async with serve(memory, jobs_api.register) as (http, url):
        body = msgspec.json.encode({**SPEC, "job_id": "job-a"})
        async with http.post(f"{url}/v1/jobs", data=body, headers=bearer(admin)) as r:
            assert r.status == 201
        async with http.get(f"{url}/v1/jobs/job-a", headers=bearer(b_owner)) as r:
            assert r.status == 403
        async with http.delete(f"{url}/v1/jobs/job-a", headers=bearer(b_owner)) as r:
            assert r.status == 403
        async with http.get(f"{url}/v1/jobs/job-a") as r:
            assert r.status == 401 and r.headers["WWW-Authenticate"].startswith("Bearer")
        async with http.get(f"{url}/v1/jobs/job-a", headers=bearer(admin)) as r:
            assert r.status == 200 and (await r.json())["job_id"] == "job-a"
        async with http.delete(f"{url}/v1/jobs/job-a", headers=bearer(admin)) as r:
            assert (r.status, (await r.json())["state"]) == (202, "cancelling")
        async with http.delete(f"{url}/v1/jobs/job-a", headers=bearer(admin)) as r:
            assert (r.status, (await r.json())["error"]) == (409, "job_ended")
    assert [type(e) for e in memory.published] == [ev.JobRegistered, ev.JobCancelled]
    assert memory.stats.unauthorized == 3


async def test_no_jobs_principal_no_broker_and_a_view_catching_up_are_told_apart() -> None:
    memory = memory_gateway(auth=False)
    body = msgspec.json.encode({**SPEC, "job_id": "job-x"})
    async with serve(memory, jobs_api.register) as (http, url):
        memory.ready = False
        async with http.post(f"{url}/v1/jobs", data=body) as r:
            assert (r.status, (await r.json())["error"]) == (429, "view_not_ready")
            assert r.headers["Retry-After"] == "1"
        memory.ready, memory.may_write_jobs = True, False
        async with http.post(f"{url}/v1/jobs", data=body) as r:
            assert (r.status, (await r.json())["error"]) == (503, "no_jobs_principal")
        memory.may_write_jobs, memory.broker = True, False
        async with http.post(f"{url}/v1/jobs", data=body) as r:
            assert (r.status, (await r.json())["error"]) == (429, "broker_unavailable")
        memory.broker = True
        async with http.post(f"{url}/v1/jobs", data=body) as r:
            assert r.status == 201
        async with http.get(f"{url}/v1/plan") as r:
            assert r.status == 200  # no snapshot yet: an empty plan, not an error
    assert [e.job_id for e in memory.published if isinstance(e, ev.JobRegistered)] == ["job-x"]


def _status(now: float) -> SchedulerStatus:
    """A scheduler snapshot taken ``now`` that saw 1,000 check-ins a second apart, a quarter
    of them from devices with ram 4 (the rest ram 1)."""
    core = make_scheduler("venn", track_devices=False)
    mix = AttributeMix()
    attrs = [{"ram": 4.0 if i % 4 == 0 else 1.0} for i in range(1000)]
    for a in attrs:
        mix.observe(a)
    slots = np.array([core.index.slot_for_attrs(a) for a in attrs])
    core.observe_many(slots, now - 1000 + np.arange(1000, dtype=np.float64))
    return scheduler_status(core, core.table(now), now, "w", "venn", mix)


async def test_admission_refuses_with_the_counts_and_admits_a_queued_job_as_a_job_ends() -> None:
    memory = memory_gateway(auth=False)
    memory.settings = memory.settings.with_admission(max_running_jobs=1, queue_check_s=0.05)
    memory.status = _status(time.time())

    def spec(job_id: str, ram: float) -> bytes:
        return msgspec.json.encode({**SPEC, "job_id": job_id, "requirement": {"ram": ram}})

    async with serve(memory, jobs_api.register) as (http, url):
        async with http.post(f"{url}/v1/jobs", data=spec("none", 8)) as r:
            body = await r.json()
            assert (r.status, body["error"]) == (409, "no_eligible_supply"), body
            assert body["counts"]["eligible_checkins"] == 0
            assert body["counts"]["window_checkins"] == 1000
        async with http.post(f"{url}/v1/jobs", data=spec("a", 2)) as r:
            assert r.status == 201
        async with http.post(f"{url}/v1/jobs", data=spec("b", 2)) as r:
            assert (r.status, (await r.json())["error"]) == (409, "running_jobs_limit")
        async with http.post(f"{url}/v1/jobs?queue=true", data=spec("c", 2)) as r:
            assert (r.status, (await r.json())["state"]) == (202, "queued")
        async with http.post(f"{url}/v1/jobs?queue=maybe", data=spec("d", 2)) as r:
            assert r.status == 422
        await asyncio.sleep(0.2)  # a few passes of the queue: the limit holds "c"
        async with http.get(f"{url}/v1/jobs/c") as r:
            assert (await r.json())["state"] == "queued"
        now = time.time()
        memory.view.apply(ev.JobFinished(event_id="fin-a", time=now, job_id="a",
                                         rounds_completed=2, arrival=now - 5,
                                         finished_at=now, jct_s=5.0))  # fmt: skip
        for _ in range(100):
            async with http.get(f"{url}/v1/jobs/c") as r:
                if (await r.json())["state"] == "submitted":
                    break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the queued job was not admitted")
        async with http.delete(f"{url}/v1/jobs/none") as r:
            assert (r.status, (await r.json())["error"]) == (409, "job_ended")  # refused
        async with http.post(f"{url}/v1/jobs?queue=true", data=spec("e", 2)) as r:
            assert r.status == 202  # "c" runs now: the limit holds "e"
        async with http.delete(f"{url}/v1/jobs/e") as r:
            assert r.status == 202
        await asyncio.sleep(0.2)
        async with http.get(f"{url}/v1/jobs/e") as r:
            assert (await r.json())["state"] == "cancelled"  # and never admitted
    decisions = [
        (type(e).__name__, getattr(e, "job_id", None), getattr(e, "decision", None))
        for e in memory.published
    ]
    assert decisions == [
        ("JobAdmission", "none", "refused"),
        ("JobRegistered", "a", None),
        ("JobAdmission", "b", "refused"),
        ("JobAdmission", "c", "queued"),
        ("JobAdmission", "c", "admitted"),
        ("JobRegistered", "c", None),
        ("JobAdmission", "e", "queued"),
        ("JobCancelled", "e", None),
    ]


async def test_admission_decisions_carry_a_token_every_reader_accepts() -> None:
    memory = memory_gateway()
    memory.status = _status(time.time())
    assert memory.tokens is not None
    owner = memory.tokens.issue("job", "team-a", jobs=["team-a-*"], ttl_s=60)
    body = msgspec.json.encode({**SPEC, "job_id": "team-a-9", "requirement": {"ram": 8}})
    async with (
        serve(memory, jobs_api.register) as (http, url),
        http.post(f"{url}/v1/jobs", data=body, headers=bearer(owner)) as r,
    ):
        assert r.status == 409
    (refusal,) = memory.published
    assert isinstance(refusal, ev.JobAdmission) and refusal.decision == "refused"
    # Venn's own decision: an operator's token, as the stream check of venn.jobs wants.
    assert check_job_event(memory.tokens, refusal) is not None
    forged = msgspec.structs.replace(refusal, token=owner)
    with pytest.raises(AuthError):
        check_job_event(memory.tokens, forged)


async def test_a_queued_job_is_registered_with_its_tenant_and_priority() -> None:
    memory = memory_gateway()
    memory.settings = memory.settings.with_admission(max_running_jobs=1, queue_check_s=0.05)
    memory.status = _status(time.time())
    assert memory.tokens is not None
    owner = memory.tokens.issue("job", "team-a", jobs=["team-a-*"], ttl_s=60)

    def spec(job_id: str, priority: int) -> bytes:
        fields = {**SPEC, "job_id": job_id, "requirement": {"ram": 2}, "priority": priority}
        return msgspec.json.encode(fields)

    async with serve(memory, jobs_api.register) as (http, url):
        async with http.post(
            f"{url}/v1/jobs", data=spec("team-a-1", 0), headers=bearer(owner)
        ) as r:
            assert r.status == 201
        async with http.post(
            f"{url}/v1/jobs?queue=true", data=spec("team-a-2", 3), headers=bearer(owner)
        ) as r:
            assert (r.status, (await r.json())["state"]) == (202, "queued")
        now = time.time()
        memory.view.apply(ev.JobFinished(event_id="fin-1", time=now, job_id="team-a-1",
                                         rounds_completed=2, arrival=now - 5,
                                         finished_at=now, jct_s=5.0))  # fmt: skip
        for _ in range(100):
            if any(
                isinstance(e, ev.JobRegistered) and e.job_id == "team-a-2" for e in memory.published
            ):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the queued job was not admitted")
    (queued,) = [
        e for e in memory.published if isinstance(e, ev.JobAdmission) and e.decision == "queued"
    ]
    assert (queued.owner, queued.priority) == ("team-a", 3)
    registered = [e for e in memory.published if isinstance(e, ev.JobRegistered)]
    assert [(e.job_id, e.tenant, e.priority) for e in registered] == [
        ("team-a-1", "team-a", None),
        ("team-a-2", "team-a", 3),
    ]
