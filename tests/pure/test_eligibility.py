"""The eligibility index: slots bounded by the requirements, eligibility unchanged."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from venn.core.eligibility import EligibilityIndex
from venn.core.model import Requirement

ATTRS = ("cpu_f", "ram", "fp16_mem", "android_os")
REQUIREMENTS = [
    Requirement.of({}),
    Requirement.of({"cpu_f": 2}),
    Requirement.of({"cpu_f": 5, "ram": 4}),
    Requirement.of({"cpu_f": 7, "ram": 6, "fp16_mem": 4}),
    Requirement.of({"cpu_f": 9, "ram": 8, "fp16_mem": 6, "android_os": 11}),
]


def test_distinct_reported_values_do_not_grow_the_index() -> None:
    """Issue 12, defect 7: 20,000 check-ins with distinct float attributes made 20,000 slots
    (CPU per check-in 5 -> 45 ms, memory never freed)."""
    index = EligibilityIndex()
    for requirement in REQUIREMENTS:
        index.group(requirement)
    rng = random.Random(7)
    for i in range(20_000):
        attrs = {name: rng.uniform(0, 16) for name in ATTRS}
        attrs[f"battery_{i}"] = rng.random()  # an attribute no requirement tests
        slot = index.slot_for_attrs(attrs)
        eligible = [index.eligible(slot, g) for g in range(index.num_groups)]
        assert eligible == [r.admits(attrs) for r in REQUIREMENTS]
    thresholds = {
        name: {v for r in REQUIREMENTS for n, v in r.thresholds if n == name} for name in ATTRS
    }
    bound = math.prod(len(t) + 1 for t in thresholds.values())
    assert index.num_slots <= bound == 5 * 4 * 3 * 2


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.dictionaries(st.sampled_from(ATTRS), st.floats(-5, 20), max_size=4),
        min_size=1,
        max_size=6,
    ),
    st.lists(st.dictionaries(st.sampled_from(ATTRS), st.floats(-5, 20), max_size=4), max_size=20),
    st.data(),
)
def test_projection_keeps_eligibility_when_requirements_arrive_later(
    requirements: list[dict[str, float]], devices: list[dict[str, float]], data: st.DataObject
) -> None:
    """Groups may arrive between check-ins: a slot made earlier stays right for the devices
    that map to it afterwards."""
    index = EligibilityIndex()
    reqs = [Requirement.of(r) for r in requirements]
    added: list[Requirement] = []
    for device in devices:
        add_one: bool = data.draw(st.booleans(), label="add a requirement now")
        if reqs and add_one:
            added.append(reqs.pop())
            index.group(added[-1])
        slot = index.slot_for_attrs(device)
        for requirement in added:
            assert index.eligible(slot, index.group(requirement)) == requirement.admits(device)
