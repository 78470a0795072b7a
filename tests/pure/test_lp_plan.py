"""Ownership from the receding-horizon LP (``venn.core.lp_plan``)."""

from __future__ import annotations

import numpy as np

from venn.core.lp_plan import Backlog, horizon_slots, lp_owner


def test_slots_double_until_they_cover_the_backlog() -> None:
    assert horizon_slots(10.0, 65.0).tolist() == [10.0, 20.0, 40.0]
    assert len(horizon_slots(1.0, 1e12, most=5)) == 5


def test_the_shared_signature_goes_to_the_group_that_can_use_nothing_else() -> None:
    # Signature 0 serves both groups, signature 1 group 0 only; each job can take at most
    # 1 device/s, which one signature supplies: group 0 gets 1, group 1 gets 0.
    sig = np.array([[True, True], [True, False]])
    jobs = [Backlog(0, 1000.0, 1.0), Backlog(1, 1000.0, 1.0)]
    owner = lp_owner(sig, np.array([1.0, 1.0]), jobs, 100.0)
    assert owner.tolist() == [1, 0]


def test_the_smaller_job_gets_a_signature_both_want() -> None:
    sig = np.array([[True, True]])
    jobs = [Backlog(0, 5000.0, 2.0), Backlog(1, 500.0, 2.0)]
    assert lp_owner(sig, np.array([1.0]), jobs, 100.0).tolist() == [1]


def test_no_job_or_no_supply_owns_nothing() -> None:
    sig = np.array([[True]])
    assert lp_owner(sig, np.array([1.0]), [], 100.0).tolist() == [-1]
    assert lp_owner(sig, np.array([0.0]), [Backlog(0, 10.0, 1.0)], 100.0).tolist() == [-1]
