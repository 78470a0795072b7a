"""The simulator's compiled IRS plan gives the owners of the core's Python plan."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from test_irs import instances

from venn.core.irs import _plan_counts
from venn.sim.plan_kernel import CompiledPlanner


@settings(max_examples=400, deadline=None)
@given(st.one_of(instances(), instances(low_supply=True)))
def test_the_compiled_plan_equals_the_python_plan(case) -> None:
    matrix, supply, groups, queues, scale = case
    expected = _plan_counts(matrix, supply, np.array(groups), queues, scale).tolist()
    assert CompiledPlanner().plan(matrix, supply, groups, queues, scale).tolist() == expected


def test_a_large_instance_and_fractional_supply() -> None:
    rng = np.random.default_rng(5)
    matrix = rng.random((120, 90)) < 0.3
    supply = rng.integers(0, 40, 120).astype(np.float64)
    groups = sorted(rng.choice(90, 70, replace=False).tolist())
    queues = [sorted((rng.integers(1, 500, 12) * 1.37).tolist()) for _ in groups]
    expected = _plan_counts(matrix, supply, np.array(groups), queues, {}).tolist()
    assert CompiledPlanner().plan(matrix, supply, groups, queues).tolist() == expected
    # Not whole numbers: the Python planner's path, whose plan is the numpy one.
    planner = CompiledPlanner()
    planner.plan(matrix, supply + 0.5, groups, queues)
    assert planner.full == 1
