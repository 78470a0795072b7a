"""The optimality bound (venn.sim.bound) against optima found by brute force.

The brute force plays every policy there is, the omniscient ones included, on tiny
instances under the simulator's rules: at each check-in (in time order) it gives the
device to any job whose open round it is useful to and that has fewer than D devices, or
to nobody; a round closes at its k-th result if that comes by its deadline, else fails at
the deadline; the next round is requested 0.1 s after a close. Its optimum is the least
sum of censored JCTs ``min(C_j, H) - a_j`` over all those schedules.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import numpy as np
import pytest

from venn.core.model import JobSpec, Requirement
from venn.sim.bound import (
    BoundJob,
    Supply,
    bound_jobs,
    earliest_rounds,
    lp_bound,
    supply_from_source,
    units_before,
)
from venn.sim.engine import SimConfig
from venn.sim.metrics import censored_jct
from venn.sim.rounds import ROUND_GAP_S
from venn.sim.runner import run_jobs
from venn.traces.checkins import SyntheticTrace
from venn.traces.devices import load_device_profiles

HORIZON = 25.0
TIGHT_MARGIN = 0.05  # the designed instance: bound >= (1 - margin) * optimum
MEAN_RATIO = 0.95  # random instances without binding deadlines: mean bound / optimum


@dataclass(frozen=True)
class TinyJob:
    arrival: float
    demand: int
    needed: int
    rounds: int
    deadline: float
    klass: int


JobState = tuple[int, float, int, tuple[float, ...], float | None]  # done, q, assigned, results, C


def brute_force(
    jobs: list[TinyJob], time: list[float], useful: list[int], finish: list[float], horizon: float
) -> float:
    """The least sum of censored JCTs over every schedule (see the module docstring)."""

    def settle(state: tuple[JobState, ...], t: float) -> tuple[JobState, ...]:
        """Run every round close at or before t (closes come before a check-in at t)."""
        out = []
        for job, (done, q, assigned, results, completed) in zip(jobs, state, strict=True):
            while completed is None:
                k = job.needed
                if len(results) >= k and results[k - 1] <= q + job.deadline:
                    close, succeeded = results[k - 1], True
                else:
                    close, succeeded = q + job.deadline, False
                if close > t:
                    break
                done += succeeded
                if done == job.rounds:
                    completed = close
                    break
                q, assigned, results = close + ROUND_GAP_S, 0, ()
            out.append((done, q, assigned, results, completed))
        return tuple(out)

    @cache
    def best(i: int, state: tuple[JobState, ...]) -> float:
        if i == len(time):
            final = settle(state, horizon)
            return sum(
                min(horizon if s[4] is None else s[4], horizon) - job.arrival
                for job, s in zip(jobs, final, strict=True)
            )
        t = time[i]
        state = settle(state, t)
        options = [state]  # nobody takes the device
        for j, (job, (done, q, assigned, results, completed)) in enumerate(
            zip(jobs, state, strict=True)
        ):
            if (
                completed is None
                and q <= t
                and assigned < job.demand
                and useful[i] >> job.klass & 1
            ):
                taken = (done, q, assigned + 1, tuple(sorted((*results, finish[i]))), completed)
                options.append((*state[:j], taken, *state[j + 1 :]))
        return min(best(i + 1, s) for s in options)

    return best(0, tuple((0, job.arrival, 0, (), None) for job in jobs))


def bound_of(
    jobs: list[TinyJob], time: np.ndarray, useful: np.ndarray, finish: np.ndarray
) -> float:
    bjobs = [BoundJob(f"j{i}", j.arrival, j.rounds, j.needed, j.klass) for i, j in enumerate(jobs)]
    classes = max(j.klass for j in jobs) + 1
    supply = Supply(time, useful.astype(np.int64), finish[:, None], (0,) * classes)
    return lp_bound(bjobs, supply, HORIZON, slot_s=1.0).lp_total_s


def random_instance(
    rng: np.random.Generator, deadline: float | None
) -> tuple[list[TinyJob], np.ndarray, np.ndarray, np.ndarray]:
    jobs = []
    for _ in range(int(rng.integers(1, 4))):
        demand = int(rng.integers(1, 3))
        jobs.append(
            TinyJob(
                arrival=float(rng.integers(0, 4)),
                demand=demand,
                needed=int(rng.integers(1, demand + 1)),
                rounds=int(rng.integers(1, 3)),
                deadline=deadline if deadline is not None else float(rng.integers(2, 8)),
                klass=int(rng.integers(0, 2)),
            )
        )
    n = int(rng.integers(3, 10))
    time = np.sort(rng.choice(np.arange(20), n, replace=False)).astype(np.float64)
    useful = rng.integers(0, 4, n)
    finish = time + rng.uniform(0.2, 3.0, n)
    return jobs, time, useful, finish


def solve_both(
    jobs: list[TinyJob], time: np.ndarray, useful: np.ndarray, finish: np.ndarray
) -> tuple[float, float]:
    opt = brute_force(jobs, time.tolist(), [int(u) for u in useful], finish.tolist(), HORIZON)
    return bound_of(jobs, time, useful, finish), opt


def test_bound_never_exceeds_the_optimum_of_random_tiny_instances() -> None:
    rng = np.random.default_rng(14)
    for _ in range(150):
        bound, opt = solve_both(*random_instance(rng, deadline=None))
        assert bound <= opt + 1e-6


@pytest.mark.parametrize("deadline", [None, 100.0])
def test_a_coarser_slot_still_gives_a_lower_bound(deadline: float | None) -> None:
    """The relaxation holds for any slot length (bound.py, "Any slot length"): slots of
    2.5, 7 and 25 s (the last one slot for the whole horizon, bar the arrivals) against
    the brute-force optimum; the full-scale report relies on this with 6 h slots."""
    rng = np.random.default_rng(41 if deadline is None else 42)
    for _ in range(60):
        jobs, time, useful, finish = random_instance(rng, deadline)
        opt = brute_force(jobs, time.tolist(), [int(u) for u in useful], finish.tolist(), HORIZON)
        bjobs = [
            BoundJob(f"j{i}", j.arrival, j.rounds, j.needed, j.klass) for i, j in enumerate(jobs)
        ]
        classes = max(j.klass for j in jobs) + 1
        supply = Supply(time, useful.astype(np.int64), finish[:, None], (0,) * classes)
        for slot_s in (1.0, 2.5, 7.0, 25.0):
            result = lp_bound(bjobs, supply, HORIZON, slot_s=slot_s)
            assert result.lp_total_s <= opt + 1e-6, slot_s
            # Coarse or not, the LP keeps every job's alone-bound E_j.
            assert result.lp_total_s >= result.alone_total_s - 1e-6, slot_s


def test_slot_length_must_be_positive() -> None:
    job = BoundJob("j", 0.0, 1, 1, 0)
    supply = Supply(np.array([1.0]), np.array([1]), np.array([[2.0]]), (0,))
    with pytest.raises(ValueError, match="slot_s"):
        lp_bound([job], supply, HORIZON, slot_s=0.0)


def test_bound_is_tight_on_average_when_deadlines_do_not_bind() -> None:
    # Deadlines past the horizon: what is left of the gap is the LP's fractional
    # completions and the rules the relaxation drops (D cap, which check-in in a slot).
    rng = np.random.default_rng(6)
    ratios = []
    for _ in range(100):
        bound, opt = solve_both(*random_instance(rng, deadline=100.0))
        assert bound <= opt + 1e-6
        ratios.append(bound / opt)
    assert np.mean(ratios) >= MEAN_RATIO
    assert np.median(ratios) == pytest.approx(1.0)


def test_bound_on_a_contended_instance_is_within_the_stated_margin() -> None:
    """Two jobs contend for the scarce class-1 devices, and a third (class 0, which any
    device serves) for all of them.

    Job 0 (class 1, two rounds of 2 results out of D = 2), job 1 (class 1, one round of 1)
    and job 2 (class 0, two rounds of 1) arrive at 0, 0 and 1; a check-in every second,
    every other one useful to class 1 too; results 1-2.5 s later. The optimum is 14.5 s
    (sum of JCTs), the bound 14.0 s: 3.4% below, within the stated 5%.
    """
    jobs = [
        TinyJob(0.0, 2, 2, 2, 30.0, 1),
        TinyJob(0.0, 1, 1, 1, 30.0, 1),
        TinyJob(1.0, 1, 1, 2, 30.0, 0),
    ]
    time = np.arange(12, dtype=np.float64)
    useful = np.where(np.arange(12) % 2 == 0, 0b11, 0b01)
    finish = time + 1.0 + (np.arange(12) % 4) * 0.5
    bound, opt = solve_both(jobs, time, useful, finish)
    assert opt == pytest.approx(14.5)
    assert bound <= opt + 1e-9
    assert bound >= (1 - TIGHT_MARGIN) * opt


def test_earliest_rounds_is_the_optimum_of_a_job_alone() -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        jobs, time, useful, finish = random_instance(rng, deadline=100.0)
        job = jobs[0]
        mine = (useful >> job.klass & 1).astype(bool)
        bj = BoundJob("j", job.arrival, job.rounds, job.needed, job.klass)
        requests, earliest = earliest_rounds(bj, time[mine], finish[mine])
        alone = brute_force(
            [job], time.tolist(), [int(u) for u in useful], finish.tolist(), HORIZON
        )
        assert min(earliest, HORIZON) - job.arrival == pytest.approx(alone)
        assert requests[0] == job.arrival
        # No more units before tau than the rounds requested by then can hold.
        reach = units_before(bj, requests, time[mine], np.array([job.arrival, HORIZON]))
        assert reach[0] == 0
        assert reach[1] <= bj.units


def test_bound_is_below_every_policy_on_a_real_trace() -> None:
    """A short trace of the synthetic fleet: every policy's censored JCT sum is at least
    the bound, and each job's alone-bound E_j is at most its simulated JCT alone."""
    tier = {1: Requirement.of(cpu=1), 2: Requirement.of(cpu=5.5, memory=3)}
    specs = [
        JobSpec(f"job-{i}", tier[1 + i % 2], demand=d, rounds=r, deadline=600.0, arrival=a)
        for i, (d, r, a) in enumerate([(60, 4, 3600.0), (100, 3, 3700.0), (40, 6, 3900.0)])
    ]
    horizon = 3 * 3600.0
    profiles = load_device_profiles()

    def source(h: float) -> SyntheticTrace:
        return SyntheticTrace(seed=5, horizon_s=h)

    jobs, classes = bound_jobs(specs)
    result = lp_bound(
        jobs, supply_from_source(source(horizon), classes, profiles, horizon), horizon, 300.0
    )
    assert result.alone_total_s <= result.lp_total_s
    for policy in ("random", "fifo", "srsf", "venn"):
        run = run_jobs(specs, source, SimConfig(policy=policy, seed=5, horizon_s=horizon))
        total = sum(censored_jct(rec, horizon) for rec in run.jobs)
        assert result.lp_total_s <= total + 1e-6, policy
    for spec, earliest in zip(specs, result.earliest_s, strict=True):
        alone = run_jobs([spec], source, SimConfig(policy="fifo", seed=5, horizon_s=horizon))
        finished = alone.jobs[0].finished_at
        assert earliest <= (finished if finished is not None else np.inf)
