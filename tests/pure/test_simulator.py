"""The simulator: the fast mode equals the event-by-event reference, for every policy."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from venn.core import POLICIES
from venn.sim.engine import Mode, SimConfig, Simulation
from venn.sim.kernels import kth_of_union
from venn.sim.metrics import summarise
from venn.sim.runner import tier_model
from venn.traces.checkins import SyntheticTrace
from venn.traces.devices import load_device_profiles
from venn.workloads import load_workload


def small_jobs(jobs: int = 4, shrink: int = 200):
    wl = load_workload("even", jobs=jobs)
    return wl, [dataclasses.replace(j, rounds=max(2, j.rounds // shrink)) for j in wl.jobs]


def run(policy: str, mode: Mode, eps: float = 0.0):
    wl, jobs = small_jobs()
    source = SyntheticTrace(seed=wl.seed, horizon_s=wl.horizon_s)
    tiers = tier_model(SyntheticTrace(seed=wl.seed, horizon_s=86_400.0), 3)
    cfg = SimConfig(
        policy=policy, seed=wl.seed, mode=mode, horizon_s=wl.horizon_s, fairness_eps=eps
    )
    return Simulation(jobs, source, load_device_profiles(), cfg, tiers).run()


def fingerprint(r) -> list:
    return [
        (
            j.spec.job_id,
            j.finished_at,
            [
                (
                    x.attempt,
                    x.filled_at,
                    x.closed_at,
                    x.assigned,
                    x.results,
                    x.succeeded,
                    x.stragglers,
                    x.surplus,
                )
                for x in j.rounds
            ],
        )
        for j in r.jobs
    ]


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_fast_mode_equals_event_mode(policy: str) -> None:
    fast, event = run(policy, "fast"), run(policy, "event")
    assert fast.assignments == event.assignments > 0
    assert fingerprint(fast) == fingerprint(event)


@pytest.mark.parametrize("policy", ["venn", "venn-paper"])
def test_fast_equals_event_when_rounds_are_restricted_and_lifted(policy: str) -> None:
    wl = load_workload("low", jobs=6)
    jobs = [dataclasses.replace(j, rounds=max(2, j.rounds // 100)) for j in wl.jobs]
    tiers = tier_model(SyntheticTrace(seed=wl.seed, horizon_s=86_400.0), 3)
    runs = []
    for mode in ("fast", "event"):
        cfg = SimConfig(policy=policy, seed=wl.seed, mode=mode, horizon_s=wl.horizon_s)
        source = SyntheticTrace(seed=wl.seed, horizon_s=wl.horizon_s)
        sim = Simulation(jobs, source, load_device_profiles(), cfg, tiers)
        runs.append((sim.run(), sim.sched.restricted, sim.sched.lifted))
    (fast, restricted, lifted), (event, *counts) = runs
    assert restricted > 0 and counts == [restricted, lifted]
    if policy == "venn":
        assert lifted > 0
    assert fingerprint(fast) == fingerprint(event)


def test_fast_equals_event_with_fairness() -> None:
    assert fingerprint(run("venn", "fast", eps=2.0)) == fingerprint(run("venn", "event", eps=2.0))


def test_the_waste_breakdown_counts_every_assignment_once() -> None:
    r = run("venn", "fast")
    w = summarise(r)["waste"]
    parts = ("counted", "stragglers", "failed_tasks", "failed_rounds_starved",
             "failed_rounds_filled", "open_at_end")  # fmt: skip
    assert sum(w[p] for p in parts) == w["assignments"] == r.assignments > 0
    assert 0 <= w["surplus"] <= w["stragglers"]
    assert w["failed_rounds_tasks"] <= w["failed_rounds_starved"] + w["failed_rounds_filled"]
    needed = sum(j.spec.results_needed * j.succeeded_rounds for j in r.jobs)
    assert w["counted"] == needed


def test_every_job_finishes_and_metrics_are_sane() -> None:
    r = run("venn", "fast")
    out = summarise(r)
    assert out["jobs_finished"] == out["jobs_total"] == 4
    assert out["avg_jct_s"] > 0 and out["avg_sched_delay_s"] > 0 and out["avg_response_s"] > 0
    for job in r.jobs:
        for rnd in job.rounds:
            assert rnd.assigned <= rnd.demand
            if rnd.succeeded:
                assert rnd.results >= job.spec.results_needed
                assert rnd.closed_at <= rnd.deadline_at


def test_cli_json_is_deterministic(tmp_path) -> None:
    wl = tmp_path / "tiny.yml"
    wl.write_text(
        "RANDOMSEED: 3\nNUM_DAY: 1\nNUM_WEEK: 1\n"
        "job_config_file: 'config/job_config_random_eli.yml'\n"
        "eligibility_file: 'trace/aibenchmark_eligibility_4'\n"
        f"job_id_prob: {[0, 0, 0, 1] + [0] * 29}\n"
    )
    cmd = [
        sys.executable,
        "-m",
        "venn.cli",
        "sim",
        "--workload",
        str(wl),
        "--jobs",
        "2",
        "--policy",
        "srsf",
        "--json",
        "--no-isolated",
    ]
    first = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    second = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert first == second
    out = json.loads(first)
    for key in (
        "policy",
        "workload",
        "trace",
        "seed",
        "jobs_total",
        "jobs_finished",
        "avg_jct_s",
        "makespan_s",
        "avg_sched_delay_s",
        "avg_response_s",
        "per_tier",
    ):
        assert key in out
    assert out["jobs_total"] == 2 and out["policy"] == "srsf"


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from([0.5, 1.0, 2.0, 3.25]) | st.floats(0, 10), max_size=15),
    st.lists(st.sampled_from([0.5, 1.0, 2.0]) | st.floats(0, 10), max_size=8),
    st.data(),
)
def test_kth_of_union_is_the_kth_of_the_merged_list(a, b, data) -> None:
    if not a and not b:
        return
    k = data.draw(st.integers(1, len(a) + len(b)))
    sa, sb = np.array(sorted(a), dtype=np.float64), np.array(sorted(b), dtype=np.float64)
    assert kth_of_union(sa, sb, k) == sorted(a + b)[k - 1]
