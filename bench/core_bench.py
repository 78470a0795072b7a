"""Core benchmarks: plan recompute time and check-in decisions per second.

Prints a table and writes docs/bench/core.json. Baselines in the same run: the Random and
FIFO policies (no plan) next to Venn's IRS plan, on the same jobs and devices.

    python bench/core_bench.py
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from venn.core import JobSpec, Requirement, make_scheduler
from venn.core.irs import irs_plan

OUT = Path(__file__).resolve().parent.parent / "docs" / "bench" / "core.json"


def build(policy: str, jobs: int, groups: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    sched = make_scheduler(policy, seed=seed)
    # Groups: thresholds on two attributes, so eligible sets overlap in many ways.
    levels = [(float(a), float(b)) for a in range(1, 11) for b in range(1, 11)][:groups]
    for j in range(jobs):
        cpu, mem = levels[j % groups]
        spec = JobSpec(
            f"j{j}", Requirement.of(cpu=cpu, memory=mem), int(rng.integers(20, 500)), 100, 600.0
        )
        sched.add_job(spec, 0.0)
        sched.request_round(spec.job_id, 0, 0.0)
    slots = [
        sched.slot_of({"cpu_f": float(a), "fp16_mem": float(b)})
        for a in range(1, 11)
        for b in range(1, 11)
    ]
    sched.observe_many(np.array(rng.choice(slots, 1000)), np.linspace(0, 100, 1000))
    return sched, slots


def plan_time(policy: str, jobs: int, groups: int, reps: int = 30) -> dict[str, float]:
    sched, _ = build(policy, jobs, groups)
    view = sched._view(0.0)
    t0 = time.perf_counter()
    for _ in range(reps):
        sched.policy.replan(view)
    plan_ms = (time.perf_counter() - t0) / reps * 1e3
    t0 = time.perf_counter()
    for _ in range(reps):
        sched._mark(replan=True)
        sched.table(0.0)
    full_ms = (time.perf_counter() - t0) / reps * 1e3
    return {"plan_ms": plan_ms, "plan_and_compile_ms": full_ms}


def irs_only(jobs: int, groups: int, reps: int = 200) -> float:
    rng = np.random.default_rng(1)
    sigs = max(groups, 8) * 2
    matrix = rng.random((sigs, groups)) < 0.5
    supply = rng.integers(0, 50, sigs).astype(float)
    queues = {
        g: sorted(rng.integers(1, 500, max(1, jobs // groups)).tolist()) for g in range(groups)
    }
    t0 = time.perf_counter()
    for _ in range(reps):
        irs_plan(matrix, supply, queues)
    return (time.perf_counter() - t0) / reps * 1e3


def checkin_rate(policy: str, n: int = 50_000) -> tuple[float, float]:
    """Decisions per second, and table compiles per 1000 check-ins."""
    sched, slots = build(policy, 100, 10)
    # Plenty of demand (decisions, not refusals), and distinct demands: with equal ones
    # every assignment would overtake the job ahead and force a recompile.
    for j, js in enumerate(sched.jobs.values()):
        js.remaining = js.demand = 10**6 + j * 1000
    sched._mark(replan=True)
    rng = np.random.default_rng(2)
    picks = rng.choice(slots, n)
    us = rng.random(n)
    compiles = sched.compiles
    t0 = time.perf_counter()
    for i in range(n):
        sched.checkin(int(picks[i]), float(i), 0, float(us[i]))
    rate = n / (time.perf_counter() - t0)
    return rate, (sched.compiles - compiles) / n * 1000


def main() -> None:
    plans: list[dict[str, object]] = []
    rates_by_policy: dict[str, float] = {}
    compiles_by_policy: dict[str, float] = {}
    results: dict[str, object] = {
        "plan": plans,
        "checkin_per_s": rates_by_policy,
        "compiles_per_1000_checkins": compiles_by_policy,
    }
    table = Table(title="Plan recompute (ms per plan event)")
    for col in (
        "jobs",
        "groups",
        "IRS plan only",
        "venn plan+compile",
        "venn-paper (round order)",
        "fifo compile (baseline)",
    ):
        table.add_column(col, justify="right")
    for jobs, groups in ((100, 10), (100, 100), (1000, 10), (1000, 100)):
        venn = plan_time("venn-sched", jobs, groups)
        paper = plan_time("venn-paper", jobs, groups)
        fifo = plan_time("fifo", jobs, groups)
        irs = irs_only(jobs, groups)
        plans.append(
            {
                "jobs": jobs,
                "groups": groups,
                "irs_ms": irs,
                "venn": venn,
                "venn_paper": paper,
                "fifo": fifo,
            }
        )
        table.add_row(
            str(jobs),
            str(groups),
            f"{irs:.3f}",
            f"{venn['plan_and_compile_ms']:.2f}",
            f"{paper['plan_and_compile_ms']:.2f}",
            f"{fifo['plan_and_compile_ms']:.2f}",
        )
    Console().print(table)
    rates = Table(title="Core check-in decisions per second (100 jobs, 10 groups)")
    rates.add_column("policy")
    rates.add_column("decisions/s", justify="right")
    rates.add_column("compiles per 1000 check-ins", justify="right")
    for policy in ("random", "fifo", "srsf", "venn"):
        r, c = checkin_rate(policy)
        rates_by_policy[policy] = r
        compiles_by_policy[policy] = c
        rates.add_row(policy, f"{r:,.0f}", f"{c:.1f}")
    Console().print(rates)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
