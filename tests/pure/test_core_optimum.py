"""A small IRS instance with a known optimum: two overlapping groups.

Fast devices are eligible for both jobs, slow devices only for the general job. Three
fast devices come first, then slow ones, then fast ones again. The optimum (found by
brute force over every assignment) gives the fast devices to the compute-rich job.
"""

from __future__ import annotations

import itertools

import numpy as np

from venn.core import JobSpec, Requirement, make_scheduler

FAST = {"cpu_f": 8.0}
SLOW = {"cpu_f": 2.0}
SEQUENCE = [FAST, FAST, FAST, SLOW, SLOW, SLOW, FAST, FAST, FAST, SLOW, SLOW, SLOW]
JOBS = [
    JobSpec("general", Requirement.of(cpu=1), demand=3, rounds=1, deadline=1e9),
    JobSpec("compute-rich", Requirement.of(cpu=7), demand=3, rounds=1, deadline=1e9),
]


def average_delay(owner: list[str | None]) -> float:
    """Mean over jobs of the time its last device arrived (inf if never complete)."""
    done = []
    for job in JOBS:
        times = [t for t, o in enumerate(owner, start=1) if o == job.job_id]
        done.append(times[job.demand - 1] if len(times) >= job.demand else float("inf"))
    return float(np.mean(done))


def brute_force_optimum() -> float:
    best = float("inf")
    choices = []
    for attrs in SEQUENCE:
        choices.append([None] + [j.job_id for j in JOBS if j.requirement.admits(attrs)])
    for owner in itertools.product(*choices):
        counts = {j.job_id: owner.count(j.job_id) for j in JOBS}
        if all(counts[j.job_id] <= j.demand for j in JOBS):
            best = min(best, average_delay(list(owner)))
    return best


def run_policy(name: str, seed: int) -> float:
    sched = make_scheduler(name, seed=seed)
    rng = np.random.default_rng(seed)
    for job in JOBS:
        sched.add_job(job, 0.0)
        sched.request_round(job.job_id, 0, 0.0)
    # Supply history: the same mix of devices as the sequence.
    slots = [sched.slot_of(a) for a in SEQUENCE]
    sched.observe_many(np.array(slots * 10), np.linspace(-100.0, -1.0, 10 * len(slots)))
    owner: list[str | None] = []
    for t, attrs in enumerate(SEQUENCE, start=1):
        a = sched.checkin(sched.slot_of(attrs), float(t), u=float(rng.random()), device_id=t)
        owner.append(None if a is None else a.job_id)
    return average_delay(owner)


def test_venn_reaches_the_optimum_and_random_does_not() -> None:
    optimum = brute_force_optimum()
    assert optimum == 4.5  # compute-rich done at 3, general at 6
    assert run_policy("venn", 0) == optimum
    assert run_policy("venn-sched", 0) == optimum
    random_delays = [run_policy("random", seed) for seed in range(40)]
    assert min(random_delays) >= optimum
    assert float(np.mean(random_delays)) > optimum + 1.0
    assert run_policy("fifo", 0) > optimum  # the general job arrived first and takes all


def test_venn_orders_a_group_by_remaining_job_work_venn_paper_by_the_round() -> None:
    """Two jobs of one group: a long job with the smaller round, a short job with the
    larger one. `venn` serves the job with less work left (average JCT); `venn-paper`
    serves the smaller round, as Algorithm 1 does."""
    long_job = JobSpec("long", Requirement.of(cpu=1), demand=2, rounds=50, deadline=1e9)
    short_job = JobSpec("short", Requirement.of(cpu=1), demand=3, rounds=1, deadline=1e9)
    first: dict[str, str | None] = {}
    for name in ("venn", "venn-paper", "venn-sched", "srsf"):
        sched = make_scheduler(name, seed=0)
        for job in (long_job, short_job):
            sched.add_job(job, 0.0)
            sched.request_round(job.job_id, 0, 0.0)
        a = sched.checkin(sched.slot_of(SLOW), 1.0, u=0.5, device_id="d1")
        first[name] = None if a is None else a.job_id
    assert first == {"venn": "short", "venn-sched": "short", "venn-paper": "long", "srsf": "long"}


def test_random_order_serves_one_job_until_its_round_fills() -> None:
    """`random-order` (the reference driver's random baseline) keeps a drawn job until its
    demand is met; `random` spreads devices over the jobs."""
    jobs = [
        JobSpec(f"j{i}", Requirement.of(cpu=1), demand=4, rounds=3, deadline=1e9) for i in range(3)
    ]
    for seed in range(5):
        sched = make_scheduler("random-order", seed=seed)
        for job in jobs:
            sched.add_job(job, 0.0)
            sched.request_round(job.job_id, 0, 0.0)
        owners = []
        for t in range(12):
            a = sched.checkin(sched.slot_of(SLOW), float(t), u=0.5, device_id=f"d{t}")
            owners.append(None if a is None else a.job_id)
        # Three runs of four devices each: whole rounds, one job after another.
        assert [owners[i : i + 4].count(owners[i]) for i in (0, 4, 8)] == [4, 4, 4], owners
        assert len(set(owners)) == 3
