"""The scheduler's published snapshot (venn.core.status): which device groups feed which
job group, supply per device group, and why an open round waits."""

from __future__ import annotations

import numpy as np

from venn.core import make_scheduler
from venn.core.model import JobSpec, Requirement
from venn.core.status import decode_status, encode_status, scheduler_status, wait_reason


def spec(job_id: str, ram: float, demand: int = 5) -> JobSpec:
    return JobSpec(job_id, Requirement.of({"ram": ram}), demand, rounds=3, deadline=60)


def test_plan_supply_and_wait_reasons() -> None:
    core = make_scheduler("venn", seed=1)
    core.add_job(spec("small", 2), 0.0)  # any device with ram >= 2
    core.add_job(spec("big", 8), 0.0)  # only ram >= 8
    core.add_job(spec("huge", 64), 0.0)  # no such device checks in
    core.add_job(spec("small-2", 2), 0.0)  # same group as "small"
    for job in ("small", "big", "huge", "small-2"):
        core.request_round(job, 0, 0.0)
    low = core.index.slot_for_attrs({"ram": 4})
    for t in range(10):  # supply: only low-RAM devices, one per second, all declined
        core.observe_many(np.array([low]), np.array([float(t)]))
    status = decode_status(encode_status(scheduler_status(core, core.table(10.0), 10.0, "w", "v")))

    assert status.checkin_rate_per_s == 1.0
    (seen,) = [d for d in status.device_groups if d.checkins_in_window]
    small_group = status.job("small").group  # type: ignore[union-attr]
    assert seen.eligible_groups == [small_group]
    assert seen.feeds == [small_group]  # low-RAM devices feed the small jobs' group
    assert status.group(small_group).fed_by == [seen.signature]  # type: ignore[union-attr]
    assert status.group(small_group).eligible_rate_per_s == 1.0  # type: ignore[union-attr]

    reasons = {j: wait_reason(status, j) for j in ("small", "small-2", "big", "huge")}
    served = [j for j in ("small", "small-2") if reasons[j] is None]
    assert len(served) == 1  # one of the group is first, the other is outranked
    assert {reasons["small"], reasons["small-2"]} == {None, "outranked"}
    assert reasons["big"] == "no_eligible_supply"  # no ram >= 8 device checked in
    assert reasons["huge"] == "no_eligible_supply"
    assert wait_reason(status, "unknown") is None


def test_a_group_the_plan_gives_nothing_is_starved() -> None:
    core = make_scheduler("venn", seed=1)
    core.add_job(spec("wide", 2, demand=50), 0.0)
    core.add_job(spec("narrow", 8, demand=50), 0.0)
    core.request_round("wide", 0, 0.0)
    core.request_round("narrow", 0, 0.0)
    big = core.index.slot_for_attrs({"ram": 16})  # eligible for both groups
    for t in range(10):
        core.observe_many(np.array([big]), np.array([float(t)]))
    status = scheduler_status(core, core.table(10.0), 10.0, "w", "venn")
    reasons = {j: wait_reason(status, j) for j in ("wide", "narrow")}
    # Both groups can use the only devices there are; the plan gives them to one group,
    # the other is starved (not outranked: nobody of its group is served).
    assert sorted(map(str, reasons.values())) == ["None", "group_starved"]
