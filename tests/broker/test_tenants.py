"""Tenant shares on the pipeline: a scheduler worker (a real Faust process) on the
session's broker with two tenants weighted 3:1 contending for the same devices."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

from tests import factories
from tests.broker.scheduler_bus import (
    checkin,
    finished,
    round_request,
    scheduler_env,
    scheduler_on_bus,
)
from venn import events as ev
from venn.broker import topics

DEVICES = 240
BATCH = 40


async def test_assignments_follow_the_tenants_weights(
    broker: str, run_dir: Path, partitions: int
) -> None:
    tok = uuid.uuid4().hex[:8]
    attr = f"cpu_{tok}"
    heavy, light = f"heavy-{tok}", f"light-{tok}"  # tenants weighted 3 and 1
    env = await scheduler_env(
        broker, run_dir, partitions, "tenants", VENN_POLICY="venn",
        VENN_TENANTS=f"{heavy}=3,{light}=1", VENN_TENANT_RERANK_EVERY="8",
    )  # fmt: skip
    async with scheduler_on_bus(broker, partitions, env) as (bus, _):
        # IRS alone serves the smaller job first, and the light tenant's is smaller: it
        # would take every device (its demand exceeds them all).
        big, small = f"big-{tok}", f"small-{tok}"
        for job_id, tenant, demand in ((big, heavy, 400), (small, light, 300)):
            registration = factories.registered(
                job_id, requirement={attr: 1}, demand=demand, rounds=5, tenant=tenant
            )
            await bus.send(topics.JOBS, registration)
        await bus.send(topics.JOBS, round_request(big, 0, 400))
        await bus.send(topics.JOBS, round_request(small, 0, 300))
        await bus.barrier(topics.JOBS)
        devices = [checkin(f"d{i}-{tok}", {attr: 2}) for i in range(DEVICES)]
        for b in range(0, DEVICES, BATCH):
            items = [ev.encode(c) for c in devices[b : b + BATCH]]
            raw = ev.encode_checkin_batch(f"cb{b}-{tok}", time.time(), items, reply_to="gw")
            await bus.send(topics.CHECKINS, raw, key=b"cb")
        mine = {big, small}
        await bus.published.wait_for(lambda: len(bus.assigned(mine)) == DEVICES, 60.0)
        got = bus.assigned(mine)
        share = sum(a.job_id == big for a in got) / len(got)
        # 3:1 -> 0.75 of the devices to the heavy tenant; tenant-blind it gets none. The
        # pure core splits this run 0.70; on the pipeline, runs gave 0.60 to 0.70 (0.60
        # after other test modules: not explained yet).
        assert 0.55 <= share <= 0.9, f"heavy tenant's share {share:.2f}"
        assert len({a.device_id for a in got}) == DEVICES
        for job_id in mine:
            await bus.send(topics.ROUNDS, finished(job_id))
