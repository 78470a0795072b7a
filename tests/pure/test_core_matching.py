"""Tier matching: when a round is restricted to a capacity tier, and when that lifts.

Every round here fills in 1 s and collects its responses in 100 s, so the job's own test
(``V + g*c < 1 + c`` with c = 100) passes for the fast tier (prior tail ratio 0.3) and
fails for the slow one (1.7); which tier a round draws is random per attempt.
"""

from __future__ import annotations

from venn.core import JobSpec, Requirement, make_scheduler
from venn.core.capacity import TierModel
from venn.core.scheduler import Scheduler

DEVICE = {"cpu_f": 8.0}
TOP_DEVICE = {"cpu_f": 10.0}  # also eligible for the cpu >= 9 jobs
TIERS = TierModel((60.0,), prior_tail_ratio=(0.3, 1.7))
FAST, SLOW = 0, 1


def job(job_id: str, demand: int = 1, cpu: float = 1) -> JobSpec:
    return JobSpec(job_id, Requirement.of(cpu=cpu), demand=demand, rounds=1000, deadline=1e9)


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
    """Indexes of the rounds (after a first, profiling one) restricted to a tier when
    requested and still restricted once filled."""
    t = run_round(sched, job_id, 0, 0.0)
    out = []
    for i in range(1, rounds + 1):
        sched.request_round(job_id, i, t)
        requested = sched.jobs[job_id].tier
        sched.checkin(sched.slot_of(DEVICE), t + 1, tier=FAST, u=0.5, device_id=f"d{i}")
        filled = sched.jobs[job_id].tier
        assert filled in (requested, None)
        if requested is not None:
            assert requested == FAST
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
    assert restricted_rounds(sched, "a", 12) == []  # not even at the request
    assert restricted_rounds(paper, "a", 12) != []


def test_only_jobs_eligible_for_the_same_devices_compete() -> None:
    hits = {}
    for policy in ("venn", "venn-paper"):
        sched = scheduler(policy)
        sched.add_job(job("a"), 0.0)
        sched.add_job(job("c", demand=10**6, cpu=9), 0.0)  # no device seen so far suits c
        sched.request_round("c", 0, 0.0)
        before = restricted_rounds(sched, "a", 12)
        # A device that suits both appears: a's signatures now overlap c's group.
        t = 13 * 102.0
        top = sched.checkin(sched.slot_of(TOP_DEVICE), t, tier=FAST, u=0.5, device_id="top")
        assert top is not None and top.job_id == "c"
        after = []
        for i in range(13, 25):
            sched.request_round("a", i, t + 1)
            if sched.jobs["a"].tier is not None:
                after.append(i)
            a = sched.checkin(sched.slot_of(DEVICE), t + 2, tier=FAST, u=0.5, device_id=f"e{i}")
            assert a is not None and a.job_id == "a"
            sched.close_round("a", i, t + 102, succeeded=True)
            t += 102
        hits[policy] = (before, after)
    assert hits["venn"][0] != []  # c could not use a's devices: no competition
    assert hits["venn"][1] == []  # now it can
    assert hits["venn-paper"][1] != []  # the same rounds pass the job's own test


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
    # b now competes: the restriction lifts and slow devices are served again (the
    # first to b, whose job has less work left, the next to a).
    first = sched.checkin(sched.slot_of(DEVICE), t + 4, tier=SLOW, u=0.5, device_id="s2")
    assert first is not None and first.job_id == "b"
    assert sched.jobs["a"].tier is None
    second = sched.checkin(sched.slot_of(DEVICE), t + 5, tier=SLOW, u=0.5, device_id="s3")
    assert second is not None and second.job_id == "a"
