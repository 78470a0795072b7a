"""The completion estimate's fluid model (``venn.core.estimate``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from services.scheduler.estimates import ESTIMATE_SHARE, Estimates
from venn.core.arrivals import Arrival, ArrivalModel, bursts
from venn.core.estimate import (
    SIMILAR_MIN,
    JobLoad,
    SupplyView,
    TrackRecord,
    completion_bands,
    completion_times,
    job_loads,
    scheduler_estimates,
    waste_factor,
)
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


def test_a_shorter_job_arriving_later_goes_first() -> None:
    waiting = load("long", 0, 20)
    alone = completion_times(ONE_GROUP, [waiting], now=0.0)
    later = [(50.0, load("short", 0, 2))]
    out = completion_times(ONE_GROUP, [waiting], now=0.0, arrivals=later)
    assert out["short"] < out["long"]
    assert out["long"] > alone["long"]
    # An arrival after the job ended changes nothing for it.
    after = completion_times(ONE_GROUP, [waiting], 0.0, [(alone["long"] + 1.0, later[0][1])])
    assert after["long"] == pytest.approx(alone["long"])


def test_waste_raises_work_by_the_devices_rounds_needed() -> None:
    core = make_scheduler("venn", track_devices=False)
    core.index.add_profiles([{"ram": 4.0}])
    core.add_job(JobSpec("j", Requirement.of(ram=2.0), 10, 4, 600.0), 0.0)
    assert waste_factor(core) == 1.0  # no round succeeded yet
    for attempt, ok in enumerate((False, True)):
        core.request_round("j", attempt, 0.0)
        for _ in range(10):
            core.checkin(0, 1.0)
        core.close_round("j", attempt, 2.0, succeeded=ok)
    # 20 devices for one successful round of 10.
    assert waste_factor(core) == pytest.approx(2.0)
    assert job_loads(core, 2.0)[0].work == pytest.approx(2.0 * 3 * 10)


def burst(times: list[float], demand: int = 10, rounds: int = 2) -> list[Arrival]:
    return [Arrival(t, Requirement.of(ram=2.0), demand, rounds, 8, 100.0) for t in times]


def test_arrivals_are_cut_into_bursts_at_long_gaps() -> None:
    times = [0.0, 10.0, 20.0, 30.0, 5000.0, 5010.0]
    assert [len(b) for b in bursts(times)] == [4, 2]


def test_a_burst_goes_on_as_long_as_past_bursts_did() -> None:
    past = burst([-1e6 + 10.0 * i for i in range(10)])  # one past burst of 10 arrivals
    model = ArrivalModel(burst([0.0, 10.0, 20.0, 30.0]), past)
    rng = np.random.default_rng(0)
    counts = {len(model.scenario(35.0, rng)) for _ in range(20)}
    assert counts == {6}  # 10 - 4 seen
    assert model.rate_per_s == pytest.approx(0.1)


def test_with_no_past_burst_the_time_left_is_drawn_from_how_long_it_lasted() -> None:
    model = ArrivalModel(burst([10.0 * i for i in range(11)]))  # 100 s so far, 0.1/s
    rng = np.random.default_rng(1)
    counts = np.array([len(model.scenario(100.0, rng)) for _ in range(400)])
    # Copernican: the burst lasts another 100 s or more half of the time (10 arrivals).
    assert 5 <= np.median(counts) <= 15
    assert np.percentile(counts, 90) > 3 * np.median(counts)


def test_no_arrival_is_expected_once_a_burst_has_ended_or_before_one() -> None:
    rng = np.random.default_rng(2)
    assert ArrivalModel(burst([0.0])).scenario(1.0, rng) == []
    ended = ArrivalModel(burst([0.0, 10.0, 20.0]))
    assert ended.scenario(20.0 + 21 * 10.0, rng) == []


def test_a_band_has_p90_at_or_after_p50_and_is_the_same_for_a_seed() -> None:
    jobs = [load("a", 0, 20), load("b", 0, 5)]
    model = ArrivalModel(burst([0.0, 10.0, 20.0], rounds=3))
    reqs = [Requirement.of(ram=2.0)]
    one = completion_bands(ONE_GROUP, jobs, 25.0, model, reqs, seed=4)
    two = completion_bands(ONE_GROUP, jobs, 25.0, model, reqs, seed=4)
    assert one == two
    assert all(b.p90 >= b.p50 for b in one.values())
    point = completion_times(ONE_GROUP, jobs, 25.0)
    assert one["a"].p90 > point["a"]  # later shorter jobs can only delay it


def test_a_track_record_of_similar_jobs_scales_the_band() -> None:
    req = Requirement.of(ram=2.0)
    other = Requirement.of(ram=8.0)
    record = TrackRecord([(req, 2.0)] * SIMILAR_MIN + [(other, 0.5)] * 50)
    assert set(record.ratios(req)) == {2.0}  # enough similar jobs: theirs alone
    assert len(record.ratios(Requirement.of(ram=4.0))) == SIMILAR_MIN + 50
    jobs = [load("a", 0, 10)]
    model = ArrivalModel([])
    plain = completion_bands(ONE_GROUP, jobs, 0.0, model, [req])["a"]
    scaled = completion_bands(ONE_GROUP, jobs, 0.0, model, [req], record=record)["a"]
    assert scaled.p50 == pytest.approx(2.0 * plain.p50)
