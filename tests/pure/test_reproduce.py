"""Reduced runs (rounds/arrival scaling), censored JCTs, and the reproduction report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from venn.core.model import JobSpec
from venn.sim.engine import SimConfig, SimRun
from venn.sim.metrics import censored_jct, summarise
from venn.sim.reproduce import (
    ANALYSIS_BEGIN,
    ANALYSIS_END,
    ISOLATED,
    POLICY_ORDER,
    run_reproduction,
    task_order,
)
from venn.sim.rounds import JobRecord
from venn.sim.runner import (
    DAY_S,
    RANDOM_HORIZON_FACTOR,
    SimRequest,
    horizon_of,
    scale_jobs,
    scaled_horizon,
    simulate,
)
from venn.workloads import load_workload


def test_scale_jobs_scales_rounds_and_arrival_gaps() -> None:
    wl = load_workload("even", jobs=6)
    scaled = scale_jobs(wl.jobs, rounds_scale=0.1, arrival_scale=0.25)
    first = wl.jobs[0].arrival
    assert scaled[0].arrival == first
    for old, new in zip(wl.jobs, scaled, strict=True):
        assert new.arrival == pytest.approx(first + (old.arrival - first) * 0.25)
        assert new.rounds == max(1, round(old.rounds * 0.1))
        assert (new.job_id, new.demand, new.tier, new.deadline) == (
            old.job_id,
            old.demand,
            old.tier,
            old.deadline,
        )
    assert all(j.rounds >= 1 for j in scale_jobs(wl.jobs, 1e-6, 1.0))
    assert scale_jobs(wl.jobs) == list(wl.jobs)
    with pytest.raises(ValueError):
        scale_jobs(wl.jobs, 0.0, 1.0)


def test_scaled_horizon_and_random_doubling() -> None:
    wl = load_workload("even", jobs=1)
    assert scaled_horizon(wl, 1.0) == wl.horizon_s
    assert scaled_horizon(wl, 0.1) == pytest.approx(wl.horizon_s * 0.1)
    assert scaled_horizon(wl, 1e-4) == 2 * DAY_S  # floor
    assert horizon_of(wl, "random", 0.1) == RANDOM_HORIZON_FACTOR * horizon_of(wl, "venn", 0.1)


def _record(job_id: str, arrival: float, finished_at: float | None) -> JobRecord:
    spec = JobSpec(
        job_id=job_id,
        requirement=load_workload("even", jobs=1).jobs[0].requirement,
        demand=10,
        rounds=1,
        deadline=300.0,
        arrival=arrival,
    )
    rec = JobRecord(spec)
    rec.finished_at = finished_at
    return rec


def test_censored_jct_counts_unfinished_jobs_at_the_horizon() -> None:
    assert censored_jct(_record("a", 100.0, 600.0), 1000.0) == 500.0
    assert censored_jct(_record("b", 100.0, None), 1000.0) == 900.0
    assert censored_jct(_record("c", 100.0, 5000.0), 1000.0) == 900.0  # finished past H
    run = SimRun(
        SimConfig(policy="random"),
        [_record("a", 100.0, 600.0), _record("b", 100.0, None)],
        0,
        0,
        1000.0,
        0,
        0,
    )
    out = summarise(run, {"a": 400.0, "b": float("inf")}, censor_at=1000.0)
    assert out["jobs_finished"] == 1
    assert out["avg_jct_s"] == 500.0  # the paper's convention: finished jobs only
    assert out["avg_jct_censored_s"] == 700.0
    assert out["isolated_avg_jct_s"] == 400.0 and out["isolated_unfinished"] == 1
    json.dumps(out, allow_nan=False)


def test_simulate_reports_scales_and_isolated_bound() -> None:
    out = simulate(SimRequest(workload="low", policy="fifo", jobs=2, rounds_scale=0.005))
    assert out["rounds_scale"] == out["arrival_scale"] == 0.005
    assert out["jobs_finished"] == 2
    assert out["isolated_avg_jct_s"] is not None
    assert out["isolated_avg_jct_s"] <= out["avg_jct_s"] + 1e-6
    assert out["avg_jct_censored_s"] == pytest.approx(out["avg_jct_s"])


def test_task_order_runs_random_last() -> None:
    tasks = task_order(["even", "low"])
    assert tasks[-2:] == [("even", "random"), ("low", "random")]
    assert {p for _, p in tasks} == {ISOLATED, *POLICY_ORDER}


def test_report_has_every_workload_and_policy_and_keeps_the_analysis(tmp_path: Path) -> None:
    console = Console(quiet=True)
    names = ["low", "small"]
    run_reproduction(names, 2, 1, tmp_path, 0.003, console)
    report = (tmp_path / "reproduction.md").read_text()
    for w in names:
        for p in POLICY_ORDER:
            assert f"| {w} | {p} |" in report
    for f in ("speedup.png", "jct_cdf_low.png", "jct_cdf_small.png", "reproduction.json"):
        assert (tmp_path / f).is_file()
    data = json.loads((tmp_path / "reproduction.json").read_text())
    assert data["meta"] == {"jobs": 2, "rounds_scale": 0.003, "arrival_scale": 0.003}
    assert set(data["results"]["low"]) == {ISOLATED, *POLICY_ORDER}
    # Hand-written analysis survives regeneration; finished runs are not redone.
    text = report.replace("(No analysis written yet.)", "Our hand-written analysis.")
    (tmp_path / "reproduction.md").write_text(text)
    data["results"]["low"]["fifo"]["avg_jct_s"] = 123456.0  # marker: resumed, not re-run
    (tmp_path / "reproduction.json").write_text(json.dumps(data))
    run_reproduction(names, 2, 1, tmp_path, 0.003, console)
    again = (tmp_path / "reproduction.md").read_text()
    assert f"{ANALYSIS_BEGIN}\nOur hand-written analysis.\n{ANALYSIS_END}" in again
    assert "123,456" in again


def test_lowest_reports_ties_and_common_set_leaves_out_random() -> None:
    from venn.sim.reproduce import common_set_avg, lowest

    def job(i: str, jct: float | None) -> dict[str, object]:
        return {"id": i, "jct": jct}

    res = {
        "random": {"avg_jct_censored_s": 9.0, "per_job": [job("a", None), job("b", 5.0)]},
        "fifo": {"avg_jct_censored_s": 4.0, "per_job": [job("a", 4.0), job("b", 2.0)]},
        "venn": {"avg_jct_censored_s": 4.0, "per_job": [job("a", 2.0), job("b", 2.0)]},
    }
    assert lowest(res, "avg_jct_censored_s") == "fifo = venn"
    n, avgs = common_set_avg(res)
    assert n == 2 and avgs == {"fifo": 3.0, "venn": 2.0}


def test_cli_sim_takes_scales_and_reports_the_isolated_bound() -> None:
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "venn.cli", "sim", "--workload", "low", "--jobs", "2"]
    cmd += ["--policy", "fifo", "--rounds-scale", "0.005", "--arrival-scale", "1", "--json"]
    out = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout)
    assert out["rounds_scale"] == 0.005 and out["arrival_scale"] == 1.0
    assert 0 < out["isolated_avg_jct_s"] <= out["avg_jct_s"] + 1e-6
