"""Pace steering (venn.core.pace): the answers, their weights, and their uses in the
gateway's supply reports, the supply window and the simulator."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from services.gateway.forwarding import SupplyCounter
from venn.core.pace import Pace, Want
from venn.core.supply import SupplyWindow
from venn.settings import Settings
from venn.sim.engine import SimConfig, Simulation
from venn.sim.runner import tier_model
from venn.traces.checkins import SyntheticTrace
from venn.traces.devices import load_device_profiles
from venn.workloads import load_workload

UNIT = [i / 100 for i in range(100)]


def test_each_answer_is_its_interval_within_the_jitter() -> None:
    pace = Pace(base_s=30, wanted_s=10, idle_s=120, jitter=0.2)
    for want, low, high in ((Want.WAITED, 8, 12), (Want.BASE, 24, 36), (Want.UNWANTED, 96, 144)):
        answers = {pace.retry_after(want, u) for u in UNIT}
        assert low <= min(answers) and max(answers) <= high
        assert len(answers) > 3  # spread, not one instant
    # A device no round can use always comes back later than one a waiting round can use.
    assert min(pace.retry_after(Want.UNWANTED, u) for u in UNIT) > max(
        pace.retry_after(Want.WAITED, u) for u in UNIT
    )


def test_weights_undo_the_pace() -> None:
    pace = Pace(base_s=30, wanted_s=10, idle_s=120)
    assert pace.weight(Want.UNWANTED) == 4.0
    assert pace.weight(Want.WAITED) == pytest.approx(1 / 3)
    assert pace.weight(Want.BASE) == 1.0
    flat = Pace.constant(30)
    assert not flat.steers
    assert {flat.retry_after(w, u) for w in Want for u in UNIT} == {30}
    assert {flat.weight(w) for w in Want} == {1.0}


@pytest.mark.parametrize(
    "bad", [dict(wanted_s=40), dict(idle_s=20), dict(wanted_s=0), dict(jitter=1.0)]
)
def test_an_inconsistent_pace_is_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Pace(**{"base_s": 30, **bad})


def test_the_gateway_settings_make_a_consistent_pace() -> None:
    settings = Settings.from_env({})
    assert settings.gateway.pace == Pace(30, 10, 120, 0.2)
    # A base below the wanted pace (a test stack answering every second) clamps it.
    fast = settings.with_gateway(retry_after_s=1).gateway.pace
    assert (fast.wanted_s, fast.base_s, fast.idle_s) == (1, 1, 120)


def test_supply_reports_weight_each_device_by_its_pace_and_carry_the_rest() -> None:
    counter = SupplyCounter("gw-1", started=0.0)
    idle, wanted = {"ram": 1.0}, {"ram": 8.0}
    for i in range(3):
        counter.add(idle, f"idle-{i}", weight=4.0)
        counter.add(wanted, f"wanted-{i}", weight=0.4)
    counter.add(idle, "idle-0", weight=4.0)  # once per interval
    (report,) = counter.reports(1.0)
    assert {c.attrs["ram"]: c.count for c in report.counts} == {1.0: 12, 8.0: 1}
    counter.add(wanted, "wanted-0", weight=0.4)
    counter.add(wanted, "wanted-1", weight=0.4)
    (report,) = counter.reports(2.0)  # 0.2 carried + 0.8
    assert [(c.attrs, c.count) for c in report.counts] == [(wanted, 1)]


def test_the_supply_window_counts_weights() -> None:
    window = SupplyWindow(4)
    window.observe(0, 0.0)
    window.observe(1, 1.0, weight=4.0)
    window.observe_many(np.array([0, 1]), np.array([2.0, 3.0]))
    assert window.slot_counts(2).tolist() == [2.0, 5.0]
    assert window.rate_per_s() == pytest.approx(3 * (7 / 4) / 3.0)
    window.observe(0, 4.0, weight=0.5)  # pushes out the first
    assert window.slot_counts(2).tolist() == [1.5, 5.0]


def _simulate(pace: Pace | None, mode: str = "event"):
    wl = load_workload("even", jobs=2)
    jobs = [dataclasses.replace(j, rounds=max(2, j.rounds // 200)) for j in wl.jobs]
    source = SyntheticTrace(seed=wl.seed, horizon_s=wl.horizon_s)
    tiers = tier_model(SyntheticTrace(seed=wl.seed, horizon_s=86_400.0), 3)
    cfg = SimConfig(policy="venn", seed=wl.seed, mode=mode, horizon_s=wl.horizon_s, pace=pace)  # type: ignore[arg-type]
    return Simulation(jobs, source, load_device_profiles(), cfg, tiers).run()


def test_the_simulator_paces_devices_without_an_assignment() -> None:
    once = _simulate(None, mode="fast")  # equal to the event mode (test_simulator)
    never = _simulate(Pace.constant(1e9))  # a pace past every window: no retry
    assert never.retries == 0
    assert [j.finished_at for j in never.jobs] == [j.finished_at for j in once.jobs]
    flat = _simulate(Pace.constant(60))  # the gateway's paces doubled: half the retries
    steered = _simulate(Pace(60, 20, 240))
    assert flat.retries > steered.retries > 0
    # Coming back within their windows, devices serve rounds the once-only model misses.
    assert all(j.finished_at is not None for j in (*flat.jobs, *steered.jobs))
    assert flat.checkins == len_trace(once) + flat.retries


def len_trace(run) -> int:
    return run.checkins - run.retries


def test_a_pace_needs_the_event_mode() -> None:
    with pytest.raises(ValueError, match="event mode"):
        _simulate(Pace(), mode="fast")
