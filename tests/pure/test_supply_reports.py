"""Supply from gateways' reports: the core's estimate and the simulator's model of it."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from venn.core import make_scheduler
from venn.core.supply import ReportedSupply, SlotCounts, SupplyWindow
from venn.sim.supply_feed import ReportFeed


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=400))
def test_one_report_of_check_ins_counts_what_the_window_counts(slots: list[int]) -> None:
    window, reported = SupplyWindow(1000), ReportedSupply(1000)
    window.observe_many(np.array(slots), np.zeros(len(slots)))
    found, counts = np.unique(slots, return_counts=True)
    reported.observe_report("gw", found, counts, 1.0, 1.0)
    assert np.array_equal(window.slot_counts(6), reported.slot_counts(6))


def test_reports_are_kept_while_they_hold_the_window() -> None:
    supply = ReportedSupply(window=100)
    supply.observe_report("gw-a", np.array([0]), np.array([60.0]), 1.0, 1.0)
    supply.observe_report("gw-b", np.array([1]), np.array([60.0]), 1.0, 1.0)
    # 120 held: dropping gw-a's 60 would leave fewer than 100.
    assert supply.slot_counts(2).tolist() == [60.0, 60.0]
    supply.observe_report("gw-a", np.array([0]), np.array([50.0]), 1.0, 2.0)
    assert supply.slot_counts(2).tolist() == [50.0, 60.0]
    # Two gateways at 50-60 check-ins/s each.
    assert supply.rate_per_s() == 110.0


def test_the_rate_adds_every_live_gateway_even_when_one_report_fills_the_window() -> None:
    """50 gateways at 2,000 check-ins/s: each report alone holds the window, so the mix is
    the latest report's; the rate is still the fleet's (it was one gateway's: 2,000/s)."""
    supply = ReportedSupply(window=1000)
    for g in range(50):
        supply.observe_report(f"gw-{g}", np.array([g % 4]), np.array([2000.0]), 1.0, 10.0)
    assert supply.slot_counts(4).sum() == 2000.0
    assert supply.rate_per_s() == 100_000.0 and supply.sources() == 50
    # Ten of them stop; the others report on: after three intervals the ten are gone.
    for t in (11.0, 12.0, 13.5):
        for g in range(10, 50):
            supply.observe_report(f"gw-{g}", np.array([0]), np.array([2000.0]), 1.0, t)
    assert supply.sources() == 40 and supply.rate_per_s() == 80_000.0


def test_slot_counts_drain_into_a_report() -> None:
    counts = SlotCounts(since=0.0)
    counts.add(np.array([2, 2, 0]))
    counts.add(np.array([2]))
    found, n, interval = counts.drain(2.0)
    assert (found.tolist(), n.tolist(), interval) == ([0, 2], [1.0, 3.0], 2.0)
    assert counts.drain(3.0)[0].size == 0


def test_the_feed_delivers_each_interval_after_its_delay() -> None:
    sched = make_scheduler("venn", supply_reports=True)
    assert sched.slot_of({"ram": 1.0}) == 0
    feed = ReportFeed(sched, interval_s=1.0, delay_s=0.25)
    feed.add(np.array([0, 0, 0, 0]), np.array([0.1, 0.5, 1.2, 1.9]))
    feed.deliver(1.2)  # interval [0, 1) is due at 1.25
    assert feed.reports == 0 and sched.supply.total_observed == 0
    feed.deliver(1.3)
    assert feed.reports == 1 and sched.supply.slot_counts(1).tolist() == [2.0]
    feed.deliver(2.3)
    assert feed.reports == 2 and sched.supply.slot_counts(1).tolist() == [4.0]


def test_the_first_report_and_a_new_signature_replan() -> None:
    sched = make_scheduler("venn", supply_reports=True)
    low = sched.slot_of({"ram": 1.0})
    sched.table(0.0)
    replans = sched.replans
    sched.observe_report("gw", np.array([low]), np.array([5.0]), 1.0, 1.0)
    sched.table(1.0)
    assert sched.replans == replans + 1  # the plan had no supply
    sched.observe_report("gw", np.array([low]), np.array([5.0]), 1.0, 2.0)
    sched.table(2.0)
    assert sched.replans == replans + 1  # the same signatures: the plan holds
