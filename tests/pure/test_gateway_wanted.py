"""`GET /v1/wanted` (services/gateway/wanted.py) served alone over real HTTP on an
in-memory context: what open rounds can still use, its ETag, cache headers and 304."""

from __future__ import annotations

import time

from services.gateway import wanted
from tests.gateway_parts import bearer, memory_gateway, serve
from venn import events as ev


def _open(job_id: str, requirement: dict[str, float], demand: int = 2) -> list[ev.Event]:
    now = time.time()
    return [
        ev.JobRegistered(
            event_id=f"reg-{job_id}", time=now, job_id=job_id, requirement=requirement,
            demand=demand, rounds=1, deadline_s=60, workload_s=5,
        ),
        ev.RoundRequested(
            event_id=f"rr-{job_id}", time=now, job_id=job_id, round_index=0, demand=demand
        ),
    ]  # fmt: skip


async def test_the_document_follows_open_rounds_with_an_etag_and_304() -> None:
    memory = memory_gateway(auth=False)
    async with serve(memory, wanted.register) as (http, url):
        async with http.get(f"{url}/v1/wanted") as r:
            assert r.status == 200
            empty, etag = await r.json(), r.headers["ETag"]
            assert r.headers["Cache-Control"] == "public, max-age=5"
        assert empty["complete"] is True and empty["requirements"] == []
        assert empty["pace"] == {"wanted_s": 10, "base_s": 30, "idle_s": 120, "jitter": 0.2}

        async with http.get(f"{url}/v1/wanted", headers={"If-None-Match": etag}) as r:
            assert r.status == 304 and await r.read() == b""
            assert r.headers["ETag"] == etag

        for event in _open("job-a", {"ram": 4.0}):
            memory.view.apply(event)
        async with http.get(f"{url}/v1/wanted", headers={"If-None-Match": etag}) as r:
            assert r.status == 200  # a round opened: the old copy no longer holds
            doc, etag2 = await r.json(), r.headers["ETag"]
        assert doc["requirements"] == [{"ram": 4.0}] and etag2 != etag
        async with http.get(f"{url}/v1/wanted", headers={"If-None-Match": f"W/{etag2}"}) as r:
            assert r.status == 304

        for device in ("d1", "d2"):  # the round's demand, used: nothing wanted any more
            memory.view.apply(
                ev.Assignment(
                    event_id=f"asg-{device}", time=time.time(), job_id="job-a", round_index=0,
                    device_id=device, task_url="http://t", speed_ms_per_sample=5,
                    bandwidth_kbps=100,
                )
            )  # fmt: skip
        async with http.get(f"{url}/v1/wanted") as r:
            assert (await r.json())["requirements"] == [] and r.headers["ETag"] == etag
        memory.ready = False  # not read to the end: the list may miss rounds
        async with http.get(f"{url}/v1/wanted") as r:
            assert (await r.json())["complete"] is False and r.headers["ETag"] != etag2
    assert memory.stats.wanted_not_modified == 2 and memory.stats.wanted_served == 4


async def test_the_document_needs_a_device_token_where_the_deployment_authenticates() -> None:
    memory = memory_gateway(auth=True)
    assert memory.tokens is not None
    async with serve(memory, wanted.register) as (http, url):
        async with http.get(f"{url}/v1/wanted") as r:
            assert r.status == 401
        token = memory.tokens.issue("device", "dev-1", ttl_s=60)
        async with http.get(f"{url}/v1/wanted", headers=bearer(token)) as r:
            assert r.status == 200 and (await r.json())["requirements"] == []
