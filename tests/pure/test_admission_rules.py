"""Admission decisions (``venn.core.admission``) on a real scheduler's snapshot."""

from __future__ import annotations

import numpy as np
import pytest

from venn.core.admission import (
    Limits,
    Load,
    Request,
    SupplySeen,
    decide,
    estimate_submission,
    next_admissions,
    supply_seen,
)
from venn.core.estimate import Band
from venn.core.model import JobSpec, Requirement
from venn.core.registry import make_scheduler
from venn.core.status import SchedulerStatus, scheduler_status
from venn.core.supply import AttributeMix


def snapshot(checkins: int = 1000, running: int = 0) -> SchedulerStatus:
    """A scheduler that saw ``checkins`` check-ins a second apart, a quarter of them from
    devices with ram 4 (the rest ram 1), running ``running`` jobs needing ram >= 2."""
    core = make_scheduler("venn", track_devices=False)
    for i in range(running):
        spec = JobSpec(f"r{i}", Requirement.of(ram=2.0), 10, 20, 300.0, workload_s=20.0)
        core.add_job(spec, 0.0)
        core.request_round(spec.job_id, 0, 0.0)
    mix = AttributeMix()
    attrs = [{"ram": 4.0 if i % 4 == 0 else 1.0} for i in range(checkins)]
    for a in attrs:
        mix.observe(a)
    slots = np.array([core.index.slot_for_attrs(a) for a in attrs])
    core.observe_many(slots, np.arange(checkins, dtype=np.float64))
    now = float(checkins)
    return scheduler_status(core, core.table(now), now, "w", "venn", mix)


def request(job_id: str = "new", ram: float = 2.0, demand: int = 10, **more: object) -> Request:
    fields: dict = {"needed": 8, "rounds": 5, "deadline_s": 300.0, "workload_s": 20.0, **more}
    return Request(job_id, Requirement.of(ram=ram), demand, **fields)


LIMITS = Limits(max_running_jobs=2, max_open_demand=100, min_checkins=200)
IDLE = Load(0, 0)


def never() -> Band | None:
    raise AssertionError("no finish_by: no estimate is made")


def test_a_requirement_no_device_meets_is_refused_with_the_counts() -> None:
    status = snapshot()
    req = request(ram=8.0)
    d = decide(req, IDLE, supply_seen(status, req.requirement), LIMITS, never)
    assert (d.verdict, d.reason) == ("refused", "no_eligible_supply")
    assert d.counts["eligible_checkins"] == 0 and d.counts["window_checkins"] == 1000
    queued = decide(request(ram=8.0, queue=True), IDLE, supply_seen(status, req.requirement),
                    LIMITS, never)  # fmt: skip
    assert (queued.verdict, queued.reason) == ("queued", "no_eligible_supply")


def test_too_few_eligible_devices_for_the_demand_is_refused() -> None:
    # 0.25 eligible check-ins a second: 75 within a 300 s deadline, 80 needed.
    status = snapshot()
    req = request(demand=100, needed=80)
    d = decide(req, IDLE, supply_seen(status, req.requirement), LIMITS, never)
    assert (d.verdict, d.reason) == ("refused", "too_little_supply")
    assert d.counts["eligible_checkins"] == 250


def test_nothing_is_refused_for_supply_before_enough_was_seen() -> None:
    status = snapshot(checkins=100)
    req = request(ram=8.0)
    seen = supply_seen(status, req.requirement)
    assert (seen.eligible, seen.total) == (0, 100)
    assert decide(req, IDLE, seen, LIMITS, never).verdict == "admitted"


def test_limits_refuse_or_queue() -> None:
    seen = SupplySeen(500, 1000, 2.0)
    full = decide(request(), Load(2, 20), seen, LIMITS, never)
    assert (full.verdict, full.reason) == ("refused", "running_jobs_limit")
    big = decide(request(demand=90, queue=True), Load(1, 20), seen, LIMITS, never)
    assert (big.verdict, big.reason) == ("queued", "open_demand_limit")
    assert decide(request(), Load(1, 20), seen, LIMITS, never).verdict == "admitted"
    assert decide(request(), Load(50, 5000), seen, Limits(), never).verdict == "admitted"


def test_a_tenants_cap_on_open_demand_refuses_or_queues_its_jobs_only() -> None:
    seen = SupplySeen(500, 1000, 2.0)
    load = Load(1, 30, {"team-a": 30})
    capped = request(demand=25, tenant="team-a", tenant_cap=50)
    refused = decide(capped, load, seen, Limits(), never)
    assert (refused.verdict, refused.reason) == ("refused", "tenant_demand_limit")
    assert refused.counts["tenant_open_demand"] == 30
    queued = decide(request(demand=25, tenant="team-a", tenant_cap=50, queue=True), load, seen,
                    Limits(), never)  # fmt: skip
    assert (queued.verdict, queued.reason) == ("queued", "tenant_demand_limit")
    other = request(demand=25, tenant="team-b", tenant_cap=50)
    assert decide(other, load, seen, Limits(), never).verdict == "admitted"
    fits = request(demand=20, tenant="team-a", tenant_cap=50)
    assert decide(fits, load, seen, Limits(), never).verdict == "admitted"
    # From the queue: the second team-a job would pass the cap; it waits.
    queue = [fits, request("second", demand=20, tenant="team-a", tenant_cap=50)]
    admitted = next_admissions(queue, load, lambda r: seen, Limits())
    assert [r.job_id for r in admitted] == ["new"]


def test_finish_by_refuses_with_the_estimate_or_admits_with_a_warning() -> None:
    status = snapshot(running=1)
    req = request(finish_by=status.time + 10.0)
    band = estimate_submission(status, req)
    assert band is not None and band.p50 > status.time + 10.0
    end = band.p50
    seen = supply_seen(status, req.requirement)
    d = decide(req, IDLE, seen, LIMITS, lambda: band)
    assert (d.verdict, d.reason, d.estimate) == ("refused", "finish_by_missed", end)
    assert d.estimate_p90 == band.p90
    late = decide(request(finish_by=status.time + 10.0, accept_late=True), IDLE, seen, LIMITS,
                  lambda: band)  # fmt: skip
    assert late.verdict == "admitted" and late.warning and late.estimate == end
    ok = decide(request(finish_by=end + 1.0), IDLE, seen, LIMITS, lambda: band)
    assert ok.verdict == "admitted" and ok.warning is None


def test_the_estimate_of_a_submission_counts_the_jobs_it_shares_devices_with() -> None:
    # The running jobs were all registered at once: no burst of arrivals to go on, so
    # the band is the fluid model's point (P50 = P90).
    alone = estimate_submission(snapshot(running=0), request())
    behind = estimate_submission(snapshot(running=3), request(rounds=50))
    small = estimate_submission(snapshot(running=3), request(rounds=1))
    assert alone is not None and behind is not None and small is not None
    # 5 rounds of 10 devices at 0.25/s (40 s) plus 20 s of latency each.
    assert alone.p50 - 1000.0 == pytest.approx(5 * 60.0)
    assert alone.p90 == alone.p50
    # A 50-round job goes after the three 20-round ones; a 1-round job before them.
    assert behind.p50 - 1000.0 > 50 * 60.0
    assert small.p50 - 1000.0 == pytest.approx(60.0, rel=0.2)


def test_jobs_arriving_in_a_burst_widen_a_submissions_band() -> None:
    # Three small jobs registered 100 s apart: the burst may go on, and each later small
    # job goes ahead of a long one, so its P90 is later than its P50 and than no-arrivals.
    core = make_scheduler("venn", track_devices=False)
    for i in range(3):
        spec = JobSpec(f"r{i}", Requirement.of(ram=2.0), 10, 2, 300.0, workload_s=20.0)
        core.add_job(spec, 700.0 + 100.0 * i)
    mix = AttributeMix()
    attrs = [{"ram": 4.0 if i % 4 == 0 else 1.0} for i in range(1000)]
    for a in attrs:
        mix.observe(a)
    slots = np.array([core.index.slot_for_attrs(a) for a in attrs])
    core.observe_many(slots, np.arange(1000, dtype=np.float64))
    status = scheduler_status(core, core.table(1000.0), 1000.0, "w", "venn", mix)
    assert len(status.arrivals) == 3
    band = estimate_submission(status, request(rounds=50))
    assert band is not None and band.p90 > band.p50


def test_queued_jobs_are_admitted_in_order_as_limits_free_up() -> None:
    seen = {2.0: SupplySeen(500, 1000, 2.0), 8.0: SupplySeen(0, 1000, 2.0)}
    queue = [request("a"), request("b", ram=8.0), request("c", demand=60), request("d")]
    limits = Limits(max_running_jobs=3, max_open_demand=100)

    def admit(load: Load) -> list[str]:
        return [r.job_id for r in next_admissions(queue, load, lambda q: seen[q.as_dict()["ram"]],
                                                  limits)]  # fmt: skip

    assert admit(Load(3, 30)) == []  # full
    assert admit(Load(2, 30)) == ["a"]  # one slot: the first; b waits for supply
    # c does not fit the open demand (40 + 10 + 60 > 100): d stays behind it.
    assert admit(Load(0, 40)) == ["a"]
    assert admit(Load(0, 0)) == ["a", "c", "d"]
