"""The IRS plan's three implementations (plain Python for small instances, numpy, and
Python lists over numpy for whole-number supply) give the same owners, and the planner
that resumes from its last plan gives what a plan from scratch gives."""

from __future__ import annotations

from bisect import insort

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from venn.core.irs import IrsPlanner, _plan_counts, _plan_numpy, _plan_small, irs_plan


@st.composite
def instances(
    draw: st.DrawFn, low_supply: bool = False
) -> tuple[np.ndarray, np.ndarray, list[int], list[list[float]], dict]:
    """Eligibility, supply, active groups, their queues and scales; ``low_supply``: many
    groups on a few check-ins each, so small supply moves reorder them."""
    sigs = draw(st.integers(4 if low_supply else 1, 12))
    groups = draw(st.integers(3 if low_supply else 1, 8))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    matrix = rng.random((sigs, groups)) < draw(st.sampled_from([0.2, 0.5, 0.8]))
    top = 4 if low_supply else draw(st.sampled_from([3, 50]))
    supply = rng.integers(0, top, sigs).astype(np.float64)
    active = sorted(rng.choice(groups, draw(st.integers(1, groups)), replace=False).tolist())
    queues = [
        sorted(
            (rng.integers(1, 40, draw(st.integers(1, 6))) * draw(st.sampled_from([1.0, 1.37])))
            .astype(float)
            .tolist()
        )
        for _ in active
    ]
    scale = {g: float(rng.choice([0.5, 1.0, 2.0])) for g in active} if draw(st.booleans()) else {}
    return matrix, supply, active, queues, scale


@settings(max_examples=300, deadline=None)
@given(instances())
def test_every_implementation_gives_the_same_plan(case) -> None:
    matrix, supply, groups, queues, scale = case
    small = _plan_small(matrix.tolist(), supply.tolist(), groups, queues, scale)
    numpy = _plan_numpy(
        matrix, supply, np.array(groups), [np.array(q) for q in queues], scale
    ).tolist()
    counts = _plan_counts(matrix, supply, np.array(groups), queues, scale).tolist()
    assert small == numpy == counts


def test_a_large_instance_takes_the_counts_path_and_matches_numpy() -> None:
    rng = np.random.default_rng(3)
    matrix = rng.random((100, 100)) < 0.4
    supply = rng.integers(0, 30, 100).astype(np.float64)
    queues = {g: sorted(rng.integers(1, 500, 10).astype(float).tolist()) for g in range(100)}
    groups = list(queues)
    expected = _plan_numpy(matrix, supply, np.array(groups), [np.array(queues[g]) for g in groups])
    assert irs_plan(matrix, supply, queues).tolist() == expected.tolist()


# An edit between two plans: a queue gains or loses a key, a signature's supply moves by
# one check-in, a group's fairness scale changes, or a group's queue empties / refills.
edits = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 7), st.integers(1, 60)),
        st.tuples(st.just("drop"), st.integers(0, 7), st.integers(0, 5)),
        st.tuples(st.just("supply"), st.integers(0, 11), st.sampled_from([-1, 1, 3])),
        st.tuples(st.just("scale"), st.integers(0, 7), st.sampled_from([0.5, 1.0, 2.0])),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(instances(), edits, st.sampled_from([1.0, 1.37]))
def test_a_resumed_plan_equals_a_plan_from_scratch(case, changes, unit) -> None:
    """IrsPlanner, fed one edit at a time, gives the plan a full recompute gives."""
    matrix, supply, groups, queues, scale = case
    num_groups = matrix.shape[1]
    queue_of = {g: list(q) for g, q in zip(groups, queues, strict=True)}
    planner = IrsPlanner()
    for op in [("none",), *changes]:
        if op[0] == "add":
            insort(queue_of.setdefault(op[1] % num_groups, []), op[2] * unit)
        elif op[0] == "drop" and queue_of:
            g = sorted(queue_of)[op[1] % len(queue_of)]
            q = queue_of[g]
            del q[op[2] % len(q)]
            if not q:
                del queue_of[g]
        elif op[0] == "supply":
            s = op[1] % len(supply)
            supply[s] = max(0.0, supply[s] + op[2])
        elif op[0] == "scale" and scale:
            scale[op[1] % num_groups] = op[2]
        active = sorted(queue_of)
        # The caller's lists change in place between plans, as OpenJobs' do.
        got = planner.plan(matrix, supply, active, [queue_of[g] for g in active], scale)
        expected = irs_plan(matrix, supply, queue_of, scale)
        assert got.tolist() == expected.tolist()


def test_the_planner_resumes_from_the_changed_group_on_the_large_instance() -> None:
    rng = np.random.default_rng(3)
    matrix = rng.random((100, 100)) < 0.4
    supply = rng.integers(0, 30, 100).astype(np.float64)
    queues = {g: sorted(rng.integers(1, 500, 10).astype(float).tolist()) for g in range(100)}
    planner = IrsPlanner()
    for step in range(60):
        g = int(rng.integers(100))
        if step % 2:
            insort(queues[g], float(rng.integers(1, 500)))
        else:
            del queues[g][int(rng.integers(len(queues[g])))]
        if step % 5 == 0:  # a check-in moves the supply window
            supply[int(rng.integers(100))] += 1
        groups = list(queues)
        got = planner.plan(matrix, supply, groups, [queues[g] for g in groups])
        assert got.tolist() == irs_plan(matrix, supply, queues).tolist()
    assert planner.full >= 1 and planner.resumed >= 40
    # Resuming recomputes a fraction of the ~100 steps a full plan takes.
    assert planner.recomputed_steps < 0.6 * 99 * planner.resumed


supply_moves = st.lists(
    st.tuples(
        st.lists(st.tuples(st.integers(0, 11), st.sampled_from([-2, -1, 1, 2])), max_size=4),
        st.integers(0, 7),
        st.integers(1, 60),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=500, deadline=None)
@given(instances(low_supply=True), supply_moves)
def test_a_plan_resumed_across_a_new_supply_order_equals_a_plan_from_scratch(case, moves) -> None:
    """A moving supply window reorders the groups; the planner carries its log over to
    the new order (only a new matrix or a new set of groups forces a full recompute)."""
    matrix, supply, groups, queues, scale = case
    queue_of = {g: list(q) for g, q in zip(groups, queues, strict=True)}
    planner = IrsPlanner()
    for changes, g, key in [([], 0, 0), *moves]:
        for s, d in changes:
            s %= len(supply)
            supply[s] = max(0.0, supply[s] + d)
        if key % 3 == 0:  # now and then a queue changes too
            q = queue_of[groups[g % len(groups)]]
            insort(q, float(key))
            del q[0]
        got = planner.plan(matrix, supply, groups, [queue_of[g] for g in groups], scale)
        assert got.tolist() == irs_plan(matrix, supply, queue_of, scale).tolist()
    assert planner.full == 1


def test_a_moving_window_on_the_large_instance_resumes_every_plan() -> None:
    rng = np.random.default_rng(4)
    matrix = rng.random((100, 100)) < 0.4
    supply = rng.integers(0, 30, 100).astype(np.float64)
    queues = {g: sorted(rng.integers(1, 500, 10).astype(float).tolist()) for g in range(100)}
    groups = list(queues)
    planner = IrsPlanner()
    for _ in range(60):
        for s in rng.integers(100, size=3):  # three check-ins in, three out
            supply[s] += 1
        for s in rng.integers(100, size=3):
            supply[s] = max(0.0, supply[s] - 1)
        g = int(rng.integers(100))
        insort(queues[g], float(rng.integers(1, 500)))
        del queues[g][0]
        got = planner.plan(matrix, supply, groups, [queues[g] for g in groups])
        assert got.tolist() == irs_plan(matrix, supply, queues).tolist()
    assert planner.full == 1 and planner.resumed == 59


def test_resumed_plans_on_many_random_supply_walks() -> None:
    """Many small random walks of the supply (cheaper per case than hypothesis): a
    reorder that a step's log would miss is rare, so it takes thousands of cases."""
    rng = np.random.default_rng(11)
    for _ in range(1500):
        sigs, num_groups = int(rng.integers(3, 8)), int(rng.integers(3, 8))
        matrix = rng.random((sigs, num_groups)) < 0.5
        supply = rng.integers(0, 4, sigs).astype(np.float64)
        queues = {
            g: sorted(rng.integers(1, 40, int(rng.integers(1, 3))).astype(float).tolist())
            for g in range(num_groups)
        }
        groups = list(queues)
        planner = IrsPlanner()
        for _ in range(4):
            got = planner.plan(matrix, supply, groups, [queues[g] for g in groups])
            assert got.tolist() == irs_plan(matrix, supply, queues).tolist()
            s = int(rng.integers(sigs))
            supply[s] = max(0.0, supply[s] + float(rng.choice([-2, -1, 1, 2])))
