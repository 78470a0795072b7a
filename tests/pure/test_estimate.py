"""The completion estimate's fluid model (``venn.core.estimate``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from services.scheduler.status import ESTIMATE_SHARE, Estimates
from venn.core.estimate import JobLoad, SupplyView, completion_times, scheduler_estimates
from venn.core.model import JobSpec, Requirement
from venn.core.registry import make_scheduler
from venn.core.supply import AttributeMix


def load(job_id: str, group: int, rounds: int, demand: int = 10, latency: float = 5.0,
         deadline: float = 100.0) -> JobLoad:  # fmt: skip
    return JobLoad(job_id, group, float(rounds * demand), demand, 8, deadline, latency)


ONE_GROUP = SupplyView(np.array([[True]]), np.array([100.0]), rate_per_s=2.0)


def test_a_lone_job_takes_its_rounds_of_fill_and_latency() -> None:
    # 10 devices at 2/s fill a round in 5 s, then 5 s of latency: 10 s a round.
    out = completion_times(ONE_GROUP, [load("a", 0, rounds=7)], now=1000.0)
    assert out["a"] == pytest.approx(1000.0 + 7 * 10.0)


def test_the_smaller_job_of_a_group_goes_first_and_the_other_uses_its_waits() -> None:
    out = completion_times(ONE_GROUP, [load("big", 0, 20), load("small", 0, 2)], now=0.0)
    alone = completion_times(ONE_GROUP, [load("big", 0, 20)], now=0.0)
    assert out["small"] < out["big"]
    # While "small" waits for results, its devices go to "big": it is delayed by less
    # than "small"'s whole life.
    assert alone["big"] < out["big"] < alone["big"] + out["small"]


def test_no_eligible_supply_means_no_completion() -> None:
    # Signature 0 serves group 0 only; group 1's job has no device at all.
    supply = SupplyView(np.array([[True, False]]), np.array([50.0]), rate_per_s=1.0)
    out = completion_times(supply, [load("a", 0, 2), load("b", 1, 2)], now=0.0)
    assert math.isfinite(out["a"])
    assert out["b"] == math.inf


def test_a_deadline_no_round_can_meet_means_no_completion() -> None:
    # 8 results at 2/s take 4 s; with 5 s of latency a 6 s deadline is never met.
    out = completion_times(ONE_GROUP, [load("a", 0, 3, deadline=6.0)], now=0.0)
    assert out["a"] == math.inf


def test_more_supply_finishes_no_later() -> None:
    jobs = [load("a", 0, 5), load("b", 0, 9, demand=30)]
    slow = completion_times(ONE_GROUP, jobs, now=0.0)
    fast = completion_times(SupplyView(ONE_GROUP.sig_matrix, ONE_GROUP.counts, 4.0), jobs, 0.0)
    assert all(fast[k] <= slow[k] for k in slow)


def test_a_scheduler_estimate_reads_its_jobs_and_supply() -> None:
    core = make_scheduler("venn", track_devices=False)
    core.index.add_profiles([{"ram": 4.0}, {"ram": 1.0}])
    spec = JobSpec(
        "j", Requirement.of(ram=2.0), demand=10, rounds=4, deadline=600.0, workload_s=30.0
    )
    core.add_job(spec, 0.0)
    core.request_round("j", 0, 0.0)
    # 1,000 check-ins a second apart, half of them eligible: 0.5 eligible a second, so a
    # round of 10 fills in 20 s and waits 30 s (no round measured yet: its workload_s).
    core.observe_many(np.arange(1000) % 2, np.arange(1000, dtype=np.float64))
    out = scheduler_estimates(core, now=1000.0)
    assert out["j"] == pytest.approx(1000.0 + 4 * (20.0 + 30.0))


def test_the_attribute_mix_holds_the_latest_window_of_checkins() -> None:
    mix = AttributeMix(window=10)
    mix.observe({"ram": 1.0}, 8)
    mix.observe({"ram": 4.0}, 5)
    # 8 + 5 >= 10, and 5 alone is not: both reports are held.
    assert sorted(n for _, n in mix.counts()) == [5, 8]
    mix.observe({"ram": 4.0}, 6)
    # 5 + 6 >= 10: the oldest report (the 8 with ram 1) has left the window.
    assert mix.counts() == [({"ram": 4.0}, 11)]


def test_the_scheduler_remakes_its_estimates_as_their_cost_allows() -> None:
    core = make_scheduler("venn", track_devices=False)
    core.add_job(JobSpec("j", Requirement.of(ram=2.0), 10, 4, 600.0), 0.0)
    estimates = Estimates()
    first = estimates.of(core, now=100.0)
    assert set(first) == {"j"}
    assert estimates.of(core, now=100.0) is first  # no time passed: the same ones
    later = 100.0 + estimates.cost_s / ESTIMATE_SHARE + 1e-3
    assert estimates.of(core, now=later) is not first
