"""The plan and dispatch table a scheduler keeps up event by event (open jobs filed
incrementally, the IRS plan resumed from the last one, a first pick's head rows and
overtake budgets reused) equal what a recompute from scratch gives, for every policy."""

from __future__ import annotations

import copy

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from venn.core import POLICIES, JobSpec, Requirement, Scheduler, make_scheduler
from venn.core.capacity import TierModel
from venn.core.compile import TableCompiler
from venn.core.dispatch import DispatchTable
from venn.core.irs import IrsPlanner
from venn.core.open_jobs import OpenJobs
from venn.core.policies import IrsPolicy

CPU = [0.0, 1.0, 4.0, 7.0]
MEM = [0.0, 10.0, 1000.0]
requirements = st.builds(
    lambda cpu, mem: Requirement.of(cpu=cpu, memory=mem), st.sampled_from(CPU), st.sampled_from(MEM)
)
devices = st.fixed_dictionaries(
    {
        "cpu_f": st.sampled_from([0.5, 2.0, 5.0, 8.0]),
        "fp16_mem": st.sampled_from([5.0, 100.0, 1200.0]),
    }
)
operation = st.one_of(
    st.tuples(
        st.just("checkin"),
        st.integers(0, 30),
        devices,
        st.integers(0, 2),
        st.floats(0, 1, exclude_max=True),
    ),
    st.tuples(st.just("release"), st.integers(0, 30)),
    st.tuples(st.just("close"), st.integers(0, 9), st.booleans(), st.integers(1, 9)),
    st.tuples(st.just("add"), requirements, st.integers(1, 9), st.integers(1, 6)),
    st.tuples(st.just("remove"), st.integers(0, 9)),
)


def from_scratch(sched: Scheduler) -> Scheduler:
    """A copy of the scheduler with nothing kept between compiles: open jobs filed
    anew, a new compiler, and an IRS planner with no last plan."""
    ref = copy.deepcopy(sched)
    ref._compiler = TableCompiler(ref.num_tiers)
    ref.open = OpenJobs(ref.num_tiers, ref.policy.ordering == "key")
    for js in ref.by_idx:
        ref.open.touch(js.idx)
    if isinstance(ref.policy, IrsPolicy):
        ref.policy.planner = IrsPlanner()
        ref.policy._table = None
    return ref


def same_table(a: DispatchTable, b: DispatchTable) -> bool:
    return (
        a.uniform == b.uniform
        and np.array_equal(a.candidates, b.candidates)
        and np.array_equal(a.counts, b.counts)
        and np.array_equal(a.budget, b.budget)
    )


PLAN_POLICIES = sorted(name for name, spec in POLICIES.items() if "IRS" in spec.description)
job_lists = st.lists(
    st.tuples(requirements, st.integers(1, 9), st.integers(1, 6)), min_size=1, max_size=10
)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(sorted(POLICIES)),
    job_lists,
    st.lists(operation, max_size=80),
    st.sampled_from([0.0, 0.0, 1.0]),
    st.integers(3, 40),
)
def test_every_policy_compiles_what_a_recompute_gives(policy, jobs, ops, eps, window) -> None:
    play(policy, jobs, ops, eps, window)


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from(PLAN_POLICIES),
    st.lists(
        st.tuples(requirements, st.integers(1, 9), st.integers(1, 6)), min_size=4, max_size=10
    ),
    st.lists(operation, min_size=30, max_size=120),
    st.sampled_from([0.0, 0.0, 0.5]),
    st.integers(20, 200),
)
def test_a_resumed_plan_equals_a_recompute(policy, jobs, ops, eps, window) -> None:
    """Plan policies on more jobs, longer runs and a slower supply window, so most plans
    resume from the one before."""
    play(policy, jobs, ops, eps, window)


def play(policy: str, jobs: list, ops: list, eps: float, window: int) -> None:
    """Run the events; after each, compare with a scheduler that recomputes everything."""
    sched = make_scheduler(
        policy, seed=3, tiers=TierModel((60.0, 120.0)), fairness_eps=eps, supply_window=window
    )
    ids: list[str] = []

    def add(req: Requirement, demand: int, rounds: int, now: float) -> None:
        spec = JobSpec(f"j{len(ids)}", req, demand, rounds=rounds, deadline=100.0)
        ids.append(spec.job_id)
        sched.add_job(spec, now)
        sched.request_round(spec.job_id, 0, now)

    for req, demand, rounds in jobs:
        add(req, demand, rounds, 0.0)
    for t, op in enumerate(ops, start=1):
        now = float(t)
        ref = from_scratch(sched)
        result: object = None
        expected: object = None
        for s in (sched, ref):
            if op[0] == "checkin":
                _, dev, attrs, tier, u = op
                got = s.checkin(s.slot_of(attrs), now, tier=tier, u=u, device_id=dev)
                result = None if got is None else (got.job_id, got.round_index)
            elif op[0] == "release":
                s.release_device(op[1])
                result = None
            elif op[0] == "close":
                job_id = ids[op[1] % len(ids)]
                js = s.jobs.get(job_id)
                result = js is not None and s.close_round(
                    job_id, js.round_index, now, op[2], [0], [5.0 * op[3]]
                )
                if result and js is not None and js.rounds_done < js.spec.rounds:
                    s.request_round(job_id, js.round_index + 1, now, demand=op[3])
            elif op[0] == "add":
                if s is sched:
                    add(op[1], op[2], op[3], now)
                else:
                    spec = JobSpec(ids[-1], op[1], op[2], rounds=op[3], deadline=100.0)
                    s.add_job(spec, now)
                    s.request_round(spec.job_id, 0, now)
                result = None
            else:
                result = s.remove_job(ids[op[1] % len(ids)])
            if s is sched:
                expected = result
            else:
                assert result == expected, f"{op}: the decision differs from a recompute"
        assert same_table(sched.table(now), ref.table(now)), f"{op}: tables differ"
        if isinstance(sched.policy, IrsPolicy):
            assert isinstance(ref.policy, IrsPolicy)
            assert sched.policy.owner.tolist() == ref.policy.owner.tolist()
