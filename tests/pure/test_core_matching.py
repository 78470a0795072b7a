"""Tier matching: when a round is restricted to a capacity tier, and when that lifts.

Every round here fills in 1 s and collects its responses in 100 s, so the job's own test
(``V + g*c < 1 + c`` with c = 100) passes for the fast tier (prior tail ratio 0.3) and
fails for the slow one (1.7); which tier a round draws is random per attempt.
"""

from __future__ import annotations

from venn.core import JobSpec, Requirement, make_scheduler
from venn.core.matching import TierModel
from venn.core.scheduler import Scheduler

DEVICE = {"cpu_f": 8.0}
TIERS = TierModel((60.0,), prior_tail_ratio=(0.3, 1.7))
FAST, SLOW = 0, 1


def job(job_id: str, demand: int = 1) -> JobSpec:
    return JobSpec(job_id, Requirement.of(cpu=1), demand=demand, rounds=1000, deadline=1e9)


def scheduler(policy: str) -> Scheduler:
    return make_scheduler(policy, seed=3, tiers=TIERS)


def run_round(sched: Scheduler, job_id: str, index: int, t: float) -> float:
    """One round of ``job_id``: request at t, fast devices at t+1, close at t+101."""
    sched.request_round(job_id, index, t)
    for k in range(sched.jobs[job_id].remaining):
        device = f"{job_id}{index}.{k}"
        a = sched.checkin(sched.slot_of(DEVICE), t + 1, tier=FAST, u=0.5, device_id=device)
        assert a is not None and a.job_id == job_id
    sched.close_round(job_id, index, t + 101, succeeded=True)
    return t + 102


def restricted_rounds(sched: Scheduler, job_id: str, rounds: int) -> list[int]:
    """Indexes of the rounds (after a first, profiling one) restricted to a tier."""
    t = run_round(sched, job_id, 0, 0.0)
    out = []
    for i in range(1, rounds + 1):
        sched.request_round(job_id, i, t)
        sched.checkin(sched.slot_of(DEVICE), t + 1, tier=FAST, u=0.5, device_id=f"d{i}")
        tier = sched.jobs[job_id].tier
        if tier is not None:
            assert tier == FAST
            out.append(i)
        sched.close_round(job_id, i, t + 101, succeeded=True)
        t += 102
    return out


def test_an_uncontested_round_is_restricted_to_a_fast_tier() -> None:
    for policy in ("venn", "venn-paper"):
        sched = scheduler(policy)
        sched.add_job(job("a"), 0.0)
        hits = restricted_rounds(sched, "a", 12)
        assert 0 < len(hits) < 12, (policy, hits)  # the fast tier's draws, not the slow's


def test_venn_does_not_restrict_a_round_another_open_job_competes_with() -> None:
    sched, paper = scheduler("venn"), scheduler("venn-paper")
    for s in (sched, paper):
        s.add_job(job("a"), 0.0)
        s.add_job(job("b", demand=10**6), 0.0)
        s.request_round("b", 0, 0.0)  # b's round stays open for the whole test
    assert restricted_rounds(sched, "a", 12) == []
    assert restricted_rounds(paper, "a", 12) != []


def test_a_restriction_lifts_when_a_competitor_opens_a_round() -> None:
    sched = scheduler("venn")
    sched.add_job(job("a", demand=2), 0.0)
    sched.add_job(job("b"), 0.0)
    t, index = run_round(sched, "a", 0, 0.0), 1
    while True:  # the first round that draws the fast tier
        sched.request_round("a", index, t)
        sched.checkin(sched.slot_of(DEVICE), t + 1, tier=FAST, u=0.5, device_id=f"f{index}")
        if sched.jobs["a"].tier is not None:
            break
        sched.checkin(sched.slot_of(DEVICE), t + 1, tier=FAST, u=0.5, device_id=f"g{index}")
        sched.close_round("a", index, t + 101, succeeded=True)
        t, index = t + 102, index + 1
        assert index < 30, "no round drew the fast tier"
    # a is restricted and still needs one device: a slow one goes nowhere.
    assert sched.checkin(sched.slot_of(DEVICE), t + 2, tier=SLOW, u=0.5, device_id="s1") is None
    sched.request_round("b", 0, t + 3)
    # b now competes: the restriction lifts and slow devices are served again.
    a = sched.checkin(sched.slot_of(DEVICE), t + 4, tier=SLOW, u=0.5, device_id="s2")
    assert a is not None
    assert sched.jobs["a"].tier is None
