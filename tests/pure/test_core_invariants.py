"""Property-based tests of the core's invariants, for every policy."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from venn.core import POLICIES, JobSpec, Requirement, make_scheduler
from venn.core.capacity import TierModel
from venn.core.supply import SupplyWindow

CPU_LEVELS = [0.0, 1.0, 4.0, 7.0]
MEM_LEVELS = [0.0, 10.0, 1000.0]

requirements = st.builds(
    lambda cpu, mem: Requirement.of(cpu=cpu, memory=mem),
    st.sampled_from(CPU_LEVELS),
    st.sampled_from(MEM_LEVELS),
)
devices = st.fixed_dictionaries(
    {
        "cpu_f": st.sampled_from([0.5, 2.0, 5.0, 8.0]),
        "fp16_mem": st.sampled_from([5.0, 100.0, 1200.0]),
    }
)
# An operation: a check-in (device number, attrs, tier, u), a release, or a round close.
operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("checkin"),
            st.integers(0, 15),
            devices,
            st.integers(0, 2),
            st.floats(0, 1, exclude_max=True),
        ),
        st.tuples(st.just("release"), st.integers(0, 15)),
        st.tuples(st.just("close"), st.integers(0, 3), st.booleans()),
    ),
    max_size=120,
)
scenario = st.tuples(
    st.sampled_from(sorted(POLICIES)),
    st.lists(st.tuples(requirements, st.integers(1, 6)), min_size=1, max_size=4),
    operations,
    st.floats(0, 2),
)


def play(policy: str, jobs: list[tuple[Requirement, int]], ops: list, eps: float) -> list:
    """Run a scenario; check invariants as it goes; return the decision log."""
    sched = make_scheduler(
        policy, seed=7, tiers=TierModel((60.0, 120.0)), fairness_eps=eps, supply_window=20
    )
    specs = {}
    for n, (req, demand) in enumerate(jobs):
        spec = JobSpec(f"j{n}", req, demand, rounds=50, deadline=100.0)
        specs[spec.job_id] = spec
        sched.add_job(spec, 0.0)
        sched.request_round(spec.job_id, 0, 0.0)
    next_round = {j: 1 for j in specs}
    per_round: dict[tuple[str, int], int] = {}
    holder: dict[int, tuple[str, int]] = {}
    log: list[tuple[object, ...] | None] = []
    for t, op in enumerate(ops, start=1):
        now = float(t)
        if op[0] == "checkin":
            _, dev, attrs, tier, u = op
            slot = sched.slot_of(attrs)
            a = sched.checkin(slot, now, tier=tier, u=u, device_id=dev)
            log.append(None if a is None else (a.job_id, a.round_index))
            if a is None:
                continue
            spec = specs[a.job_id]
            assert spec.requirement.admits(attrs), "ineligible assignment"
            assert dev not in holder, "device double-booked"
            holder[dev] = (a.job_id, a.round_index)
            key = (a.job_id, a.round_index)
            per_round[key] = per_round.get(key, 0) + 1
            assert per_round[key] <= spec.demand, "more than D assignments in a round"
            js = sched.jobs[a.job_id]
            if js.tier is not None:
                assert tier == js.tier, "device outside the round's capacity tier"
        elif op[0] == "release":
            holder.pop(op[1], None)
            sched.release_device(op[1])
        else:
            job_id = f"j{op[1] % len(specs)}"
            js = sched.jobs[job_id]
            closed = sched.close_round(job_id, js.round_index, now, op[2], [0], [5.0])
            if closed:
                for dev in [d for d, h in holder.items() if h == (job_id, js.round_index)]:
                    del holder[dev]
                sched.request_round(job_id, next_round[job_id], now)
                next_round[job_id] += 1
            log.append(("close", job_id, closed))
    return log


@settings(max_examples=150, deadline=None)
@given(scenario)
def test_invariants_hold_for_every_policy(case) -> None:
    policy, jobs, ops, eps = case
    play(policy, jobs, ops, eps)


@settings(max_examples=40, deadline=None)
@given(scenario)
def test_same_inputs_same_decisions(case) -> None:
    policy, jobs, ops, eps = case
    first = json.dumps(play(policy, jobs, ops, eps))
    assert json.dumps(play(policy, jobs, ops, eps)) == first


def test_replayed_events_change_nothing() -> None:
    sched = make_scheduler("venn", seed=1)
    spec = JobSpec("a", Requirement.of(cpu=1), 2, rounds=2, deadline=10.0)
    assert sched.add_job(spec, 0.0)
    assert not sched.add_job(spec, 0.0)
    assert sched.request_round("a", 0, 0.0)
    assert not sched.request_round("a", 0, 0.5)
    slot = sched.slot_of({"cpu_f": 2.0})
    assert sched.checkin(slot, 1.0, device_id="d1") is not None
    assert sched.checkin(slot, 1.0, device_id="d1") is None  # still holds its assignment
    assert sched.jobs["a"].remaining == 1
    assert sched.close_round("a", 0, 2.0, True)
    assert not sched.close_round("a", 0, 2.0, True)
    assert sched.jobs["a"].rounds_done == 1


def test_unknown_job_is_refused() -> None:
    sched = make_scheduler("fifo")
    assert not sched.request_round("ghost", 0, 0.0)
    assert not sched.close_round("ghost", 0, 0.0, True)
    assert not sched.remove_job("ghost")


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 7),
    st.lists(st.lists(st.integers(0, 9), max_size=20), max_size=12),
)
def test_supply_window_batches_equal_single_check_ins(size: int, batches: list[list[int]]) -> None:
    one, many = SupplyWindow(size), SupplyWindow(size)
    t = 0.0
    for batch in batches:
        times = [t + i for i in range(len(batch))]
        t += len(batch)
        for slot, time in zip(batch, times, strict=True):
            one.observe(slot, time)
        many.observe_many(np.array(batch, dtype=np.int64), np.array(times))
        assert one.total_observed == many.total_observed
        assert (one.slot_counts(10) == many.slot_counts(10)).all()
        assert one.rate_per_s() == many.rate_per_s()
        assert sorted(one.window_slots().tolist()) == sorted(many.window_slots().tolist())
