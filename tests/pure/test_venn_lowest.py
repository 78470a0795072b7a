"""`venn` has the lowest average JCT of all policies on every Table 1 workload, its
candidate successors (`CANDIDATES`) apart.

The report (docs/results/reproduction.md) shows it at rounds x0.1; here every policy runs every
workload at x0.02 (same load shape, a few seconds a run) on the synthetic trace. Ties
count: `venn-sched` is `venn` without matching and runs identically wherever the
matching restricts no round.
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor

import pytest

from venn.core import POLICIES
from venn.sim.reproduce import TABLE1_WORKLOADS
from venn.sim.runner import SimRequest, simulate

SCALE = 0.02
CANDIDATES = ("venn-trim", "venn-lp")
"""Options that may succeed `venn` (issue 37): measured against it in
docs/results/reproduction.md, where one beating it is the point, not a failure here."""
COMPARED = [p for p in POLICIES if p not in CANDIDATES]
pytestmark = pytest.mark.timeout(1800)
"""About 200 s of CPU in all: on a machine busy with other work the module's fixture took
longer than the suite's 600 s guard, which is for a hang, not for a slow CPU."""


def censored_avg_jct(case: tuple[str, str]) -> tuple[str, str, float]:
    workload, policy = case
    out = simulate(SimRequest(workload=workload, policy=policy, rounds_scale=SCALE, isolated=False))
    return workload, policy, float(out["avg_jct_censored_s"])


@pytest.fixture(scope="module")
def jcts() -> dict[str, dict[str, float]]:
    cases = [(w, p) for w in TABLE1_WORKLOADS for p in COMPARED]
    with ProcessPoolExecutor(2) as pool:
        results = list(pool.map(censored_avg_jct, cases))
    out: dict[str, dict[str, float]] = {}
    for workload, policy, jct in results:
        out.setdefault(workload, {})[policy] = jct
    return out


@pytest.mark.parametrize("workload", TABLE1_WORKLOADS)
def test_venn_has_the_lowest_average_jct(jcts: dict[str, dict[str, float]], workload: str) -> None:
    row = jcts[workload]
    assert set(row) == set(COMPARED)
    beaten_by = {p: j for p, j in row.items() if j < row["venn"] * (1 - 1e-9)}
    assert not beaten_by, f"{workload}: venn {row['venn']:.0f} s, lower: {beaten_by}"
    # Scheduling makes the difference: the plain baselines are clearly behind.
    for baseline in ("random", "random-order", "fifo", "srsf"):
        assert row[baseline] > 1.05 * row["venn"], (workload, baseline, row)
