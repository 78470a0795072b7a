"""The capacity proxy has one home (venn.core.capacity): a device's score from the
measures it reports equals its score from its trace factors, one at a time or many."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from venn.core.capacity import capacity_proxy, measures_of, proxies_of, proxy_of

factor = st.floats(0.01, 100.0)


@given(st.lists(st.tuples(factor, factor), min_size=1, max_size=20))
def test_the_score_is_the_same_from_factors_or_measures(devices: list[tuple[float, float]]) -> None:
    comp = np.array([c for c, _ in devices])
    comm = np.array([m for _, m in devices])
    speeds, bandwidths = measures_of(comp, comm)
    from_factors = capacity_proxy(comp, comm)
    np.testing.assert_allclose(proxies_of(speeds, bandwidths), from_factors, rtol=1e-12)
    one_by_one = [proxy_of(float(s), float(b)) for s, b in zip(speeds, bandwidths, strict=True)]
    np.testing.assert_allclose(one_by_one, from_factors, rtol=1e-12)


def test_a_device_without_bandwidth_is_the_slowest() -> None:
    assert proxy_of(50.0, 0.0) == math.inf
    slow, mean_network = proxies_of(np.array([50.0, 50.0]), np.array([0.0, 13_736.0]))
    assert slow == math.inf
    assert mean_network == pytest.approx(60.0 * 50.0 / 78.0 + 10.0)
