"""The epsilon fairness knob: what it counts as service, and the Fig 14 figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from venn.core import JobSpec, Requirement, make_scheduler
from venn.sim.fairness_sweep import (
    contenders,
    eps_key,
    fair_share,
    overlapping,
    plot_fairness,
    report_section,
    sweep_rows,
)

ANY = Requirement.of(cpu=1)
FAST = Requirement.of(cpu=7)
DEVICE = {"cpu_f": 8.0}


def test_a_job_keeps_its_priority_while_its_round_fills() -> None:
    """Service counts in completed rounds: the devices of an open round do not push its
    job behind a job that has none yet (the round would starve half-filled and fail)."""
    sched = make_scheduler("venn", fairness_eps=2.0, seed=1)
    first = JobSpec("first", ANY, demand=10, rounds=5, deadline=600.0)
    second = JobSpec("second", ANY, demand=10, rounds=6, deadline=600.0)
    other = JobSpec("other", FAST, demand=10, rounds=5, deadline=600.0)
    for spec in (first, second, other):
        sched.add_job(spec, 0.0)
    slot = sched.slot_of(DEVICE)
    sched.observe_many(np.full(200, slot), np.linspace(-200.0, -1.0, 200))
    sched.request_round("first", 0, 0.0)
    sched.request_round("second", 0, 0.0)
    got = []
    for t in range(1, 6):
        a = sched.checkin(slot, float(t), device_id=t)
        got.append(a.job_id if a else None)
    assert got == ["first"] * 5
    sched.request_round("other", 0, 6.0)  # a plan event: every weight is computed afresh
    later = [sched.checkin(slot, float(t), device_id=t) for t in range(7, 12)]
    assert "second" not in {a.job_id for a in later if a}


def job(job_id: str, arrival: float, jct: float | None) -> dict[str, Any]:
    return {"id": job_id, "arrival": arrival, "jct": jct}


def test_contenders_average_the_jobs_alive_over_a_lifetime() -> None:
    per_job = [job("a", 0.0, 100.0), job("b", 50.0, 100.0), job("c", 120.0, None)]
    # a [0, 100], b [50, 150], c [120, 1000]
    m = contenders(per_job, horizon=1000.0)
    assert m == pytest.approx({"a": 1.5, "b": 1.8, "c": 910 / 880})
    assert overlapping(per_job, horizon=1000.0) == {"a": 2, "b": 3, "c": 2}


def test_fair_share_counts_unfinished_jobs_as_missed() -> None:
    run = {
        "censor_at_s": 1000.0,
        "per_job": [job("a", 0.0, 100.0), job("b", 50.0, 230.0), job("c", 0.0, None)],
    }
    # a [0, 100]: M = 250 / 100, 100 <= 2.5 * 40. b [50, 280]: M = 510 / 230 and
    # 230 > M * 80, though 230 <= 3 * 80 (every job overlaps it). c never finished.
    isolated: dict[str, float | None] = {"a": 40.0, "b": 80.0, "c": 10.0}
    out = fair_share(run, isolated)
    assert out["share"] == pytest.approx(1 / 3)
    assert out["share_overlap"] == pytest.approx(2 / 3)
    assert out["mean_m"] == pytest.approx((2.5 + 510 / 230 + 1330 / 1000) / 3)


def fake_run(avg: float, jcts: list[float | None]) -> dict[str, Any]:
    per_job = [job(f"j{i}", 10.0 * i, x) for i, x in enumerate(jcts)]
    return {
        "avg_jct_censored_s": avg,
        "jobs_finished": sum(x is not None for x in jcts),
        "jobs_total": len(jcts),
        "censor_at_s": 1000.0,
        "per_job": per_job,
    }


def test_sweep_rows_report_and_plot(tmp_path: Path) -> None:
    iso = {"j0": 50.0, "j1": 50.0}
    runs = {
        "low": {
            "isolated": {"jct_by_job": iso},
            "random": fake_run(400.0, [None, None]),
            "random-order": fake_run(300.0, [200.0, 300.0]),
            eps_key(0.0): fake_run(200.0, [80.0, 320.0]),
            eps_key(2.0): fake_run(250.0, [90.0, 85.0]),
        }
    }
    rows = sweep_rows(runs)
    assert [r["eps"] for r in rows] == [0.0, 2.0]
    assert rows[0]["speedup_random"] == 2.0
    assert rows[1]["relative_to_eps0"] == 0.8
    assert rows[0]["fair_share"] == 0.5  # j1: 320 > (390 / 320) * 50
    assert rows[1]["fair_share"] == 1.0
    text = "\n".join(report_section(runs, {"jobs": 2, "rounds_scale": 0.1}))
    assert (
        "| low | 2 | 250 | 2/2 | 1.60 (1.60) | 1.20 | 0.80 (0.85) | 100% (69%) | 1.9 | 100% |"
        in text
    )
    plot_fairness(runs, tmp_path)
    assert (tmp_path / "fairness.png").stat().st_size > 1000
