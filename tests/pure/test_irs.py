"""The IRS plan's three implementations (plain Python for small instances, numpy, and
Python lists over numpy for whole-number supply) give the same owners."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from venn.core.irs import _plan_counts, _plan_numpy, _plan_small, irs_plan


@st.composite
def instances(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, list[int], list[list[float]], dict]:
    sigs = draw(st.integers(1, 12))
    groups = draw(st.integers(1, 8))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    matrix = rng.random((sigs, groups)) < draw(st.sampled_from([0.2, 0.5, 0.8]))
    supply = rng.integers(0, draw(st.sampled_from([3, 50])), sigs).astype(np.float64)
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
