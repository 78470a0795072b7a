"""A ``finish_by`` submission's completion estimate is made off the gateway's event loop,
one at a time with a bounded wait (issue 34, item 3: on 7b90043 it ran on the loop,
quadratic in the jobs, 2,000 jobs 6.8 s with every check-in waiting as long)."""

from __future__ import annotations

import asyncio

import pytest

from services.gateway.estimates import ESTIMATES_WAITING, Estimates, EstimatesBusy
from venn.core import JobSpec, Requirement, make_scheduler
from venn.core.admission import Request, estimate_submission
from venn.core.estimate import Band
from venn.core.status import SchedulerStatus, scheduler_status
from venn.core.supply import AttributeMix


def snapshot(jobs: int) -> SchedulerStatus:
    core = make_scheduler("venn")
    for i in range(jobs):
        spec = JobSpec(f"load-{i}", Requirement.of(ram=float(1 + i % 8)), 50, 20, 600.0)
        core.add_job(spec, 0.0)
        core.request_round(spec.job_id, 0, 0.0)
    mix = AttributeMix()
    for k in range(500):
        attrs = {"ram": float(1 + k % 16)}
        core.checkin(core.slot_of(attrs), k / 100, device_id=f"w{k}")
        mix.observe(attrs)
    return scheduler_status(core, core.table(10.0), 10.0, "test", "venn", mix, estimates={})


def request(job_id: str) -> Request:
    return Request(job_id, Requirement.of(ram=2.0), 20, 16, 50, 600.0, 60.0, finish_by=1e9)


async def test_an_estimate_runs_off_the_event_loop_and_a_third_waits_no_more() -> None:
    status = snapshot(100)
    estimates = Estimates()
    ticks = 0

    async def ticking() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0)
            ticks += 1

    async def estimate(job_id: str) -> tuple[Band | None, int]:
        """The estimate, and how often the loop ran other work while it was made."""
        start = ticks
        got = await estimates.completion(status, request(job_id))
        return got, ticks - start

    ticker = asyncio.create_task(ticking())
    try:
        made = [asyncio.create_task(estimate(f"j{i}")) for i in range(ESTIMATES_WAITING)]
        await asyncio.sleep(0)  # both are waiting for the worker
        with pytest.raises(EstimatesBusy):
            await estimates.completion(status, request("one-too-many"))
        (first, ran_first), (second, ran_second) = await asyncio.gather(*made)
    finally:
        ticker.cancel()
        estimates.close()
    # Made on the loop, an estimate would let nothing else run until it was done (0 ticks);
    # a worker process is started, fed the snapshot and runs the fluid model meanwhile.
    assert ran_first >= 100 and ran_second >= 100, (ran_first, ran_second)
    assert first == second == estimate_submission(status, request("here"))
    assert estimates.waiting == 0
